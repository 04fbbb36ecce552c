//! Request heads: one call parses at most one head (httparse), checks
//! every bound in [`crate::limits`], and turns it into a [`Request`]
//! holding only what a static file server needs.
//!
//! The parser never reads a socket: the shell appends bytes to its
//! buffer and calls [`parse_request`] again. `Ok(None)` means "need
//! more" (the shell applies its header-read deadline), `Ok(Some((req,
//! used)))` consumed exactly `used` bytes so the next pipelined request
//! starts at `buf[used..]`, and an error maps to one status code through
//! [`RequestError::status`]. After an error the shell sends the answer
//! and closes the connection: framing of what follows is unknown.

use std::fmt;

use crate::limits::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_LOG_FIELD, MAX_REQUEST_LINE};
use crate::path::{normalize, PathError, VirtualPath};

/// Methods we serve. Everything else gets 405 with `Allow: GET, HEAD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD: the same head as GET, never a body.
    Head,
}

impl Method {
    /// The method token.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
        }
    }
}

/// HTTP versions we speak (httparse accepts exactly these two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: close after each response unless the client asks for
    /// `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: persistent unless `Connection: close`.
    Http11,
}

/// One parsed and validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GET or HEAD.
    pub method: Method,
    /// 1.0 or 1.1.
    pub version: Version,
    /// The decoded, normalized path (see [`crate::path`]).
    pub path: VirtualPath,
    /// The raw query string after `?`, without the `?` (not decoded).
    pub query: Option<String>,
    /// Host header, or the authority of an absolute-form target.
    pub host: Option<String>,
    /// Range header value, if exactly one was sent.
    pub range: Option<String>,
    /// If-Match header value (several fields joined with `, `).
    pub if_match: Option<String>,
    /// If-Unmodified-Since header value.
    pub if_unmodified_since: Option<String>,
    /// If-None-Match header value (several fields joined with `, `).
    pub if_none_match: Option<String>,
    /// If-Modified-Since header value.
    pub if_modified_since: Option<String>,
    /// If-Range header value.
    pub if_range: Option<String>,
    /// Want-Repr-Digest (RFC 9530) and Want-Digest (RFC 3230) values,
    /// several fields joined with `, ` (see [`crate::digest`]).
    pub want_repr_digest: Option<String>,
    /// Want-Digest (RFC 3230).
    pub want_digest: Option<String>,
    /// Whether the connection stays open after the response, from the
    /// version and the Connection header (RFC 9112 9.3).
    pub keep_alive: bool,
    /// User-Agent, clipped to [`MAX_LOG_FIELD`], for the access log.
    pub user_agent: Option<String>,
    /// Referer, clipped to [`MAX_LOG_FIELD`], for the access log.
    pub referer: Option<String>,
    /// The request line as sent (lossy UTF-8, clipped), for the log.
    pub request_line: String,
}

impl Request {
    /// True if the query asks for the JSON listing (`format=json`).
    pub fn wants_json(&self) -> bool {
        self.query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == "format=json"))
    }
}

/// Why a request head was refused; each maps to one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Request line longer than [`MAX_REQUEST_LINE`]: 414.
    LineTooLong,
    /// Head longer than [`MAX_HEAD_BYTES`]: 431.
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] fields: 431.
    TooManyHeaders,
    /// Not HTTP/1.x syntax, or a missing/duplicate Host: 400.
    Malformed(&'static str),
    /// The path could not be decoded or normalized: 400 or 414.
    Path(PathError),
    /// A method other than GET or HEAD: 405 with `Allow`.
    MethodNotAllowed,
    /// A version other than HTTP/1.0 or 1.1: 505.
    VersionNotSupported,
    /// Transfer-Encoding on a request (we take no request bodies and
    /// do not decode chunked): 501, RFC 9112 6.1.
    TransferEncoding,
    /// A Content-Length above zero: GET and HEAD carry no content and we
    /// will not read one: 413.
    Body,
}

