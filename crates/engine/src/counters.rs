//! Atomic counters of what the engine did, global and per transfer,
//! read as a plain snapshot, rendered as Prometheus text on request.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::plan::TpfCounters;

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
    prefetch_reads: AtomicU64,
    prefetch_bytes_planned: AtomicU64,
    prefetch_reads_cancelled: AtomicU64,
    prefetch_bytes_cancelled: AtomicU64,
    prefetch_reads_delayed: AtomicU64,
    prefetch_reads_skipped: AtomicU64,
    prefetch_bytes_discarded: AtomicU64,
    evicted_unused: AtomicU64,
    flow_samples: AtomicU64,
    prefetch_reads_after_close: AtomicU64,
    prefetch_bytes_after_close: AtomicU64,
    shared_bytes_read: AtomicU64,
    shared_bytes_sent: AtomicU64,
    /// Counters of work running where these cannot be borrowed (a blocking
    /// sender's own thread): read into every snapshot while attached, folded
    /// in when detached, so a transfer's counters stay live.
    mirrors: Mutex<Vec<Arc<Counters>>>,
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
    /// Times a sender resumed after waiting (socket readiness, a timer, a
    /// disk job; not its own yields), or a receiver waited for readiness.
    pub wakeups: u64,
    /// Times a sender yielded after its quantum though its socket had room.
    pub yields: u64,
    /// Calls that returned `EAGAIN`.
    pub eagains: u64,
    /// Disk read jobs completed.
    pub disk_reads: u64,
    /// Disk write jobs completed.
    pub disk_writes: u64,
    /// Reads the prefetch planner issued (`tcp`/`fixed` modes).
    pub prefetch_reads: u64,
    /// Bytes those reads asked for.
    pub prefetch_bytes_planned: u64,
    /// Prefetch reads dropped from the scheduler's queue or cancelled on a
    /// disk thread because their connection ended.
    pub prefetch_reads_cancelled: u64,
    /// Bytes of those reads.
    pub prefetch_bytes_cancelled: u64,
    /// Prefetch reads put off after a congestion-window cut.
    pub prefetch_reads_delayed: u64,
    /// Cancelled reads a disk thread skipped without touching the disk.
    pub prefetch_reads_skipped: u64,
    /// Bytes read from disk for a connection that had ended (read, unused).
    pub prefetch_bytes_discarded: u64,
    /// Read-ahead bytes gone from the page cache before `sendfile` sent
    /// them (pages the planner read, found evicted by `cachestat`).
    pub evicted_unused: u64,
    /// `TCP_INFO` samples taken for the planner.
    pub flow_samples: u64,
    /// Prefetch reads that reached the disk after their connection had
    /// closed or been reset (eager cancellation should keep this near 0).
    pub prefetch_reads_after_close: u64,
    /// Bytes of those reads, thrown away.
    pub prefetch_bytes_after_close: u64,
    /// Bytes read from disk into shared (Circus) blocks, also counted in
    /// `bytes_read_disk`.
    pub shared_bytes_read: u64,
    /// File bytes sent from shared blocks.
    pub shared_bytes_sent: u64,
}

impl Counters {
    /// New zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads all counters (each individually atomic, not as a set),
    /// including those of attached mirrors.
    pub fn snapshot(&self) -> CountersSnapshot {
        let mut s = self.own_snapshot();
        for m in self.lock_mirrors().iter() {
            s.add(&m.snapshot());
        }
        s
    }

