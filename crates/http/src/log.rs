//! The access-log line, in the Combined Log Format that Apache and nginx
//! write and every log tool reads:
//!
//! ```text
//! 127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "GET /a HTTP/1.1" 200 1234 "-" "curl/8.5.0"
//! ```
//!
//! Client-supplied fields (request line, Referer, User-Agent) are
//! escaped as nginx does: `"` and `\` get a backslash, bytes outside
//! printable ASCII become `\xHH`, so one request is always one line.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::SystemTime;

use crate::limits::MAX_LOG_FIELD;

/// The facts of one finished exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessEntry<'a> {
    /// The client address.
    pub peer: IpAddr,
    /// An authenticated user name, if any (`-` otherwise).
    pub user: Option<&'a str>,
    /// When the request was received.
    pub time: SystemTime,
    /// The request line as sent (see [`crate::Request::request_line`]).
    pub request_line: &'a str,
    /// The status sent.
    pub status: u16,
    /// Body bytes actually sent (not the head).
    pub bytes: u64,
    /// The Referer field.
    pub referer: Option<&'a str>,
    /// The User-Agent field.
    pub user_agent: Option<&'a str>,
}

impl AccessEntry<'_> {
    /// The Combined Log Format line, without a trailing newline.
    pub fn combined(&self) -> String {
        let mut out = String::with_capacity(160);
        let user = self.user.map_or_else(|| "-".to_owned(), escape);
        let bytes = if self.bytes == 0 {
            "-".to_owned()
        } else {
            self.bytes.to_string()
        };
        let _ = write!(
            out,
            "{} - {} [{}] \"{}\" {} {} \"{}\" \"{}\"",
            self.peer,
            if user.is_empty() { "-" } else { &user },
            clf_time(self.time),
            escape(self.request_line),
            self.status,
            bytes,
            self.referer.map_or_else(|| "-".to_owned(), escape),
            self.user_agent.map_or_else(|| "-".to_owned(), escape),
        );
        out
    }
}

/// `06/Nov/1994:08:49:37 +0000`, rearranged from the IMF-fixdate.
fn clf_time(t: SystemTime) -> String {
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let d = httpdate::fmt_http_date(t);
    let parts: Vec<&str> = d.split(' ').collect();
    match parts[..] {
        [_, day, mon, year, time, _] => format!("{day}/{mon}/{year}:{time} +0000"),
        _ => d,
    }
}

/// Escape a client-supplied field and clip it to [`MAX_LOG_FIELD`].
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_LOG_FIELD));
    for b in s.bytes() {
        if out.len() >= MAX_LOG_FIELD {
            break;
        }
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn combined_line() {
        let e = AccessEntry {
            peer: "127.0.0.1".parse().unwrap(),
            user: None,
            time: UNIX_EPOCH + Duration::from_secs(784_111_777),
            request_line: "GET /a HTTP/1.1",
            status: 200,
            bytes: 1234,
            referer: None,
            user_agent: Some("curl/8.5.0"),
        };
        assert_eq!(e.combined(), "127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a HTTP/1.1\" 200 1234 \"-\" \"curl/8.5.0\"");
    }

    #[test]
    fn hostile_fields_stay_on_one_line() {
        let e = AccessEntry {
            peer: "::1".parse().unwrap(),
            user: Some("bob"),
            time: UNIX_EPOCH,
            request_line: "GET /\"x\\ HTTP/1.1",
            status: 404,
            bytes: 0,
            referer: Some("a\nb"),
            user_agent: Some("é"),
        };
        assert_eq!(
            e.combined(),
            "::1 - bob [01/Jan/1970:00:00:00 +0000] \"GET /\\\"x\\\\ HTTP/1.1\" 404 - \"a\\x0Ab\" \"\\xC3\\xA9\""
        );
        let long = "a".repeat(10 * MAX_LOG_FIELD);
        let line = AccessEntry {
            user_agent: Some(&long),
            ..e
        }
        .combined();
        assert!(line.len() < 2 * MAX_LOG_FIELD + 100);
    }
}
