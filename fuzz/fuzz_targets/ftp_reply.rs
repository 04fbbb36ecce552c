//! Server replies as the client parses them.
//! Properties: `used <= input.len()`; a parsed reply re-encodes to bytes
//! that parse back to the same reply; the buffering `ReplyParser` fed in
//! two pieces yields exactly what `parse_reply` yields on the whole.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::reply::{parse_reply, ReplyParser};

fuzz_target!(|input: (u16, &[u8])| {
    let (cut, data) = input;
    let mut whole = Vec::new();
    let mut rest = data;
    let mut failed = false;
    loop {
        match parse_reply(rest) {
            Ok(Some((reply, used))) => {
                assert!(used > 0 && used <= rest.len());
                assert!(!reply.lines.is_empty());
                if reply.lines.iter().all(|l| !l.contains('\r')) {
                    let wire = reply.to_bytes();
                    assert_eq!(parse_reply(&wire), Ok(Some((reply.clone(), wire.len()))));
                }
                whole.push(reply);
                rest = &rest[used..];
            }
            Ok(None) => break,
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    let cut = cut as usize % (data.len() + 1);
    let mut parser = ReplyParser::new();
    let mut pieces = Vec::new();
    let mut piece_failed = false;
    'outer: for part in [&data[..cut], &data[cut..]] {
        parser.handle_input(part).expect("small input");
        loop {
            match parser.poll_reply() {
                Ok(Some(r)) => pieces.push(r),
                Ok(None) => break,
                Err(_) => {
                    piece_failed = true;
                    break 'outer;
                }
            }
        }
    }
    assert_eq!(piece_failed, failed);
    assert_eq!(pieces, whole);
});
