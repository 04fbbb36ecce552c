//! Positional file reads that never wait for the disk.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::cvt_retry;

/// Reads into `buf` at `offset` only what is already in the page cache
/// (`preadv2` with `RWF_NOWAIT`). `WouldBlock` when the first page is not
/// cached; a short count when a later page is not; `Ok(0)` at end of file.
/// Safe to call on an event loop: it never waits for disk I/O.
pub fn pread_nowait(file: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, a live writable slice; the kernel writes
    // at most `buf.len()` bytes into it.
    let n =
        cvt_retry(|| unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) })?;
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn reads_cached_pages_and_stops_at_eof() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"abcdefgh").unwrap();
        let mut buf = [0u8; 16];
        // Just-written pages are in the page cache.
        match pread_nowait(f.as_fd(), &mut buf, 2) {
            Ok(n) => assert_eq!(&buf[..n], b"cdefgh"),
            // Some file systems (tmpfs on old kernels) refuse RWF_NOWAIT.
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EAGAIN)
                ),
                "{e}"
            ),
        }
        assert_eq!(pread_nowait(f.as_fd(), &mut buf, 100).unwrap_or(0), 0);
    }
}
