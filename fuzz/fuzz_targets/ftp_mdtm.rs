//! `YYYYMMDDHHMMSS[.sss]` times (`parse_mdtm`): MDTM replies read by the
//! client, MFMT/MDTM arguments read by the server.
//! Property: whatever parses formats (`mdtm`) to a 14-digit time that
//! parses back to the same second, for times within years 0..=9999.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::listing::{mdtm, parse_mdtm};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Some(secs) = parse_mdtm(s) else {
        return;
    };
    // Day 31 of a short month (and second 60) are accepted and normalise
    // into the next day or minute; the formatted form must be canonical.
    let text = mdtm(secs);
    assert_eq!(text.len(), 14, "{s:?} -> {secs} -> {text:?}");
    assert_eq!(parse_mdtm(&text), Some(secs), "{s:?} -> {text:?}");
});
