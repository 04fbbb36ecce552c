//! `respond`: every rule of the file server's decision function, driven
//! through the public API the shell uses (parse, then respond).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use sluice_http::{
    parse_request, parse_response_head, respond, respond_error, respond_status, DirEntry,
    EntryKind, Options, Plan, Request, RequestError, Resource, Segment, Status,
};

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn mtime() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn opts() -> Options {
    Options {
        server: "sluice-test".into(),
        boundary_seed: 7,
    }
}

fn req(head: &str) -> Request {
    parse_request(head.as_bytes()).unwrap().unwrap().0
}

fn get(path: &str, extra: &str) -> Request {
    req(&format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}\r\n"))
}

fn file(len: u64) -> Resource {
    Resource::File {
        len,
        mtime: mtime(),
    }
}

fn head_str(p: &Plan) -> String {
    String::from_utf8(p.head.clone()).unwrap()
}

fn field(p: &Plan, name: &str) -> Option<String> {
    let (h, _) = parse_response_head(&p.head).unwrap().unwrap();
    h.field(name).map(str::to_owned)
}

/// The head's Content-Length equals what GET's body plan carries.
fn assert_length_consistent(p: &Plan) {
    if let Some(cl) = field(p, "content-length") {
        assert_eq!(cl.parse::<u64>().unwrap(), p.body_len(), "{}", head_str(p));
    }
}

