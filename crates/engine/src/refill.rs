//! Rate-sized `TCP_NOTSENT_LOWAT`: few wake-ups per GiB without holding
//! more kernel memory than the connection's rate needs.
//!
//! With a mark `L`, the kernel wakes a waiting sender once unsent data is
//! below `L/2`, and a refill stops at `L`: each wake-up moves about `L/2`.
//! A fixed large mark (8 MiB) is right for a fast stream and wrong for a
//! thousand slow ones: 300 readers at 1 Mbit/s each kept ~5 MiB queued,
//! the host went over `tcp_mem` pressure, and there a socket keeps
//! reporting writable while refusing data, so senders woke several times a
//! second for nothing (lab send-wakeups: 35-47k wake-ups per GiB).
//!
//! So each connection's mark is `2 x rate x refill_time` (one wake-up per
//! `refill_time`), at least [`MIN_MARK`], at most the configured
//! `notsent_lowat`, and at most an equal share of a budget of 3/4 of the
//! kernel's no-pressure TCP memory (`tcp_mem[0]`) among the connections
//! sending. The rate is bytes acknowledged per second since the last
//! measurement, taken at a wake-up at least two round trips later (one
//! `TCP_INFO` call, only on a wake-up: no timer); the first wake-up of a
//! send takes the kernel's latest delivery-rate sample instead. A new
//! connection starts at [`START_MARK`] (`prepare_socket`); after that the
//! mark lives on the socket, so a connection that sends in pieces (MODE S
//! pieces, MODE E blocks, keep-alive requests) keeps its mark, and a send
//! that never waits makes no system call for it (measured: resetting the
//! mark at each 64 MiB piece cost a 2 GiB loopback download ~35 % of its
//! rate and 6x its context switches).
//!
//! The refill's own state (the mark it set, the acked-bytes anchor of its
//! rate, the span) is carried on the connection's [`Flow`] from one send
//! to the next ([`RefillCarry`]). Without it each shared 1 MiB piece of a
//! slow in-order reader started blind: its first wake-up took the kernel's
//! delivery-rate sample (low and bursty for a receiver that paces itself)
//! and set the mark from it, and a measured rate came only two round trips
//! later, so the lab's 1000 slow readers sat at 300-430 kB marks where
//! their share allowed ~590 kB (send-wakeups s12-final, `ss` samples).

#[cfg(test)]
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sluice_platform::tcp;
use tokio::net::TcpStream;

use crate::flow::{Flow, RefillCarry};
use crate::Engine;

/// Smallest mark: below this the per-wake-up work is tiny anyway.
pub(crate) const MIN_MARK: u64 = 128 << 10;
/// Mark of a connection without a measured rate yet.
pub(crate) const START_MARK: u64 = 1 << 20;
/// Shortest span over which a rate is measured: two round trips (acks
/// come in window-sized steps), at least this.
const RATE_SPAN_MIN: Duration = Duration::from_millis(20);
/// ... and at most this, whatever the round trip.
const RATE_SPAN_MAX: Duration = Duration::from_millis(500);
/// Budget when neither `tcp_mem` nor the memory size can be read.
const FALLBACK_BUDGET: u64 = 256 << 20;
/// A new mark is applied only when it differs from the old by more than
/// this fraction (one `setsockopt` less on most wake-ups).
const HYSTERESIS: f64 = 0.25;
/// A rate anchor carried over a pause between two sends longer than this
/// is dropped: the socket may have run empty meanwhile, and the bytes
/// acked since would understate the rate. (A slow reader's socket holds
/// seconds of data at its mark, so a pause this short never empties it.)
const CARRY_GAP: Duration = RATE_SPAN_MAX;

/// Connections currently sending with rate-sized marks (engine-wide).
#[derive(Debug, Default)]
pub(crate) struct Senders(AtomicU64);

/// One connection's mark while its send runs; leaves the count on drop.
pub(crate) struct Refill<'a> {
    senders: &'a Senders,
    /// The connection's `TCP_INFO` reader, shared with the planner's feed.
    flow: &'a Flow,
    time: Duration,
    cap: u64,
    mark: u64,
    anchor: Option<(u64, Instant)>,
    span: Duration,
    /// When the sender last woke (or started), and bytes written since.
    last_wake: Instant,
    written: u64,
}

impl Engine {
    /// Starts rate-sizing `conn`'s mark, if configured and supported.
    pub(crate) fn refill<'a>(&'a self, flow: &'a Flow) -> Option<Refill<'a>> {
        let cfg = self.config();
        let time = cfg.refill_time?;
        let cap = u64::from(cfg.notsent_lowat?);
        if !self.features().notsent_lowat.is_supported() {
            return None;
        }
        let senders = &self.inner.senders;
        senders.0.fetch_add(1, Relaxed);
        // No system call here: a response that fits the socket without a
        // wait (a small file on a keep-alive connection) costs nothing, and
        // a connection sending in pieces (MODE S pieces, MODE E blocks)
        // keeps the mark its last piece left on the socket, and what its
        // last piece measured.
        let now = Instant::now();
        let (mark, anchor, span) = resume(flow.take_refill(), flow.mark_cap.load(Relaxed), now);
        Some(Refill {
            senders,
            flow,
            time,
            cap,
            mark,
            anchor,
            span,
            last_wake: now,
            written: 0,
        })
    }

