//! Request and response heads: bytes used never exceed the input, the
//! path is always normalized, and the plan built from any parsed request
//! is self-consistent (head parses back, Content-Length = body bytes,
//! file segments inside the file).
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use sluice_http::limits::MAX_HEAD_BYTES;
use sluice_http::{
    normalize, parse_request, parse_response_head, respond, respond_error, Method, Options,
    Resource, Segment,
};

fuzz_target!(|data: &[u8]| {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let opts = Options::default();
    match parse_request(data) {
        Ok(Some((req, used))) => {
            assert!(used > 0 && used <= data.len());
            assert!(req.path.as_str().starts_with('/'));
            assert!(req
                .path
                .segments()
                .all(|s| s != "." && s != ".." && !s.contains(['/', '\0'])));
            let again = normalize(&req.path.encoded(false)).expect("encoded path must parse");
            assert_eq!(again.as_str(), req.path.as_str());

            let len = 1000;
            let resource = Resource::File {
                len,
                mtime: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            };
            let plan = respond(&req, resource, now, &opts);
            let (head, head_used) = parse_response_head(&plan.head).unwrap().unwrap();
            assert_eq!(head_used, plan.head.len());
            assert_eq!(head.status, plan.status.code());
            for s in &plan.body {
                if let Segment::File { offset, len: n } = s {
                    assert!(*n > 0 && offset + n <= len);
                }
            }
            if req.method == Method::Get {
                if let Some(cl) = head.content_length {
                    assert_eq!(cl, plan.body_len());
                }
            } else {
                assert!(plan.body.is_empty());
            }
        }
        Ok(None) => assert!(data.len() <= MAX_HEAD_BYTES),
        Err(e) => {
            let plan = respond_error(e, now, &opts);
            assert!(!plan.keep_alive);
            assert_eq!(plan.status.code(), e.status());
        }
    }
    if let Ok(Some((_, used))) = parse_response_head(data) {
        assert!(used <= data.len());
    }
});
