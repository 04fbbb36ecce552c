//! What limited a transfer: the kernel's own accounting of each data
//! connection (`TCP_INFO`'s busy, receive-window-limited and
//! send-buffer-limited times, retransmits, RTT) and Sluice's own waits
//! (the disk, the receiver's writer), turned into shares of the
//! transfer's time: "limited by receiver window 71 %, network 25 %,
//! disk 4 %". Sans-I/O: tallies in, a [`Verdict`] out.
//!
//! A sender sees most: while it has data in flight the kernel says
//! whether the peer's window (`tcpi_rwnd_limited`) or our send buffer
//! (`tcpi_sndbuf_limited`) held it back, and the rest of the busy time
//! the network (congestion window, pacing, loss) did; time not busy is
//! time the application had nothing queued (disk or CPU). A receiver
//! sees less: the time its writer made the reading wait (disk), and the
//! round trips in which nearly its whole offered window arrived (its
//! window limits); the rest is the network or the sender, which it
//! cannot tell apart.

use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use sluice_platform::tcp::TcpInfo;

/// One thing that can limit a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// The receiver's advertised window (slow reader, small receive buffer).
    ReceiverWindow,
    /// The sender's socket buffer.
    SendBuffer,
    /// The network: congestion window, pacing, loss, the link's rate.
    Network,
    /// Seen from the receiver: the network or the sender (it cannot tell).
    NetworkOrSender,
    /// Waiting for the disk (reads at the sender, the writer at the receiver).
    Disk,
    /// The sending application had nothing queued (not the disk: CPU,
    /// scheduling, the protocol's own turns).
    Sender,
}

impl Limit {
    /// Name in text output ("receiver window").
    pub fn name(self) -> &'static str {
        match self {
            Limit::ReceiverWindow => "receiver window",
            Limit::SendBuffer => "send buffer",
            Limit::Network => "network",
            Limit::NetworkOrSender => "network or sender",
            Limit::Disk => "disk",
            Limit::Sender => "sender",
        }
    }

    /// Name as a key (JSON, xferlog, metrics): `receiver_window`.
    pub fn key(self) -> &'static str {
        match self {
            Limit::ReceiverWindow => "receiver_window",
            Limit::SendBuffer => "send_buffer",
            Limit::Network => "network",
            Limit::NetworkOrSender => "network_or_sender",
            Limit::Disk => "disk",
            Limit::Sender => "sender",
        }
    }
}

/// A sending connection's kernel accounting over a transfer (deltas), or
/// several connections' summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendTally {
    /// Connection time covered (summed over connections).
    pub elapsed: Duration,
    /// Time with data in flight (`tcpi_busy_time`; includes the two below).
    pub busy: Duration,
    /// Of that, limited by the peer's receive window.
    pub rwnd_limited: Duration,
    /// Of that, limited by our send buffer.
    pub sndbuf_limited: Duration,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Largest smoothed RTT seen at the end of a connection.
    pub rtt: Duration,
}

impl SendTally {
    /// The tally between two `TCP_INFO` readings `elapsed` apart.
    pub fn between(before: &TcpInfo, after: &TcpInfo, elapsed: Duration) -> SendTally {
        let us = |a: u64, b: u64| Duration::from_micros(a.saturating_sub(b));
        // The kernel counts as send-buffer-limited every moment the
        // congestion control wanted more in flight than the buffer holds.
        // With a queue standing at the bottleneck (the smoothed RTT above
        // the least by QUEUE_RTT) that cost no rate: the path was full and
        // the buffer only kept the sender from queueing more, which DRS
        // does on purpose (drs.rs: BBR's startup wants 2.9 BDPs in flight).
        // That time is the network's.
        let queued = after.min_rtt_us > 0
            && f64::from(after.rtt_us) > f64::from(after.min_rtt_us) * QUEUE_RTT;
        SendTally {
            elapsed,
            busy: us(after.busy_time_us, before.busy_time_us),
            rwnd_limited: us(after.rwnd_limited_us, before.rwnd_limited_us),
            sndbuf_limited: if queued {
                Duration::ZERO
            } else {
                us(after.sndbuf_limited_us, before.sndbuf_limited_us)
            },
            retransmits: u64::from(after.total_retrans.saturating_sub(before.total_retrans)),
            rtt: Duration::from_micros(u64::from(after.rtt_us)),
        }
    }

