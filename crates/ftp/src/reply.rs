//! Reply codes, reply encoding (server side) and a sans-I/O reply parser
//! (client side).
//!
//! Wire format, RFC 959 section 4.2:
//!
//! ```text
//! single line:  "200 Command okay.\r\n"
//! multi-line:   "211-Features:\r\n"        first line: code, '-', text
//!               " EPSV\r\n"                 middle lines: anything that does
//!               " MDTM\r\n"                 not start with "211 "
//!               "211 End\r\n"               last line: code, ' ', text
//! ```
//!
//! [`Reply::encode`] writes middle lines with one leading space (the RFC 2389
//! FEAT style), so no middle line can ever look like the last one, and
//! [`parse_reply`] strips that one space again, so encode-then-parse gives
//! back the same [`Reply`].

use crate::limits::{MAX_LINE, MAX_REPLY_BYTES, MAX_REPLY_LINES};
use std::fmt;

/// A three-digit FTP reply code (RFC 959 section 4.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyCode(pub u16);

impl ReplyCode {
    /// 110 Restart marker reply (RFC 959, stream mode `MARK yyyy = mmmm`).
    pub const RESTART_MARKER: Self = Self(110);
    /// 111 GridFTP restart (range) marker: `Range Marker 0-1000,...`.
    pub const RANGE_MARKER: Self = Self(111);
    /// 112 GridFTP performance marker.
    pub const PERF_MARKER: Self = Self(112);
    /// 120 Service ready in nnn minutes.
    pub const SERVICE_READY_LATER: Self = Self(120);
    /// 125 Data connection already open; transfer starting.
    pub const DATA_ALREADY_OPEN: Self = Self(125);
    /// 150 File status okay; about to open data connection.
    pub const OPENING_DATA: Self = Self(150);
    /// 200 Command okay.
    pub const OK: Self = Self(200);
    /// 202 Command not implemented, superfluous at this site (ALLO).
    pub const SUPERFLUOUS: Self = Self(202);
    /// 211 System status, or system help reply (FEAT).
    pub const SYSTEM_STATUS: Self = Self(211);
    /// 212 Directory status.
    pub const DIRECTORY_STATUS: Self = Self(212);
    /// 213 File status (SIZE, MDTM, CKSM, STAT of a file).
    pub const FILE_STATUS: Self = Self(213);
    /// 214 Help message.
    pub const HELP: Self = Self(214);
    /// 215 NAME system type (SYST).
    pub const SYSTEM_TYPE: Self = Self(215);
    /// 220 Service ready for new user.
    pub const SERVICE_READY: Self = Self(220);
    /// 221 Service closing control connection (QUIT).
    pub const CLOSING: Self = Self(221);
    /// 225 Data connection open; no transfer in progress (ABOR, nothing to abort).
    pub const DATA_OPEN_NO_TRANSFER: Self = Self(225);
    /// 226 Closing data connection; requested file action successful.
    pub const TRANSFER_COMPLETE: Self = Self(226);
    /// 227 Entering Passive Mode (h1,h2,h3,h4,p1,p2).
    pub const PASSIVE: Self = Self(227);
    /// 229 Entering Extended Passive Mode (|||port|) (RFC 2428).
    pub const EXTENDED_PASSIVE: Self = Self(229);
    /// 230 User logged in, proceed.
    pub const LOGGED_IN: Self = Self(230);
    /// 250 Requested file action okay, completed.
    pub const FILE_ACTION_OK: Self = Self(250);
    /// 257 "PATHNAME" created / is current directory.
    pub const PATHNAME: Self = Self(257);
    /// 331 User name okay, need password.
    pub const NEED_PASSWORD: Self = Self(331);
    /// 332 Need account for login.
    pub const NEED_ACCOUNT: Self = Self(332);
    /// 350 Requested file action pending further information (REST, RNFR).
    pub const PENDING: Self = Self(350);
    /// 421 Service not available, closing control connection.
    pub const SERVICE_NOT_AVAILABLE: Self = Self(421);
    /// 425 Can't open data connection.
    pub const CANT_OPEN_DATA: Self = Self(425);
    /// 426 Connection closed; transfer aborted.
    pub const TRANSFER_ABORTED: Self = Self(426);
    /// 450 Requested file action not taken (file busy, transient).
    pub const FILE_UNAVAILABLE_TRANSIENT: Self = Self(450);
    /// 451 Requested action aborted: local error in processing.
    pub const LOCAL_ERROR: Self = Self(451);
    /// 452 Requested action not taken: insufficient storage.
    pub const INSUFFICIENT_STORAGE: Self = Self(452);
    /// 500 Syntax error, command unrecognized (also: line too long).
    pub const SYNTAX_ERROR: Self = Self(500);
    /// 501 Syntax error in parameters or arguments.
    pub const BAD_ARGUMENTS: Self = Self(501);
    /// 502 Command not implemented.
    pub const NOT_IMPLEMENTED: Self = Self(502);
    /// 503 Bad sequence of commands.
    pub const BAD_SEQUENCE: Self = Self(503);
    /// 504 Command not implemented for that parameter.
    pub const PARAMETER_NOT_IMPLEMENTED: Self = Self(504);
    /// 522 Network protocol not supported (EPRT/EPSV, RFC 2428).
    pub const BAD_NETWORK_PROTOCOL: Self = Self(522);
    /// 530 Not logged in.
    pub const NOT_LOGGED_IN: Self = Self(530);
    /// 532 Need account for storing files.
    pub const NEED_ACCOUNT_FOR_STORING: Self = Self(532);
    /// 550 Requested action not taken: file unavailable.
    pub const FILE_UNAVAILABLE: Self = Self(550);
    /// 551 Requested action aborted: page type unknown.
    pub const PAGE_TYPE_UNKNOWN: Self = Self(551);
    /// 552 Requested file action aborted: exceeded storage allocation.
    pub const EXCEEDED_STORAGE: Self = Self(552);
    /// 553 Requested action not taken: file name not allowed.
    pub const BAD_FILE_NAME: Self = Self(553);

