//! Progress of one transfer: bytes done, the byte ranges that reached the
//! file (for 111 restart and 112 range markers), and per-transfer counters.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_engine::verdict::{drain_poll, send_queue_drained, written_bytes, SendTally};
use sluice_engine::Counters;
use sluice_ftp::markers::RangeSet;
use sluice_platform::tcp::{self, TcpInfo};

use crate::limits::MAX_RANGES;

/// Live progress of one transfer, shared with the session (markers, STAT).
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    ranges: Mutex<RangeSet>,
    counters: Arc<Counters>,
    /// Downloads: the kernel's accounting of the data connections, summed
    /// as each finishes (what limited the transfer, `verdict.rs`).
    tally: Mutex<SendTally>,
    /// Connections that finished sending while the kernel still held some
    /// of their data: tallied by [`Progress::settle`] once it is gone.
    pending: Mutex<Vec<Pending>>,
}

/// A finished sending connection whose tally waits for its send queue to
/// drain: its reading at the start, when that was, and its socket (a
/// duplicate descriptor, so closing the connection does not lose it).
#[derive(Debug)]
struct Pending {
    before: TcpInfo,
    t0: Instant,
    fd: OwnedFd,
    /// `bytes_acked` at which all this transfer wrote is acknowledged
    /// ([`written_bytes`] when it finished sending).
    goal: Option<u64>,
}

impl Progress {
    /// Fresh progress with its own engine counters.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Payload bytes sent (downloads) or written to the file (uploads).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The byte ranges that have been written to the file (uploads).
    pub fn ranges(&self) -> RangeSet {
        self.ranges.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// This transfer's engine counters (sends, wake-ups, EAGAINs, disk bytes).
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Downloads: the summed `TCP_INFO` accounting of the connections
    /// that have finished sending (empty for uploads).
    pub fn send_tally(&self) -> SendTally {
        self.tally.lock().map(|t| *t).unwrap_or_default()
    }

    /// A connection that finished sending: tallied from `before` (read
    /// at `t0`) once its send queue has drained ([`Progress::settle`]).
    pub(crate) fn add_pending(&self, before: TcpInfo, t0: Instant, fd: OwnedFd) {
        let goal = tcp::tcp_info(fd.as_fd())
            .ok()
            .and_then(|i| written_bytes(&i));
        if let Ok(mut p) = self.pending.lock() {
            p.push(Pending {
                before,
                t0,
                fd,
                goal,
            });
        }
    }

    /// Tallies the connections that finished sending once the kernel has
    /// sent and seen acknowledged all they held, waiting at most `bound`
    /// (a client that stopped reading cannot hold the transfer's record;
    /// past it the tally is read as it is). Called after the transfer's
    /// reply: the wait never delays the client.
    pub async fn settle(&self, bound: Duration) {
        let mut left = self
            .pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let deadline = Instant::now() + bound;
        while !left.is_empty() {
            let late = Instant::now() >= deadline;
            let mut wait = Duration::from_millis(50);
            left.retain(|p| {
                let Ok(now) = tcp::tcp_info(p.fd.as_fd()) else {
                    return false;
                };
                let through = p.goal.is_some_and(|g| now.bytes_acked >= g);
                if late || through || send_queue_drained(&now) {
                    self.add_tally(&SendTally::between(&p.before, &now, drained_for(p, &now)));
                    return false;
                }
                wait = wait.min(drain_poll(&now));
                true
            });
            if !left.is_empty() {
                let until = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(wait.min(until)).await;
            }
        }
    }

    pub(crate) fn add_tally(&self, t: &SendTally) {
        if let Ok(mut mine) = self.tally.lock() {
            mine.add(t);
        }
    }

    pub(crate) fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Records `[offset, offset+len)` as written; false when the set would
    /// exceed [`MAX_RANGES`] (the caller fails the transfer).
    pub(crate) fn add_range(&self, offset: u64, len: u64) -> bool {
        self.add_bytes(len);
        let Ok(mut r) = self.ranges.lock() else {
            return false;
        };
        r.insert(offset..offset.saturating_add(len));
        r.len() <= MAX_RANGES
    }
}

/// The connection's time from its first reading to when its queue
/// emptied: the last ACK's age is taken off, so a look that came late
/// (the transfer's end waited for something else) adds no idle time.
fn drained_for(p: &Pending, now: &TcpInfo) -> Duration {
    let since_ack = Duration::from_millis(u64::from(now.last_ack_recv_ms));
    let whole = p.t0.elapsed();
    if send_queue_drained(now) {
        whole.saturating_sub(since_ack)
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_ranges_merge_and_overflow_is_reported() {
        let p = Progress::new();
        assert!(p.add_range(10, 10));
        assert!(p.add_range(30, 10));
        assert!(p.add_range(20, 10));
        assert_eq!(p.ranges().to_string(), "10-40");
        assert_eq!((p.bytes(), p.ranges().total()), (30, 30));
        // Every other byte: disjoint ranges until the bound is passed.
        let p = Progress::new();
        for i in 0..MAX_RANGES as u64 {
            assert!(p.add_range(2 * i, 1));
        }
        assert!(!p.add_range(2 * MAX_RANGES as u64, 1));
        assert_eq!(p.ranges().len(), MAX_RANGES + 1);
    }

    #[tokio::test]
    async fn a_download_is_tallied_once_the_kernel_has_sent_it_all() {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        // A sender whose 4 MiB all fit its send buffer: its last write
        // returns while most of it still waits in the kernel for a reader
        // that takes ~3 MB/s through a 64 KiB window.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut rx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut tx, _) = l.accept().unwrap();
        tcp::set_recv_buffer(rx.as_fd(), 64 << 10).unwrap();
        tcp::set_send_buffer(tx.as_fd(), 16 << 20).unwrap();
        let reader = std::thread::spawn(move || {
            let (mut buf, mut got) = (vec![0u8; 64 << 10], 0);
            loop {
                let n = rx.read(&mut buf).unwrap();
                if n == 0 {
                    return got;
                }
                got += n;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let p = Progress::new();
        let (before, t0) = (tcp::tcp_info(tx.as_fd()).unwrap(), Instant::now());
        tx.write_all(&vec![7u8; 4 << 20]).unwrap();
        tx.shutdown(std::net::Shutdown::Write).unwrap();
        let at_last_write = tcp::tcp_info(tx.as_fd()).unwrap();
        assert!(
            at_last_write.bytes_acked < 2 << 20,
            "the send buffer did not hold the tail: {at_last_write:?}"
        );
        p.add_pending(before, t0, tx.as_fd().try_clone_to_owned().unwrap());
        drop(tx);
        // Nothing is tallied until the queue has drained.
        assert_eq!(p.send_tally(), SendTally::default());
        p.settle(Duration::from_secs(60)).await;
        assert_eq!(reader.join().unwrap(), 4 << 20);
        let t = p.send_tally();
        // Read at the last write, the tally would have covered the first
        // half at most; now the window's hold on the whole is in it.
        let share = |d: Duration| d.as_secs_f64() / t.elapsed.as_secs_f64();
        assert!(share(t.busy) >= 0.8, "{t:?}");
        assert!(share(t.rwnd_limited) >= 0.5, "{t:?}");
    }
}
