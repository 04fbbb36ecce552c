//! The decision function: a parsed [`Request`], the facts the shell
//! found about the resource, and `now` in; a [`Plan`] out (head bytes, a
//! body as segments, keep-alive). File bytes stay in the file: the body
//! names `File { offset, len }` segments for the engine's senders.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::conditional::{self, Conditions, Precondition, Validators};
use crate::listing::{self, DirEntry};
use crate::mime;
use crate::range::{self, ByteRange, IgnoreReason, RangeOutcome};
use crate::request::{Method, Request, RequestError, Version};
use crate::response::{HeadBuilder, Status};

/// What the shell found at the request's path (after resolving it
/// beneath the root with `openat2(RESOLVE_BENEATH)` and `fstat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A regular file of `len` bytes, last modified at `mtime`.
    File {
        /// Size in bytes, from the same `fstat` as `mtime`.
        len: u64,
        /// Modification time.
        mtime: SystemTime,
    },
    /// A directory and its entries (listing enabled).
    Directory {
        /// The entries, in any order.
        entries: Vec<DirEntry>,
    },
    /// A directory whose entries the shell sends itself, a batch at a
    /// time ([`crate::listing::Renderer`] framed as [`listing_framing`]
    /// says): the plan holds the head only.
    StreamedDirectory,
    /// Nothing there (ENOENT, ENOTDIR, or escapes the root): 404.
    NotFound,
    /// There but not served (EACCES, listing disabled, not a regular
    /// file): 403.
    Forbidden,
    /// Temporarily refused (EMFILE, connection limit): 503.
    Unavailable,
    /// Our own failure (EIO, a broken invariant): 500.
    Error,
}

/// One piece of a response body, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Bytes made here (multipart part headers, listings, error text).
    Bytes(Vec<u8>),
    /// `len` bytes of the file from `offset`, for the engine's sender.
    File {
        /// Offset in the file.
        offset: u64,
        /// Byte count, at least 1.
        len: u64,
    },
}

impl Segment {
    /// The number of body bytes this segment stands for.
    pub fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::File { len, .. } => *len,
        }
    }

    /// True if the segment carries no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to send, decided without I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Plan {
    /// The status sent (for the access log and counters).
    pub status: Status,
    /// The complete response head.
    pub head: Vec<u8>,
    /// The body, in order (empty for HEAD, 304 and empty files).
    pub body: Vec<Segment>,
    /// Keep the connection open after the body; if false, close it.
    pub keep_alive: bool,
    /// Why a Range header was not honoured, if it was not (counters).
    pub range_ignored: Option<IgnoreReason>,
}

impl Plan {
    /// Body bytes the plan sends (the `bytes` field of the access log).
    pub fn body_len(&self) -> u64 {
        self.body.iter().map(Segment::len).sum()
    }
}

/// Fixed settings of the server side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The Server field; empty to send none.
    pub server: String,
    /// Mixed into multipart boundaries (the shell may pass a per-
    /// connection counter so two responses never share one).
    pub boundary_seed: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            server: concat!("sluice/", env!("CARGO_PKG_VERSION")).to_owned(),
            boundary_seed: 0,
        }
    }
}

/// Decide the response to `req` given what the shell found.
pub fn respond(req: &Request, resource: Resource, now: SystemTime, opts: &Options) -> Plan {
    let mut plan = match resource {
        // `/a.txt/` names a directory that is not there (as the kernel and
        // nginx say for `file/`), not the file.
        Resource::File { .. } if req.path.has_trailing_slash() => {
            simple(req, Status::NotFound, now, opts)
        }
        Resource::File { len, mtime } => file(req, len, mtime, now, opts),
        Resource::Directory { entries } => directory(req, Some(&entries), now, opts),
        Resource::StreamedDirectory => directory(req, None, now, opts),
        Resource::NotFound => simple(req, Status::NotFound, now, opts),
        Resource::Forbidden => simple(req, Status::Forbidden, now, opts),
        Resource::Unavailable => simple(req, Status::ServiceUnavailable, now, opts),
        Resource::Error => simple(req, Status::InternalServerError, now, opts),
    };
    if req.method == Method::Head {
        plan.body.clear();
    }
    plan
}