    /// First digit: 1 preliminary, 2 completion, 3 intermediate,
    /// 4 transient failure, 5 permanent failure.
    pub fn class(self) -> u16 {
        self.0 / 100
    }

    /// 1xx: more replies follow for this command.
    pub fn is_preliminary(self) -> bool {
        self.class() == 1
    }

    /// 2xx: the command succeeded.
    pub fn is_completion(self) -> bool {
        self.class() == 2
    }

    /// 3xx: the command needs another (PASS after USER, RNTO after RNFR).
    pub fn is_intermediate(self) -> bool {
        self.class() == 3
    }

    /// 4xx or 5xx: the command failed.
    pub fn is_failure(self) -> bool {
        matches!(self.class(), 4 | 5)
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:03}", self.0)
    }
}

/// One reply: a code and one or more lines of text (without terminators).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The reply code.
    pub code: ReplyCode,
    /// Text lines; `lines[0]` follows the code on the first line. Never
    /// empty when built by [`Reply::new`], [`Reply::multi`] or the parser.
    pub lines: Vec<String>,
}

impl Reply {
    /// A single-line reply.
    pub fn new(code: ReplyCode, text: impl Into<String>) -> Self {
        Self {
            code,
            lines: vec![text.into()],
        }
    }

    /// A multi-line reply; an empty `lines` becomes one empty line.
    pub fn multi(code: ReplyCode, lines: Vec<String>) -> Self {
        let lines = if lines.is_empty() {
            vec![String::new()]
        } else {
            lines
        };
        Self { code, lines }
    }

    /// The first line of text.
    pub fn text(&self) -> &str {
        self.lines.first().map(String::as_str).unwrap_or("")
    }

    /// Append the wire form to `out`. CR and LF inside a line are replaced by
    /// spaces (a line must never end a reply early or inject another one).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let code = self.code.0.min(999);
        let n = self.lines.len();
        if n <= 1 {
            push_line(out, code, b' ', self.text());
            return;
        }
        push_line(out, code, b'-', &self.lines[0]);
        for line in &self.lines[1..n - 1] {
            out.push(b' ');
            push_text(out, line);
            out.extend_from_slice(b"\r\n");
        }
        push_line(out, code, b' ', &self.lines[n - 1]);
    }

    /// The wire form as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

fn push_line(out: &mut Vec<u8>, code: u16, sep: u8, text: &str) {
    out.push(b'0' + (code / 100) as u8);
    out.push(b'0' + (code / 10 % 10) as u8);
    out.push(b'0' + (code % 10) as u8);
    out.push(sep);
    push_text(out, text);
    out.extend_from_slice(b"\r\n");
}

fn push_text(out: &mut Vec<u8>, text: &str) {
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
}

/// Quote a path for a 257 reply (RFC 959 appendix II): surround with `"` and
/// double every embedded `"`.
pub fn quote_257(path: &str) -> String {
    let mut s = String::with_capacity(path.len() + 2);
    s.push('"');
    for c in path.chars() {
        if c == '"' {
            s.push('"');
        }
        if c == '\r' || c == '\n' {
            s.push(' ');
        } else {
            s.push(c);
        }
    }
    s.push('"');
    s
}

/// Why a server's reply could not be parsed. Each one means the control
/// connection is no longer in sync and should be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// A line longer than [`MAX_LINE`] without a terminator.
    LineTooLong,
    /// More than [`MAX_REPLY_LINES`] lines in one reply.
    TooManyLines,
    /// More than [`MAX_REPLY_BYTES`] bytes in one reply.
    TooLarge,
    /// A reply did not start with three digits followed by ' ', '-' or the end.
    BadCode,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::LineTooLong => "reply line too long",
            Self::TooManyLines => "reply has too many lines",
            Self::TooLarge => "reply too large",
            Self::BadCode => "reply does not start with a three-digit code",
        })
    }
}

