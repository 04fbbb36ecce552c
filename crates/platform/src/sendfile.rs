//! Zero-copy file-to-socket transfer: `sendfile(2)` and `splice(2)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::cvt_retry;

/// Sends up to `count` bytes of `file` starting at `*offset` to `out`, and
/// advances `*offset` by the bytes sent. The file position is not used or
/// changed. On a non-blocking socket, a full send buffer is `WouldBlock`;
/// `Ok(0)` means `*offset` is at or past the end of the file.
pub fn sendfile(
    out: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off: libc::off_t = i64::try_from(*offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
    // The kernel caps one call at 0x7ffff000 bytes anyway; passing more is harmless
    // but keep it within ssize_t.
    let count = count.min(0x7fff_f000);
    // SAFETY: both fds are borrowed and open for the call's duration; `off`
    // is a live off_t that the kernel reads and updates.
    let n = cvt_retry(|| unsafe {
        libc::sendfile(out.as_raw_fd(), file.as_raw_fd(), &mut off, count)
    })?;
    *offset = off as u64;
    Ok(n as usize)
}

/// True when a [`sendfile`] error means "this file (system) cannot be sent
/// this way" (EINVAL, ENOSYS, EOPNOTSUPP), so the caller should fall back to
/// read+send rather than fail the transfer.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// Flags for [`splice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpliceFlags {
    /// `SPLICE_F_NONBLOCK`: do not block on the pipe.
    pub nonblock: bool,
    /// `SPLICE_F_MORE`: more data will follow.
    pub more: bool,
    /// `SPLICE_F_MOVE`: move pages instead of copying, if possible.
    pub move_pages: bool,
}

/// Moves up to `len` bytes between `from` and `to`, one of which must be a
/// pipe. `off_from`/`off_to` are file offsets for non-pipe ends (advanced by
/// the bytes moved), `None` for pipes and sockets. `Ok(0)` is end of input.
pub fn splice(
    from: BorrowedFd<'_>,
    off_from: Option<&mut u64>,
    to: BorrowedFd<'_>,
    off_to: Option<&mut u64>,
    len: usize,
    flags: SpliceFlags,
) -> io::Result<usize> {
    let mut bits = 0;
    if flags.nonblock {
        bits |= libc::SPLICE_F_NONBLOCK;
    }
    if flags.more {
        bits |= libc::SPLICE_F_MORE;
    }
    if flags.move_pages {
        bits |= libc::SPLICE_F_MOVE;
    }
    let to_loff = |o: &Option<&mut u64>| -> io::Result<Option<libc::loff_t>> {
        match o {
            Some(v) => Ok(Some(i64::try_from(**v).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "offset beyond loff_t")
            })?)),
            None => Ok(None),
        }
    };
    let mut a = to_loff(&off_from)?;
    let mut b = to_loff(&off_to)?;
    let pa = a
        .as_mut()
        .map_or(std::ptr::null_mut(), |v| v as *mut libc::loff_t);
    let pb = b
        .as_mut()
        .map_or(std::ptr::null_mut(), |v| v as *mut libc::loff_t);
    // SAFETY: both fds are open for the call; `pa`/`pb` are null or point to
    // live locals the kernel reads and updates.
    let n =
        cvt_retry(|| unsafe { libc::splice(from.as_raw_fd(), pa, to.as_raw_fd(), pb, len, bits) })?;
    if let (Some(o), Some(v)) = (off_from, a) {
        *o = v as u64;
    }
    if let (Some(o), Some(v)) = (off_to, b) {
        *o = v as u64;
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn sendfile_temp_file_to_loopback_socket_matches() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        f.write_all(&data).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let c = TcpStream::connect(addr).unwrap();
        let mut off = 1000u64;
        while off < data.len() as u64 {
            let n = sendfile(c.as_fd(), f.as_fd(), &mut off, 1 << 20).unwrap();
            assert!(n > 0);
        }
        assert_eq!(
            sendfile(c.as_fd(), f.as_fd(), &mut off, 10).unwrap(),
            0,
            "EOF"
        );
        drop(c);
        let got = reader.join().unwrap();
        assert_eq!(got, &data[1000..]);
    }

    #[test]
    fn splice_file_through_pipe() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut off = 3u64;
        let n = splice(
            f.as_fd(),
            Some(&mut off),
            w.as_fd(),
            None,
            4,
            SpliceFlags::default(),
        )
        .unwrap();
        assert_eq!((n, off), (4, 7));
        drop(w);
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "3456");
    }
}