    /// Adds another connection's tally.
    pub fn add(&mut self, o: &SendTally) {
        self.elapsed += o.elapsed;
        self.busy += o.busy;
        self.rwnd_limited += o.rwnd_limited;
        self.sndbuf_limited += o.sndbuf_limited;
        self.retransmits += o.retransmits;
        self.rtt = self.rtt.max(o.rtt);
    }
}

/// A smoothed RTT this many times the least says a queue stands at the
/// bottleneck (the path is full).
const QUEUE_RTT: f64 = 1.15;

/// Whether a sending connection has nothing left in the kernel: every
/// byte (and the FIN) acknowledged, nothing unsent, or the connection
/// gone. Until then the tally misses the tail: what the kernel still held
/// when the last write returned (up to the send buffer; a 4 MiB download
/// read "sender 100 %" when tallied at its last write).
pub fn send_queue_drained(i: &TcpInfo) -> bool {
    /// `TCP_CLOSE`: reset or fully closed, nothing more will move.
    const CLOSE: u8 = 7;
    (i.unacked == 0 && i.notsent_bytes == 0) || i.state == CLOSE
}

/// The bytes the application has handed the socket so far: sent once
/// (`bytes_sent` less retransmissions) plus not yet sent. A connection
/// whose `bytes_acked` reaches this value has had everything written up to
/// this reading acknowledged, whatever was written after it (a kept MODE E
/// connection carries the next file at once, so its queue may never drain
/// between two transfers). `None` where the kernel does not report
/// `bytes_sent` (before Linux 4.19).
pub fn written_bytes(i: &TcpInfo) -> Option<u64> {
    (i.bytes_sent > 0)
        .then(|| i.bytes_sent.saturating_sub(i.bytes_retrans) + u64::from(i.notsent_bytes))
}

/// How long to wait before looking at a draining connection again: half
/// its round trip (an ACK can come no sooner), within 1-50 ms.
pub fn drain_poll(i: &TcpInfo) -> Duration {
    (Duration::from_micros(u64::from(i.rtt_us)) / 2)
        .clamp(Duration::from_millis(1), Duration::from_millis(50))
}

/// A receiving connection's tally, built from samples while it reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvTally {
    /// Connection time covered (summed over connections).
    pub elapsed: Duration,
    /// Time in which nearly the whole offered window arrived each round trip.
    pub window_full: Duration,
    /// Time the reader waited for its writer (the disk), summed.
    pub writer_wait: Duration,
    /// Last receiver RTT estimate (largest over connections).
    pub rtt: Duration,
    last: Option<(Duration, u64)>,
}

/// Share of the offered window that, arriving in one round trip, counts
/// as window-limited.
const WINDOW_FULL_SHARE: f64 = 0.8;

impl RecvTally {
    /// Folds in a sample at `now` (any clock, as long as it only grows):
    /// cumulative bytes received, the window offered now and the
    /// receiver's RTT estimate (zero: not known yet).
    pub fn sample(&mut self, now: Duration, bytes_received: u64, rcv_wnd: u64, rcv_rtt: Duration) {
        if let Some((t, b)) = self.last {
            let dt = now.saturating_sub(t);
            if !dt.is_zero() {
                self.elapsed += dt;
                if !rcv_rtt.is_zero() && rcv_wnd > 0 {
                    let per_rtt = bytes_received.saturating_sub(b) as f64 * rcv_rtt.as_secs_f64()
                        / dt.as_secs_f64();
                    if per_rtt >= rcv_wnd as f64 * WINDOW_FULL_SHARE {
                        self.window_full += dt;
                    }
                }
            }
        }
        if !rcv_rtt.is_zero() {
            self.rtt = rcv_rtt;
        }
        self.last = Some((now, bytes_received));
    }

    /// Adds another connection's tally.
    pub fn add(&mut self, o: &RecvTally) {
        self.elapsed += o.elapsed;
        self.window_full += o.window_full;
        self.writer_wait += o.writer_wait;
        self.rtt = self.rtt.max(o.rtt);
    }
}

/// Engine-wide sums of finished downloads' tallies, for `/metrics`: the
/// seconds all data connections spent limited by each cause.
#[derive(Debug, Default)]
pub struct LimitTotals {
    connection_us: AtomicU64,
    rwnd_us: AtomicU64,
    sndbuf_us: AtomicU64,
    network_us: AtomicU64,
    idle_us: AtomicU64,
    retransmits: AtomicU64,
}

