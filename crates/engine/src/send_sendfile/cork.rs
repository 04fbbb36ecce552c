//! `TCP_CORK` around a long `sendfile` send, as nginx's `tcp_nopush`.
//!
//! Data sockets run with `TCP_NODELAY` (small answers and the end of a
//! send must not wait for an ACK). A long send to a slow reader is sent
//! as the reader's window opens; with `TCP_NODELAY` the kernel sends every
//! opening whole, the part short of a full segment too
//! (`tcp_mss_split_point`), so each window update costs a small segment
//! more. Corked, only full segments go out while the send runs, and
//! uncorking at its end sends the tail at once.

use std::os::fd::AsFd;

use sluice_platform::tcp;
use tokio::net::TcpStream;

/// Sends at least this long are corked: two `setsockopt` calls per send
/// are nothing against its wake-ups. Shorter ones (a MODE E block, a
/// shared piece, a small HTTP answer) are not.
pub(crate) const CORK_MIN: u64 = 4 << 20;

/// Whether a send of `len` bytes is corked.
pub(crate) fn corks(len: u64) -> bool {
    len >= CORK_MIN
}

/// Corks `conn` for a send's life; uncorks (sending what is held) when
/// dropped, whichever way the send ends.
pub(crate) struct Cork<'a> {
    conn: Option<&'a TcpStream>,
}

impl<'a> Cork<'a> {
    /// Corks `conn` for a send of `len` bytes, if it is long enough.
    pub(crate) fn new(conn: &'a TcpStream, len: u64) -> Cork<'a> {
        let on = corks(len) && tcp::set_cork(conn.as_fd(), true).is_ok();
        Cork {
            conn: on.then_some(conn),
        }
    }
}

impl Drop for Cork<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn {
            let _ = tcp::set_cork(c.as_fd(), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_long_sends_are_corked() {
        assert!(!corks(1 << 20), "a MODE E block");
        assert!(!corks(CORK_MIN - 1));
        assert!(corks(CORK_MIN));
        assert!(corks(64 << 20), "a MODE S piece");
    }
}
