//! The page-cache side of the sendfile feed: reading a planned range into
//! the cache off the loop, checking that it is still there when it is taken,
//! and dropping what the peer has acknowledged.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use sluice_platform::fadvise;

use crate::buffers::{BufferPool, PoolBuf};
use crate::send::read_full_at;

/// On a disk thread: reads `len` bytes at `off` into pooled buffers (copy)
/// or through one scratch buffer into the page cache (sendfile). Returns
/// the bytes read; fewer than `len` means the file ends there.
pub(super) fn read_range(
    file: &File,
    pool: &Arc<BufferPool>,
    off: u64,
    len: u64,
    copy: bool,
) -> io::Result<(u64, Vec<PoolBuf>)> {
    let mut bufs = Vec::new();
    // WILLNEED first reads exactly the planned range and leaves no
    // read-ahead marks, so the pread below finds cached pages and the
    // kernel's own read-ahead (8 MiB windows on the lab disk) never reads
    // past what the planner asked for. Measured: without it the copy path's
    // planned 1 MiB preads made the kernel read about twice the planned bytes.
    let _ = fadvise::fadvise(file.as_fd(), off, len, fadvise::Advice::WillNeed);
    let mut scratch = (!copy).then(|| pool.take());
    let mut done = 0u64;
    while done < len {
        let mut buf = match scratch.take() {
            Some(s) => s,
            None => pool.take(),
        };
        let want = (buf.len() as u64).min(len - done) as usize;
        let n = read_full_at(file, &mut buf[..want], off + done)?;
        done += n as u64;
        if copy {
            if n > 0 {
                bufs.push(buf);
            }
        } else {
            scratch = Some(buf);
        }
        if n < want {
            break;
        }
    }
    Ok((done, bufs))
}

/// Bytes of `[off, off + len)` missing from the page cache (`cachestat`),
/// 0 when it cannot be told.
pub(super) fn missing_bytes(file: &File, off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let ps = fadvise::page_size() as u64;
    let pages = (off + len - 1) / ps - off / ps + 1;
    match fadvise::cachestat(file.as_fd(), off, len) {
        Ok(st) => (pages.saturating_sub(st.cached_pages) * ps).min(len),
        Err(_) => 0,
    }
}

/// Which acknowledged bytes of a range to drop from the page cache.
/// Pure arithmetic; the caller issues the `DONTNEED`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DropBehind {
    /// Everything before this was dropped already (page aligned, or the
    /// range's start).
    done: u64,
    page: u64,
}

impl DropBehind {
    /// Nothing dropped yet of a range starting at `start`.
    pub(crate) fn new(start: u64, page: u64) -> DropBehind {
        DropBehind { done: start, page: page.max(1) }
    }

    /// With `sent_to` the sender's offset and `in_socket` bytes still in the
    /// socket (unsent + unacknowledged, whose pages the socket still pins),
    /// the next range to drop, whole pages only, if any. The first partial
    /// page is kept (it may hold bytes of the range before ours).
    pub(crate) fn next(&mut self, sent_to: u64, in_socket: u64) -> Option<(u64, u64)> {
        let acked = sent_to.saturating_sub(in_socket);
        let from = self.done.div_ceil(self.page) * self.page;
        let to = acked / self.page * self.page;
        if to <= from {
            return None;
        }
        self.done = to;
        Some((from, to - from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_behind_drops_whole_acknowledged_pages_once() {
        let mut d = DropBehind::new(100, 4096);
        assert_eq!(d.next(5000, 0), None, "no whole page acknowledged");
        assert_eq!(d.next(20_000, 3000), Some((4096, 12288)));
        assert_eq!(d.next(20_000, 3000), None, "already dropped");
        assert_eq!(d.next(40_000, 0), Some((16384, 20480)));
        assert_eq!(d.next(10, 100), None, "a socket larger than the offset");
    }

    #[test]
    fn missing_bytes_of_a_cached_range_is_zero() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 65536]).unwrap();
        if fadvise::cachestat(f.as_fd(), 0, 0).is_ok() {
            assert_eq!(missing_bytes(&f, 0, 65536), 0);
        }
        assert_eq!(missing_bytes(&f, 0, 0), 0);
    }
}