impl LimitTotals {
    /// Adds one finished connection (or transfer).
    pub fn add(&self, t: &SendTally) {
        let us = |d: Duration| d.as_micros().min(u128::from(u64::MAX)) as u64;
        let busy = t.busy.min(t.elapsed.max(t.busy));
        let rwnd = t.rwnd_limited.min(busy);
        let sndbuf = t.sndbuf_limited.min(busy - rwnd);
        self.connection_us
            .fetch_add(us(t.elapsed.max(busy)), Relaxed);
        self.rwnd_us.fetch_add(us(rwnd), Relaxed);
        self.sndbuf_us.fetch_add(us(sndbuf), Relaxed);
        self.network_us.fetch_add(us(busy - rwnd - sndbuf), Relaxed);
        self.idle_us
            .fetch_add(us(t.elapsed.max(busy) - busy), Relaxed);
        self.retransmits.fetch_add(t.retransmits, Relaxed);
    }

    /// Prometheus text: `sluice_engine_limit_seconds_total{by="..."}`,
    /// connection seconds and retransmits.
    pub fn prometheus(&self) -> String {
        let s = |a: &AtomicU64| a.load(Relaxed) as f64 / 1e6;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP sluice_engine_limit_seconds_total Download data-connection seconds by what limited them (TCP_INFO: receive window, send buffer, network while busy; sender: socket idle)."
        );
        let _ = writeln!(out, "# TYPE sluice_engine_limit_seconds_total counter");
        for (by, a) in [
            (Limit::ReceiverWindow, &self.rwnd_us),
            (Limit::SendBuffer, &self.sndbuf_us),
            (Limit::Network, &self.network_us),
            (Limit::Sender, &self.idle_us),
        ] {
            let _ = writeln!(
                out,
                "sluice_engine_limit_seconds_total{{by=\"{}\"}} {:.6}",
                by.key(),
                s(a)
            );
        }
        let _ = writeln!(out, "# HELP sluice_engine_download_connection_seconds_total Download data-connection seconds accounted above.");
        let _ = writeln!(
            out,
            "# TYPE sluice_engine_download_connection_seconds_total counter"
        );
        let _ = writeln!(
            out,
            "sluice_engine_download_connection_seconds_total {:.6}",
            s(&self.connection_us)
        );
        let _ = writeln!(out, "# HELP sluice_engine_download_retransmits_total Segments retransmitted on download data connections.");
        let _ = writeln!(
            out,
            "# TYPE sluice_engine_download_retransmits_total counter"
        );
        let _ = writeln!(
            out,
            "sluice_engine_download_retransmits_total {}",
            self.retransmits.load(Relaxed)
        );
        out
    }
}

/// What limited a transfer, as shares of its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// (limit, percent), largest first; limits under 0.5 % left out.
    pub shares: Vec<(Limit, f64)>,
    /// Segments the sender retransmitted (sender view; 0 at a receiver).
    pub retransmits: u64,
    /// Round-trip time.
    pub rtt: Duration,
}

fn share(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * part.as_secs_f64() / whole.as_secs_f64()
    }
}

impl Verdict {
    /// From a sender's tally and the time its sends waited for the disk.
    pub fn of_sender(t: &SendTally, disk_wait: Duration) -> Verdict {
        let whole = t.elapsed.max(t.busy);
        let busy = t.busy;
        let rwnd = t.rwnd_limited.min(busy);
        let sndbuf = t.sndbuf_limited.min(busy - rwnd);
        let network = busy - rwnd - sndbuf;
        let idle = whole - busy;
        let disk = disk_wait.min(idle);
        let parts = [
            (Limit::ReceiverWindow, rwnd),
            (Limit::SendBuffer, sndbuf),
            (Limit::Network, network),
            (Limit::Disk, disk),
            (Limit::Sender, idle - disk),
        ];
        Verdict::from_parts(&parts, whole, t.retransmits, t.rtt)
    }

    /// From a receiver's tally (its writer waits included).
    pub fn of_receiver(t: &RecvTally) -> Verdict {
        let whole = t.elapsed.max(t.writer_wait);
        let disk = t.writer_wait;
        let window = t.window_full.min(whole - disk);
        let rest = whole - disk - window;
        let parts = [
            (Limit::ReceiverWindow, window),
            (Limit::Disk, disk),
            (Limit::NetworkOrSender, rest),
        ];
        Verdict::from_parts(&parts, whole, 0, t.rtt)
    }

