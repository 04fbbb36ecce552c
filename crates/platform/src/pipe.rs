//! A kernel pipe sized for `splice(2)`, the carrier of the splice data path.
//!
//! `sendfile` is `splice` through a hidden per-task pipe of 16 pages, so it
//! hands the socket 64 KiB per internal step. A pipe of our own, grown with
//! `F_SETPIPE_SZ`, lets one `splice` into the socket carry up to a megabyte:
//! fewer passes through `tcp_sendmsg` per byte.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// Both ends of a non-blocking pipe and the capacity the kernel granted.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// A non-blocking, close-on-exec pipe of about `want` bytes. The kernel
    /// rounds up to a power of two of pages and may refuse sizes above
    /// `/proc/sys/fs/pipe-max-size` (or the per-user pipe budget): then the
    /// pipe keeps a smaller size, and [`Pipe::capacity`] says which.
    pub fn with_capacity(want: usize) -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let mut capacity = fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ)? as usize;
        let mut size = want.min(i32::MAX as usize);
        while size > capacity {
            match fcntl(write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(size as i32)) {
                Ok(granted) => {
                    capacity = granted as usize;
                    break;
                }
                // Over the limit: halve and try again, down to the default.
                Err(nix::errno::Errno::EPERM | nix::errno::Errno::EINVAL) => size /= 2,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Bytes the pipe holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The end `splice` reads from.
    pub fn read_end(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// The end `splice` writes into.
    pub fn write_end(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_a_megabyte_or_says_what_it_got() {
        let p = Pipe::with_capacity(1 << 20).unwrap();
        assert!(p.capacity() >= 4096);
        assert!(p.capacity() <= 1 << 20 || p.capacity().is_power_of_two());
        let fd_limit = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok());
        if fd_limit.is_some_and(|m| m >= 1 << 20) {
            assert_eq!(p.capacity(), 1 << 20);
        }
    }

    #[test]
    fn absurd_sizes_fall_back_instead_of_failing() {
        let p = Pipe::with_capacity(usize::MAX).unwrap();
        assert!(p.capacity() >= 4096);
    }
}
