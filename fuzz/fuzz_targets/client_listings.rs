//! What `sluice get -r` / `sluice cp -f` read from servers and users:
//! MLSD listings (`tree::plan::parse_mlsd`), Sluice's JSON listing and HTML
//! index pages (`tree::http_listing`), and `-f LIST` lines
//! (`cp::list_fields`). A hostile server chooses every byte of the first
//! three.
//! Properties: `plan_dir` over any parsed listing either refuses it or
//! yields only paths made of safe segments (no `..`, `/` inside a name,
//! control characters or empty names), each under the listed directory;
//! every entry `parse_html` keeps already passes `check_name`; `-f` fields
//! never hold unquoted whitespace and never outgrow the line.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_client::cp::list_fields;
use sluice_client::tree::http_listing::{parse_html, parse_json};
use sluice_client::tree::plan::{check_name, parse_mlsd, plan_dir, Action, Entry};

fn check_plan(entries: &[Entry]) {
    let Ok(actions) = plan_dir("top", entries) else {
        return;
    };
    for a in actions {
        let rel = match a {
            Action::Descend { rel } | Action::Copy { rel, .. } | Action::Skip { rel, .. } => rel,
        };
        let rest = rel.strip_prefix("top/").expect("a planned path stays under its directory");
        assert!(check_name(rest).is_ok(), "unsafe planned path {rel:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_mlsd(data) {
        check_plan(&entries);
    }
    if let Ok(entries) = parse_json(data) {
        check_plan(&entries);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let (entries, _passed_over) = parse_html(text);
        for e in &entries {
            assert!(check_name(&e.name).is_ok(), "HTML entry {:?} kept", e.name);
        }
        check_plan(&entries);
        let fields = list_fields(text);
        assert!(fields.iter().map(String::len).sum::<usize>() <= text.len());
    }
});
