use super::*;
use crate::request::parse_request;
use std::time::Duration;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn get(path: &str, extra: &str) -> Request {
    let head = format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}\r\n");
    parse_request(head.as_bytes()).unwrap().unwrap().0
}

fn listing() -> Resource {
    Resource::Directory {
        entries: Vec::new(),
    }
}

fn file() -> Resource {
    Resource::File {
        len: 1000,
        mtime: at(1_700_000_000),
    }
}

fn go(req: &Request, r: Resource) -> (Plan, String) {
    let p = respond(req, r, at(1_800_000_000), &Options::default());
    let h = String::from_utf8(p.head.clone()).unwrap();
    (p, h)
}

/// The file's ETag as a 200 reports it.
fn etag() -> String {
    Validators::new(1000, at(1_700_000_000), at(1_800_000_000)).etag
}

#[track_caller]
fn assert_412(p: &Plan, h: &str) {
    assert_eq!(p.status, Status::PreconditionFailed, "{h}");
    assert!(h.starts_with("HTTP/1.1 412 Precondition Failed\r\n"), "{h}");
    assert!(p.body.is_empty());
    assert!(h.contains("\r\nContent-Length: 0\r\n"), "{h}");
    assert!(p.keep_alive, "a 412 with a length keeps the connection");
}

#[test]
fn failed_if_match_is_412_with_validators() {
    for extra in [
        "If-Match: \"nope\"\r\n",
        "If-Match: W/\"6553f100.0-3e8\"\r\n",
        "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
        // Before If-None-Match, which would give a 304...
        "If-Match: \"nope\"\r\nIf-None-Match: *\r\n",
        // ...and before Range / If-Range, which would give a 206.
        "If-Match: \"nope\"\r\nRange: bytes=0-9\r\n",
        "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\nRange: bytes=0-9\r\n",
    ] {
        let (p, h) = go(&get("/a.txt", extra), file());
        assert_412(&p, &h);
        assert!(h.contains(&format!("\r\nETag: {}\r\n", etag())), "{h}");
        assert!(
            h.contains("\r\nLast-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n"),
            "{h}"
        );
        assert!(!h.contains("Content-Range"), "{h}");
    }
    // HEAD gets the same head.
    let head = "HEAD /a.txt HTTP/1.1\r\nHost: h\r\nIf-Match: \"x\"\r\n\r\n";
    let req = parse_request(head.as_bytes()).unwrap().unwrap().0;
    let (p, h) = go(&req, file());
    assert_412(&p, &h);
}

#[test]
fn passing_if_match_serves_and_ranges() {
    let e = etag();
    for extra in [
        format!("If-Match: {e}\r\n"),
        "If-Match: *\r\n".to_owned(),
        "If-Unmodified-Since: Tue, 14 Nov 2023 22:13:20 GMT\r\n".to_owned(),
        // If-Match passes, so the stale If-Unmodified-Since is not used.
        format!("If-Match: {e}\r\nIf-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"),
    ] {
        assert_eq!(go(&get("/a.txt", &extra), file()).0.status, Status::Ok);
    }
    let (p, _) = go(
        &get("/a.txt", &format!("If-Match: {e}\r\nRange: bytes=0-9\r\n")),
        file(),
    );
    assert_eq!(p.status, Status::PartialContent);
    let (p, _) = go(
        &get(
            "/a.txt",
            &format!("If-Match: {e}\r\nIf-None-Match: {e}\r\n"),
        ),
        file(),
    );
    assert_eq!(p.status, Status::NotModified);
}

#[test]
fn preconditions_on_other_answers() {
    // A listing has no ETag: only "*" passes.
    let (p, h) = go(&get("/d/", "If-Match: \"x\"\r\n"), listing());
    assert_412(&p, &h);
    assert!(!h.contains("ETag"), "{h}");
    assert_eq!(
        go(&get("/d/", "If-Match: *\r\n"), listing()).0.status,
        Status::Ok
    );
    assert_eq!(
        go(
            &get(
                "/d/",
                "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
            ),
            listing()
        )
        .0
        .status,
        Status::Ok
    );
    // Not a 2xx without the conditions: they are ignored (RFC 9110 13.2.1).
    let (p, _) = go(&get("/d", "If-Match: \"x\"\r\n"), listing());
    assert_eq!(p.status, Status::MovedPermanently);
    let (p, _) = go(&get("/gone", "If-Match: *\r\n"), Resource::NotFound);
    assert_eq!(p.status, Status::NotFound);
}

#[test]
fn listings_redirect_to_the_normalized_path_and_files_refuse_a_slash() {
    let (p, h) = go(&get("/d/sub/..", ""), listing());
    assert_eq!(p.status, Status::MovedPermanently);
    assert!(h.contains("\r\nLocation: /d/\r\n"), "{h}");
    let (p, h) = go(&get("/..", ""), listing());
    assert_eq!(p.status, Status::MovedPermanently);
    assert!(h.contains("\r\nLocation: /\r\n"), "{h}");
    assert_eq!(go(&get("/d/", ""), listing()).0.status, Status::Ok);
    assert_eq!(go(&get("/a/", ""), file()).0.status, Status::NotFound);
    assert_eq!(go(&get("/x/../a", ""), file()).0.status, Status::Ok);
}

#[test]
fn unavailable_says_when_to_retry() {
    let p = respond_status(Status::ServiceUnavailable, at(1), &Options::default());
    let h = String::from_utf8(p.head).unwrap();
    assert!(h.contains("\r\nRetry-After: 1\r\n"), "{h}");
    let (_, h) = go(&get("/a", ""), Resource::Unavailable);
    assert!(h.contains("\r\nRetry-After: 1\r\n"), "{h}");
    let p = respond_status(Status::RequestTimeout, at(1), &Options::default());
    assert!(!String::from_utf8(p.head).unwrap().contains("Retry-After"));
}