    fn lock_mirrors(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Counters>>> {
        // Plain data behind the lock: a panic elsewhere leaves it usable.
        self.mirrors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `m`'s counts part of every snapshot of `self` until [`detach`].
    ///
    /// [`detach`]: Counters::detach
    pub(crate) fn attach(&self, m: &Arc<Counters>) {
        self.lock_mirrors().push(Arc::clone(m));
    }

    /// Folds `m`'s counts into `self` and stops reading it (one lock, so a
    /// snapshot never sees them twice or not at all).
    pub(crate) fn detach(&self, m: &Arc<Counters>) {
        let mut v = self.lock_mirrors();
        if let Some(i) = v.iter().position(|x| Arc::ptr_eq(x, m)) {
            v.swap_remove(i);
            self.add_snapshot(&m.snapshot());
        }
    }

    fn add_snapshot(&self, s: &CountersSnapshot) {
        let mine = self.atomics();
        for (a, (_, _, v)) in mine.iter().zip(s.fields()) {
            a.fetch_add(v, Relaxed);
        }
    }

    /// The atomics in the order of [`CountersSnapshot::fields`].
    fn atomics(&self) -> [&AtomicU64; 24] {
        [
            &self.bytes_sent,
            &self.bytes_read_disk,
            &self.bytes_received,
            &self.bytes_written_disk,
            &self.send_calls,
            &self.recv_calls,
            &self.wakeups,
            &self.yields,
            &self.eagains,
            &self.disk_reads,
            &self.disk_writes,
            &self.prefetch_reads,
            &self.prefetch_bytes_planned,
            &self.prefetch_reads_cancelled,
            &self.prefetch_bytes_cancelled,
            &self.prefetch_reads_delayed,
            &self.prefetch_reads_skipped,
            &self.prefetch_bytes_discarded,
            &self.evicted_unused,
            &self.flow_samples,
            &self.prefetch_reads_after_close,
            &self.prefetch_bytes_after_close,
            &self.shared_bytes_read,
            &self.shared_bytes_sent,
        ]
    }

    fn own_snapshot(&self) -> CountersSnapshot {
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
            prefetch_reads: self.prefetch_reads.load(Relaxed),
            prefetch_bytes_planned: self.prefetch_bytes_planned.load(Relaxed),
            prefetch_reads_cancelled: self.prefetch_reads_cancelled.load(Relaxed),
            prefetch_bytes_cancelled: self.prefetch_bytes_cancelled.load(Relaxed),
            prefetch_reads_delayed: self.prefetch_reads_delayed.load(Relaxed),
            prefetch_reads_skipped: self.prefetch_reads_skipped.load(Relaxed),
            prefetch_bytes_discarded: self.prefetch_bytes_discarded.load(Relaxed),
            evicted_unused: self.evicted_unused.load(Relaxed),
            flow_samples: self.flow_samples.load(Relaxed),
            prefetch_reads_after_close: self.prefetch_reads_after_close.load(Relaxed),
            prefetch_bytes_after_close: self.prefetch_bytes_after_close.load(Relaxed),
            shared_bytes_read: self.shared_bytes_read.load(Relaxed),
            shared_bytes_sent: self.shared_bytes_sent.load(Relaxed),
        }
    }

    /// Adds a finished connection's planner and scheduler counts to these
    /// counters alone (per transfer; engine totals come from the planner).
    pub(crate) fn add_tpf(&self, c: &TpfCounters) {
        self.prefetch_reads.fetch_add(c.reads_issued, Relaxed);
        self.prefetch_bytes_planned
            .fetch_add(c.bytes_planned, Relaxed);
        self.prefetch_reads_cancelled
            .fetch_add(c.reads_cancelled, Relaxed);
        self.prefetch_bytes_cancelled
            .fetch_add(c.bytes_cancelled, Relaxed);
        self.prefetch_reads_delayed
            .fetch_add(c.reads_delayed, Relaxed);
    }

    /// A disk read completed (counted where no transfer's counters are at
    /// hand: engine totals at completion, a transfer's when it takes the data).
    pub(crate) fn add_disk_read(&self, bytes: u64) {
        self.disk_reads.fetch_add(1, Relaxed);
        self.bytes_read_disk.fetch_add(bytes, Relaxed);
    }

    /// A shared (Circus) block was read from disk (engine-wide only: it
    /// is read for every reader of the file).
    pub(crate) fn add_shared_read(&self, bytes: u64) {
        self.shared_bytes_read.fetch_add(bytes, Relaxed);
    }

    /// File bytes sent from a shared block.
    pub(crate) fn add_shared_sent(&self, bytes: u64) {
        self.shared_bytes_sent.fetch_add(bytes, Relaxed);
    }

    /// A prefetch read finished after its connection ended: skipped (never
    /// ran) or run with its `bytes` thrown away.
    pub(crate) fn add_wasted(&self, skipped: bool, bytes: u64) {
        if skipped {
            self.prefetch_reads_skipped.fetch_add(1, Relaxed);
        }
        self.prefetch_bytes_discarded.fetch_add(bytes, Relaxed);
    }
}

impl CountersSnapshot {
    /// Adds every field of `o`.
    pub fn add(&mut self, o: &CountersSnapshot) {
        let f = o.fields();
        let mine = self.fields_mut();
        for (m, (_, _, v)) in mine.into_iter().zip(f) {
            *m += v;
        }
    }

    fn fields_mut(&mut self) -> [&mut u64; 24] {
        [
            &mut self.bytes_sent,
            &mut self.bytes_read_disk,
            &mut self.bytes_received,
            &mut self.bytes_written_disk,
            &mut self.send_calls,
            &mut self.recv_calls,
            &mut self.wakeups,
            &mut self.yields,
            &mut self.eagains,
            &mut self.disk_reads,
            &mut self.disk_writes,
            &mut self.prefetch_reads,
            &mut self.prefetch_bytes_planned,
            &mut self.prefetch_reads_cancelled,
            &mut self.prefetch_bytes_cancelled,
            &mut self.prefetch_reads_delayed,
            &mut self.prefetch_reads_skipped,
            &mut self.prefetch_bytes_discarded,
            &mut self.evicted_unused,
            &mut self.flow_samples,
            &mut self.prefetch_reads_after_close,
            &mut self.prefetch_bytes_after_close,
            &mut self.shared_bytes_read,
            &mut self.shared_bytes_sent,
        ]
    }