    /// The mark a fresh connection starts with when marks are rate-sized
    /// (`prepare_socket`), else None.
    pub(crate) fn start_mark(&self) -> Option<u32> {
        let cfg = self.config();
        cfg.refill_time?;
        Some(cfg.notsent_lowat?.min(START_MARK as u32))
    }
}

impl Refill<'_> {
    /// After a wake-up: measures the rate and resizes the mark.
    pub(crate) fn woke(&mut self, conn: &TcpStream) {
        let now = Instant::now();
        let since = now.duration_since(std::mem::replace(&mut self.last_wake, now));
        let written = std::mem::take(&mut self.written);
        if self.anchor.is_some_and(|(_, at)| at.elapsed() < self.span) {
            // Too early for a rate from TCP_INFO, but what was written
            // between two wake-ups has left the unsent queue: a floor of
            // the rate that costs no system call, enough to grow a fast
            // connection's mark at once (measured: the 1 MiB start mark's
            // first 20 ms were ~40 % of a 2 GiB loopback download's context
            // switches). A wake-up that finds no room (tcp_mem pressure)
            // wrote nothing and grows nothing.
            let want = self.bounded(mark_for(rate_floor(written, since), self.time));
            if self.mark > 0 && want as f64 > self.mark as f64 * (1.0 + HYSTERESIS) {
                self.apply(conn, want);
            }
            return;
        }
        self.measure(conn);
    }

    fn measure(&mut self, conn: &TcpStream) {
        let Some((now, info)) = self.flow.info(conn) else {
            return;
        };
        self.span =
            (2 * Duration::from_micros(u64::from(info.rtt_us))).clamp(RATE_SPAN_MIN, RATE_SPAN_MAX);
        let rate = match self.anchor {
            Some((acked, at)) => {
                let dt = now.duration_since(at).as_secs_f64();
                Some(info.bytes_acked.saturating_sub(acked) as f64 / dt)
            }
            // A mark carried from the connection's last send stands until
            // this send has measured a rate of its own.
            None if self.mark > 0 => None,
            // First look on this connection: the kernel's latest
            // delivery-rate sample, if it has one yet (no acks yet: keep
            // the mark).
            None => (info.delivery_rate > 0).then_some(info.delivery_rate as f64),
        };
        if let Some(rate) = rate {
            let want = self.bounded(mark_for(rate, self.time));
            // 0: the mark on the socket is not known (set by an earlier send).
            let diff = (want as f64 - self.mark as f64).abs();
            if self.mark == 0 || diff > self.mark as f64 * HYSTERESIS {
                self.apply(conn, want);
            }
        }
        self.anchor = Some((info.bytes_acked, now));
    }

    /// After a write of `n` bytes that had to wait for room (`waited`)
    /// or not: a wait ends in a wake-up, and the bytes count towards the
    /// rate floor of the next one.
    pub(crate) fn wrote(&mut self, conn: &TcpStream, n: u64, waited: bool) {
        if waited {
            self.woke(conn);
        }
        self.written += n;
    }

    /// The mark in force.
    #[cfg(test)]
    pub(crate) fn mark(&self) -> u64 {
        self.mark
    }

    fn bounded(&self, want: u64) -> u64 {
        let n = self.senders.0.load(Relaxed).max(1);
        let share = budget() / n;
        // DRS's ceiling from the path's BDP (0: none), else the rate's mark.
        let drs = match self.flow.mark_cap.load(Relaxed) {
            0 => u64::MAX,
            c => c,
        };
        want.min(self.cap)
            .min(share)
            .min(drs)
            .max(MIN_MARK.min(self.cap))
    }

    fn apply(&mut self, conn: &TcpStream, mark: u64) {
        let m = mark.min(u64::from(u32::MAX)) as u32;
        match self.flow.set_mark(conn, m) {
            Ok(()) => {
                tracing::trace!(from = self.mark, to = mark, "NOTSENT_LOWAT mark");
                self.mark = mark
            }
            Err(e) => tracing::debug!("TCP_NOTSENT_LOWAT refused: {e}"),
        }
    }
}

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        self.senders.0.fetch_sub(1, Relaxed);
        self.flow.keep_refill(RefillCarry {
            mark: self.mark,
            anchor: self.anchor,
            span: self.span,
            at: Instant::now(),
        });
    }
}