    fn from_parts(
        parts: &[(Limit, Duration)],
        whole: Duration,
        retransmits: u64,
        rtt: Duration,
    ) -> Verdict {
        let mut shares: Vec<(Limit, f64)> = parts
            .iter()
            .map(|&(l, d)| (l, share(d, whole)))
            .filter(|&(_, p)| p >= 0.5)
            .collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Verdict {
            shares,
            retransmits,
            rtt,
        }
    }

    /// The largest share, if any time was accounted.
    pub fn limit(&self) -> Option<Limit> {
        self.shares.first().map(|&(l, _)| l)
    }

    /// The share of `l`, percent.
    pub fn share_of(&self, l: Limit) -> f64 {
        self.shares
            .iter()
            .find(|&&(k, _)| k == l)
            .map_or(0.0, |&(_, p)| p)
    }

    /// One compact field for logs: `limit=receiver_window:71,network:25`
    /// (`limit=unknown` when nothing was accounted).
    pub fn log_field(&self) -> String {
        if self.shares.is_empty() {
            return "limit=unknown".into();
        }
        let parts: Vec<String> = self
            .shares
            .iter()
            .map(|&(l, p)| format!("{}:{:.0}", l.key(), p))
            .collect();
        format!("limit={}", parts.join(","))
    }
}

