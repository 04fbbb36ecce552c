use super::*;
use proptest::prelude::*;

fn ok(raw: &str) -> (Request, usize) {
    parse_request(raw.as_bytes()).unwrap().unwrap()
}

fn err(raw: &[u8]) -> RequestError {
    parse_request(raw).unwrap_err()
}

#[test]
fn simple_get() {
    let raw = "GET /a%20b/c.txt?format=json HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8\r\n\r\n";
    let (r, used) = ok(raw);
    assert_eq!(used, raw.len());
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.version, Version::Http11);
    assert_eq!(r.path.as_str(), "/a b/c.txt");
    assert_eq!(r.query.as_deref(), Some("format=json"));
    assert!(r.wants_json());
    assert_eq!(r.host.as_deref(), Some("x"));
    assert!(r.keep_alive);
    assert_eq!(r.user_agent.as_deref(), Some("curl/8"));
    assert_eq!(r.request_line, "GET /a%20b/c.txt?format=json HTTP/1.1");
}

#[test]
fn need_more_then_complete() {
    let raw = b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 0..raw.len() {
        assert_eq!(parse_request(&raw[..cut]), Ok(None), "cut {cut}");
    }
    assert_eq!(
        ok("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n").0.method,
        Method::Head
    );
}

#[test]
fn pipelined_requests_parse_one_at_a_time() {
    let raw = b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /3";
    let (a, n1) = parse_request(raw).unwrap().unwrap();
    let (b, n2) = parse_request(&raw[n1..]).unwrap().unwrap();
    assert_eq!(a.path.as_str(), "/1");
    assert_eq!(b.path.as_str(), "/2");
    assert!(a.keep_alive && !b.keep_alive);
    assert_eq!(parse_request(&raw[n1 + n2..]), Ok(None));
}

#[test]
fn http10_keep_alive_rules() {
    assert!(!ok("GET / HTTP/1.0\r\n\r\n").0.keep_alive);
    assert!(
        ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .0
            .keep_alive
    );
    assert!(
        !ok("GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n")
            .0
            .keep_alive
    );
    assert_eq!(
        ok("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n")
            .0
            .host
            .as_deref(),
        Some("[::1]:8080")
    );
    // HTTP/1.0 may omit Host.
    assert_eq!(ok("GET / HTTP/1.0\r\n\r\n").0.host, None);
}

#[test]
fn bounds() {
    let long_line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST_LINE));
    assert_eq!(err(long_line.as_bytes()), RequestError::LineTooLong);
    // Even before the line ends.
    assert_eq!(
        err(&long_line.as_bytes()[..MAX_REQUEST_LINE + 1]),
        RequestError::LineTooLong
    );
    assert_eq!(RequestError::LineTooLong.status(), 414);

    let mut big = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    while big.len() <= MAX_HEAD_BYTES {
        big.push_str(&format!("X-Pad: {}\r\n", "p".repeat(4000)));
    }
    assert_eq!(err(big.as_bytes()), RequestError::HeadTooLarge);
    big.push_str("\r\n");
    assert_eq!(err(big.as_bytes()), RequestError::HeadTooLarge);
    assert_eq!(RequestError::HeadTooLarge.status(), 431);

    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..MAX_HEADERS {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_eq!(err(many.as_bytes()), RequestError::TooManyHeaders);
    assert_eq!(RequestError::TooManyHeaders.status(), 431);

    // Endless blank lines are bounded too.
    assert_eq!(
        err(&vec![b'\n'; MAX_HEAD_BYTES + 1]),
        RequestError::HeadTooLarge
    );
}

#[test]
fn refusals_and_their_statuses() {
    let cases: &[(&[u8], u16)] = &[
        (b"POST / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"get / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            501,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
            413,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n",
            400,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
            400,
        ),
        (b"GET /a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /a%00 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / FOO\r\n\r\n", 400),
        (b"\x00\x01\x02\r\n\r\n", 400),
    ];
    for (raw, status) in cases {
        assert_eq!(
            err(raw).status(),
            *status,
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    assert!(
        parse_request(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .is_some()
    );
}

#[test]
fn absolute_form_and_leading_blank_lines() {
    let (r, _) = ok("\r\nGET HTTP://Example.com:8080/x/../y?q=1 HTTP/1.1\r\nHost: ignored\r\n\r\n");
    assert_eq!(r.host.as_deref(), Some("Example.com:8080"));
    assert_eq!(r.path.as_str(), "/y");
    assert_eq!(r.query.as_deref(), Some("q=1"));
    assert_eq!(
        ok("GET http://h HTTP/1.1\r\nHost: h\r\n\r\n")
            .0
            .path
            .as_str(),
        "/"
    );
}

#[test]
fn conditional_and_range_fields() {
    let (r, _) = ok("GET /f HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nIf-None-Match: \"a\"\r\n\
                     If-None-Match: \"b\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-Range: \"a\"\r\n\r\n");
    assert_eq!(r.range.as_deref(), Some("bytes=0-1"));
    assert_eq!(r.if_none_match.as_deref(), Some("\"a\", \"b\""));
    assert_eq!(
        r.if_modified_since.as_deref(),
        Some("Sun, 06 Nov 1994 08:49:37 GMT")
    );
    assert_eq!(r.if_range.as_deref(), Some("\"a\""));
    assert_eq!(r.if_match, None);
    assert_eq!(r.if_unmodified_since, None);
    let (r, _) = ok(
        "GET /f HTTP/1.1\r\nHost: x\r\nIf-Match: \"a\"\r\nif-match: W/\"b\"\r\n\
                     If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n",
    );
    assert_eq!(r.if_match.as_deref(), Some("\"a\", W/\"b\""));
    assert_eq!(
        r.if_unmodified_since.as_deref(),
        Some("Thu, 01 Jan 1970 00:00:00 GMT")
    );
    let (r, _) = ok("GET /f HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n");
    assert_eq!(r.range, None);
}

#[test]
fn peek_line_for_logs() {
    assert_eq!(
        peek_request_line(b"\r\nPOST /x HTTP/1.1\r\nHost: x"),
        "POST /x HTTP/1.1"
    );
    assert_eq!(peek_request_line(&vec![b'a'; 10_000]).len(), MAX_LOG_FIELD);
}

proptest! {
    #[test]
    fn never_uses_more_than_input(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(Some((req, used))) = parse_request(&buf) {
            prop_assert!(used <= buf.len() && used > 0);
            prop_assert!(req.path.segments().all(|s| s != ".." && s != "."));
        }
    }

    #[test]
    fn valid_heads_use_exactly_their_length(path in "/[a-z%0-9./]{0,30}", tail in proptest::collection::vec(any::<u8>(), 0..50)) {
        let head = format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut buf = head.clone().into_bytes();
        buf.extend_from_slice(&tail);
        match parse_request(&buf) {
            Ok(Some((req, used))) => {
                prop_assert_eq!(used, head.len());
                prop_assert!(req.path.as_str().starts_with('/'));
                prop_assert!(req.path.segments().all(|s| s != ".." && s != "."));
            }
            Ok(None) => prop_assert!(false, "complete head reported partial"),
            Err(e) => prop_assert!(matches!(e, RequestError::Path(_)), "{e:?}"),
        }
    }
}
