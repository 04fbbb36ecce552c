//! The client side, for `sluice get http://...`: a request builder, a
//! response-head parser (httparse), a chunked-body decoder and a
//! Content-Range parser, so
//! parallel range requests (`aria2c -x` style) can check each answer
//! covers exactly the bytes asked for.

use std::fmt;

pub mod chunked;
pub use chunked::ChunkedDecoder;

use crate::limits::{MAX_RESPONSE_HEADERS, MAX_RESPONSE_HEAD_BYTES};
use crate::request::{Method, Version};

/// Why a response head or Content-Range was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientError {
    /// The head is larger than [`MAX_RESPONSE_HEAD_BYTES`].
    HeadTooLarge,
    /// More than [`MAX_RESPONSE_HEADERS`] fields.
    TooManyHeaders,
    /// Not an HTTP/1.x response head.
    Malformed(&'static str),
    /// A Content-Range we cannot use.
    BadContentRange,
    /// A request field would contain CR, LF or NUL.
    BadRequestField,
    /// A chunked body that breaks RFC 9112 7.1.
    BadChunk(&'static str),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::HeadTooLarge => f.write_str("response head too large"),
            ClientError::TooManyHeaders => f.write_str("too many response header fields"),
            ClientError::Malformed(why) => write!(f, "malformed response: {why}"),
            ClientError::BadContentRange => f.write_str("bad Content-Range"),
            ClientError::BadRequestField => f.write_str("control byte in a request field"),
            ClientError::BadChunk(why) => write!(f, "bad chunked body: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A parsed Content-Range (RFC 9110 14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/complete` (`complete` is `None` for `*`).
    Bytes {
        /// First byte offset.
        first: u64,
        /// Last byte offset, inclusive.
        last: u64,
        /// The full length, if the server knows it.
        complete: Option<u64>,
    },
    /// `bytes */complete`, sent with 416.
    Unsatisfied {
        /// The full length.
        complete: u64,
    },
}

/// Parse a Content-Range value. Refuses `last < first` and ranges that
/// end past the complete length.
pub fn parse_content_range(value: &str) -> Result<ContentRange, ClientError> {
    let bad = ClientError::BadContentRange;
    let rest = value.trim();
    let (unit, rest) = rest.split_once(' ').ok_or(bad)?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return Err(bad);
    }
    let (range, complete) = rest.trim_start().split_once('/').ok_or(bad)?;
    let complete = if complete == "*" {
        None
    } else {
        Some(digits(complete)?)
    };
    if range == "*" {
        return complete
            .map(|complete| ContentRange::Unsatisfied { complete })
            .ok_or(bad);
    }
    let (first, last) = range.split_once('-').ok_or(bad)?;
    let (first, last) = (digits(first)?, digits(last)?);
    if last < first || complete.is_some_and(|c| last >= c) {
        return Err(bad);
    }
    Ok(ContentRange::Bytes {
        first,
        last,
        complete,
    })
}

/// A decimal number that fits in u64 (no sign, no spaces).
fn digits(s: &str) -> Result<u64, ClientError> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ClientError::BadContentRange);
    }
    s.parse().map_err(|_| ClientError::BadContentRange)
}

/// How the body after a response head is delimited (RFC 9112 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding ([`ChunkedDecoder`]).
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// 1.0 or 1.1.
    pub version: Version,
    /// The status code.
    pub status: u16,
    /// The reason phrase (lossy UTF-8).
    pub reason: String,
    /// All fields, names lower-cased, values lossy UTF-8, in order.
    pub headers: Vec<(String, String)>,
    /// Content-Length, if present and valid.
    pub content_length: Option<u64>,
    /// Content-Range, if present and valid.
    pub content_range: Option<ContentRange>,
    /// `Transfer-Encoding: chunked` was sent.
    pub chunked: bool,
    /// The server keeps the connection open after this response.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// The first value of field `name` (case-insensitive).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The ETag, for If-Range on later range requests.
    pub fn etag(&self) -> Option<&str> {
        self.field("etag")
    }

    /// The server said `Accept-Ranges: bytes`.
    pub fn accepts_ranges(&self) -> bool {
        self.field("accept-ranges")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("bytes")))
    }

    /// How the body is delimited, for a response to `method`.
    pub fn framing(&self, method: Method) -> Framing {
        if method == Method::Head
            || (100..200).contains(&self.status)
            || self.status == 204
            || self.status == 304
        {
            Framing::None
        } else if self.chunked {
            Framing::Chunked
        } else if let Some(n) = self.content_length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        }
    }
}

