//! HTTP/1.1 on raw sockets against `sluice serve`: ranges, conditionals,
//! keep-alive, listings, the open-file cache, connection limits, and
//! hostile input, each answered with its status while the server goes on
//! serving a fresh connection.

use crate::harness::{corpus, require_tool, run};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::http::{sluice_http, HttpServer, RAW_TIMEOUT};

/// Sends `request` on a fresh connection and reads until the server
/// closes it (or RAW_TIMEOUT).
pub(crate) fn raw(port: u16, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    // The server may answer and close before it read everything (414,
    // 431): a failed write is fine, the answer is what we check.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// The status codes of every response in `bytes`, in order (heads are
/// found by their status line; bodies here never contain one).
fn statuses(bytes: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(bytes);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text[i + 9..].get(..3)?.parse().ok())
        .collect()
}

pub(crate) fn status(bytes: &[u8]) -> u16 {
    statuses(bytes).first().copied().unwrap_or_else(|| {
        panic!(
            "no response: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        )
    })
}

/// Body of a single response (after the blank line).
pub(crate) fn body(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end");
    &bytes[at + 4..]
}

pub(crate) fn field(bytes: &[u8], name: &str) -> Option<String> {
    let at = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..at]).into_owned();
    head.lines().find_map(|l| {
        l.split_once(':')
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The server still answers a plain GET on a fresh connection.
#[track_caller]
pub(crate) fn assert_serves_fresh(s: &HttpServer) {
    let r = raw(
        s.port,
        b"GET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        status(&r),
        200,
        "fresh connection after bad input\n{}",
        s.ftp.log_tail()
    );
    assert_eq!(body(&r), std::fs::read(&corpus().file(1).path).expect("f1"));
}

pub(crate) fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

#[test]
fn ranges_conditionals_and_listings() {
    let s = sluice_http(&[]);
    let f = corpus().file((1 << 20) + 7);
    let data = std::fs::read(&f.path).expect("read");
    let p = s.port;
    let name = format!("/{}", f.name);

    let r = raw(p, &get(&name, "Range: bytes=100-199\r\n"));
    assert_eq!(status(&r), 206);
    assert_eq!(body(&r), &data[100..200]);
    assert_eq!(
        field(&r, "content-range").as_deref(),
        Some("bytes 100-199/1048583")
    );
    let r = raw(p, &get(&name, "Range: bytes=1048000-\r\n"));
    assert_eq!(body(&r), &data[1048000..]);
    let r = raw(p, &get(&name, "Range: bytes=-7\r\n"));
    assert_eq!(body(&r), &data[data.len() - 7..]);
    let r = raw(p, &get(&name, "Range: bytes=0-0,10-19\r\n"));
    assert_eq!(status(&r), 206);
    assert!(field(&r, "content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    let b = body(&r);
    assert!(
        b.windows(10).any(|w| w == &data[10..20]),
        "second part present"
    );
    let r = raw(p, &get(&name, "Range: bytes=2000000-\r\n"));
    assert_eq!(status(&r), 416);
    assert_eq!(
        field(&r, "content-range").as_deref(),
        Some("bytes */1048583")
    );

    // Validators, 304, If-Range.
    let r = raw(
        p,
        &format!("HEAD {name} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    );
    assert_eq!(status(&r), 200);
    assert!(body(&r).is_empty(), "HEAD has no body");
    assert_eq!(field(&r, "content-length").as_deref(), Some("1048583"));
    assert_eq!(field(&r, "accept-ranges").as_deref(), Some("bytes"));
    let etag = field(&r, "etag").expect("etag");
    let lm = field(&r, "last-modified").expect("last-modified");
    assert_eq!(
        status(&raw(p, &get(&name, &format!("If-None-Match: {etag}\r\n")))),
        304
    );
    assert_eq!(
        status(&raw(
            p,
            &get(&name, &format!("If-Modified-Since: {lm}\r\n"))
        )),
        304
    );
    let r = raw(
        p,
        &get(&name, &format!("Range: bytes=5-9\r\nIf-Range: {etag}\r\n")),
    );
    assert_eq!((status(&r), body(&r)), (206, &data[5..10]));
    let r = raw(
        p,
        &get(&name, "Range: bytes=5-9\r\nIf-Range: \"other\"\r\n"),
    );
    assert_eq!(status(&r), 200, "If-Range mismatch sends the whole file");
    assert_eq!(body(&r).len(), data.len());

    // Keep-alive with three pipelined requests in one write, then HTTP/1.0.
    let r = raw(
        p,
        b"GET /f1.bin HTTP/1.1\r\nHost: t\r\n\r\nHEAD /f0.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(statuses(&r), [200, 200, 200]);
    let r = raw(p, b"GET /f1.bin HTTP/1.0\r\n\r\n");
    assert_eq!(status(&r), 200);
    assert_eq!(body(&r).len(), 1);

    // Listings.
    let r = raw(p, &get("/", ""));
    assert_eq!(status(&r), 200);
    let html = String::from_utf8_lossy(body(&r)).into_owned();
    for f in corpus().files() {
        assert!(html.contains(&format!("href=\"./{}\"", f.name)), "{html}");
    }
    let r = raw(p, &get("/?format=json", ""));
    assert_eq!(
        field(&r, "content-type").as_deref(),
        Some("application/json")
    );
    assert!(String::from_utf8_lossy(body(&r)).contains("\"f1048583.bin\""));
    let r = raw(p, &get("/nope/", ""));
    assert_eq!(status(&r), 404);

    // The access log has combined-format lines.
    let log = s.ftp.log_tail();
    assert!(
        log.contains(&format!("\"GET {name} HTTP/1.1\" 206 100 \"-\" \"-\"")),
        "no access line\n{log}"
    );
}

/// RFC 9110 13.1.1, 13.1.4, 13.2.2: If-Match (strong) and, without it,
/// If-Unmodified-Since are checked first; failing, 412 with no body and
/// the current validators, before any 304 or 206 could be chosen.
#[test]
fn if_match_and_if_unmodified_since_give_412() {
    let s = sluice_http(&[]);
    let p = s.port;
    let f = corpus().file((1 << 20) + 7);
    let data = std::fs::read(&f.path).expect("read");
    let name = format!("/{}", f.name);
    let r = raw(
        p,
        &format!("HEAD {name} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    );
    let etag = field(&r, "etag").expect("etag");
    let lm = field(&r, "last-modified").expect("last-modified");
    let epoch = "Thu, 01 Jan 1970 00:00:00 GMT";
    for extra in [
        "If-Match: \"nope\"\r\n".to_owned(),
        format!("If-Match: W/{etag}\r\n"),
        format!("If-Unmodified-Since: {epoch}\r\n"),
        format!("If-Match: \"nope\"\r\nIf-None-Match: {etag}\r\n"),
        format!("If-Match: \"nope\"\r\nRange: bytes=0-9\r\nIf-Range: {etag}\r\n"),
        format!("If-Unmodified-Since: {epoch}\r\nRange: bytes=0-9\r\n"),
    ] {
        let r = raw(p, &get(&name, &extra));
        assert_eq!(status(&r), 412, "{extra}{}", String::from_utf8_lossy(&r));
        assert!(body(&r).is_empty(), "{extra}");
        assert_eq!(field(&r, "content-length").as_deref(), Some("0"), "{extra}");
        assert_eq!(field(&r, "etag").as_ref(), Some(&etag), "{extra}");
        assert_eq!(field(&r, "last-modified").as_ref(), Some(&lm), "{extra}");
    }
    // Passing conditions serve as before.
    for extra in [
        format!("If-Match: {etag}\r\n"),
        "If-Match: *\r\n".to_owned(),
        format!("If-Match: \"a\", {etag}\r\n"),
        format!("If-Unmodified-Since: {lm}\r\n"),
        format!("If-Match: {etag}\r\nIf-Unmodified-Since: {epoch}\r\n"),
    ] {
        let r = raw(p, &get(&name, &extra));
        assert_eq!(status(&r), 200, "{extra}");
        assert_eq!(body(&r).len(), data.len(), "{extra}");
    }
    let r = raw(
        p,
        &get(&name, &format!("If-Match: {etag}\r\nRange: bytes=5-9\r\n")),
    );
    assert_eq!((status(&r), body(&r)), (206, &data[5..10]));
    // A 412 keeps the connection usable: the next pipelined request is answered.
    let r = raw(
        p,
        format!(
            "GET {name} HTTP/1.1\r\nHost: t\r\nIf-Match: \"nope\"\r\n\r\n\
             GET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(statuses(&r), [412, 200]);
    // curl sends the same and sees the same.
    if require_tool("curl") {
        let out = run(Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "If-Match: \"nope\"", &s.url(&f.name)]));
        assert_eq!(out.stdout.trim(), "412", "{}", out.describe());
    }
}

/// Names with control bytes cannot be requested (the path parser refuses
/// them), so the listings leave them out, and every link a listing
/// offers leads to its file.
#[test]
fn listings_offer_only_names_that_can_be_fetched() {
    let s = sluice_http(&[]);
    let root = s.ftp.root.clone();
    let bad = [
        "bad-new\nline",
        "bad-cr\rx",
        "bad-tab\there",
        "bad-ctl\u{1}\u{1b}[31m",
        "bad-del\u{7f}",
    ];
    for name in bad {
        std::fs::write(root.join(name), b"x").expect("odd name");
    }
    std::fs::write(root.join("good é?#.txt"), b"good").expect("good name");
    let r = raw(s.port, &get("/", ""));
    assert_eq!(status(&r), 200);
    let html = String::from_utf8(body(&r).to_vec()).expect("utf-8 page");
    let r = raw(s.port, &get("/?format=json", ""));
    let json = String::from_utf8(body(&r).to_vec()).expect("utf-8 json");
    for page in [&html, &json] {
        assert!(!page.contains("bad-"), "{page}");
        assert!(
            !page.bytes().any(|b| b < 0x20 && b != b'\n' || b == 0x7f),
            "raw control bytes: {page:?}"
        );
    }
    assert!(json.contains("\"good é?#.txt\""), "{json}");
    // Follow every link of the page (HEAD: the corpus holds big files).
    let links: Vec<&str> = html
        .split("href=\"./")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(links.contains(&"good%20%C3%A9%3F%23.txt"), "{html}");
    assert_eq!(links.len(), corpus().files().len() + 1, "{html}");
    for link in links {
        let r = raw(
            s.port,
            format!("HEAD /{link} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&r), 200, "link {link}");
    }
    assert_eq!(
        body(&raw(s.port, &get("/good%20%C3%A9%3F%23.txt", ""))),
        b"good"
    );
    assert_serves_fresh(&s);
}

/// FIFOs and sockets answer 403, so the listings leave them out instead
/// of offering links that only ever fail.
#[test]
fn listings_leave_out_fifos_and_sockets() {
    let s = sluice_http(&[]);
    let root = s.ftp.root.clone();
    let st = std::process::Command::new("mkfifo")
        .arg(root.join("a-fifo"))
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed");
    let _sock = std::os::unix::net::UnixListener::bind(root.join("a-socket")).expect("bind");
    assert_eq!(status(&raw(s.port, &get("/a-fifo", ""))), 403);
    for path in ["/", "/?format=json"] {
        let r = raw(s.port, &get(path, ""));
        assert_eq!(status(&r), 200);
        let page = String::from_utf8_lossy(body(&r)).into_owned();
        assert!(page.contains("f1.bin"), "{page}");
        for gone in ["a-fifo", "a-socket"] {
            assert!(!page.contains(gone), "{path} lists {gone}:\n{page}");
        }
    }
    assert_serves_fresh(&s);
}

/// Targets of the server's open descriptors that end with `suffix`.
fn open_fds_ending(pid: u32, suffix: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|t| t.to_string_lossy().into_owned())
                .filter(|t| t.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (generously) until `cond` holds; panics with `what` if it never does.
#[track_caller]
fn wait_for(s: &HttpServer, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + RAW_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}\n{}", s.ftp.log_tail());
        thread::sleep(Duration::from_millis(100));
    }
}

/// The open-file cache lets go of files on its own: a deleted file is
/// closed (its space freed) and an expired entry is dropped without any
/// further request for that path.
#[test]
fn the_open_file_cache_does_not_keep_deleted_or_old_files_open() {
    // A long-lived cache: the file is surely still cached when we look,
    // and only its lost link can make the server close it.
    let s = sluice_http(&["--http-open-cache", "3600"]);
    let pid = s.ftp.pid();
    let path = s.ftp.root.join("rotate.log");
    std::fs::write(&path, vec![b'l'; 100_000]).expect("file");
    assert_eq!(status(&raw(s.port, &get("/rotate.log", ""))), 200);
    wait_for(&s, "the cache never held the file", || {
        !open_fds_ending(pid, "/rotate.log").is_empty()
    });
    std::fs::remove_file(&path).expect("delete");
    wait_for(&s, "the deleted file stays open", || {
        open_fds_ending(pid, "/rotate.log (deleted)").is_empty()
    });
    assert_serves_fresh(&s);

    // A one-second cache and a file renamed away (still linked, so only
    // the expiry can release it), never asked for again.
    let s = sluice_http(&["--http-open-cache", "1"]);
    let pid = s.ftp.pid();
    let path = s.ftp.root.join("app.log");
    std::fs::write(&path, b"log line\n").expect("file");
    assert_eq!(status(&raw(s.port, &get("/app.log", ""))), 200);
    std::fs::rename(&path, s.ftp.root.join("app.log.1")).expect("rotate");
    wait_for(&s, "the expired entry stays open", || {
        open_fds_ending(pid, "/app.log").is_empty() && open_fds_ending(pid, "/app.log.1").is_empty()
    });
    // And a downloaded-then-deleted file under the default-sized cache.
    let path = s.ftp.root.join("gone.bin");
    std::fs::write(&path, b"bytes").expect("file");
    assert_eq!(status(&raw(s.port, &get("/gone.bin", ""))), 200);
    std::fs::remove_file(&path).expect("delete");
    wait_for(&s, "the deleted file stays open", || {
        open_fds_ending(pid, "/gone.bin (deleted)").is_empty()
    });
    assert_serves_fresh(&s);
}
