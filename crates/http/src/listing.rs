//! Directory listings: an HTML page for people and `?format=json` for
//! scripts. The shell reads the directory (names, kinds, sizes, times);
//! this module sorts, escapes and renders.
//!
//! Escaping rules: a link is the percent-encoded name
//! ([`crate::path::encode_segment`], so `?`, `#`, `%` and `/` cannot
//! change it), then HTML-escaped like the visible name, so a file called
//! `<script>` is text. JSON strings escape `"`, `\` and every control
//! character (RFC 8259 7).
//!
//! Only names a request can reach are listed
//! ([`crate::path::is_requestable_name`]): the path parser refuses ASCII
//! control bytes (they are never in names we mean to serve and they
//! poison logs and terminals), so a file called `new\nline` or
//! `\x1b[31m` is left out of both the HTML and the JSON listing, as the
//! shell leaves out names that are not UTF-8. A link that only ever
//! answers 400 would be worse than no link, and raw CR/LF/ESC would
//! reach the page's text.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::limits::MAX_LISTING_ENTRIES;
use crate::path::{encode_segment, is_requestable_name, VirtualPath};

/// What a directory entry is (after the shell followed or refused
/// symlinks, by its own policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory: listed first, linked with a trailing `/`.
    Dir,
    /// Anything else (device, socket, dangling link): listed, size 0.
    Other,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Other => "other",
        }
    }
}

/// One entry as the shell found it. Names must be UTF-8: the shell skips
/// others (the request parser refuses non-UTF-8 paths, so a link to one
/// could not be followed anyway).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name (one segment, no `/`).
    pub name: String,
    /// File, directory or other.
    pub kind: EntryKind,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Modification time, if known.
    pub mtime: Option<SystemTime>,
}

/// The entries a request can name (see the module docs), directories
/// first, then by name (bytewise, so the order is stable across locales).
fn sorted(entries: &[DirEntry]) -> Vec<&DirEntry> {
    let mut v: Vec<&DirEntry> = entries
        .iter()
        .filter(|e| is_requestable_name(&e.name))
        .collect();
    v.sort_by(|a, b| (a.kind != EntryKind::Dir, &a.name).cmp(&(b.kind != EntryKind::Dir, &b.name)));
    v
}

/// The HTML listing of `dir`, whole (directories first, then by name; at
/// most [`MAX_LISTING_ENTRIES`]).
pub fn html(dir: &VirtualPath, entries: &[DirEntry]) -> String {
    whole(dir, entries, false)
}

/// The JSON listing of `dir`, whole:
/// `{"path":"/a/","entries":[{"name":..,"type":"file","size":N,
/// "mtime":UNIX_SECONDS_OR_NULL},..],"truncated":false}`.
pub fn json(dir: &VirtualPath, entries: &[DirEntry]) -> String {
    whole(dir, entries, true)
}