impl RequestError {
    /// The status code this error is answered with.
    pub fn status(self) -> u16 {
        match self {
            RequestError::LineTooLong => 414,
            RequestError::HeadTooLarge | RequestError::TooManyHeaders => 431,
            RequestError::Malformed(_) => 400,
            RequestError::Path(p) => p.status(),
            RequestError::MethodNotAllowed => 405,
            RequestError::VersionNotSupported => 505,
            RequestError::TransferEncoding => 501,
            RequestError::Body => 413,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::LineTooLong => f.write_str("request line too long"),
            RequestError::HeadTooLarge => f.write_str("request head too large"),
            RequestError::TooManyHeaders => f.write_str("too many header fields"),
            RequestError::Malformed(why) => write!(f, "malformed request: {why}"),
            RequestError::Path(p) => write!(f, "bad path: {p}"),
            RequestError::MethodNotAllowed => f.write_str("method not allowed"),
            RequestError::VersionNotSupported => f.write_str("HTTP version not supported"),
            RequestError::TransferEncoding => f.write_str("transfer-encoding not supported"),
            RequestError::Body => f.write_str("request content not accepted"),
        }
    }
}

impl std::error::Error for RequestError {}

impl From<PathError> for RequestError {
    fn from(e: PathError) -> Self {
        RequestError::Path(e)
    }
}

/// Parse one request head from the front of `buf`. See the module docs.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request, usize)>, RequestError> {
    // httparse skips empty lines before the request line (RFC 9112 2.2);
    // measure the line the same way.
    let start = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    match buf[start..].iter().position(|&b| b == b'\n') {
        Some(p) if p + 1 > MAX_REQUEST_LINE => return Err(RequestError::LineTooLong),
        None if buf.len() - start > MAX_REQUEST_LINE => return Err(RequestError::LineTooLong),
        _ => {}
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let used = match parsed.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(RequestError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD_BYTES => {
            return Err(RequestError::HeadTooLarge)
        }
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(httparse::Error::Version) if looks_like_http_version(&buf[start..]) => {
            return Err(RequestError::VersionNotSupported)
        }
        Err(_) => return Err(RequestError::Malformed("bad request syntax")),
    };
    let request_line = request_line(&buf[start..]);

    let version = match parsed.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(RequestError::VersionNotSupported),
    };
    // Method tokens are case-sensitive (RFC 9110 9.1).
    let method = match parsed.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        _ => return Err(RequestError::MethodNotAllowed),
    };
    let target = parsed.path.ok_or(RequestError::Malformed("no target"))?;

    let mut fields = Fields::default();
    for h in parsed.headers.iter() {
        fields.add(h.name, h.value)?;
    }
    if fields.transfer_encoding {
        return Err(RequestError::TransferEncoding);
    }
    if fields.content_length.is_some_and(|n| n > 0) {
        return Err(RequestError::Body);
    }

    let (path, query, authority) = split_target(target)?;
    // RFC 9112 3.2: a 1.1 request without exactly one Host is a 400; an
    // absolute-form target's authority replaces Host (3.2.2).
    if fields.host_count > 1 {
        return Err(RequestError::Malformed("several Host fields"));
    }
    if version == Version::Http11 && fields.host_count == 0 {
        return Err(RequestError::Malformed("no Host field"));
    }
    let host = authority.map(str::to_owned).or(fields.host);
    let keep_alive = match version {
        Version::Http11 => !fields.close,
        Version::Http10 => fields.keep_alive && !fields.close,
    };
    let req = Request {
        method,
        version,
        path: normalize(path)?,
        query: query.map(str::to_owned),
        host,
        range: if fields.range_count == 1 {
            fields.range
        } else {
            None
        },
        if_match: fields.if_match,
        if_unmodified_since: fields.if_unmodified_since,
        if_none_match: fields.if_none_match,
        if_modified_since: fields.if_modified_since,
        if_range: fields.if_range,
        want_repr_digest: fields.want_repr_digest,
        want_digest: fields.want_digest,
        keep_alive,
        user_agent: fields.user_agent,
        referer: fields.referer,
        request_line,
    };
    Ok(Some((req, used)))
}

/// The first line of `buf` (up to CR/LF), lossy and clipped, for an
/// access-log line about a request that could not be parsed.
pub fn peek_request_line(buf: &[u8]) -> String {
    let start = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    request_line(&buf[start..])
}

fn request_line(buf: &[u8]) -> String {
    let end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len());
    clip(&buf[..end])
}

fn clip(bytes: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_LOG_FIELD)]).into_owned();
    while s.len() > MAX_LOG_FIELD {
        s.pop();
    }
    s
}

/// `... HTTP/d.d` at the end of the first line: a well-formed version
/// httparse does not support (505), not garbage (400).
fn looks_like_http_version(buf: &[u8]) -> bool {
    let end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len());
    let line = &buf[..end];
    let token = line.rsplit(|&b| b == b' ').next().unwrap_or(&[]);
    matches!(token, [b'H', b'T', b'T', b'P', b'/', a, b'.', b] if a.is_ascii_digit() && b.is_ascii_digit())
}

