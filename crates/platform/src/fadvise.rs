//! Page-cache hints and residency: `posix_fadvise`, `readahead`, `cachestat`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::{cvt, cvt_retry};

/// `cachestat(2)` syscall number (Linux 6.5+, same on all architectures).
const SYS_CACHESTAT: libc::c_long = 451;

/// Access-pattern advice for [`fadvise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `POSIX_FADV_SEQUENTIAL`: larger kernel read-ahead.
    Sequential,
    /// `POSIX_FADV_WILLNEED`: start reading the range into the page cache now.
    WillNeed,
    /// `POSIX_FADV_DONTNEED`: drop clean cached pages of the range.
    DontNeed,
    /// `POSIX_FADV_NOREUSE`: data is accessed once.
    NoReuse,
    /// `POSIX_FADV_RANDOM`: no kernel read-ahead on this open file; a read
    /// of an uncached page brings in just the pages asked for. `WILLNEED`
    /// still reads the whole range it names.
    Random,
    /// `POSIX_FADV_NORMAL`: the kernel's default read-ahead again.
    Normal,
}

/// Gives the kernel an access-pattern hint for `len` bytes at `offset`
/// (`len` 0 means to the end of the file).
pub fn fadvise(fd: BorrowedFd<'_>, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let adv = match advice {
        Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        Advice::NoReuse => libc::POSIX_FADV_NOREUSE,
        Advice::Random => libc::POSIX_FADV_RANDOM,
        Advice::Normal => libc::POSIX_FADV_NORMAL,
    };
    let off = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscall on a borrowed open fd, no pointers.
    let rc = unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, len, adv) };
    // posix_fadvise returns the error number instead of setting errno.
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Starts reading `len` bytes at `offset` into the page cache (`readahead(2)`).
/// May block while the I/O is queued: call it off the event loop.
pub fn readahead(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscall on a borrowed open fd, no pointers.
    cvt_retry(|| unsafe { libc::readahead(fd.as_raw_fd(), off, len) })?;
    Ok(())
}

/// Page-cache state of a file range, from `cachestat(2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStat {
    /// Pages of the range in the page cache.
    pub cached_pages: u64,
    /// Cached pages that are dirty.
    pub dirty_pages: u64,
    /// Pages under writeback.
    pub writeback_pages: u64,
    /// Pages evicted from the cache.
    pub evicted_pages: u64,
    /// Pages evicted recently.
    pub recently_evicted_pages: u64,
}

#[repr(C)]
struct RawRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct RawCacheStat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Reports how much of `len` bytes at `offset` is in the page cache
/// (`len` 0 = to the end). `Unsupported` (ENOSYS) on kernels before 6.5.
pub fn cachestat(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<CacheStat> {
    let range = RawRange { off: offset, len };
    let mut out = RawCacheStat::default();
    // SAFETY: `range` is read and `out` written by the kernel; both are live
    // #[repr(C)] locals matching the uapi layout; flags must be 0.
    cvt(unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd() as libc::c_uint,
            &range as *const RawRange,
            &mut out as *mut RawCacheStat,
            0 as libc::c_uint,
        )
    })?;
    Ok(CacheStat {
        cached_pages: out.nr_cache,
        dirty_pages: out.nr_dirty,
        writeback_pages: out.nr_writeback,
        evicted_pages: out.nr_evicted,
        recently_evicted_pages: out.nr_recently_evicted,
    })
}

/// Page size in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v <= 0 {
        4096
    } else {
        v as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn hints_accept_a_regular_file() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1u8; 65536]).unwrap();
        fadvise(f.as_fd(), 0, 0, Advice::Sequential).unwrap();
        fadvise(f.as_fd(), 0, 0, Advice::Random).unwrap();
        fadvise(f.as_fd(), 0, 0, Advice::Normal).unwrap();
        fadvise(f.as_fd(), 0, 65536, Advice::WillNeed).unwrap();
        readahead(f.as_fd(), 0, 65536).unwrap();
    }

    #[test]
    fn cachestat_sees_freshly_written_pages() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![1u8; 16 * page_size()]).unwrap();
        match cachestat(f.as_fd(), 0, 0) {
            Ok(st) => assert_eq!(st.cached_pages, 16),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS)),
        }
    }
}
