//! LIST/NLST wildcards (`sluice_ftp::glob`): the first byte splits the
//! input into a pattern and a name.
//! Properties: no panic; a pattern longer than `MAX_PATTERN` does not
//! compile; `*` alone matches every name not starting with `.`; a name
//! matches itself escaped; and a match is stable when a `*` is put in
//! front of a pattern that starts with `*` (`**` is `*`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::glob::{Glob, MAX_PATTERN};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(rest.len());
    let (pattern, name) = rest.split_at(cut);
    let pattern = String::from_utf8_lossy(pattern);
    let Some(g) = Glob::new(&pattern) else {
        assert!(pattern.len() > MAX_PATTERN);
        return;
    };
    let m = g.matches(name);
    if pattern.starts_with('*') {
        let g2 = Glob::new(&format!("*{pattern}"));
        if let Some(g2) = g2 {
            assert_eq!(g2.matches(name), m, "{pattern:?}");
        }
    }
    let star = Glob::new("*").unwrap();
    assert_eq!(star.matches(name), name.first() != Some(&b'.'));
    if let Ok(text) = std::str::from_utf8(name) {
        let escaped: String = text
            .chars()
            .flat_map(|c| {
                let esc = matches!(c, '*' | '?' | '[' | '\\');
                esc.then_some('\\').into_iter().chain(std::iter::once(c))
            })
            .collect();
        if let Some(e) = Glob::new(&escaped) {
            assert!(e.matches(name), "{text:?} as {escaped:?}");
        }
    }
});