/// Split a request target into (path, query, authority of an absolute-
/// form target). Only origin-form and absolute-form are valid for GET
/// and HEAD (RFC 9112 3.2).
fn split_target(target: &str) -> Result<(&str, Option<&str>, Option<&str>), RequestError> {
    if !target.is_ascii() || target.contains('#') {
        return Err(RequestError::Malformed("bad target"));
    }
    let mut authority = None;
    let mut rest = target;
    if !target.starts_with('/') {
        let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
        let skip = if lower.starts_with("http://") {
            7
        } else if lower.starts_with("https://") {
            8
        } else {
            return Err(RequestError::Malformed("bad target form"));
        };
        let after = &target[skip..];
        let end = after.find(['/', '?']).unwrap_or(after.len());
        if end == 0 {
            return Err(RequestError::Malformed("empty authority"));
        }
        authority = Some(&after[..end]);
        rest = &after[end..];
    }
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    Ok((if path.is_empty() { "/" } else { path }, query, authority))
}

/// The header fields we act on, gathered in one pass.
#[derive(Default)]
struct Fields {
    host: Option<String>,
    host_count: usize,
    range: Option<String>,
    range_count: usize,
    if_match: Option<String>,
    if_unmodified_since: Option<String>,
    if_none_match: Option<String>,
    if_modified_since: Option<String>,
    if_range: Option<String>,
    want_repr_digest: Option<String>,
    want_digest: Option<String>,
    user_agent: Option<String>,
    referer: Option<String>,
    content_length: Option<u64>,
    transfer_encoding: bool,
    close: bool,
    keep_alive: bool,
}

impl Fields {
    fn add(&mut self, name: &str, value: &[u8]) -> Result<(), RequestError> {
        let text = || std::str::from_utf8(value).ok().map(|s| s.trim().to_owned());
        let lname = name.to_ascii_lowercase();
        match lname.as_str() {
            "host" => {
                // RFC 9112 3.2: an invalid Host value is a 400. Allowed:
                // reg-name, IP literals in brackets, and a port.
                self.host_count += 1;
                let ok = value
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(b));
                if !ok {
                    return Err(RequestError::Malformed("bad Host field"));
                }
                self.host = text();
            }
            "range" => {
                // Several Range fields have no defined meaning: ignore all.
                self.range_count += 1;
                self.range = text();
            }
            // List fields may be split over several lines (RFC 9110 5.3).
            "if-none-match" => join_list(&mut self.if_none_match, text()),
            "if-match" => join_list(&mut self.if_match, text()),
            "if-unmodified-since" => self.if_unmodified_since = text(),
            "if-modified-since" => self.if_modified_since = text(),
            "if-range" => self.if_range = text(),
            "want-repr-digest" => join_list(&mut self.want_repr_digest, text()),
            "want-digest" => join_list(&mut self.want_digest, text()),
            "user-agent" => self.user_agent = Some(clip(value)),
            "referer" => self.referer = Some(clip(value)),
            "transfer-encoding" => self.transfer_encoding = true,
            "content-length" => {
                // RFC 9112 6.3: a list of identical values is one value;
                // differing or non-numeric values are unrecoverable.
                let v = std::str::from_utf8(value)
                    .map_err(|_| RequestError::Malformed("bad Content-Length"))?;
                for part in v.split(',') {
                    let part = part.trim();
                    if part.is_empty()
                        || part.len() > 19
                        || !part.bytes().all(|b| b.is_ascii_digit())
                    {
                        return Err(RequestError::Malformed("bad Content-Length"));
                    }
                    let n: u64 = part
                        .parse()
                        .map_err(|_| RequestError::Malformed("bad Content-Length"))?;
                    if self.content_length.is_some_and(|old| old != n) {
                        return Err(RequestError::Malformed("conflicting Content-Length"));
                    }
                    self.content_length = Some(n);
                }
            }
            "connection" => {
                for token in String::from_utf8_lossy(value).split(',') {
                    let token = token.trim();
                    if token.eq_ignore_ascii_case("close") {
                        self.close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        self.keep_alive = true;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Appends one more line of a list field to what came before.
fn join_list(field: &mut Option<String>, more: Option<String>) {
    if let Some(v) = more {
        *field = Some(match field.take() {
            Some(old) => format!("{old}, {v}"),
            None => v,
        });
    }
}

#[cfg(test)]
mod tests;
