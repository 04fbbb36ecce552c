//! Control lines: split a buffer into lines and parse each one.
//! Properties: progress and bounds of `next_line`, no panic in
//! `parse_command`, error replies short, single-line and failures.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::command::{next_line, parse_command, CommandError};
use sluice_ftp::limits::MAX_LINE;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        match next_line(rest) {
            Ok(Some((line, used))) => {
                assert!(used > 0 && used <= rest.len() && used <= MAX_LINE);
                assert!(line.len() < used && !line.contains(&b'\n'));
                if let Err(e) = parse_command(&line) {
                    let reply = e.reply();
                    let wire = reply.to_bytes();
                    assert!(reply.code.is_failure());
                    assert!(wire.len() < 120);
                    assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), 1);
                }
                rest = &rest[used..];
            }
            Ok(None) => {
                assert!(rest.len() < MAX_LINE);
                break;
            }
            Err(CommandError::LineTooLong) => {
                assert!(rest.len() >= MAX_LINE);
                break;
            }
            Err(e) => panic!("next_line gave {e:?}"),
        }
    }
});