impl fmt::Display for Verdict {
    /// "limited by receiver window 71 %, network 25 %, disk 4 %".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shares.is_empty() {
            return f.write_str("limit unknown (no time accounted)");
        }
        f.write_str("limited by ")?;
        for (i, (l, p)) in self.shares.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {:.0} %", l.name(), p)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn written_bytes_count_each_byte_once_and_what_waits_unsent() {
        let i = TcpInfo {
            bytes_sent: 10_000,
            bytes_retrans: 1_000,
            notsent_bytes: 500,
            bytes_acked: 8_000,
            ..TcpInfo::default()
        };
        // 9000 sent once, 500 not yet: acknowledged through 9500.
        assert_eq!(written_bytes(&i), Some(9_500));
        // A kernel that does not report bytes_sent: unknown.
        assert_eq!(written_bytes(&TcpInfo::default()), None);
    }

    #[test]
    fn a_sender_held_by_the_receiver_window() {
        let t = SendTally {
            elapsed: 1000 * MS,
            busy: 960 * MS,
            rwnd_limited: 710 * MS,
            sndbuf_limited: Duration::ZERO,
            retransmits: 3,
            rtt: 50 * MS,
        };
        let v = Verdict::of_sender(&t, 40 * MS);
        assert_eq!(v.limit(), Some(Limit::ReceiverWindow));
        assert_eq!(
            v.to_string(),
            "limited by receiver window 71 %, network 25 %, disk 4 %"
        );
        assert_eq!(v.log_field(), "limit=receiver_window:71,network:25,disk:4");
        assert_eq!(v.retransmits, 3);
    }

    #[test]
    fn idle_time_is_disk_up_to_the_disk_wait_then_the_sender() {
        let t = SendTally {
            elapsed: 1000 * MS,
            busy: 200 * MS,
            sndbuf_limited: 100 * MS,
            ..SendTally::default()
        };
        let v = Verdict::of_sender(&t, 500 * MS);
        assert_eq!(v.limit(), Some(Limit::Disk));
        assert_eq!(v.share_of(Limit::Disk), 50.0);
        assert_eq!(v.share_of(Limit::Sender), 30.0);
        assert_eq!(v.share_of(Limit::SendBuffer), 10.0);
        assert_eq!(v.share_of(Limit::Network), 10.0);
        // A disk wait longer than the idle time cannot claim busy time.
        let v = Verdict::of_sender(&t, 5000 * MS);
        assert_eq!(v.share_of(Limit::Disk), 80.0);
    }

    #[test]
    fn kernel_counters_out_of_step_are_clamped() {
        // busy above elapsed (clock skew between the two), limits above busy.
        let t = SendTally {
            elapsed: 100 * MS,
            busy: 120 * MS,
            rwnd_limited: 200 * MS,
            sndbuf_limited: 50 * MS,
            ..SendTally::default()
        };
        let v = Verdict::of_sender(&t, Duration::ZERO);
        assert_eq!(v.shares, vec![(Limit::ReceiverWindow, 100.0)]);
        let empty = Verdict::of_sender(&SendTally::default(), Duration::ZERO);
        assert_eq!(empty.limit(), None);
        assert_eq!(empty.log_field(), "limit=unknown");
    }

    #[test]
    fn tallies_add_and_come_from_tcp_info() {
        let before = TcpInfo {
            busy_time_us: 1000,
            rwnd_limited_us: 100,
            total_retrans: 2,
            ..TcpInfo::default()
        };
        let after = TcpInfo {
            busy_time_us: 901_000,
            rwnd_limited_us: 300_100,
            sndbuf_limited_us: 5,
            total_retrans: 7,
            rtt_us: 20_000,
            ..TcpInfo::default()
        };
        let mut t = SendTally::between(&before, &after, 1000 * MS);
        assert_eq!(t.busy, 900 * MS);
        assert_eq!(t.rwnd_limited, 300 * MS);
        assert_eq!(t.retransmits, 5);
        let one = t;
        t.add(&one);
        assert_eq!(t.elapsed, 2000 * MS);
        assert_eq!(t.retransmits, 10);
        assert_eq!(t.rtt, 20 * MS);
    }

    #[test]
    fn a_send_buffer_that_only_held_back_a_queue_is_the_networks_time() {
        let before = TcpInfo::default();
        let after = |rtt_us, min_rtt_us| TcpInfo {
            busy_time_us: 1_000_000,
            sndbuf_limited_us: 600_000,
            rtt_us,
            min_rtt_us,
            ..TcpInfo::default()
        };
        // No queue (RTT at its least): the buffer kept the path from filling.
        let t = SendTally::between(&before, &after(100_000, 100_000), 1000 * MS);
        assert_eq!(t.sndbuf_limited, 600 * MS);
        // 145 ms on a 100 ms path: the path was full, the buffer held a queue.
        let t = SendTally::between(&before, &after(145_000, 100_000), 1000 * MS);
        assert_eq!(t.sndbuf_limited, Duration::ZERO);
        assert_eq!(
            Verdict::of_sender(&t, Duration::ZERO).share_of(Limit::Network),
            100.0
        );
    }

    #[test]
    fn totals_sum_connections_for_metrics() {
        let t = LimitTotals::default();
        let one = SendTally {
            elapsed: 2000 * MS,
            busy: 1500 * MS,
            rwnd_limited: 500 * MS,
            retransmits: 2,
            ..SendTally::default()
        };
        t.add(&one);
        t.add(&one);
        let p = t.prometheus();
        assert!(
            p.contains("sluice_engine_limit_seconds_total{by=\"receiver_window\"} 1.000000"),
            "{p}"
        );
        assert!(
            p.contains("sluice_engine_limit_seconds_total{by=\"network\"} 2.000000"),
            "{p}"
        );
        assert!(
            p.contains("sluice_engine_limit_seconds_total{by=\"sender\"} 1.000000"),
            "{p}"
        );
        assert!(
            p.contains("sluice_engine_download_connection_seconds_total 4.000000"),
            "{p}"
        );
        assert!(
            p.contains("sluice_engine_download_retransmits_total 4"),
            "{p}"
        );
    }

    #[test]
    fn a_receiver_counts_full_windows_and_writer_waits() {
        let mut r = RecvTally::default();
        let rtt = 50 * MS;
        let wnd = 1_000_000u64;
        let mut now = Duration::ZERO;
        let mut bytes = 0u64;
        r.sample(now, bytes, wnd, rtt);
        // 1 s of full windows (1 MB per 50 ms), then 1 s at a quarter.
        for _ in 0..10 {
            now += 100 * MS;
            bytes += 2 * wnd;
            r.sample(now, bytes, wnd, rtt);
        }
        for _ in 0..10 {
            now += 100 * MS;
            bytes += wnd / 2;
            r.sample(now, bytes, wnd, rtt);
        }
        r.writer_wait = 500 * MS;
        let v = Verdict::of_receiver(&r);
        assert_eq!(r.elapsed, 2000 * MS);
        assert_eq!(v.share_of(Limit::ReceiverWindow), 50.0);
        assert_eq!(v.share_of(Limit::Disk), 25.0);
        assert_eq!(v.share_of(Limit::NetworkOrSender), 25.0);
        // Without an RTT nothing counts as window-limited.
        let mut n = RecvTally::default();
        n.sample(Duration::ZERO, 0, wnd, Duration::ZERO);
        n.sample(100 * MS, 10 * wnd, wnd, Duration::ZERO);
        assert_eq!(
            Verdict::of_receiver(&n).limit(),
            Some(Limit::NetworkOrSender)
        );
    }
}
