//! The page-cache side of the sendfile feed: reading a planned range into
//! the cache off the loop, checking that it is still there when it is taken,
//! and dropping what the peer has acknowledged.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use sluice_platform::fadvise;

use crate::buffers::{BufferPool, PoolBuf};
use crate::send::read_full_at;
use crate::{Cancel, EngineError};

/// One planned read of a batch ([`read_batch`]).
pub(super) struct PlannedRead {
    pub(super) file: Arc<File>,
    pub(super) off: u64,
    pub(super) len: u64,
    /// Into pooled buffers (copy path) rather than only the page cache.
    pub(super) copy: bool,
    /// Fired when the read's connection went away: skipped if not begun.
    pub(super) token: Cancel,
}

/// What one planned read gave: the bytes read (fewer than asked means the
/// file ends there) and, on the copy path, the buffers holding them.
pub(super) type ReadOutcome = Result<io::Result<(u64, Vec<PoolBuf>)>, EngineError>;

/// On a disk thread: runs a batch of planned reads, each result at its
/// read's index. Every live read is asked of the kernel first (`WILLNEED`
/// starts its I/O without waiting), so the disk gets the whole batch at
/// once; then they are read, the last first: the block layer serves a
/// cgroup's throttled reads in order, so once the last is in the others
/// are too, and the thread sleeps about once per batch instead of once per
/// read (in the order given it woke for each). A read whose token fired
/// before it began is skipped ([`EngineError::Cancelled`]).
pub(super) fn read_batch(reads: &[PlannedRead], pool: &Arc<BufferPool>) -> Vec<ReadOutcome> {
    for r in reads.iter().filter(|r| !r.token.is_cancelled()) {
        // WILLNEED reads exactly the planned range and leaves no read-ahead
        // marks, so the pread below finds cached pages and the kernel's own
        // read-ahead (8 MiB windows on the lab disk) never reads past what
        // the planner asked for. Measured: without it the copy path's
        // planned 1 MiB preads made the kernel read about twice the planned bytes.
        let _ = fadvise::fadvise(r.file.as_fd(), r.off, r.len, fadvise::Advice::WillNeed);
    }
    let mut out: Vec<Option<ReadOutcome>> = (0..reads.len()).map(|_| None).collect();
    for (i, r) in reads.iter().enumerate().rev() {
        out[i] = Some(if r.token.is_cancelled() {
            Err(EngineError::Cancelled)
        } else {
            Ok(read_range(&r.file, pool, r.off, r.len, r.copy))
        });
    }
    out.into_iter()
        .map(|o| o.unwrap_or(Err(EngineError::Cancelled)))
        .collect()
}

/// Reads `len` bytes at `off` into pooled buffers (copy) or only into the
/// page cache (sendfile), after the batch's `WILLNEED`. Returns the bytes
/// read; fewer than `len` means the file ends there.
fn read_range(
    file: &File,
    pool: &Arc<BufferPool>,
    off: u64,
    len: u64,
    copy: bool,
) -> io::Result<(u64, Vec<PoolBuf>)> {
    if !copy {
        if let Some(n) = into_cache(file, off, len)? {
            return Ok((n, Vec::new()));
        }
    }
    let mut bufs = Vec::new();
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

/// Brings `[off, off + len)` into the page cache: without a copy where it
/// can be spliced ([`into_cache`]), else through one pooled scratch buffer.
/// Returns the bytes brought in (fewer: the file ends there). The planner's
/// sendfile-path reads and the sender's read-in at a miss both use it.
pub(crate) fn fill_cache(
    file: &File,
    pool: &Arc<BufferPool>,
    off: u64,
    len: u64,
) -> io::Result<u64> {
    read_range(file, pool, off, len, false).map(|(n, _)| n)
}

/// `/dev/null`, opened once, for [`into_cache`]; `None` if it cannot be.
fn dev_null() -> Option<&'static File> {
    static NULL: std::sync::OnceLock<Option<File>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .ok()
    })
    .as_ref()
}