#[test]
fn full_get() {
    let p = respond(&get("/dir/a.txt", ""), file(1000), now(), &opts());
    assert_eq!(p.status, Status::Ok);
    assert_eq!(
        p.body,
        vec![Segment::File {
            offset: 0,
            len: 1000
        }]
    );
    assert!(p.keep_alive);
    let h = head_str(&p);
    assert!(h.starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(h.contains("Date: Fri, 15 Jan 2027 08:00:00 GMT\r\n"));
    assert!(h.contains("Server: sluice-test\r\n"));
    assert!(h.contains("Content-Type: text/plain; charset=utf-8\r\n"));
    assert!(h.contains("Content-Length: 1000\r\n"));
    assert!(h.contains("Accept-Ranges: bytes\r\n"));
    assert!(h.contains("ETag: \"6553f100.0-3e8\"\r\n"));
    assert!(h.contains("Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n"));
    assert!(!h.contains("Connection"));
    assert!(h.ends_with("\r\n\r\n"));
}

#[test]
fn head_has_same_head_and_no_body() {
    let g = respond(&get("/a.bin", ""), file(1000), now(), &opts());
    let h = respond(
        &req("HEAD /a.bin HTTP/1.1\r\nHost: h\r\n\r\n"),
        file(1000),
        now(),
        &opts(),
    );
    assert_eq!(g.head, h.head);
    assert!(h.body.is_empty());
    assert_eq!(
        field(&h, "content-type").as_deref(),
        Some("application/octet-stream")
    );
    let r = respond(
        &req("HEAD /a HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n"),
        file(100),
        now(),
        &opts(),
    );
    assert_eq!(r.status, Status::PartialContent);
    assert!(r.body.is_empty());
    assert_eq!(field(&r, "content-length").as_deref(), Some("10"));
}

#[test]
fn empty_file() {
    let p = respond(&get("/e", "Range: bytes=0-\r\n"), file(0), now(), &opts());
    assert_eq!(p.status, Status::Ok);
    assert!(p.body.is_empty());
    assert_eq!(field(&p, "content-length").as_deref(), Some("0"));
}

#[test]
fn single_ranges() {
    for (range, start, len, cr) in [
        ("bytes=0-99", 0, 100, "bytes 0-99/1000"),
        ("bytes=900-", 900, 100, "bytes 900-999/1000"),
        ("bytes=-10", 990, 10, "bytes 990-999/1000"),
    ] {
        let p = respond(
            &get("/f", &format!("Range: {range}\r\n")),
            file(1000),
            now(),
            &opts(),
        );
        assert_eq!(p.status, Status::PartialContent, "{range}");
        assert_eq!(p.body, vec![Segment::File { offset: start, len }]);
        assert_eq!(field(&p, "content-range").as_deref(), Some(cr));
        assert_length_consistent(&p);
    }
}

#[test]
fn multipart_byteranges() {
    let p = respond(
        &get("/x.txt", "Range: bytes=0-9,20-29\r\n"),
        file(100),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::PartialContent);
    let ctype = field(&p, "content-type").unwrap();
    let boundary = ctype
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap()
        .to_owned();
    assert!(field(&p, "content-range").is_none());
    assert_length_consistent(&p);
    // Render the body with a fake file whose byte i is b'a' + i % 26.
    let mut body = Vec::new();
    for s in &p.body {
        match s {
            Segment::Bytes(b) => body.extend_from_slice(b),
            Segment::File { offset, len } => {
                body.extend((*offset..offset + len).map(|i| b'a' + (i % 26) as u8))
            }
        }
    }
    let expect = format!(
        "--{b}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Range: bytes 0-9/100\r\n\r\nabcdefghij\
         \r\n--{b}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Range: bytes 20-29/100\r\n\r\nuvwxyzabcd\
         \r\n--{b}--\r\n",
        b = boundary
    );
    assert_eq!(String::from_utf8(body).unwrap(), expect);
}

#[test]
fn unsatisfiable_is_416_with_star() {
    let p = respond(
        &get("/f", "Range: bytes=1000-\r\n"),
        file(1000),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::RangeNotSatisfiable);
    assert_eq!(field(&p, "content-range").as_deref(), Some("bytes */1000"));
    assert!(p.keep_alive);
    assert_length_consistent(&p);
}

#[test]
fn amplification_and_bad_ranges_serve_full() {
    for range in [
        "bytes=0-,0-",
        "bytes=0-5,1-5,2-5,3-5",
        "bytes=9-1",
        "lines=1-2",
    ] {
        let p = respond(
            &get("/f", &format!("Range: {range}\r\n")),
            file(1000),
            now(),
            &opts(),
        );
        assert_eq!(p.status, Status::Ok, "{range}");
        assert!(p.range_ignored.is_some());
        assert_eq!(
            p.body,
            vec![Segment::File {
                offset: 0,
                len: 1000
            }]
        );
    }
}

#[test]
fn conditional_get() {
    let etag = field(&respond(&get("/f", ""), file(10), now(), &opts()), "etag").unwrap();
    let p = respond(
        &get("/f", &format!("If-None-Match: {etag}\r\n")),
        file(10),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::NotModified);
    assert!(p.body.is_empty());
    assert!(field(&p, "content-length").is_none());
    assert_eq!(field(&p, "etag"), Some(etag.clone()));
    let p = respond(
        &get("/f", "If-Modified-Since: Tue, 14 Nov 2023 22:13:20 GMT\r\n"),
        file(10),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::NotModified);
    let p = respond(
        &get("/f", "If-Modified-Since: Tue, 14 Nov 2023 22:13:19 GMT\r\n"),
        file(10),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::Ok);
    // A changed file (new size) no longer matches.
    let p = respond(
        &get("/f", &format!("If-None-Match: {etag}\r\n")),
        file(11),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::Ok);
}

#[test]
fn if_range() {
    let etag = field(&respond(&get("/f", ""), file(100), now(), &opts()), "etag").unwrap();
    let p = respond(
        &get("/f", &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n")),
        file(100),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::PartialContent);
    let p = respond(
        &get("/f", "Range: bytes=0-9\r\nIf-Range: \"stale\"\r\n"),
        file(100),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::Ok);
    assert_eq!(p.body_len(), 100);
    let p = respond(
        &get(
            "/f",
            "Range: bytes=0-9\r\nIf-Range: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
        ),
        file(100),
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::PartialContent);
}

#[test]
fn http10_connection_handling() {
    let p = respond(&req("GET /f HTTP/1.0\r\n\r\n"), file(1), now(), &opts());
    assert!(!p.keep_alive);
    assert!(head_str(&p).contains("Connection: close\r\n"));
    let p = respond(
        &req("GET /f HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
        file(1),
        now(),
        &opts(),
    );
    assert!(p.keep_alive);
    assert!(head_str(&p).contains("Connection: keep-alive\r\n"));
    let p = respond(&get("/f", "Connection: close\r\n"), file(1), now(), &opts());
    assert!(!p.keep_alive && head_str(&p).contains("Connection: close\r\n"));
}

fn entries() -> Vec<DirEntry> {
    vec![
        DirEntry {
            name: "z.txt".into(),
            kind: EntryKind::File,
            size: 5,
            mtime: Some(mtime()),
        },
        DirEntry {
            name: "a dir".into(),
            kind: EntryKind::Dir,
            size: 0,
            mtime: Some(mtime()),
        },
    ]
}

#[test]
fn directory_listing_html_and_json() {
    let p = respond(
        &get("/pub/", ""),
        Resource::Directory { entries: entries() },
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::Ok);
    assert_eq!(
        field(&p, "content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_length_consistent(&p);
    let Segment::Bytes(html) = &p.body[0] else {
        panic!()
    };
    let html = String::from_utf8(html.clone()).unwrap();
    assert!(html.find("a%20dir/").unwrap() < html.find("z.txt").unwrap());

    let p = respond(
        &get("/pub/?format=json", ""),
        Resource::Directory { entries: entries() },
        now(),
        &opts(),
    );
    assert_eq!(
        field(&p, "content-type").as_deref(),
        Some("application/json")
    );
    let Segment::Bytes(json) = &p.body[0] else {
        panic!()
    };
    assert!(String::from_utf8(json.clone())
        .unwrap()
        .starts_with("{\"path\":\"/pub/\""));
}

#[test]
fn directory_without_slash_redirects() {
    let p = respond(
        &get("/my%20pub?format=json", ""),
        Resource::Directory { entries: entries() },
        now(),
        &opts(),
    );
    assert_eq!(p.status, Status::MovedPermanently);
    assert_eq!(
        field(&p, "location").as_deref(),
        Some("/my%20pub/?format=json")
    );
    assert_length_consistent(&p);
}

#[test]
fn not_found_forbidden_errors() {
    for (res, st) in [
        (Resource::NotFound, Status::NotFound),
        (Resource::Forbidden, Status::Forbidden),
        (Resource::Unavailable, Status::ServiceUnavailable),
        (Resource::Error, Status::InternalServerError),
    ] {
        let p = respond(&get("/f", ""), res, now(), &opts());
        assert_eq!(p.status, st);
        assert!(p.keep_alive);
        assert_length_consistent(&p);
    }
}

#[test]
fn parse_errors_close() {
    let p = respond_error(RequestError::MethodNotAllowed, now(), &opts());
    assert_eq!(p.status, Status::MethodNotAllowed);
    assert!(!p.keep_alive);
    assert_eq!(field(&p, "allow").as_deref(), Some("GET, HEAD"));
    assert_eq!(field(&p, "connection").as_deref(), Some("close"));
    assert_length_consistent(&p);
    for (e, code) in [
        (RequestError::LineTooLong, 414),
        (RequestError::HeadTooLarge, 431),
        (RequestError::VersionNotSupported, 505),
        (RequestError::TransferEncoding, 501),
        (RequestError::Body, 413),
        (RequestError::Malformed("x"), 400),
    ] {
        assert_eq!(respond_error(e, now(), &opts()).status.code(), code);
    }
    let p = respond_status(Status::RequestTimeout, now(), &opts());
    assert!(head_str(&p).starts_with("HTTP/1.1 408 Request Timeout\r\n"));
    assert!(!p.keep_alive);
    assert_length_consistent(&p);
}

#[test]
fn pipelined_exchange() {
    let buf = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nHEAD /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    let mut at = 0;
    let mut statuses = Vec::new();
    while let Ok(Some((r, used))) = parse_request(&buf[at..]) {
        at += used;
        let p = respond(&r, file(3), now(), &opts());
        statuses.push((p.status, p.keep_alive, p.body_len()));
        if !p.keep_alive {
            break;
        }
    }
    assert_eq!(at, buf.len());
    assert_eq!(
        statuses,
        vec![(Status::Ok, true, 3), (Status::Ok, false, 0)]
    );
}

proptest! {
    /// Whatever the Range header, the plan reads only inside the file and
    /// its Content-Length matches its body.
    #[test]
    fn plans_stay_inside_the_file(range in "bytes=[0-9,\\- ]{0,30}", len in 0u64..3000) {
        let r = get("/f", &format!("Range: {range}\r\n"));
        let p = respond(&r, file(len), now(), &opts());
        for s in &p.body {
            if let Segment::File { offset, len: n } = s {
                prop_assert!(*n > 0 && offset + n <= len);
            }
        }
        if let Some(cl) = field(&p, "content-length") {
            prop_assert_eq!(cl.parse::<u64>().unwrap(), p.body_len());
        }
        let file_bytes: u64 = p.body.iter().filter(|s| matches!(s, Segment::File { .. })).map(Segment::len).sum();
        prop_assert!(file_bytes <= len);
    }
}
