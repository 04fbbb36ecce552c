//! Sans-I/O HTTP/1.1 core for Sluice: GET and HEAD of static files with
//! byte ranges, conditional requests and directory listings, plus the
//! client-side pieces `sluice get http://...` needs. No sockets, no
//! files, no clocks: the shell passes bytes, file facts and `now`; this
//! crate returns decisions and bytes.
//!
//! # Brief overview
//!
//! ```text
//!  socket bytes                         shell (crates/server)
//!      |                                      |
//!      v                                      |
//!  parse_request(&buf) --Ok(None)--> read more (header deadline: shell)
//!      |        \--Err(e)--> respond_error(e, now) -> Plan, then close
//!      | Ok(Some((Request, used)))   (buf[used..] = next pipelined request)
//!      v
//!  Request.path: VirtualPath  --------> openat2(root, path.relative(),
//!      |                                   RESOLVE_BENEATH) + fstat/readdir
//!      |                                      |
//!      |        Resource::{File{len,mtime}, Directory{entries}, NotFound,..}
//!      v                                      v
//!  respond(&req, resource, now, &Options) -> Plan
//!      |   conditional (304) -> range (206/416/200) -> mime -> response head
//!      v
//!  Plan { status, head: Vec<u8>, body: [Bytes(..) | File{offset,len}],
//!         keep_alive }  --> shell writes head, engine sends File segments
//!      |
//!      v
//!  AccessEntry{..}.combined() -> access-log line
//! ```
//!
//! Client side: [`HttpUrl::parse`] splits an `http://` URL,
//! [`ClientRequest::encode`] builds a GET/HEAD (optionally
//! ranged), [`parse_response_head`] and [`parse_content_range`] read the
//! answer, [`ResponseHead::framing`] says where the body ends.
//!
//! Every bound on peer input is in [`limits`]; every refusal is a typed
//! error mapped to one status ([`RequestError::status`]). The policy on
//! ranges (what is ignored, what gets 416, amplification) is in
//! [`range`]; the path rules (`%2F`, NUL, dot segments) in [`path`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod conditional;
pub mod digest;
pub mod limits;
pub mod listing;
pub mod log;
pub mod mime;
pub mod path;
pub mod range;
pub mod request;
pub mod response;
pub mod serve;
pub mod url;

pub use client::{
    parse_content_range, parse_response_head, ChunkedDecoder, ClientRequest, ContentRange, Framing,
    ResponseHead,
};
pub use listing::{DirEntry, EntryKind};
pub use log::AccessEntry;
pub use path::{normalize, VirtualPath};
pub use range::{ByteRange, RangeOutcome};
pub use request::{parse_request, Method, Request, RequestError, Version};
pub use response::Status;
pub use serve::{
    chunk, listing_framing, respond, respond_error, respond_status, ListingFraming, Options, Plan,
    Resource, Segment, LAST_CHUNK,
};
pub use url::{HttpUrl, UrlError};