/// Brings `[off, off + len)` into the page cache without copying it out:
/// `sendfile` to `/dev/null` waits for each page like a read but only takes
/// references to the cached pages (the null device drops them), where a
/// `pread` through a scratch buffer copied every byte once more (the
/// sendfile path sends from the cache, the copy was only a way to wait).
/// Returns the bytes brought in (fewer: the file ends there), or `None`
/// where this file or `/dev/null` cannot be spliced (the caller reads).
fn into_cache(file: &File, off: u64, len: u64) -> io::Result<Option<u64>> {
    let Some(null) = dev_null() else {
        return Ok(None);
    };
    let mut pos = off;
    let end = off.saturating_add(len);
    while pos < end {
        let want = usize::try_from(end - pos).unwrap_or(usize::MAX);
        match sluice_platform::sendfile::sendfile(null.as_fd(), file.as_fd(), &mut pos, want) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if pos == off && sluice_platform::sendfile::is_unsupported(&e) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(pos - off))
}

/// Bytes of `[off, off + len)` missing from the page cache, or `None` when
/// `cachestat` (Linux 6.5) cannot tell. The one place both the planner's
/// eviction feedback and the kernel-mode resident check ask.
pub(crate) fn uncached_bytes(file: &File, off: u64, len: u64) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    let ps = fadvise::page_size() as u64;
    let pages = (off + len - 1) / ps - off / ps + 1;
    let st = fadvise::cachestat(file.as_fd(), off, len).ok()?;
    Some((pages.saturating_sub(st.cached_pages) * ps).min(len))
}

/// [`uncached_bytes`] with the holes of a sparse file left out: a hole
/// reads as zeroes without a disk, and tmpfs never caches it, so counted
/// as missing it made `--prefetch auto` plan reads of sparse files the
/// kernel serves from memory. At most 8 extents are walked (a finely
/// fragmented sparse range counts its tail as data).
pub(crate) fn missing_data_bytes(file: &File, off: u64, len: u64) -> Option<u64> {
    // One `cachestat` first: a cached range (the common case) needs no
    // walk of its extents (two `lseek`s each).
    let all = uncached_bytes(file, off, len)?;
    if all == 0 {
        return Some(0);
    }
    let Ok(data) = sluice_platform::fs::data_ranges(file, off, len, 8) else {
        return Some(all);
    };
    data.into_iter().try_fold(0u64, |n, r| {
        Some(n + uncached_bytes(file, r.start, r.end - r.start)?)
    })
}

/// [`uncached_bytes`], 0 when it cannot be told.
pub(super) fn missing_bytes(file: &File, off: u64, len: u64) -> u64 {
    uncached_bytes(file, off, len).unwrap_or(0)
}

/// How long acknowledged pages are asked again to leave the page cache.
/// Over veth or loopback the receiver's socket buffer holds the very
/// page-cache pages `sendfile` queued (skb fragments keep their references
/// until the reading application copies them out), so a `DONTNEED` right
/// after the ACK fails on most of them; dropping each range once (as this
/// did before) left every sent page cached until reclaim, and reclaim then
/// took unsent read-ahead too (tpf-mixed-rates: 8-12 MB evicted unused). A
/// 200 kbit/s reader drains a ~128 KiB receive buffer in ~5 s; 15 s covers
/// that with room. Asking again is cheap for absent pages (skipped), not
/// for pinned ones (each failure drains every CPU's LRU batches: asking at
/// every sample doubled the server's CPU per GiB), hence `DROP_EVERY`.
pub(crate) const DROP_RETRY: Duration = Duration::from_secs(15);
/// How often one range's acknowledged pages are asked to go.
pub(crate) const DROP_EVERY: Duration = Duration::from_secs(1);

/// Which acknowledged bytes of a range to drop from the page cache.
/// Pure arithmetic over offsets and times; the caller issues the `DONTNEED`.
#[derive(Debug, Clone)]
pub(crate) struct DropBehind {
    /// Everything before this was asked to go `DROP_RETRY` ago or earlier
    /// (page aligned, or the range's start): not asked again.
    done: u64,
    /// Acknowledged offsets of recent calls, with when they were seen,
    /// oldest first (each larger than the one before).
    recent: VecDeque<(Duration, u64)>,
    /// When pages were last asked to go.
    last: Option<Duration>,
    page: u64,
}

impl DropBehind {
    /// Nothing dropped yet of a range starting at `start`.
    pub(crate) fn new(start: u64, page: u64) -> DropBehind {
        DropBehind {
            done: start,
            recent: VecDeque::new(),
            last: None,
            page: page.max(1),
        }
    }

