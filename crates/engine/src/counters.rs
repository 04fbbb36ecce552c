//! Atomic counters of what the engine did, global and per transfer,
//! read as a plain snapshot (exported later as Prometheus text).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters; cheap to bump from any task or thread.
#[derive(Debug, Default)]
pub struct Counters {
    bytes_sent: AtomicU64,
    bytes_read_disk: AtomicU64,
    bytes_received: AtomicU64,
    bytes_written_disk: AtomicU64,
    send_calls: AtomicU64,
    recv_calls: AtomicU64,
    wakeups: AtomicU64,
    yields: AtomicU64,
    eagains: AtomicU64,
    disk_reads: AtomicU64,
    disk_writes: AtomicU64,
}

/// A point-in-time copy of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountersSnapshot {
    /// Payload and framing bytes written to sockets.
    pub bytes_sent: u64,
    /// Bytes read from files (copy path and prefetch touches).
    pub bytes_read_disk: u64,
    /// Bytes read from sockets.
    pub bytes_received: u64,
    /// Bytes written to files.
    pub bytes_written_disk: u64,
    /// `send`/`writev`/`sendfile` calls that moved bytes.
    pub send_calls: u64,
    /// `recv` calls that returned bytes.
    pub recv_calls: u64,
    /// Times a sender or receiver had to wait for socket readiness.
    pub wakeups: u64,
    /// Times a sender yielded after its quantum though its socket had room.
    pub yields: u64,
    /// Calls that returned `EAGAIN`.
    pub eagains: u64,
    /// Disk read jobs completed.
    pub disk_reads: u64,
    /// Disk write jobs completed.
    pub disk_writes: u64,
}

impl Counters {
    /// New zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads all counters (each individually atomic, not as a set).
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            bytes_sent: self.bytes_sent.load(Relaxed),
            bytes_read_disk: self.bytes_read_disk.load(Relaxed),
            bytes_received: self.bytes_received.load(Relaxed),
            bytes_written_disk: self.bytes_written_disk.load(Relaxed),
            send_calls: self.send_calls.load(Relaxed),
            recv_calls: self.recv_calls.load(Relaxed),
            wakeups: self.wakeups.load(Relaxed),
            yields: self.yields.load(Relaxed),
            eagains: self.eagains.load(Relaxed),
            disk_reads: self.disk_reads.load(Relaxed),
            disk_writes: self.disk_writes.load(Relaxed),
        }
    }
}

/// The pair of counters every operation updates: the engine's totals and
/// the current transfer's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally<'a> {
    pub global: &'a Counters,
    pub local: &'a Counters,
}

macro_rules! tally_add {
    ($($name:ident => $field:ident),* $(,)?) => {
        impl Tally<'_> {
            $(
                pub(crate) fn $name(&self, n: u64) {
                    self.global.$field.fetch_add(n, Relaxed);
                    self.local.$field.fetch_add(n, Relaxed);
                }
            )*
        }
    };
}

tally_add! {
    sent => bytes_sent,
    read_disk => bytes_read_disk,
    received => bytes_received,
    written_disk => bytes_written_disk,
    send_calls => send_calls,
    recv_calls => recv_calls,
    wakeups => wakeups,
    yields => yields,
    eagains => eagains,
    disk_reads => disk_reads,
    disk_writes => disk_writes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_updates_both_sets() {
        let g = Counters::new();
        let l = Counters::new();
        let t = Tally {
            global: &g,
            local: &l,
        };
        t.sent(10);
        t.sent(5);
        t.eagains(1);
        let other = Counters::new();
        Tally {
            global: &g,
            local: &other,
        }
        .sent(1);
        assert_eq!(g.snapshot().bytes_sent, 16);
        assert_eq!(l.snapshot().bytes_sent, 15);
        assert_eq!(l.snapshot().eagains, 1);
        assert_eq!(other.snapshot().bytes_sent, 1);
    }
}
