//! PORT/EPRT arguments and 227/229 reply texts.
//! Property: whatever parses, formats to text that parses back to the
//! same address (and port 0 never parses).
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::addr::{
    format_227, format_229, format_eprt, format_port, parse_227, parse_229, parse_eprt, parse_port,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = parse_port(data) {
        assert_ne!(a.port(), 0);
        assert_eq!(parse_port(format_port(a).as_bytes()), Ok(a));
    }
    if let Ok(a) = parse_eprt(data) {
        assert_ne!(a.port(), 0);
        assert_eq!(parse_eprt(format_eprt(a).as_bytes()), Ok(a));
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(a) = parse_227(&text) {
        assert_eq!(parse_227(&format_227(a)), Ok(a));
    }
    if let Ok(p) = parse_229(&text) {
        assert_ne!(p, 0);
        assert_eq!(parse_229(&format_229(p)), Ok(p));
    }
});
