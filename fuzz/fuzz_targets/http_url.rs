//! `sluice get http://...` URLs (`HttpUrl::parse`), typed by users and
//! taken from redirects and HTML index pages.
//! Properties: a parsed URL has a non-empty host, a port in 1..=65535 and
//! an origin-form target of printable ASCII without spaces (it goes on a
//! request line as is); the URL rebuilt from its parts parses to the same
//! value; `file_name` never panics and never contains a `/`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_http::HttpUrl;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(u) = HttpUrl::parse(s) else {
        return;
    };
    assert!(!u.host.is_empty());
    assert_ne!(u.port, 0);
    assert!(u.target.starts_with('/'), "target {:?}", u.target);
    assert!(
        u.target.bytes().all(|b| b.is_ascii_graphic()),
        "target not request-line safe: {:?}",
        u.target
    );
    let rebuilt = format!("http://{}:{}{}", bracket(&u.host), u.port, u.target);
    assert_eq!(HttpUrl::parse(&rebuilt).as_ref(), Ok(&u), "from {rebuilt:?}");
    if let Some(name) = u.file_name() {
        assert!(!name.contains('/'), "file name {name:?}");
    }
});

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
