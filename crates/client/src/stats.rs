//! Counters of one transfer, shared by the drain, writer and control
//! threads (relaxed atomics: they are read once at the end or by the
//! progress ticker, never used to synchronise anything).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What `--stats` prints. All counters only grow, except `mem_in_use`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Payload bytes moved over the data connections (this run only).
    pub bytes: AtomicU64,
    /// Payload bytes written to the destination by the writer thread.
    pub bytes_written: AtomicU64,
    /// Data connections opened or accepted.
    pub streams: AtomicU64,
    /// `read`/`write` calls on data sockets.
    pub socket_calls: AtomicU64,
    /// MODE E blocks (data-carrying) seen or sent.
    pub blocks: AtomicU64,
    /// Bytes that arrived twice (a MODE E block overlapping earlier data).
    pub duplicate_bytes: AtomicU64,
    /// Times the drain thread had to wait for the writer (memory cap).
    pub receive_stalls: AtomicU64,
    /// Total time the drain thread spent in those waits, in microseconds.
    pub stall_micros: AtomicU64,
    /// Bytes currently held between drain and writer.
    pub mem_in_use: AtomicU64,
    /// Highest value `mem_in_use` reached.
    pub mem_peak: AtomicU64,
    /// 112 performance markers received.
    pub perf_markers: AtomicU64,
    /// 111 restart markers received.
    pub restart_markers: AtomicU64,
    /// Uploads: segments our data sockets retransmitted (TCP_INFO).
    pub tcp_retransmits: AtomicU64,
    /// Data connections refused because they did not come from the server.
    pub foreign_connections: AtomicU64,
    /// Bytes the server reported in its last 112 marker.
    pub server_reported_bytes: AtomicU64,
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Records that `n` more bytes are in flight between drain and writer.
    pub fn mem_acquired(&self, n: u64) {
        let now = self.mem_in_use.fetch_add(n, Relaxed) + n;
        self.mem_peak.fetch_max(now, Relaxed);
    }

    /// Records that the writer released `n` bytes.
    pub fn mem_released(&self, n: u64) {
        self.mem_in_use.fetch_sub(n, Relaxed);
    }

    /// The `--stats` block: one `name value` per line, easy to grep.
    pub fn render(&self, mode: &str, elapsed: Duration) -> String {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let mut s = String::new();
        let _ = writeln!(s, "stats: mode {mode}");
        let _ = writeln!(s, "stats: seconds {:.3}", elapsed.as_secs_f64());
        for (name, c) in [
            ("bytes", &self.bytes),
            ("bytes_written", &self.bytes_written),
            ("streams", &self.streams),
            ("socket_calls", &self.socket_calls),
            ("blocks", &self.blocks),
            ("duplicate_bytes", &self.duplicate_bytes),
            ("receive_stalls", &self.receive_stalls),
            ("stall_micros", &self.stall_micros),
            ("mem_peak", &self.mem_peak),
            ("perf_markers", &self.perf_markers),
            ("restart_markers", &self.restart_markers),
            ("server_reported_bytes", &self.server_reported_bytes),
            ("foreign_connections", &self.foreign_connections),
            ("tcp_retransmits", &self.tcp_retransmits),
        ] {
            let _ = writeln!(s, "stats: {name} {}", g(c));
        }
        s
    }
}

/// The summary line printed after every transfer.
pub fn summary(verb: &str, bytes: u64, elapsed: Duration, detail: &str) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    };
    format!("sluice: {verb} {bytes} bytes in {secs:.3} s, {rate:.1} MB/s ({detail})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_follows_highest_use() {
        let s = Stats::default();
        s.mem_acquired(10);
        s.mem_acquired(5);
        s.mem_released(12);
        s.mem_acquired(1);
        assert_eq!(s.mem_peak.load(Relaxed), 15);
        assert_eq!(s.mem_in_use.load(Relaxed), 4);
    }

    #[test]
    fn summary_has_bytes_seconds_rate() {
        let line = summary("received", 2_000_000, Duration::from_secs(2), "1 stream");
        assert_eq!(
            line,
            "sluice: received 2000000 bytes in 2.000 s, 1.0 MB/s (1 stream)"
        );
        // A zero-length transfer must not divide by zero.
        assert!(summary("received", 0, Duration::ZERO, "x").contains("0.0 MB/s"));
    }
}
