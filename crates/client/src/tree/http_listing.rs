//! Directory listings over HTTP, sans-I/O: Sluice's own JSON listing
//! (`?format=json`, see `sluice_http::listing::json`) and, for other
//! servers (nginx autoindex, Apache), the links of an HTML index page.
//!
//! The two are trusted differently. A JSON listing says "these are the
//! entries", so an unsafe name in it refuses the job ([`super::plan`]).
//! An HTML page links to many things that are not entries (`../`, sort
//! links `?C=N;O=D`, absolute links elsewhere), so only links to one
//! child (`name` or `name/`, optionally `./`-prefixed) count, and
//! anything else, an unsafe decoded name included, is passed over.

use super::plan::{check_name, Entry, Kind};

/// Largest listing body read.
pub const MAX_LISTING: usize = 64 << 20;

/// Parses `{"entries":[{"name":..,"type":"file"|"dir"|"other","size":N,"mtime":N|null}]}`.
pub fn parse_json(body: &[u8]) -> Result<Vec<Entry>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("JSON listing: {e}"))?;
    if v.get("truncated").and_then(|t| t.as_bool()) == Some(true) {
        return Err("the server cut its JSON listing short (too many entries)".into());
    }
    let entries = v
        .get("entries")
        .and_then(|e| e.as_array())
        .ok_or("JSON listing without an `entries` array")?;
    entries
        .iter()
        .map(|e| {
            let name = e
                .get("name")
                .and_then(|n| n.as_str())
                .ok_or("JSON listing entry without a name")?;
            let kind = match e.get("type").and_then(|t| t.as_str()) {
                Some("file") => Kind::File,
                Some("dir") => Kind::Dir,
                Some(t) if t.contains("link") => Kind::Link,
                _ => Kind::Other,
            };
            Ok(Entry {
                name: name.to_string(),
                kind,
                size: e.get("size").and_then(|s| s.as_u64()),
                mtime: e.get("mtime").and_then(|s| s.as_i64()),
            })
        })
        .collect()
}

/// Undoes the HTML escapes an index page uses in attributes.
fn html_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
}

/// The `href` values of `<a>` tags, in order.
fn hrefs(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = lower[at..].find("href=") {
        let start = at + i + 5;
        at = start;
        let rest = &html[start..];
        let (quote, body) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => (Some(q), &rest[1..]),
            _ => (None, rest),
        };
        let end = match quote {
            Some(q) => body.find(q),
            None => body.find(|c: char| c.is_ascii_whitespace() || c == '>'),
        };
        if let Some(end) = end {
            out.push(html_unescape(&body[..end]));
        }
    }
    out
}

/// The children an HTML index page links to, and the number of child
/// links passed over because their decoded name was unsafe.
pub fn parse_html(html: &str) -> (Vec<Entry>, Vec<String>) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut unsafe_names = Vec::new();
    for href in hrefs(html) {
        // `./a:b` is how a page links to a name with a colon (bare, it
        // would read as a URL scheme).
        let (h, dotted) = match href.strip_prefix("./") {
            Some(h) => (h, true),
            None => (href.as_str(), false),
        };
        if h.is_empty()
            || h.contains(['?', '#'])
            || (!dotted && h.contains(':'))
            || h.starts_with('/')
        {
            continue;
        }
        let (seg, kind) = match h.strip_suffix('/') {
            Some(s) => (s, Kind::Dir),
            None => (h, Kind::File),
        };
        if seg.contains('/') || seg == ".." || seg == "." {
            continue;
        }
        let Ok(name) = percent_encoding::percent_decode_str(seg).decode_utf8() else {
            unsafe_names.push(super::plan::shown(seg));
            continue;
        };
        if let Err(b) = check_name(&name) {
            unsafe_names.push(b.shown);
            continue;
        }
        if entries.iter().any(|e| e.name == name) {
            continue;
        }
        entries.push(Entry {
            name: name.into_owned(),
            kind,
            size: None,
            mtime: None,
        });
    }
    (entries, unsafe_names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sluice_json_listing() {
        let body = br#"{"path":"/d/","truncated":false,"entries":[
            {"name":"sub dir","type":"dir","size":0,"mtime":1700000000},
            {"name":"caf\u00e9.txt","type":"file","size":5,"mtime":null},
            {"name":"dev","type":"other","size":0,"mtime":null}]}"#;
        let e = parse_json(body).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].kind, e[0].mtime), (Kind::Dir, Some(1_700_000_000)));
        assert_eq!((e[1].name.as_str(), e[1].size), ("café.txt", Some(5)));
        assert_eq!(e[2].kind, Kind::Other);
        assert!(parse_json(b"{\"truncated\":true,\"entries\":[]}").is_err());
        assert!(parse_json(b"<html>").is_err());
    }

    #[test]
    fn nginx_autoindex_links() {
        let page = r#"<html><head><title>Index of /d/</title></head><body>
<h1>Index of /d/</h1><hr><pre><a href="../">../</a>
<a href="sub%20dir/">sub dir/</a>                                  25-Nov-2026 02:00       -
<a href="caf%C3%A9%20%E2%98%95.bin">café ☕.bin</a>   25-Nov-2026 02:00     123
<a href="a&amp;b">a&amp;b</a>
<a href="?C=N;O=D">Name</a> <a href="/elsewhere">x</a> <a href="http://evil/x">y</a>
<a href="..%2F..%2Fetc">z</a> <a href="ok">dup</a> <a href='./ok'>dup</a>
<a href=%2e%2e>w</a> <a href="./a:b">c</a></pre><hr></body></html>"#;
        let (e, bad) = parse_html(page);
        let names: Vec<_> = e.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            names,
            [
                ("sub dir", Kind::Dir),
                ("café ☕.bin", Kind::File),
                ("a&b", Kind::File),
                ("ok", Kind::File),
                ("a:b", Kind::File)
            ]
        );
        assert_eq!(bad, ["../../etc", ".."]);
    }
}