fn whole(dir: &VirtualPath, entries: &[DirEntry], json: bool) -> String {
    let mut r = Renderer::new(dir, json);
    let mut out = Vec::with_capacity(512 + entries.len().min(MAX_LISTING_ENTRIES) * 160);
    r.batch(entries, &mut out);
    r.end(&mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Renders a listing a batch of entries at a time, so a directory of any
/// size is sent with the memory of one batch: the page's head comes with
/// the first batch, its end with [`Renderer::end`]. Each batch is ordered
/// (directories first, then by name); a listing given in one batch is
/// ordered as a whole. After [`MAX_LISTING_ENTRIES`] entries the rest
/// are dropped and the page says it was cut ([`Renderer::is_full`]).
#[derive(Debug)]
pub struct Renderer {
    json: bool,
    title: String,
    root: bool,
    started: bool,
    count: usize,
    cut: bool,
    in_order: bool,
}

impl Renderer {
    /// A renderer for `dir`, HTML or JSON.
    pub fn new(dir: &VirtualPath, json: bool) -> Renderer {
        Renderer {
            json,
            title: dir_display(dir),
            root: dir.is_root(),
            started: false,
            count: 0,
            cut: false,
            in_order: true,
        }
    }

    /// Says the page was sent in several batches, so it is not ordered
    /// as a whole (the HTML page says so; JSON has `"sorted":false`).
    pub fn set_unordered(&mut self) {
        self.in_order = false;
    }

    /// True once [`MAX_LISTING_ENTRIES`] entries were rendered: read no more.
    pub fn is_full(&self) -> bool {
        self.count >= MAX_LISTING_ENTRIES
    }

    fn begin(&mut self, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        if self.json {
            out.extend_from_slice(b"{\"path\":");
            let mut s = String::new();
            json_string(&mut s, &self.title);
            out.extend_from_slice(s.as_bytes());
            out.extend_from_slice(b",\"entries\":[");
            return;
        }
        let title = html_escape(&self.title);
        let mut s = String::new();
        let _ = write!(
            s,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width\">\
             <title>Index of {title}</title>\n<style>body{{font-family:sans-serif}}\
             td{{padding:0 1em}}td.s{{text-align:right;font-family:monospace}}</style>\
             </head>\n<body>\n<h1>Index of {title}</h1>\n<table>\n\
             <tr><th>Name</th><th>Size</th><th>Modified (UTC)</th></tr>\n"
        );
        if !self.root {
            s.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// Appends the rendering of `entries` (the page's head first, on the
    /// first call).
    pub fn batch(&mut self, entries: &[DirEntry], out: &mut Vec<u8>) {
        self.begin(out);
        let mut s = String::with_capacity(entries.len() * 160);
        for e in sorted(entries) {
            if self.is_full() {
                self.cut = true;
                break;
            }
            if self.json {
                entry_json(&mut s, e, self.count > 0);
            } else {
                entry_html(&mut s, e);
            }
            self.count += 1;
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// Appends the end of the page.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        self.begin(out);
        if self.json {
            let _ = writeln!(
                Bytes(out),
                "],\"truncated\":{},\"sorted\":{}}}",
                self.cut,
                self.in_order
            );
            return;
        }
        out.extend_from_slice(b"</table>\n");
        if self.cut {
            let _ = writeln!(
                Bytes(out),
                "<p>Listing cut off after {MAX_LISTING_ENTRIES} entries.</p>"
            );
        }
        if !self.in_order {
            out.extend_from_slice(
                b"<p>A large directory: entries are shown as it holds them, not sorted.</p>\n",
            );
        }
        out.extend_from_slice(b"</body></html>\n");
    }
}

/// `fmt::Write` onto a byte buffer.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn entry_html(out: &mut String, e: &DirEntry) {
    let slash = if e.kind == EntryKind::Dir { "/" } else { "" };
    let href = html_escape(&encode_segment(&e.name));
    let name = html_escape(&e.name);
    let size = if e.kind == EntryKind::Dir {
        "-".to_owned()
    } else {
        e.size.to_string()
    };
    let date = e.mtime.map(civil_time).unwrap_or_default();
    let _ = writeln!(
        out,
        "<tr><td><a href=\"./{href}{slash}\">{name}{slash}</a></td>\
         <td class=\"s\">{size}</td><td>{date}</td></tr>"
    );
}

fn entry_json(out: &mut String, e: &DirEntry, comma: bool) {
    if comma {
        out.push(',');
    }
    out.push_str("{\"name\":");
    json_string(out, &e.name);
    let _ = write!(
        out,
        ",\"type\":\"{}\",\"size\":{},\"mtime\":",
        e.kind.as_str(),
        e.size
    );
    match e.mtime.and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
        Some(d) => {
            let _ = write!(out, "{}", d.as_secs());
        }
        None => out.push_str("null"),
    }
    out.push('}');
}

fn dir_display(dir: &VirtualPath) -> String {
    if dir.is_root() {
        "/".to_owned()
    } else {
        format!("{}/", dir.as_str())
    }
}

/// Escape text for HTML element content and double-quoted attributes.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Append `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            // U+2028/2029 are valid JSON but break JavaScript string literals.
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `YYYY-MM-DD HH:MM` in UTC, for people.
fn civil_time(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs(),
        Err(_) => return String::new(),
    };
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's
/// `civil_from_days` algorithm for the proleptic Gregorian calendar.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::normalize;
    use std::time::Duration;

    fn entry(name: &str, kind: EntryKind, size: u64) -> DirEntry {
        DirEntry {
            name: name.to_owned(),
            kind,
            size,
            mtime: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        }
    }

    fn sample() -> Vec<DirEntry> {
        vec![
            entry("b.txt", EntryKind::File, 10),
            entry("<script>alert(1)<\\script>", EntryKind::File, 1),
            entry("sub dir", EntryKind::Dir, 0),
            entry("a&b?c#d%e\"f", EntryKind::File, 3),
            DirEntry {
                name: "q\"\\\u{2028}".to_owned(),
                kind: EntryKind::Other,
                size: 0,
                mtime: None,
            },
        ]
    }

    #[test]
    fn html_is_sorted_escaped_and_linked() {
        let page = html(&normalize("/pub/").unwrap(), &sample());
        assert!(page.contains("<title>Index of /pub/</title>"));
        assert!(page.contains("<a href=\"../\">../</a>"));
        assert!(page.contains("<a href=\"./sub%20dir/\">sub dir/</a>"));
        assert!(page.contains("<a href=\"./a%26b%3Fc%23d%25e%22f\">a&amp;b?c#d%e&quot;f</a>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;\\script&gt;"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("<td class=\"s\">10</td><td>2023-11-14 22:13</td>"));
        // Directory first, then bytewise name order.
        let pos = |s: &str| page.find(s).unwrap();
        assert!(
            pos("sub%20dir") < pos("%3Cscript")
                && pos("%3Cscript") < pos("a%26b")
                && pos("a%26b") < pos("b.txt")
        );
        // The root has no parent link.
        assert!(!html(&VirtualPath::root(), &[]).contains("../"));
    }

    #[test]
    fn json_escapes_everything() {
        let out = json(&normalize("/pub").unwrap(), &sample());
        assert!(out.starts_with(
            "{\"path\":\"/pub/\",\"entries\":[{\"name\":\"sub dir\",\"type\":\"dir\""
        ));
        assert!(
            out.ends_with("],\"truncated\":false,\"sorted\":true}\n"),
            "{out}"
        );
        assert!(out.contains(
            "{\"name\":\"q\\\"\\\\\\u2028\",\"type\":\"other\",\"size\":0,\"mtime\":null}"
        ));
        assert!(
            out.contains("{\"name\":\"b.txt\",\"type\":\"file\",\"size\":10,\"mtime\":1700000000}")
        );
        assert!(out.trim_end().ends_with("}"));
    }

    #[test]
    fn names_no_request_can_reach_are_not_listed() {
        let mut entries = sample();
        // As the probe found them; "bad" marks them in the output.
        for bad in [
            "bad-new\nline",
            "bad-cr\rx",
            "bad-tab\there",
            "bad-ctl\u{1}\u{1b}[31m",
            "bad-del\u{7f}",
        ] {
            entries.push(entry(bad, EntryKind::File, 1));
        }
        entries.push(entry("ok\u{e9}", EntryKind::File, 1));
        let page = html(&VirtualPath::root(), &entries);
        let list = json(&VirtualPath::root(), &entries);
        for out in [&page, &list] {
            assert!(
                !out.bytes().any(|b| b < 0x20 && b != b'\n' || b == 0x7f),
                "{out:?}"
            );
            for gone in ["bad", "%0A", "%1B", "\\u001b"] {
                assert!(!out.contains(gone), "{gone} in {out}");
            }
        }
        assert!(page.contains("<a href=\"./ok%C3%A9\">ok\u{e9}</a>"));
        assert!(list.contains("\"name\":\"ok\u{e9}\""));
        assert_eq!(list.matches("\"name\"").count(), sample().len() + 1);
    }

    /// Streaming: a listing rendered a batch at a time holds no more than
    /// one batch's bytes (the renderer keeps counters only), whatever the
    /// directory's size, and the batches add up to every entry.
    #[test]
    fn a_streamed_listing_holds_one_batch_at_a_time() {
        for json in [false, true] {
            let mut r = Renderer::new(&normalize("/big/").unwrap(), json);
            let (mut names, mut biggest) = (0, 0);
            // A long name, escaped: the worst line is still bounded.
            let long = "&".repeat(200);
            for b in 0..20 {
                let batch: Vec<DirEntry> = (0..1000)
                    .map(|i| entry(&format!("{long}{b}-{i}"), EntryKind::File, 1 << 40))
                    .collect();
                let mut out = Vec::new();
                r.batch(&batch, &mut out);
                biggest = biggest.max(out.len());
                let text = String::from_utf8(out).unwrap();
                names += text
                    .matches(if json { "{\"name\":" } else { "<a href=\"./" })
                    .count();
            }
            let mut out = Vec::new();
            r.end(&mut out);
            // Head of the page + 1000 lines of at most 2 KiB.
            assert!(biggest <= 1024 + 1000 * 2048, "{biggest}");
            assert_eq!(names, 20_000);
            assert!(std::mem::size_of::<Renderer>() < 128);
        }
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(
            civil_time(UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661)),
            "2000-02-29 01:01"
        );
    }

    #[test]
    fn huge_listing_is_cut() {
        let many: Vec<DirEntry> = (0..MAX_LISTING_ENTRIES + 2)
            .map(|i| entry(&i.to_string(), EntryKind::File, 0))
            .collect();
        let out = json(&VirtualPath::root(), &many);
        assert!(out.contains("\"truncated\":true"));
        assert_eq!(out.matches("\"name\"").count(), MAX_LISTING_ENTRIES);
    }
}
