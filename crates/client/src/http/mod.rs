//! `sluice get http://...`: one connection, or `-p N` ranged requests in
//! parallel (as `aria2c -x N` does), resumable with `--continue`.
//!
//! ```text
//!  [HEAD (only with -p N > 1: size, ETag, Accept-Ranges)]
//!  per connection: GET [Range: bytes=a-b] [If-Range: etag], Connection: close
//!      head read here (parse_response_head), leftover body bytes -> writer
//!      socket -> drain thread (MODE S framing: in order from a, ends at EOF)
//!                  -> writer (pwrite at offset into DEST.part) -> rename
//! ```
//!
//! Every connection asks for `Connection: close`, so each body ends at
//! the server's FIN and the same drain loop as FTP's stream mode reads it;
//! the writer's gap check then proves every byte of `0..size` arrived.
//! The protocol pieces (URL, request, response head, Content-Range) are
//! `sluice_http`'s client side.

pub mod auto;
pub mod exchange;
pub mod get;
pub mod ranges;

/// True when `url` is one for this module (`http://` or `https://`, any
/// case).
pub fn is_http(url: &str) -> bool {
    let u = url.trim();
    u.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("http://"))
        || u.get(..8)
            .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn scheme_check() {
        assert!(super::is_http("http://h/x"));
        assert!(super::is_http("HTTP://h/x"));
        assert!(!super::is_http("ftp://h/x"));
        assert!(super::is_http("HTTPS://h/x"));
        assert!(!super::is_http("http:/"));
    }
}