/// Parse one response head from the front of `buf`: `Ok(None)` for "need
/// more", `Ok(Some((head, used)))` with the body starting at `buf[used..]`.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, ClientError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut parsed = httparse::Response::new(&mut headers);
    let used = match parsed.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD_BYTES => {
            return Err(ClientError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(n)) if n > MAX_RESPONSE_HEAD_BYTES => {
            return Err(ClientError::HeadTooLarge)
        }
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => return Err(ClientError::TooManyHeaders),
        Err(_) => return Err(ClientError::Malformed("bad response syntax")),
    };
    let version = if parsed.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let status = parsed.code.ok_or(ClientError::Malformed("no status"))?;
    let mut head = ResponseHead {
        version,
        status,
        reason: parsed.reason.unwrap_or("").to_owned(),
        headers: Vec::with_capacity(parsed.headers.len()),
        content_length: None,
        content_range: None,
        chunked: false,
        keep_alive: version == Version::Http11,
    };
    for h in parsed.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value).trim().to_owned();
        match name.as_str() {
            "content-length" => {
                let n = digits(&value).map_err(|_| ClientError::Malformed("bad Content-Length"))?;
                if head.content_length.is_some_and(|old| old != n) {
                    return Err(ClientError::Malformed("conflicting Content-Length"));
                }
                head.content_length = Some(n);
            }
            "content-range" => head.content_range = Some(parse_content_range(&value)?),
            "transfer-encoding" => {
                head.chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
                if !head.chunked {
                    // RFC 9112 6.3: a final coding other than chunked is
                    // delimited by the close.
                    head.keep_alive = false;
                }
            }
            "connection" => {
                for t in value.split(',').map(str::trim) {
                    if t.eq_ignore_ascii_case("close") {
                        head.keep_alive = false;
                    } else if t.eq_ignore_ascii_case("keep-alive") && version == Version::Http10 {
                        head.keep_alive = true;
                    }
                }
            }
            _ => {}
        }
        head.headers.push((name, value));
    }
    if head.chunked {
        // Transfer-Encoding overrides Content-Length (RFC 9112 6.3).
        head.content_length = None;
    } else if head.content_length.is_none() && head.framing(Method::Get) == Framing::UntilClose {
        head.keep_alive = false;
    }
    Ok(Some((head, used)))
}

/// A GET or HEAD request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRequest<'a> {
    /// GET or HEAD.
    pub method: Method,
    /// The Host field (`host` or `host:port`).
    pub host: &'a str,
    /// The origin-form target, already percent-encoded (`/a/b?q`).
    pub target: &'a str,
    /// Ask for bytes `start..=end` (`end` `None`: to the end of file).
    pub range: Option<(u64, Option<u64>)>,
    /// If-Range validator (an ETag from an earlier response).
    pub if_range: Option<&'a str>,
    /// Keep the connection for further requests.
    pub keep_alive: bool,
    /// The User-Agent field; empty to send none.
    pub user_agent: &'a str,
}