impl std::error::Error for ReplyError {}

/// Parse one complete reply from the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some((reply, used)))`
/// with `used <= buf.len()` bytes consumed, or an error as soon as a bound
/// is passed. Lines end in CRLF or a bare LF. Non-UTF-8 text is replaced
/// lossily (reply text is for humans; numbers in it are ASCII).
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, ReplyError> {
    let mut partial = Partial::default();
    let mut pos = 0;
    while let Some((line, next)) = split_line(buf, pos)? {
        pos = next;
        if let Some(reply) = partial.handle_line(line, next)? {
            return Ok(Some((reply, pos)));
        }
    }
    Ok(None)
}

/// The next line of `buf` starting at `pos`, without its CRLF or LF, and
/// the position after it; `None` if no terminator yet.
fn split_line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let rest = &buf[pos..];
    let Some(nl) = rest.iter().take(MAX_LINE).position(|&b| b == b'\n') else {
        if rest.len() >= MAX_LINE {
            return Err(ReplyError::LineTooLong);
        }
        return Ok(None);
    };
    let line = &rest[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(Some((line, pos + nl + 1)))
}

/// A reply being assembled line by line.
#[derive(Debug, Default)]
struct Partial {
    /// Set once the first line said "multi-line" (`123-`).
    code: Option<ReplyCode>,
    lines: Vec<String>,
}

impl Partial {
    /// Take one line; `total` is the reply's size in bytes so far. Returns
    /// the reply when this line completes it.
    fn handle_line(&mut self, line: &[u8], total: usize) -> Result<Option<Reply>, ReplyError> {
        if total > MAX_REPLY_BYTES {
            return Err(ReplyError::TooLarge);
        }
        let Some(code) = self.code else {
            let (code, sep) = split_code(line).ok_or(ReplyError::BadCode)?;
            self.lines.push(text_after(line));
            if sep == Some(b'-') {
                self.code = Some(code);
                return Ok(None);
            }
            return Ok(Some(Reply {
                code,
                lines: std::mem::take(&mut self.lines),
            }));
        };
        if self.lines.len() >= MAX_REPLY_LINES {
            return Err(ReplyError::TooManyLines);
        }
        match split_code(line) {
            Some((c, sep)) if c == code && sep != Some(b'-') => {
                self.lines.push(text_after(line));
                self.code = None;
                return Ok(Some(Reply {
                    code,
                    lines: std::mem::take(&mut self.lines),
                }));
            }
            // Some servers repeat "211-" on every middle line.
            Some((c, Some(b'-'))) if c == code => self.lines.push(text_after(line)),
            _ => {
                let body = line.strip_prefix(b" ").unwrap_or(line);
                self.lines.push(String::from_utf8_lossy(body).into_owned());
            }
        }
        Ok(None)
    }
}

/// `Some((code, separator))` if `line` starts with three digits followed by
/// a space, a '-' (`Some(b'-')`) or nothing (`None`).
fn split_code(line: &[u8]) -> Option<(ReplyCode, Option<u8>)> {
    if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let code = line[..3]
        .iter()
        .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    match line.get(3) {
        None => Some((ReplyCode(code), None)),
        Some(&b' ') => Some((ReplyCode(code), Some(b' '))),
        Some(&b'-') => Some((ReplyCode(code), Some(b'-'))),
        Some(_) => None,
    }
}

fn text_after(line: &[u8]) -> String {
    String::from_utf8_lossy(line.get(4..).unwrap_or(&[])).into_owned()
}

/// A buffering, incremental reply parser for a client's control
/// connection: feed bytes with [`ReplyParser::handle_input`], take replies
/// with [`ReplyParser::poll_reply`] (1xx preliminaries come out one by one,
/// before the final reply). Each line is parsed once, however the bytes are
/// chunked.
#[derive(Debug, Default)]
pub struct ReplyParser {
    buf: Vec<u8>,
    /// Start of the first line not yet handed to `partial`.
    pos: usize,
    partial: Partial,
}

