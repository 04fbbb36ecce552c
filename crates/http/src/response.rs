//! Status codes and the response-head builder. Every response we send is
//! `HTTP/1.1` (RFC 9110 6.2: a server sends its own highest version) and
//! carries Content-Length, so keep-alive framing never depends on closing.

use std::time::SystemTime;

/// The status codes this server sends, named (its `reply.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200
    Ok,
    /// 206
    PartialContent,
    /// 301: a directory asked for without its trailing slash.
    MovedPermanently,
    /// 304
    NotModified,
    /// 400
    BadRequest,
    /// 403
    Forbidden,
    /// 404
    NotFound,
    /// 405, sent with `Allow: GET, HEAD`.
    MethodNotAllowed,
    /// 408: the shell's header-read deadline passed.
    RequestTimeout,
    /// 412: If-Match or If-Unmodified-Since failed (RFC 9110 15.5.13).
    PreconditionFailed,
    /// 413
    ContentTooLarge,
    /// 414
    UriTooLong,
    /// 416, sent with `Content-Range: bytes */LEN`.
    RangeNotSatisfiable,
    /// 431
    HeaderFieldsTooLarge,
    /// 500
    InternalServerError,
    /// 501
    NotImplemented,
    /// 503
    ServiceUnavailable,
    /// 505
    VersionNotSupported,
}

impl Status {
    /// The numeric code.
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::PartialContent => 206,
            Status::MovedPermanently => 301,
            Status::NotModified => 304,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::PreconditionFailed => 412,
            Status::ContentTooLarge => 413,
            Status::UriTooLong => 414,
            Status::RangeNotSatisfiable => 416,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::NotImplemented => 501,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    /// The reason phrase (RFC 9110 15).
    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::PartialContent => "Partial Content",
            Status::MovedPermanently => "Moved Permanently",
            Status::NotModified => "Not Modified",
            Status::BadRequest => "Bad Request",
            Status::Forbidden => "Forbidden",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::PreconditionFailed => "Precondition Failed",
            Status::ContentTooLarge => "Content Too Large",
            Status::UriTooLong => "URI Too Long",
            Status::RangeNotSatisfiable => "Range Not Satisfiable",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::InternalServerError => "Internal Server Error",
            Status::NotImplemented => "Not Implemented",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::VersionNotSupported => "HTTP Version Not Supported",
        }
    }

    /// The status for a code from [`crate::RequestError::status`]; codes
    /// we never send map to 500.
    pub fn from_code(code: u16) -> Status {
        const ALL: [Status; 18] = [
            Status::Ok,
            Status::PartialContent,
            Status::MovedPermanently,
            Status::NotModified,
            Status::BadRequest,
            Status::Forbidden,
            Status::NotFound,
            Status::MethodNotAllowed,
            Status::RequestTimeout,
            Status::PreconditionFailed,
            Status::ContentTooLarge,
            Status::UriTooLong,
            Status::RangeNotSatisfiable,
            Status::HeaderFieldsTooLarge,
            Status::InternalServerError,
            Status::NotImplemented,
            Status::ServiceUnavailable,
            Status::VersionNotSupported,
        ];
        ALL.into_iter()
            .find(|s| s.code() == code)
            .unwrap_or(Status::InternalServerError)
    }
}

/// Calls `f` with `now` as an IMF-fixdate. The text only changes once a
/// second, so each thread keeps the last one it formatted (nginx keeps
/// one per second too): most responses copy it instead of formatting.
fn with_http_date(now: SystemTime, f: impl FnOnce(&str)) {
    use std::cell::RefCell;
    use std::time::UNIX_EPOCH;
    thread_local! {
        static LAST: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != secs || last.1.is_empty() {
            *last = (secs, httpdate::fmt_http_date(now));
        }
        f(&last.1);
    });
}

/// Builds one response head: status line, fields, blank line.
#[derive(Debug, Clone)]
pub struct HeadBuilder {
    buf: Vec<u8>,
}

impl HeadBuilder {
    /// Start a head with its status line.
    pub fn new(status: Status) -> HeadBuilder {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(
            format!("HTTP/1.1 {} {}\r\n", status.code(), status.reason()).as_bytes(),
        );
        HeadBuilder { buf }
    }

    /// Start a head with the fields every response carries: Date, Server
    /// and Connection (`close`, or `keep-alive` for a 1.0 client that
    /// asked; 1.1 persistence is the default and needs no field).
    pub fn common(
        status: Status,
        now: SystemTime,
        server: &str,
        keep_alive: bool,
        http10: bool,
    ) -> HeadBuilder {
        let mut h = HeadBuilder::new(status);
        with_http_date(now, |date| {
            h.field("Date", date);
        });
        if !server.is_empty() {
            h.field("Server", server);
        }
        if !keep_alive {
            h.field("Connection", "close");
        } else if http10 {
            h.field("Connection", "keep-alive");
        }
        h
    }

    /// Add a field. Control bytes in `value` (CR, LF, NUL...) are
    /// replaced by `?`: values come from us, but one of them (a Location)
    /// carries a client path, and a head must never be split.
    pub fn field(&mut self, name: &str, value: &str) -> &mut HeadBuilder {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend(value.bytes().map(|b| {
            if b < 0x20 && b != b'\t' || b == 0x7f {
                b'?'
            } else {
                b
            }
        }));
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Finish with the blank line and return the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"\r\n");
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn codes_round_trip() {
        for code in [
            200, 206, 301, 304, 400, 403, 404, 405, 408, 412, 413, 414, 416, 431, 500, 501, 503,
            505,
        ] {
            assert_eq!(Status::from_code(code).code(), code);
        }
        assert_eq!(Status::from_code(299), Status::InternalServerError);
    }

    #[test]
    fn head_bytes() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let mut h = HeadBuilder::common(Status::Ok, now, "sluice", false, false);
        h.field("X", "a\r\nInjected: 1");
        let head = String::from_utf8(h.finish()).unwrap();
        assert_eq!(
            head,
            "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: sluice\r\n\
             Connection: close\r\nX: a??Injected: 1\r\n\r\n"
        );
        let h10 =
            String::from_utf8(HeadBuilder::common(Status::NotFound, now, "", true, true).finish())
                .unwrap();
        assert!(h10.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(h10.contains("Connection: keep-alive\r\n") && !h10.contains("Server"));
    }

    #[test]
    fn the_remembered_date_follows_the_clock() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let date = |now| {
            let head = HeadBuilder::common(Status::Ok, now, "", true, false).finish();
            String::from_utf8(head).unwrap()
        };
        assert!(date(t).contains("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"));
        assert!(date(t + Duration::from_millis(900)).contains("08:49:37 GMT"));
        assert!(date(t + Duration::from_secs(1)).contains("08:49:38 GMT"));
    }
}