/// The answer to a request head that could not be parsed. The
/// connection is closed after it: what follows cannot be framed.
pub fn respond_error(err: RequestError, now: SystemTime, opts: &Options) -> Plan {
    respond_status(Status::from_code(err.status()), now, opts)
}

/// A closing answer the shell decides on its own, without a parsed
/// request: 408 when the header-read deadline passes, 503 when it is
/// over its connection limit. Short text body, `Connection: close`.
pub fn respond_status(status: Status, now: SystemTime, opts: &Options) -> Plan {
    let mut h = HeadBuilder::common(status, now, &opts.server, false, false);
    if status == Status::MethodNotAllowed {
        h.field("Allow", "GET, HEAD");
    }
    retry_after(&mut h, status);
    let body = error_text(status);
    text_fields(&mut h, &body);
    Plan {
        status,
        head: h.finish(),
        body: vec![Segment::Bytes(body)],
        keep_alive: false,
        range_ignored: None,
    }
}

fn common(req: &Request, status: Status, now: SystemTime, opts: &Options) -> HeadBuilder {
    HeadBuilder::common(
        status,
        now,
        &opts.server,
        req.keep_alive,
        req.version == Version::Http10,
    )
}

/// A 503 is passing (a full connection table, descriptors running
/// out): tell clients that retry when they may (RFC 9110 10.2.3) rather
/// than leave them to guess, or hammer.
fn retry_after(h: &mut HeadBuilder, status: Status) {
    if status == Status::ServiceUnavailable {
        h.field("Retry-After", "1");
    }
}

fn conditions(req: &Request) -> Conditions<'_> {
    Conditions {
        if_match: req.if_match.as_deref(),
        if_unmodified_since: req.if_unmodified_since.as_deref(),
        if_none_match: req.if_none_match.as_deref(),
        if_modified_since: req.if_modified_since.as_deref(),
    }
}

/// 412 Precondition Failed: no body (the client asked for a version it
/// does not get; text would only be mistaken for it), Content-Length 0
/// so the connection stays usable, and the current validators, if any,
/// so the client can see what changed.
fn precondition_failed(
    req: &Request,
    v: Option<&Validators>,
    now: SystemTime,
    opts: &Options,
) -> Plan {
    let mut h = common(req, Status::PreconditionFailed, now, opts);
    h.field("Content-Length", "0");
    if let Some(v) = v {
        h.field("ETag", &v.etag);
        h.field("Last-Modified", &v.last_modified_http());
    }
    Plan {
        status: Status::PreconditionFailed,
        head: h.finish(),
        body: Vec::new(),
        keep_alive: req.keep_alive,
        range_ignored: None,
    }
}

fn error_text(status: Status) -> Vec<u8> {
    format!("{} {}\n", status.code(), status.reason()).into_bytes()
}

fn text_fields(h: &mut HeadBuilder, body: &[u8]) {
    h.field("Content-Type", "text/plain; charset=utf-8");
    h.field("Content-Length", &body.len().to_string());
}

fn simple(req: &Request, status: Status, now: SystemTime, opts: &Options) -> Plan {
    let mut h = common(req, status, now, opts);
    retry_after(&mut h, status);
    let body = error_text(status);
    text_fields(&mut h, &body);
    Plan {
        status,
        head: h.finish(),
        body: vec![Segment::Bytes(body)],
        keep_alive: req.keep_alive,
        range_ignored: None,
    }
}

/// How the body of a streamed listing is delimited: chunked for an
/// HTTP/1.1 connection kept alive, else by closing the connection (an
/// HTTP/1.0 client cannot take chunks; one that asked to close needs
/// no length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingFraming {
    /// `Transfer-Encoding: chunked` ([`chunk`] each piece, then [`LAST_CHUNK`]).
    Chunked,
    /// Raw bytes, then close.
    UntilClose,
}

