//! Splitting the control stream into lines (RFC 959 over a minimal
//! RFC 854 Telnet), and the escaped echo used in error replies.

use super::CommandError;
use crate::limits::{MAX_ECHO, MAX_LINE};

/// A clipped, escaped echo of client bytes, safe to put in a reply:
/// printable ASCII kept, everything else as `\xNN`, at most [`MAX_ECHO`]
/// characters of output, then `...` if anything was left out.
pub fn echo(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        let piece = if (0x20..0x7f).contains(&b) && b != b'\\' && b != b'\'' {
            (b as char).to_string()
        } else {
            format!("\\x{b:02x}")
        };
        if s.len() + piece.len() > MAX_ECHO {
            s.push_str("...");
            return s;
        }
        s.push_str(&piece);
    }
    s
}

const IAC: u8 = 255;

/// Split the first line off `buf`.
///
/// Returns `Ok(Some((line, used)))` with the line's CRLF (or bare LF)
/// removed and Telnet IAC sequences stripped (RFC 854: `IAC IAC` is a
/// data 0xFF; `IAC WILL/WONT/DO/DONT opt` and other `IAC x` pairs, such
/// as the `IAC IP IAC DM` clients send before ABOR, are dropped);
/// `used <= buf.len()` is the number of bytes consumed. `Ok(None)` means
/// no terminator yet (then `buf.len() < MAX_LINE`).
/// [`CommandError::LineTooLong`] as soon as [`MAX_LINE`] bytes are held
/// without a terminator among them.
pub fn next_line(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, CommandError> {
    let mut line = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        if i >= MAX_LINE {
            return Err(CommandError::LineTooLong);
        }
        let b = buf[i];
        if b == IAC {
            match buf.get(i + 1) {
                None if buf.len() >= MAX_LINE => return Err(CommandError::LineTooLong),
                None => return Ok(None),
                Some(&IAC) => {
                    line.push(IAC);
                    i += 2;
                }
                // WILL, WONT, DO, DONT carry one option byte.
                Some(251..=254) => i += 3,
                Some(_) => i += 2,
            }
            continue;
        }
        if b == b'\n' {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some((line, i + 1)));
        }
        line.push(b);
        i += 1;
    }
    // An IAC sequence may have stepped past the end; judge by what we hold.
    if buf.len() >= MAX_LINE {
        return Err(CommandError::LineTooLong);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ReplyCode;

    #[test]
    fn lines() {
        assert_eq!(
            next_line(b"NOOP\r\nQUIT\r\n").unwrap(),
            Some((b"NOOP".to_vec(), 6))
        );
        assert_eq!(
            next_line(b"NOOP\nQUIT").unwrap(),
            Some((b"NOOP".to_vec(), 5))
        );
        assert_eq!(next_line(b"NOOP\r").unwrap(), None);
        assert_eq!(next_line(b"").unwrap(), None);
        // Telnet: IAC IP IAC DM before ABOR; IAC IAC is a literal 0xff;
        // option negotiation is dropped.
        assert_eq!(
            next_line(b"\xff\xf4\xff\xf2ABOR\r\n").unwrap(),
            Some((b"ABOR".to_vec(), 10))
        );
        assert_eq!(
            next_line(b"a\xff\xffb\n").unwrap(),
            Some((b"a\xffb".to_vec(), 5))
        );
        assert_eq!(
            next_line(b"\xff\xfb\x01NOOP\n").unwrap(),
            Some((b"NOOP".to_vec(), 8))
        );
        assert_eq!(next_line(b"NO\xff").unwrap(), None);
    }

    #[test]
    fn long_lines_fail_early() {
        let mut buf = vec![b'a'; MAX_LINE - 1];
        assert_eq!(next_line(&buf).unwrap(), None);
        buf.push(b'\n');
        assert!(next_line(&buf).unwrap().is_some());
        let buf = vec![b'a'; MAX_LINE];
        assert_eq!(next_line(&buf), Err(CommandError::LineTooLong));
        let mut buf = vec![b'a'; MAX_LINE + 10];
        buf.push(b'\n');
        assert_eq!(next_line(&buf), Err(CommandError::LineTooLong));
        assert!(CommandError::LineTooLong.closes_connection());
        assert_eq!(
            CommandError::LineTooLong.reply().code,
            ReplyCode::SYNTAX_ERROR
        );
    }

    #[test]
    fn echo_escapes() {
        assert_eq!(echo(b"ab'\\\r"), "ab\\x27\\x5c\\x0d");
        assert!(echo(&[b'x'; 100]).ends_with("..."));
        assert_eq!(echo(&[b'x'; MAX_ECHO]).len(), MAX_ECHO);
        assert!(echo(&[0u8; 100]).len() <= MAX_ECHO + 3);
    }
}