    /// With `sent_to` the sender's offset and `in_socket` bytes still in the
    /// socket (unsent + unacknowledged, whose pages the socket still pins),
    /// the range to drop at `now`, whole pages only, if any (at most once
    /// per `DROP_EVERY`): everything acknowledged, from what was
    /// acknowledged `DROP_RETRY` ago (pages the receiver may still have
    /// held at an earlier call are asked again).
    /// The first partial page is kept (it may hold bytes of the range
    /// before ours).
    pub(crate) fn next(
        &mut self,
        now: Duration,
        sent_to: u64,
        in_socket: u64,
    ) -> Option<(u64, u64)> {
        let acked = sent_to.saturating_sub(in_socket);
        let to = acked / self.page * self.page;
        while let Some(&(at, off)) = self.recent.front() {
            if now.saturating_sub(at) < DROP_RETRY {
                break;
            }
            self.done = self.done.max(off);
            self.recent.pop_front();
        }
        if self.recent.back().is_none_or(|&(_, off)| to > off) {
            self.recent.push_back((now, to));
        }
        let from = self.done.div_ceil(self.page) * self.page;
        if to <= from
            || self
                .last
                .is_some_and(|l| now.saturating_sub(l) < DROP_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        Some((from, to - from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_each_range_into_its_slot_skips_cancelled_ones_and_stops_at_the_end() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let file = Arc::new(f);
        let pool = BufferPool::new(64 << 10, 4);
        let read = |off, len, copy, token: &Cancel| PlannedRead {
            file: Arc::clone(&file),
            off,
            len,
            copy,
            token: token.clone(),
        };
        let live = Cancel::new();
        let gone = Cancel::new();
        gone.cancel();
        let reads = [
            read(0, 100_000, false, &live),
            read(100_000, 100_000, true, &live),
            read(200_000, 50_000, false, &gone),
            read(250_000, 100_000, false, &live),
        ];
        let out = read_batch(&reads, &pool);
        assert_eq!(out.len(), 4);
        let (n, bufs) = out[0].as_ref().unwrap().as_ref().unwrap();
        assert_eq!((*n, bufs.len()), (100_000, 0), "sendfile path: cache only");
        let (n, bufs) = out[1].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(*n, 100_000);
        let copied: Vec<u8> = bufs
            .iter()
            .flat_map(|b| b[..].to_vec())
            .take(100_000)
            .collect();
        assert_eq!(
            copied,
            data[100_000..200_000],
            "copy path: the bytes, in order"
        );
        assert!(matches!(out[2], Err(EngineError::Cancelled)));
        let (n, _) = out[3].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(*n, 50_000, "short: the file ends at 300 000");
    }

    #[test]
    fn drop_behind_drops_whole_acknowledged_pages_once() {
        let t = Duration::ZERO;
        let mut d = DropBehind::new(100, 4096);
        assert_eq!(d.next(t, 5000, 0), None, "no whole page acknowledged");
        assert_eq!(d.next(t, 20_000, 3000), Some((4096, 12288)));
        assert_eq!(d.next(t, 40_000, 0), None, "asked within DROP_EVERY");
        assert_eq!(d.next(DROP_EVERY, 40_000, 0), Some((4096, 32768)));
        assert_eq!(d.next(t, 10, 100), None, "a socket larger than the offset");
    }

    #[test]
    fn drop_behind_asks_again_until_the_retry_time_has_passed() {
        let s = Duration::from_secs;
        let mut d = DropBehind::new(0, 4096);
        assert_eq!(d.next(s(0), 8192, 0), Some((0, 8192)));
        // The receiver may still have held those pages: asked again.
        assert_eq!(d.next(s(1), 16384, 0), Some((0, 16384)));
        assert_eq!(d.next(s(2), 16384, 0), Some((0, 16384)));
        // 8192 was acknowledged DROP_RETRY ago: no longer asked.
        let later = DROP_RETRY + s(0);
        assert_eq!(d.next(later, 16384, 0), Some((8192, 8192)));
        let much_later = DROP_RETRY + s(2);
        assert_eq!(d.next(much_later, 16384, 0), None, "all asked long enough");
        assert_eq!(d.next(much_later, 20480, 0), Some((16384, 4096)));
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
