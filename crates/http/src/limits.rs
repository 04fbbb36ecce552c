//! Every bound on peer-controlled input in the HTTP core, in one place
//! (as vsftpd's `defs.h`). Each constant says why it has its value.

/// Longest request line (method, target, version and CRLF) we accept;
/// longer gets 414 URI Too Long. nginx's `large_client_header_buffers`
/// default is 8 KiB per line and RFC 9112 3 recommends supporting at
/// least 8000 octets; real clients stay far below.
pub const MAX_REQUEST_LINE: usize = 8192;

/// Most bytes in one request head (request line, headers, blank line);
/// more gets 431. Four 8 KiB lines, as nginx allows, is plenty for
/// browsers with cookies, and bounds what the shell buffers per
/// connection before it has a request.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Most header fields in one request; more gets 431. Browsers send about
/// 15; 100 is what hyper and many proxies allow.
pub const MAX_HEADERS: usize = 100;

/// Longest decoded request path, in bytes (Linux `PATH_MAX`); longer
/// gets 414.
pub const MAX_PATH_BYTES: usize = 4096;

/// Most ranges in one Range header we honour. More and the Range header
/// is ignored (a full 200), as nginx does past `max_ranges`. Apache's
/// `MaxRanges` default is 200; download managers send one range per
/// request, browsers one or two. 64 bounds the multipart plan size.
pub const MAX_RANGES: usize = 64;

/// Longest Range header value we look at; longer is ignored (full 200).
/// 64 ranges of two 20-digit numbers fit in about 2.7 KB.
pub const MAX_RANGE_HEADER: usize = 4096;

/// Most directory entries rendered in one listing; the rest are cut off
/// with a note. Bounds response size and CPU for huge directories.
pub const MAX_LISTING_ENTRIES: usize = 100_000;

/// Most bytes of the request line, Referer and User-Agent kept for the
/// access log, so one request cannot write a megabyte log line.
pub const MAX_LOG_FIELD: usize = 2048;

/// Most bytes in one response head the client parser buffers; larger
/// is an error. Servers send far less; this bounds client memory.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 * 1024;

/// Most header fields in one response the client parser accepts.
pub const MAX_RESPONSE_HEADERS: usize = 100;