impl ClientRequest<'_> {
    /// The request head bytes. Refuses fields with control bytes, so a
    /// URL cannot inject a header.
    pub fn encode(&self) -> Result<Vec<u8>, ClientError> {
        let fields = [
            self.host,
            self.target,
            self.if_range.unwrap_or(""),
            self.user_agent,
        ];
        if fields
            .iter()
            .any(|f| f.bytes().any(|b| b < 0x20 || b == 0x7f))
            || self.target.contains(' ')
            || !self.target.starts_with('/')
        {
            return Err(ClientError::BadRequestField);
        }
        let mut s = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method.as_str(),
            self.target,
            self.host
        );
        if !self.user_agent.is_empty() {
            s.push_str(&format!("User-Agent: {}\r\n", self.user_agent));
        }
        if let Some((start, end)) = self.range {
            match end {
                Some(end) if end >= start => s.push_str(&format!("Range: bytes={start}-{end}\r\n")),
                Some(_) => return Err(ClientError::BadRequestField),
                None => s.push_str(&format!("Range: bytes={start}-\r\n")),
            }
            if let Some(v) = self.if_range {
                s.push_str(&format!("If-Range: {v}\r\n"));
            }
        }
        if !self.keep_alive {
            s.push_str("Connection: close\r\n");
        }
        s.push_str("\r\n");
        Ok(s.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn content_range_forms() {
        assert_eq!(
            parse_content_range("bytes 0-499/1234"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: 499,
                complete: Some(1234)
            })
        );
        assert_eq!(
            parse_content_range("bytes 5-5/*"),
            Ok(ContentRange::Bytes {
                first: 5,
                last: 5,
                complete: None
            })
        );
        assert_eq!(
            parse_content_range("bytes */1234"),
            Ok(ContentRange::Unsatisfied { complete: 1234 })
        );
        for bad in [
            "bytes 5-4/10",
            "bytes 0-10/10",
            "bytes */*",
            "items 0-1/2",
            "bytes 0-1",
            "bytes -1-2/3",
            "bytes 0-99999999999999999999999/*",
            "",
            "bytes a-b/c",
        ] {
            assert_eq!(
                parse_content_range(bad),
                Err(ClientError::BadContentRange),
                "{bad}"
            );
        }
    }

    #[test]
    fn response_head_206() {
        let raw = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 500\r\nContent-Range: bytes 0-499/1000\r\n\
                    ETag: \"x\"\r\nAccept-Ranges: bytes\r\n\r\nBODY";
        let (h, used) = parse_response_head(raw).unwrap().unwrap();
        assert_eq!(&raw[used..], b"BODY");
        assert_eq!(h.status, 206);
        assert_eq!(h.content_length, Some(500));
        assert_eq!(
            h.content_range,
            Some(ContentRange::Bytes {
                first: 0,
                last: 499,
                complete: Some(1000)
            })
        );
        assert_eq!(h.etag(), Some("\"x\""));
        assert!(h.accepts_ranges() && h.keep_alive);
        assert_eq!(h.framing(Method::Get), Framing::Length(500));
        assert_eq!(h.framing(Method::Head), Framing::None);
    }

    #[test]
    fn response_framing_and_persistence() {
        let (h, _) = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing(Method::Get), Framing::UntilClose);
        assert!(!h.keep_alive);
        let (h, _) = parse_response_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing(Method::Get), Framing::Chunked);
        let (h, _) = parse_response_head(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(h.keep_alive);
        let (h, _) = parse_response_head(b"HTTP/1.1 304 Not Modified\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing(Method::Get), Framing::None);
        assert!(h.keep_alive);
        assert_eq!(
            parse_response_head(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
            ),
            Err(ClientError::Malformed("conflicting Content-Length"))
        );
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-"),
            Ok(None)
        );
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert_eq!(
            parse_response_head(&[b'x'; 10]).map(|_| ()),
            Err(ClientError::Malformed("bad response syntax"))
        );
    }

    #[test]
    fn request_builder() {
        let req = ClientRequest {
            method: Method::Get,
            host: "127.0.0.1:8080",
            target: "/big%20file",
            range: Some((100, Some(199))),
            if_range: Some("\"e\""),
            keep_alive: true,
            user_agent: "sluice/0.1",
        };
        assert_eq!(
            String::from_utf8(req.encode().unwrap()).unwrap(),
            "GET /big%20file HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: sluice/0.1\r\n\
             Range: bytes=100-199\r\nIf-Range: \"e\"\r\n\r\n"
        );
        let open = ClientRequest {
            range: Some((5, None)),
            if_range: None,
            keep_alive: false,
            user_agent: "",
            ..req.clone()
        };
        assert_eq!(String::from_utf8(open.encode().unwrap()).unwrap(),
                   "GET /big%20file HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nRange: bytes=5-\r\nConnection: close\r\n\r\n");
        let inject = ClientRequest {
            target: "/x\r\nEvil: 1",
            ..req.clone()
        };
        assert_eq!(inject.encode(), Err(ClientError::BadRequestField));
        let backwards = ClientRequest {
            range: Some((5, Some(4))),
            ..req
        };
        assert_eq!(backwards.encode(), Err(ClientError::BadRequestField));
    }

    #[test]
    fn our_request_parses_on_our_server() {
        let req = ClientRequest {
            method: Method::Head,
            host: "h",
            target: "/a?b=c",
            range: Some((0, Some(9))),
            if_range: None,
            keep_alive: true,
            user_agent: "t",
        };
        let bytes = req.encode().unwrap();
        let (parsed, used) = crate::request::parse_request(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(parsed.method, Method::Head);
        assert_eq!(parsed.range.as_deref(), Some("bytes=0-9"));
        assert_eq!(parsed.query.as_deref(), Some("b=c"));
    }

    proptest! {
        #[test]
        fn response_parser_never_uses_more_than_input(buf in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(Some((_, used))) = parse_response_head(&buf) {
                prop_assert!(used <= buf.len());
            }
        }

        #[test]
        fn content_range_round_trip(first in any::<u64>(), len in 1u64..1 << 40, extra in 0u64..1000) {
            let last = first.saturating_add(len - 1);
            let complete = last.checked_add(1 + extra);
            let v = match complete {
                Some(c) => format!("bytes {first}-{last}/{c}"),
                None => format!("bytes {first}-{last}/*"),
            };
            prop_assert_eq!(parse_content_range(&v), Ok(ContentRange::Bytes { first, last, complete }));
        }
    }
}
