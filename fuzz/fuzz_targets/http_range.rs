//! Range headers against any file length: a 206 plan only ever names
//! bytes inside the file, never more bytes than the file holds, and a
//! multipart plan's Content-Length equals its body. Content-Range values
//! we emit parse back to the same range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::limits::MAX_RANGES;
use sluice_http::range::{evaluate, RangeOutcome};
use sluice_http::serve::multipart;
use sluice_http::{parse_content_range, ContentRange, Segment};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (len_bytes, rest) = data.split_at(8);
    let mut len = u64::from_le_bytes(len_bytes.try_into().unwrap());
    // Half the time a small file, where edge cases live.
    if len & 1 == 0 {
        len = (len >> 1) % 4096;
    }
    let value = String::from_utf8_lossy(rest);
    let _ = parse_content_range(&value);
    match evaluate(&value, len) {
        RangeOutcome::Partial(ranges) => {
            assert!(!ranges.is_empty() && ranges.len() <= MAX_RANGES);
            let mut total = 0u128;
            for r in &ranges {
                assert!(r.len > 0 && r.start < len && r.last() < len);
                total += u128::from(r.len);
                let parsed = parse_content_range(&r.content_range(len)).unwrap();
                assert_eq!(
                    parsed,
                    ContentRange::Bytes {
                        first: r.start,
                        last: r.last(),
                        complete: Some(len)
                    }
                );
            }
            assert!(total <= u128::from(len));
            let body = multipart(&ranges, len, "application/octet-stream", "b");
            let file_bytes: u64 = body
                .iter()
                .filter(|s| matches!(s, Segment::File { .. }))
                .map(Segment::len)
                .sum();
            assert_eq!(u128::from(file_bytes), total);
        }
        RangeOutcome::Unsatisfiable => assert!(len > 0),
        RangeOutcome::Ignore(_) => {}
    }
});