/// A send's starting mark, rate anchor and span from what the connection's
/// last send left (`carried`), `now`. The mark is what that send set,
/// under DRS's ceiling `drs_cap` (0: none): DRS lowers a socket's mark
/// above its ceiling itself (`drs_socket::cap_mark`). 0: not known.
fn resume(
    carried: Option<RefillCarry>,
    drs_cap: u64,
    now: Instant,
) -> (u64, Option<(u64, Instant)>, Duration) {
    let Some(c) = carried else {
        return (0, None, RATE_SPAN_MAX);
    };
    let mark = match drs_cap {
        0 => c.mark,
        cap => c.mark.min(cap),
    };
    let anchor = c
        .anchor
        .filter(|_| now.saturating_duration_since(c.at) < CARRY_GAP);
    (mark, anchor, c.span)
}

/// Bytes per second that `written` bytes in `since` prove at least.
fn rate_floor(written: u64, since: Duration) -> f64 {
    written as f64 / since.as_secs_f64().max(1e-6)
}

/// `2 x rate x time`: the kernel wakes at half the mark, so one wake-up
/// per `time` at this rate.
fn mark_for(rate: f64, time: Duration) -> u64 {
    (2.0 * rate * time.as_secs_f64()).min(u64::MAX as f64 / 2.0) as u64
}

/// Three quarters of `tcp_mem[0]` in bytes, read once: the host's TCP
/// memory below which the kernel applies no pressure. A socket's unsent
/// data lies between half its mark and its mark (the kernel wakes the
/// sender at half), ~3/4 of it on average, so marks summing to this keep
/// ~56 % of that memory unsent on average and never all of it: the rest
/// for data in flight, the receive side and everything else on the host.
fn budget() -> u64 {
    static BUDGET: OnceLock<u64> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let page = sluice_platform::fadvise::page_size() as u64;
        let pages = match tcp::tcp_mem_pages() {
            Ok(p) => Some(p[0]),
            // `tcp_mem` is host-wide and shown only in the host's network
            // namespace: a server in another (the lab's, a container's)
            // cannot read it, and the 256 MiB fallback gave the lab's
            // 1000 slow readers 268 kB marks whatever their rate (a
            // wake-up per ~160 kB, send-wakeups s12/s13). The kernel's own
            // default is a fixed share of the memory, which it can read.
            Err(e) => {
                tracing::debug!("cannot read tcp_mem ({e}); taking the kernel's default");
                std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|m| default_tcp_mem0(&m, page))
            }
        };
        match pages {
            Some(p) => p.saturating_mul(page) / 4 * 3,
            None => FALLBACK_BUDGET,
        }
    })
}

