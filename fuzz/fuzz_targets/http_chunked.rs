//! The client's chunked-body decoder: whatever the input and however it
//! is cut into pieces, bytes used never exceed a piece, payload ranges lie
//! inside it, `payload_len` counts exactly the payload handed out, and
//! feeding the body in pieces gives the same payload, the same end and
//! the same error (or none) as feeding it whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::ChunkedDecoder;

/// Decodes `body` cut at `cuts`; returns (payload, done, failed).
fn run(body: &[u8], cuts: &[usize]) -> (Vec<u8>, bool, bool) {
    let mut d = ChunkedDecoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    bounds.push(body.len());
    bounds.sort_unstable();
    for end in bounds {
        while at < end && !d.is_done() {
            let piece = &body[at..end];
            match d.decode(piece) {
                Ok((used, range)) => {
                    assert!(used <= piece.len());
                    if let Some(r) = range {
                        assert!(r.start <= r.end && r.end <= used);
                        out.extend_from_slice(&piece[r]);
                    }
                    assert_eq!(d.payload_len(), out.len() as u64);
                    if used == 0 {
                        assert!(d.is_done() || piece.is_empty());
                        break;
                    }
                    at += used;
                }
                Err(_) => return (out, false, true),
            }
        }
    }
    (out, d.is_done(), false)
}

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes choose up to 4 cut points; the rest is the body.
    let (cut_bytes, body) = data.split_at(data.len().min(8));
    let cuts: Vec<usize> = cut_bytes
        .chunks(2)
        .map(|c| usize::from(c[0]) << 8 | usize::from(*c.get(1).unwrap_or(&0)))
        .collect();
    let whole = run(body, &[]);
    let pieces = run(body, &cuts);
    assert_eq!(whole.1, pieces.1, "done differs");
    assert_eq!(whole.2, pieces.2, "error differs");
    if !whole.2 {
        assert_eq!(whole.0, pieces.0, "payload differs");
    }
});
