//! One place that turns `-1`/errno into `io::Error` and retries EINTR.

use std::io;

/// Converts a libc return value into `io::Result`, reading errno on `-1`.
pub fn cvt<T: IsMinusOne>(ret: T) -> io::Result<T> {
    if ret.is_minus_one() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Calls `f` until it returns something other than EINTR.
pub fn cvt_retry<T: IsMinusOne, F: FnMut() -> T>(mut f: F) -> io::Result<T> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Integer return types of libc calls that signal failure with `-1`.
pub trait IsMinusOne {
    /// True when the value is the libc failure marker.
    fn is_minus_one(&self) -> bool;
}

macro_rules! impl_is_minus_one {
    ($($t:ty)*) => ($(impl IsMinusOne for $t {
        fn is_minus_one(&self) -> bool { *self == -1 }
    })*)
}
impl_is_minus_one! { i32 i64 isize }

/// What [`wait_writable_or_stop`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteWait {
    /// The socket accepts data (or has an error the next write will report).
    Writable,
    /// The stop descriptor became readable or hung up: give up.
    Stopped,
    /// Nothing happened within the timeout.
    TimedOut,
}

/// Blocks the calling thread in `poll(2)` until `sock` is writable, `stop`
/// is readable or hung up, or `timeout` passes (`None`: no limit). For
/// thread-per-connection senders: the thread sleeps in the kernel and is
/// woken by the same socket write-space callback as a blocking `send`.
pub fn wait_writable_or_stop(
    sock: std::os::fd::BorrowedFd<'_>,
    stop: std::os::fd::BorrowedFd<'_>,
    timeout: Option<std::time::Duration>,
) -> io::Result<WriteWait> {
    use std::os::fd::AsRawFd;
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().min(i32::MAX as u128) as i32,
    };
    let mut fds = [
        libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a valid array of two initialised pollfd structs that
    // lives across the call, and its length is passed with it; both fds are
    // borrowed, so they stay open for the call.
    let n = cvt_retry(|| unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) })?;
    if n == 0 {
        return Ok(WriteWait::TimedOut);
    }
    if fds[1].revents != 0 {
        return Ok(WriteWait::Stopped);
    }
    Ok(WriteWait::Writable)
}

/// Raises the soft limit on open descriptors (RLIMIT_NOFILE) to the hard
/// limit, as nginx's `worker_rlimit_nofile` does, and returns the soft
/// limit now in force. A server holds one or two descriptors per client;
/// the usual soft default (1024) is far below what it is configured for.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; setrlimit only reads it.
        if cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) }).is_ok() {
            lim = raised;
        }
    }
    Ok(lim.rlim_cur)
}

/// True for the errors that say "out of descriptors" (EMFILE for the
/// process, ENFILE for the system).
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    #[test]
    fn poll_sees_writable_stop_and_timeout() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (stop_rx, mut stop_tx) = UnixStream::pair().unwrap();
        let r = wait_writable_or_stop(a.as_fd(), stop_rx.as_fd(), Some(Duration::from_secs(5)));
        assert_eq!(r.unwrap(), WriteWait::Writable);
        // A socket whose buffer is full is not writable: fill one.
        a.set_nonblocking(true).unwrap();
        let chunk = [0u8; 65536];
        while (&a).write(&chunk).is_ok() {}
        let r = wait_writable_or_stop(a.as_fd(), stop_rx.as_fd(), Some(Duration::from_millis(1)));
        assert_eq!(r.unwrap(), WriteWait::TimedOut);
        stop_tx.write_all(b"x").unwrap();
        let r = wait_writable_or_stop(a.as_fd(), stop_rx.as_fd(), None);
        assert_eq!(r.unwrap(), WriteWait::Stopped);
        drop(stop_tx);
    }
}