/// The framing of a streamed listing for `req`.
pub fn listing_framing(req: &Request) -> ListingFraming {
    if req.keep_alive && req.version == Version::Http11 {
        ListingFraming::Chunked
    } else {
        ListingFraming::UntilClose
    }
}

/// Appends `data` as one chunk (RFC 9112 7.1); empty data adds nothing
/// (an empty chunk would end the body).
pub fn chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A listing: whole (`entries`) or streamed by the shell (`None`).
fn directory(req: &Request, entries: Option<&[DirEntry]>, now: SystemTime, opts: &Options) -> Plan {
    if !req.path.has_trailing_slash() || req.path.climbed() {
        // Relative links in the listing need the slash, and a path without
        // `..` (they resolve against the path as sent): redirect.
        let mut location = req.path.encoded(true);
        if let Some(q) = &req.query {
            location.push('?');
            location.push_str(q);
        }
        let mut h = common(req, Status::MovedPermanently, now, opts);
        h.field("Location", &location);
        let body = error_text(Status::MovedPermanently);
        text_fields(&mut h, &body);
        return Plan {
            status: Status::MovedPermanently,
            head: h.finish(),
            body: vec![Segment::Bytes(body)],
            keep_alive: req.keep_alive,
            range_ignored: None,
        };
    }
    // Preconditions only apply to what would be a 2xx (RFC 9110 13.2.1),
    // so after the redirect. A listing has no validators of its own.
    if conditional::evaluate_unvalidated(&conditions(req)) == Precondition::Failed {
        return precondition_failed(req, None, now, opts);
    }
    let ctype = if req.wants_json() {
        "application/json"
    } else {
        "text/html; charset=utf-8"
    };
    let Some(entries) = entries else {
        let framing = listing_framing(req);
        let keep_alive = framing == ListingFraming::Chunked;
        let mut h = HeadBuilder::common(
            Status::Ok,
            now,
            &opts.server,
            keep_alive,
            req.version == Version::Http10,
        );
        h.field("Content-Type", ctype);
        if keep_alive {
            h.field("Transfer-Encoding", "chunked");
        }
        h.field("Cache-Control", "no-cache");
        return Plan {
            status: Status::Ok,
            head: h.finish(),
            body: Vec::new(),
            keep_alive,
            range_ignored: None,
        };
    };
    let body = if req.wants_json() {
        listing::json(&req.path, entries)
    } else {
        listing::html(&req.path, entries)
    };
    let mut h = common(req, Status::Ok, now, opts);
    h.field("Content-Type", ctype);
    h.field("Content-Length", &body.len().to_string());
    h.field("Cache-Control", "no-cache");
    Plan {
        status: Status::Ok,
        head: h.finish(),
        body: vec![Segment::Bytes(body.into_bytes())],
        keep_alive: req.keep_alive,
        range_ignored: None,
    }
}

