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
//! `notsent_lowat`, and at most an equal share of a budget of half the
//! kernel's no-pressure TCP memory (`tcp_mem[0]`) among the connections
//! sending. The rate is bytes acknowledged per second since the last
//! measurement, taken at a wake-up at least two round trips later (one
//! `TCP_INFO` call, only on a wake-up: no timer). A new connection starts
//! at [`START_MARK`] until it has a rate; a fast one gets it within a few
//! wake-ups (measured: with a 250 ms span, 20 loopback streams woke ~150
//! times each at the start mark, 9x the wake-ups per GiB of a fixed mark).

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sluice_platform::tcp;
use tokio::net::TcpStream;

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
/// Budget when `tcp_mem` cannot be read.
const FALLBACK_BUDGET: u64 = 256 << 20;
/// A new mark is applied only when it differs from the old by more than
/// this fraction (one `setsockopt` less on most wake-ups).
const HYSTERESIS: f64 = 0.25;

/// Connections currently sending with rate-sized marks (engine-wide).
#[derive(Debug, Default)]
pub(crate) struct Senders(AtomicU64);

/// One connection's mark while its send runs; leaves the count on drop.
pub(crate) struct Refill<'a> {
    senders: &'a Senders,
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
    pub(crate) fn refill(&self, conn: &TcpStream) -> Option<Refill<'_>> {
        let cfg = self.config();
        let time = cfg.refill_time?;
        let cap = u64::from(cfg.notsent_lowat?);
        if !self.features().notsent_lowat.is_supported() {
            return None;
        }
        let senders = &self.inner.senders;
        senders.0.fetch_add(1, Relaxed);
        let mut r = Refill {
            senders,
            time,
            cap,
            mark: 0,
            anchor: None,
            span: RATE_SPAN_MAX,
            last_wake: Instant::now(),
            written: 0,
        };
        r.apply(conn, r.bounded(START_MARK));
        r.measure(conn);
        Some(r)
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
            if want as f64 > self.mark as f64 * (1.0 + HYSTERESIS) {
                self.apply(conn, want);
            }
            return;
        }
        self.measure(conn);
    }

    fn measure(&mut self, conn: &TcpStream) {
        let now = Instant::now();
        let Ok(info) = tcp::tcp_info(conn.as_fd()) else {
            return;
        };
        self.span =
            (2 * Duration::from_micros(u64::from(info.rtt_us))).clamp(RATE_SPAN_MIN, RATE_SPAN_MAX);
        if let Some((acked, at)) = self.anchor {
            let dt = now.duration_since(at).as_secs_f64();
            let rate = info.bytes_acked.saturating_sub(acked) as f64 / dt;
            let want = mark_for(rate, self.time);
            let want = self.bounded(want);
            let diff = (want as f64 - self.mark as f64).abs();
            if diff > self.mark as f64 * HYSTERESIS {
                self.apply(conn, want);
            }
        }
        self.anchor = Some((info.bytes_acked, now));
    }

    /// Counts bytes written into the socket (for the floor in `woke`).
    pub(crate) fn wrote(&mut self, n: u64) {
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
        want.min(self.cap).min(share).max(MIN_MARK.min(self.cap))
    }

    fn apply(&mut self, conn: &TcpStream, mark: u64) {
        let m = mark.min(u64::from(u32::MAX)) as u32;
        match tcp::set_notsent_lowat(conn.as_fd(), m) {
            Ok(()) => self.mark = mark,
            Err(e) => tracing::debug!("TCP_NOTSENT_LOWAT refused: {e}"),
        }
    }
}

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        self.senders.0.fetch_sub(1, Relaxed);
    }
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

/// Half of `tcp_mem[0]` in bytes, read once: the host's TCP memory below
/// which the kernel applies no pressure; half, for the receive side and
/// everything else on the host.
fn budget() -> u64 {
    static BUDGET: OnceLock<u64> = OnceLock::new();
    *BUDGET.get_or_init(|| match tcp::tcp_mem_pages() {
        Ok(p) => p[0].saturating_mul(sluice_platform::fadvise::page_size() as u64) / 2,
        Err(e) => {
            tracing::debug!("cannot read tcp_mem: {e}");
            FALLBACK_BUDGET
        }
    })
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
        let r = e.refill(&tx).unwrap();
        assert_eq!(e.inner.senders.0.load(Relaxed), 1);
        let start = r.mark();
        assert!((MIN_MARK..=START_MARK).contains(&start), "{start}");
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
        assert!(fixed.refill(&tx).is_none());
    }
}