impl ReplyParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append bytes read from the control connection. Fails if more than a
    /// whole maximal reply would be buffered without being polled.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), ReplyError> {
        if self.buf.len() + bytes.len() > 2 * MAX_REPLY_BYTES {
            return Err(ReplyError::TooLarge);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete reply, if one is buffered. After an error the
    /// connection is out of sync and should be closed.
    pub fn poll_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        while let Some((line, next)) = split_line(&self.buf, self.pos)? {
            self.pos = next;
            if let Some(reply) = self.partial.handle_line(line, next)? {
                self.buf.drain(..next);
                self.pos = 0;
                return Ok(Some(reply));
            }
        }
        Ok(None)
    }

    /// Bytes buffered but not yet part of a complete reply.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_line() {
        let r = Reply::new(ReplyCode::OK, "Command okay.");
        assert_eq!(r.to_bytes(), b"200 Command okay.\r\n");
        assert_eq!(
            parse_reply(b"200 Command okay.\r\n").unwrap(),
            Some((r, 19))
        );
    }

    #[test]
    fn multi_line_feat_style() {
        let r = Reply::multi(
            ReplyCode::SYSTEM_STATUS,
            vec![
                "Features:".into(),
                "EPSV".into(),
                "MDTM".into(),
                "End".into(),
            ],
        );
        let wire = b"211-Features:\r\n EPSV\r\n MDTM\r\n211 End\r\n";
        assert_eq!(r.to_bytes(), wire);
        assert_eq!(parse_reply(wire).unwrap(), Some((r, wire.len())));
    }

    #[test]
    fn middle_line_that_looks_like_the_end_is_escaped() {
        let r = Reply::multi(
            ReplyCode::HELP,
            vec!["a".into(), "214 not the end".into(), "b".into()],
        );
        let wire = r.to_bytes();
        assert_eq!(parse_reply(&wire).unwrap(), Some((r, wire.len())));
    }

    #[test]
    fn cr_lf_in_text_cannot_inject() {
        let r = Reply::new(ReplyCode::OK, "a\r\n500 evil");
        assert_eq!(r.to_bytes(), b"200 a  500 evil\r\n");
    }

    #[test]
    fn parse_variants() {
        // Bare LF, no text, other servers' middle-line styles.
        assert_eq!(
            parse_reply(b"200\n").unwrap(),
            Some((Reply::new(ReplyCode::OK, ""), 4))
        );
        let wire = b"150-first\r\n150-second\r\nplain third\r\n150 last\r\n226 done\r\n";
        let (r, used) = parse_reply(wire).unwrap().unwrap();
        assert_eq!(r.code, ReplyCode::OPENING_DATA);
        assert_eq!(r.lines, vec!["first", "second", "plain third", "last"]);
        assert_eq!(&wire[used..], b"226 done\r\n");
        // A different code inside a multi-line reply is a middle line.
        let (r, _) = parse_reply(b"211-a\r\n200 b\r\n211 c\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.lines, vec!["a", "200 b", "c"]);
    }

    #[test]
    fn need_more() {
        assert_eq!(parse_reply(b"").unwrap(), None);
        assert_eq!(parse_reply(b"200 ok").unwrap(), None);
        assert_eq!(parse_reply(b"211-a\r\n b\r\n").unwrap(), None);
    }

    #[test]
    fn errors() {
        assert_eq!(parse_reply(b"20 x\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_reply(b"abc x\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_reply(b"200x\r\n"), Err(ReplyError::BadCode));
        assert_eq!(
            parse_reply(&vec![b'2'; MAX_LINE]),
            Err(ReplyError::LineTooLong)
        );
        let mut many = b"211-start\r\n".to_vec();
        for _ in 0..MAX_REPLY_LINES {
            many.extend_from_slice(b" x\r\n");
        }
        many.extend_from_slice(b"211 end\r\n");
        assert_eq!(parse_reply(&many), Err(ReplyError::TooManyLines));
    }

    #[test]
    fn parser_preliminary_then_final() {
        let mut p = ReplyParser::new();
        p.handle_input(b"150 Opening\r\n112-Perf Marker\r\n Timestamp:  1.0\r\n")
            .unwrap();
        assert_eq!(
            p.poll_reply().unwrap().unwrap().code,
            ReplyCode::OPENING_DATA
        );
        assert_eq!(p.poll_reply().unwrap(), None);
        p.handle_input(b"112 End.\r\n226 Transfer complete\r\n")
            .unwrap();
        assert_eq!(
            p.poll_reply().unwrap().unwrap().code,
            ReplyCode::PERF_MARKER
        );
        assert_eq!(
            p.poll_reply().unwrap().unwrap().code,
            ReplyCode::TRANSFER_COMPLETE
        );
        assert_eq!(p.poll_reply().unwrap(), None);
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn codes() {
        assert!(ReplyCode::OPENING_DATA.is_preliminary());
        assert!(ReplyCode::TRANSFER_COMPLETE.is_completion());
        assert!(ReplyCode::NEED_PASSWORD.is_intermediate());
        assert!(ReplyCode::LOCAL_ERROR.is_failure());
        assert_eq!(ReplyCode(5).to_string(), "005");
    }

    #[test]
    fn quote() {
        assert_eq!(quote_257("/a \"b\""), "\"/a \"\"b\"\"\"");
    }
}
