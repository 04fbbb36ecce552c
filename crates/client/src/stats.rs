//! Counters of one transfer, shared by the drain, writer and control
//! threads (relaxed atomics: they are read once at the end or by the
//! progress ticker, never used to synchronise anything).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use sluice_engine::verdict::{RecvTally, SendTally, Verdict};

use crate::cli::StatsFormat;

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
    /// Uploads: retransmission timeouts on our data sockets (TCP_INFO
    /// `total_rto`, Linux 6.7+).
    pub tcp_rtos: AtomicU64,
    /// Downloads: 1 when the drain thread runs at a raised priority
    /// (`--drain-priority`), 0 when not (off, or not permitted).
    pub drain_priority: AtomicU64,
    /// Data connections refused because they did not come from the server.
    pub foreign_connections: AtomicU64,
    /// Bytes the server reported in its last 112 marker.
    pub server_reported_bytes: AtomicU64,
    /// Downloads: data-connection time the drain watched, microseconds
    /// (summed over connections).
    pub watched_micros: AtomicU64,
    /// Downloads: of that, time in which nearly the whole offered
    /// receive window arrived each round trip (window-limited).
    pub window_full_micros: AtomicU64,
    /// Downloads: the receiver's RTT estimate (largest), microseconds.
    pub rcv_rtt_micros: AtomicU64,
    /// `--drs on`: largest socket buffer set, bytes.
    pub drs_peak_buffer: AtomicU64,
    /// `--drs on`: largest receive window clamp set, bytes (what the
    /// sender may have had in flight: the memory of both ends).
    pub drs_peak_window: AtomicU64,
    /// `--drs on`: socket buffer changes made.
    pub drs_changes: AtomicU64,
    /// `--drs on`: the system's limit held a buffer below the path's need
    /// (which sysctl would help, and the cost).
    pub drs_note: Mutex<Option<String>>,
    /// Downloads: segments that arrived out of order (TCP_INFO
    /// `rcv_ooopack`), the sender's losses and retransmits as the receiver
    /// sees them.
    pub rcv_ooo_packets: AtomicU64,
    /// Downloads: looks at a connection (every 100 ms) that found new
    /// out-of-order segments: loss episodes, the controller's loss signal.
    pub rcv_loss_events: AtomicU64,
    /// Downloads: the latest receiver RTT estimate, microseconds (live,
    /// for the stream-count controller).
    pub rtt_now_micros: AtomicU64,
    /// Downloads: time the drain thread(s) were ready to read but waited
    /// for a CPU (`/proc/thread-self/schedstat`), microseconds.
    pub drain_run_delay_micros: AtomicU64,
    /// Downloads: most bytes found waiting unread in a receive queue
    /// (SIOCINQ) when the drain got to it.
    pub unread_peak: AtomicU64,
    /// Downloads: times the drain found half a receive buffer or more
    /// waiting unread (the window was closing because nobody read).
    pub unread_full_wakes: AtomicU64,
    /// Streams chosen automatically (no `-p`): the count at the end, and
    /// 0 when the count was fixed.
    pub streams_auto: AtomicU64,
    /// Most data connections open at once.
    pub streams_peak: AtomicU64,
    /// Stream-count changes the automatic choice made.
    pub streams_changes: AtomicU64,
    /// Automatic streams: every epoch the controller measured (`--stats`
    /// prints them as `streams_epochs`: seconds, streams, MB/s).
    pub streams_epochs: Mutex<Vec<crate::autostreams::Epoch>>,
    /// Uploads: the kernel's accounting of our sending sockets.
    pub send_tally: Mutex<Option<SendTally>>,
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

    /// Folds a finished download connection's tally in.
    pub fn add_recv_tally(&self, t: &RecvTally) {
        Stats::add(&self.watched_micros, t.elapsed.as_micros() as u64);
        Stats::add(&self.window_full_micros, t.window_full.as_micros() as u64);
        self.rcv_rtt_micros
            .fetch_max(t.rtt.as_micros() as u64, Relaxed);
    }

    /// Folds a finished upload connection's tally in.
    pub fn add_send_tally(&self, t: &SendTally) {
        if let Ok(mut mine) = self.send_tally.lock() {
            mine.get_or_insert_with(SendTally::default).add(t);
        }
    }

    /// What limited the transfer: an upload from the kernel's accounting
    /// of our sockets, a download from what the drain saw (full windows,
    /// and waits for the writer, which stop every connection at once).
    pub fn verdict(&self) -> Verdict {
        if let Some(t) = self.send_tally.lock().ok().and_then(|t| *t) {
            return Verdict::of_sender(&t, Duration::ZERO);
        }
        let g = |c: &AtomicU64| c.load(Relaxed);
        let streams = g(&self.streams).max(1);
        let mut t = RecvTally::default();
        t.elapsed = Duration::from_micros(g(&self.watched_micros));
        t.window_full = Duration::from_micros(g(&self.window_full_micros));
        t.writer_wait = Duration::from_micros(g(&self.stall_micros).saturating_mul(streams));
        t.rtt = Duration::from_micros(g(&self.rcv_rtt_micros));
        Verdict::of_receiver(&t)
    }

    /// The DRS limit note, if a buffer was held below the path's need.
    pub fn drs_note(&self) -> Option<String> {
        self.drs_note.lock().ok().and_then(|n| n.clone())
    }

    fn counters(&self) -> [(&'static str, &AtomicU64); 31] {
        [
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
            ("tcp_rtos", &self.tcp_rtos),
            ("drain_priority", &self.drain_priority),
            ("watched_micros", &self.watched_micros),
            ("window_full_micros", &self.window_full_micros),
            ("rcv_rtt_micros", &self.rcv_rtt_micros),
            ("drs_peak_buffer", &self.drs_peak_buffer),
            ("drs_peak_window", &self.drs_peak_window),
            ("drs_changes", &self.drs_changes),
            ("rcv_ooo_packets", &self.rcv_ooo_packets),
            ("rcv_loss_events", &self.rcv_loss_events),
            ("drain_run_delay_micros", &self.drain_run_delay_micros),
            ("unread_peak", &self.unread_peak),
            ("unread_full_wakes", &self.unread_full_wakes),
            ("streams_auto", &self.streams_auto),
            ("streams_peak", &self.streams_peak),
            ("streams_changes", &self.streams_changes),
            ("rtt_now_micros", &self.rtt_now_micros),
        ]
    }

    /// `--stats=json`: every counter, the mode, seconds and the verdict
    /// as one JSON object (one line).
    pub fn render_json(&self, mode: &str, elapsed: Duration) -> String {
        let mut o = serde_json::Map::new();
        o.insert("mode".into(), mode.into());
        o.insert("seconds".into(), elapsed.as_secs_f64().into());
        for (name, c) in self.counters() {
            o.insert(name.into(), c.load(Relaxed).into());
        }
        let v = self.verdict();
        let shares: serde_json::Map<String, serde_json::Value> = v
            .shares
            .iter()
            .map(|&(l, p)| (l.key().to_string(), ((p * 10.0).round() / 10.0).into()))
            .collect();
        o.insert(
            "limit".into(),
            serde_json::json!({
                "by": v.limit().map(|l| l.key()),
                "shares_percent": shares,
                "text": v.to_string(),
                "retransmits": v.retransmits,
                "rtt_ms": v.rtt.as_secs_f64() * 1e3,
            }),
        );
        if let Some(n) = self.drs_note() {
            o.insert("drs_note".into(), n.into());
        }
        let epochs: Vec<serde_json::Value> = self
            .epochs()
            .iter()
            .map(|e| {
                serde_json::json!({
                    "at": e.at.as_secs_f64(),
                    "streams": e.streams,
                    "mb_per_s": e.rate / 1e6,
                    "loss": e.loss,
                    "rtt_ms": e.rtt.as_secs_f64() * 1e3,
                })
            })
            .collect();
        if !epochs.is_empty() {
            o.insert("streams_epochs".into(), epochs.into());
        }
        let mut s = serde_json::Value::Object(o).to_string();
        s.push('\n');
        s
    }

    /// What ends a transfer's output on stderr: the DRS note when a
    /// system limit cost throughput (always), and the `--stats` block in
    /// the format asked for.
    pub fn print_end(&self, format: Option<StatsFormat>, mode: &str, elapsed: Duration) {
        if let Some(n) = self.drs_note() {
            eprintln!("sluice: {n}");
        }
        match format {
            None => {}
            Some(StatsFormat::Text) => eprint!("{}", self.render(mode, elapsed)),
            Some(StatsFormat::Json) => eprint!("{}", self.render_json(mode, elapsed)),
        }
    }

    /// The `--stats` block: one `name value` per line, easy to grep.
    pub fn render(&self, mode: &str, elapsed: Duration) -> String {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let mut s = String::new();
        let _ = writeln!(s, "stats: mode {mode}");
        let _ = writeln!(s, "stats: seconds {:.3}", elapsed.as_secs_f64());
        for (name, c) in self.counters() {
            let _ = writeln!(s, "stats: {name} {}", g(c));
        }
        let epochs = self.epochs();
        if !epochs.is_empty() {
            let list: Vec<String> = epochs
                .iter()
                .map(|e| {
                    format!(
                        "{:.2}s:{}:{:.1}",
                        e.at.as_secs_f64(),
                        e.streams,
                        e.rate / 1e6
                    )
                })
                .collect();
            let _ = writeln!(s, "stats: streams_epochs {}", list.join(" "));
        }
        let _ = writeln!(s, "sluice: {}", self.verdict());
        s
    }

    /// The automatic stream choice's epochs, if any.
    fn epochs(&self) -> Vec<crate::autostreams::Epoch> {
        self.streams_epochs
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// Records the controller's epochs at the end of a transfer.
    pub fn set_epochs(&self, epochs: &[crate::autostreams::Epoch]) {
        if let Ok(mut e) = self.streams_epochs.lock() {
            *e = epochs.to_vec();
        }
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
    fn the_verdict_is_in_text_and_json() {
        let s = Stats::default();
        Stats::add(&s.streams, 1);
        let mut t = RecvTally::default();
        t.elapsed = Duration::from_secs(4);
        t.window_full = Duration::from_secs(1);
        t.rtt = Duration::from_millis(50);
        s.add_recv_tally(&t);
        Stats::add(&s.stall_micros, 1_000_000);
        let text = s.render("MODE S", Duration::from_secs(4));
        assert!(
            text.contains(
                "sluice: limited by network or sender 50 %, receiver window 25 %, disk 25 %"
            ),
            "{text}"
        );
        let j: serde_json::Value =
            serde_json::from_str(&s.render_json("MODE S", Duration::from_secs(4))).unwrap();
        assert_eq!(j["limit"]["by"], "network_or_sender");
        assert_eq!(j["limit"]["shares_percent"]["disk"], 25.0);
        assert_eq!(j["bytes"], 0);
        assert_eq!(j["mode"], "MODE S");
        // An upload's verdict comes from the sender's kernel accounting.
        s.add_send_tally(&SendTally {
            elapsed: Duration::from_secs(1),
            busy: Duration::from_secs(1),
            rwnd_limited: Duration::from_millis(900),
            ..SendTally::default()
        });
        assert_eq!(
            s.verdict().to_string(),
            "limited by receiver window 90 %, network 10 %"
        );
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