/// The kernel's default `tcp_mem[0]` in pages for a machine whose
/// `/proc/meminfo` is `meminfo` (`tcp_init`: a sixteenth of the buffer
/// pages is `tcp_mem[1]`, three quarters of that `tcp_mem[0]`; the buffer
/// pages are about `MemTotal`).
fn default_tcp_mem0(meminfo: &str, page: u64) -> Option<u64> {
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let limit = (kb * 1024 / page.max(1) / 16).max(128);
    Some(limit / 4 * 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::pair;
    use crate::EngineConfig;

    #[test]
    fn the_mark_covers_the_refill_time_twice() {
        assert_eq!(mark_for(125_000.0, Duration::from_secs(4)), 1_000_000);
        assert_eq!(mark_for(0.0, Duration::from_secs(4)), 0);
    }

    #[test]
    fn an_early_wake_up_proves_a_rate_floor() {
        // 4 MiB between two wake-ups 2 ms apart: at least 2 GiB/s.
        let r = rate_floor(4 << 20, Duration::from_millis(2));
        assert!((r - 2097152000.0).abs() < 1.0, "{r}");
        // A wake-up that wrote nothing (tcp_mem pressure) proves nothing.
        assert_eq!(rate_floor(0, Duration::from_millis(2)), 0.0);
        assert!(rate_floor(1, Duration::ZERO).is_finite());
    }

    #[tokio::test]
    async fn marks_start_small_stay_bounded_and_leave_the_count() {
        let e = Engine::new(EngineConfig::default());
        let (tx, _rx) = pair().await;
        if !e.features().notsent_lowat.is_supported() {
            return;
        }
        e.prepare_socket(&tx);
        let start = u64::from(tcp::notsent_lowat(tx.as_fd()).unwrap());
        assert!((MIN_MARK..=START_MARK).contains(&start), "{start}");
        let flow = Flow::new();
        let r = e.refill(&flow).unwrap();
        assert_eq!(e.inner.senders.0.load(Relaxed), 1);
        // Starting a send leaves the socket's mark alone.
        assert_eq!(r.mark(), 0);
        assert_eq!(u64::from(tcp::notsent_lowat(tx.as_fd()).unwrap()), start);
        // Far above the configured ceiling: capped by it (or by the share).
        assert!(r.bounded(u64::MAX) <= 8 << 20);
        assert_eq!(r.bounded(1), MIN_MARK);
        drop(r);
        assert_eq!(e.inner.senders.0.load(Relaxed), 0);
        let fixed = Engine::new(EngineConfig {
            refill_time: None,
            ..EngineConfig::default()
        });
        assert!(fixed.refill(&flow).is_none());
        fixed.prepare_socket(&tx);
        assert_eq!(tcp::notsent_lowat(tx.as_fd()).unwrap(), 8 << 20);
    }

    #[test]
    fn the_budget_is_found_outside_the_hosts_network_namespace_too() {
        // This machine: MemTotal 24684084 kB, tcp_mem[0] 287898 pages.
        let m = "MemTotal:       24684084 kB\nMemFree:        21681568 kB\n";
        let p = default_tcp_mem0(m, 4096).unwrap();
        assert!((280_000..=295_000).contains(&p), "{p}");
        assert_eq!(default_tcp_mem0("MemFree: 1 kB\n", 4096), None);
        assert_eq!(default_tcp_mem0("MemTotal: 4 kB\n", 4096), Some(96));
        assert!(budget() > FALLBACK_BUDGET / 8);
    }

    #[test]
    fn a_send_resumes_the_mark_and_rate_of_the_last_one() {
        let t0 = Instant::now();
        let span = Duration::from_millis(200);
        let carry = |mark, at| RefillCarry {
            mark,
            anchor: Some((5_000_000, t0)),
            span,
            at,
        };
        // A fresh connection: nothing known.
        assert_eq!(resume(None, 0, t0), (0, None, RATE_SPAN_MAX));
        // The next piece right after: the mark, the anchor and the span.
        let at = t0 + Duration::from_secs(3);
        assert_eq!(
            resume(Some(carry(590_000, at)), 0, at + Duration::from_millis(1)),
            (590_000, Some((5_000_000, t0)), span)
        );
        // DRS's ceiling fell under the mark meanwhile: the socket has it.
        assert_eq!(resume(Some(carry(590_000, at)), 400_000, at).0, 400_000);
        // After a pause the anchor is dropped (the socket may have run
        // empty) but the mark on the socket is still known.
        let (mark, anchor, _) = resume(Some(carry(590_000, at)), 0, at + CARRY_GAP);
        assert_eq!((mark, anchor), (590_000, None));
    }

    #[tokio::test]
    async fn the_next_send_on_a_connection_starts_from_the_last_mark() {
        let e = Engine::new(EngineConfig::default());
        let (tx, _rx) = pair().await;
        if !e.features().notsent_lowat.is_supported() {
            return;
        }
        e.prepare_socket(&tx);
        let flow = Flow::new();
        let mut r = e.refill(&flow).unwrap();
        r.apply(&tx, 300_000);
        drop(r);
        let r = e.refill(&flow).unwrap();
        assert_eq!(r.mark(), 300_000);
        assert_eq!(tcp::notsent_lowat(tx.as_fd()).unwrap(), 300_000);
    }

    #[test]
    fn drs_caps_the_mark_at_its_bdp_share() {
        let e = Engine::new(EngineConfig::default());
        let flow = Flow::new();
        let Some(r) = e.refill(&flow) else {
            return;
        };
        assert!(r.bounded(u64::MAX) > 300_000);
        // DRS published half a 0.6 MB BDP: no mark above it.
        flow.mark_cap.store(300_000, Relaxed);
        assert_eq!(r.bounded(u64::MAX), 300_000);
        assert_eq!(r.bounded(200_000), 200_000);
    }

    #[tokio::test]
    async fn a_wake_up_sizes_the_mark_from_the_measured_rate() {
        let e = Engine::new(EngineConfig::default());
        let (tx, mut rx) = pair().await;
        if !e.features().notsent_lowat.is_supported() {
            return;
        }
        e.prepare_socket(&tx);
        // Some acknowledged data, so the kernel has a delivery-rate sample.
        let data = vec![7u8; 1 << 20];
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < 1 << 20 {
                got += rx.read(&mut buf).await.unwrap();
            }
        });
        let mut sent = 0;
        while sent < data.len() {
            tx.writable().await.unwrap();
            if let Ok(n) = tx.try_write(&data[sent..]) {
                sent += n;
            }
        }
        reader.await.unwrap();
        let flow = Flow::new();
        let mut r = e.refill(&flow).unwrap();
        r.woke(&tx);
        // Whatever the rate, a sized mark is within the bounds and on the socket.
        let m = r.mark();
        assert!((MIN_MARK..=8 << 20).contains(&m), "{m}");
        assert_eq!(u64::from(tcp::notsent_lowat(tx.as_fd()).unwrap()), m);
    }
}