fn file(req: &Request, len: u64, mtime: SystemTime, now: SystemTime, opts: &Options) -> Plan {
    let v = Validators::new(len, mtime, now);
    let validators = |h: &mut HeadBuilder| {
        h.field("ETag", &v.etag);
        h.field("Last-Modified", &v.last_modified_http());
    };
    let plan = |status, h: HeadBuilder, body, range_ignored| Plan {
        status,
        head: h.finish(),
        body,
        keep_alive: req.keep_alive,
        range_ignored,
    };

    // All preconditions before Range/If-Range (RFC 9110 13.2.2).
    match conditional::evaluate_all(&conditions(req), &v, now) {
        Precondition::Proceed => {}
        Precondition::Failed => return precondition_failed(req, Some(&v), now, opts),
        Precondition::NotModified => {
            let mut h = common(req, Status::NotModified, now, opts);
            validators(&mut h);
            return plan(Status::NotModified, h, Vec::new(), None);
        }
    }

    let outcome = match &req.range {
        None => None,
        Some(_)
            if req
                .if_range
                .as_deref()
                .is_some_and(|ir| !conditional::if_range_matches(ir, &v)) =>
        {
            Some(RangeOutcome::Ignore(IgnoreReason::IfRangeMismatch))
        }
        Some(r) => Some(range::evaluate(r, len)),
    };
    let ctype = mime::content_type(req.path.file_name().unwrap_or(""));
    match outcome {
        None | Some(RangeOutcome::Ignore(_)) => {
            let ignored = match outcome {
                Some(RangeOutcome::Ignore(why)) => Some(why),
                _ => None,
            };
            let mut h = common(req, Status::Ok, now, opts);
            h.field("Content-Type", ctype);
            h.field("Content-Length", &len.to_string());
            h.field("Accept-Ranges", "bytes");
            // Files are served as their name says, never as a browser
            // guesses from the bytes (an uploaded .bin must not run as HTML).
            h.field("X-Content-Type-Options", "nosniff");
            validators(&mut h);
            let body = if len > 0 {
                vec![Segment::File { offset: 0, len }]
            } else {
                Vec::new()
            };
            plan(Status::Ok, h, body, ignored)
        }
        Some(RangeOutcome::Unsatisfiable) => {
            let mut h = common(req, Status::RangeNotSatisfiable, now, opts);
            h.field("Content-Range", &format!("bytes */{len}"));
            h.field("Accept-Ranges", "bytes");
            let body = error_text(Status::RangeNotSatisfiable);
            text_fields(&mut h, &body);
            plan(
                Status::RangeNotSatisfiable,
                h,
                vec![Segment::Bytes(body)],
                None,
            )
        }
        Some(RangeOutcome::Partial(ranges)) => {
            let mut h = common(req, Status::PartialContent, now, opts);
            let body = if let [r] = ranges[..] {
                h.field("Content-Type", ctype);
                h.field("Content-Range", &r.content_range(len));
                h.field("Content-Length", &r.len.to_string());
                vec![Segment::File {
                    offset: r.start,
                    len: r.len,
                }]
            } else {
                let boundary = boundary(opts.boundary_seed, &v.etag, now);
                let body = multipart(&ranges, len, ctype, &boundary);
                let total: u64 = body.iter().map(Segment::len).sum();
                h.field(
                    "Content-Type",
                    &format!("multipart/byteranges; boundary={boundary}"),
                );
                h.field("Content-Length", &total.to_string());
                body
            };
            h.field("Accept-Ranges", "bytes");
            h.field("X-Content-Type-Options", "nosniff");
            validators(&mut h);
            plan(Status::PartialContent, h, body, None)
        }
    }
}

/// The multipart/byteranges body (RFC 9110 14.6): each part is a
/// delimiter, Content-Type and Content-Range, a blank line and the bytes.
pub fn multipart(ranges: &[ByteRange], total: u64, ctype: &str, boundary: &str) -> Vec<Segment> {
    let mut body = Vec::with_capacity(ranges.len() * 2 + 1);
    for (i, r) in ranges.iter().enumerate() {
        // The CRLF before a delimiter belongs to the delimiter; the first
        // needs none (RFC 2046 5.1.1).
        let lead = if i == 0 { "" } else { "\r\n" };
        let part = format!(
            "{lead}--{boundary}\r\nContent-Type: {ctype}\r\nContent-Range: {}\r\n\r\n",
            r.content_range(total)
        );
        body.push(Segment::Bytes(part.into_bytes()));
        body.push(Segment::File {
            offset: r.start,
            len: r.len,
        });
    }
    body.push(Segment::Bytes(
        format!("\r\n--{boundary}--\r\n").into_bytes(),
    ));
    body
}

/// A boundary that differs per file version, time and seed (nginx uses
/// a counter). A file containing it by chance could confuse a client's
/// multipart parser; 64 bits of mixing makes that vanishingly rare.
fn boundary(seed: u64, etag: &str, now: SystemTime) -> String {
    let nanos = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed
        .to_le_bytes()
        .iter()
        .chain(nanos.to_le_bytes().iter())
        .chain(etag.as_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("sluice-{h:016x}")
}

#[cfg(test)]
mod tests;