    /// Adds the planner's and scheduler's totals (engine-wide snapshot).
    pub(crate) fn add_tpf(&mut self, c: &TpfCounters) {
        self.prefetch_reads += c.reads_issued;
        self.prefetch_bytes_planned += c.bytes_planned;
        self.prefetch_reads_cancelled += c.reads_cancelled;
        self.prefetch_bytes_cancelled += c.bytes_cancelled;
        self.prefetch_reads_delayed += c.reads_delayed;
        self.prefetch_reads_after_close += c.reads_after_close;
        self.prefetch_bytes_after_close += c.bytes_after_close;
    }

    /// Every counter as `(name, help, value)`, in a fixed order.
    pub fn fields(&self) -> [(&'static str, &'static str, u64); 24] {
        [
            (
                "bytes_sent",
                "Payload and framing bytes written to sockets.",
                self.bytes_sent,
            ),
            (
                "bytes_read_disk",
                "Bytes read from files.",
                self.bytes_read_disk,
            ),
            (
                "bytes_received",
                "Bytes read from sockets.",
                self.bytes_received,
            ),
            (
                "bytes_written_disk",
                "Bytes written to files.",
                self.bytes_written_disk,
            ),
            (
                "send_calls",
                "Socket send calls that moved bytes.",
                self.send_calls,
            ),
            (
                "recv_calls",
                "Socket recv calls that returned bytes.",
                self.recv_calls,
            ),
            (
                "wakeups",
                "Times a sender resumed after waiting (socket, timer, disk job) or a receiver waited.",
                self.wakeups,
            ),
            ("yields", "Sender yields after a quantum.", self.yields),
            ("eagains", "Calls that returned EAGAIN.", self.eagains),
            ("disk_reads", "Disk read jobs completed.", self.disk_reads),
            (
                "disk_writes",
                "Disk write jobs completed.",
                self.disk_writes,
            ),
            (
                "prefetch_reads",
                "Prefetch reads issued by the planner.",
                self.prefetch_reads,
            ),
            (
                "prefetch_bytes_planned",
                "Bytes of prefetch reads issued.",
                self.prefetch_bytes_planned,
            ),
            (
                "prefetch_reads_cancelled",
                "Prefetch reads cancelled because their connection ended.",
                self.prefetch_reads_cancelled,
            ),
            (
                "prefetch_bytes_cancelled",
                "Bytes of cancelled prefetch reads.",
                self.prefetch_bytes_cancelled,
            ),
            (
                "prefetch_reads_delayed",
                "Prefetch reads delayed after a cwnd cut.",
                self.prefetch_reads_delayed,
            ),
            (
                "prefetch_reads_skipped",
                "Cancelled prefetch reads skipped before touching the disk.",
                self.prefetch_reads_skipped,
            ),
            (
                "prefetch_bytes_discarded",
                "Bytes read for connections that had ended.",
                self.prefetch_bytes_discarded,
            ),
            (
                "evicted_unused",
                "Read-ahead bytes evicted from the page cache before being sent.",
                self.evicted_unused,
            ),
            (
                "flow_samples",
                "TCP_INFO samples taken for the planner.",
                self.flow_samples,
            ),
            (
                "prefetch_reads_after_close",
                "Prefetch reads that reached the disk after their connection had closed or been reset.",
                self.prefetch_reads_after_close,
            ),
            (
                "prefetch_bytes_after_close",
                "Bytes of those reads, thrown away.",
                self.prefetch_bytes_after_close,
            ),
            (
                "shared_bytes_read",
                "Bytes read from disk into shared (Circus) blocks.",
                self.shared_bytes_read,
            ),
            (
                "shared_bytes_sent",
                "File bytes sent from shared (Circus) blocks.",
                self.shared_bytes_sent,
            ),
        ]
    }

    /// Prometheus text exposition (version 0.0.4) of every counter, named
    /// `sluice_engine_<field>_total`.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        for (name, help, v) in self.fields() {
            let _ = writeln!(out, "# HELP sluice_engine_{name}_total {help}");
            let _ = writeln!(out, "# TYPE sluice_engine_{name}_total counter");
            let _ = writeln!(out, "sluice_engine_{name}_total {v}");
        }
        out
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
    evicted_unused => evicted_unused,
    flow_samples => flow_samples,
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

    #[test]
    fn prometheus_text_has_every_counter_once() {
        let s = CountersSnapshot {
            bytes_sent: 7,
            evicted_unused: 3,
            ..CountersSnapshot::default()
        };
        let text = s.prometheus();
        assert!(text.contains("\nsluice_engine_bytes_sent_total 7\n"));
        assert!(text.contains("\nsluice_engine_evicted_unused_total 3\n"));
        assert_eq!(
            text.lines().filter(|l| !l.starts_with('#')).count(),
            s.fields().len()
        );
    }
}
