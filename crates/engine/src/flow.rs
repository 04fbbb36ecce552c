//! [`Flow`]: a connection's one reader of `TCP_INFO`.
//!
//! Two parts of a sender learn from the kernel's view of its connection:
//! the rate-sized `TCP_NOTSENT_LOWAT` mark (`refill.rs`) and the prefetch
//! planner's flow samples (`prefetch/feed.rs`). Both look after the same
//! wake-up, and each used to make its own `getsockopt(TCP_INFO)` there.
//! They now ask the connection's `Flow`, which reads the socket once and
//! hands the same reading to whoever asks within [`SAME_WAKE`]. The flow
//! lives as long as the connection ([`crate::DataConn`]); later consumers
//! (buffer sizing, pacing, the end-of-transfer diagnosis) read it too.
//!
//! DRS's sampler (`conn.rs`, `drs_during`) takes its `TCP_INFO` from the
//! flow as well, so a slow reader's wake-up (DRS due and the refill's rate
//! span gone, every wake-up at a few seconds apart) reads the socket once,
//! not twice. The flow also remembers the `TCP_NOTSENT_LOWAT` the engine
//! last set on the socket ([`Flow::set_mark`]), so DRS's ceiling check does
//! not read it back with a `getsockopt` per sample.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_platform::tcp::{self, TcpInfo};
use tokio::net::TcpStream;

/// A reading this young is the same wake-up's: the consumers' rate spans
/// are 20 ms and more, so a reading taken microseconds earlier serves them
/// as well as a new one.
pub(crate) const SAME_WAKE: Duration = Duration::from_millis(1);

/// Rate state handed from one send to the next on the same connection, so
/// a piece does not start over from the planner's initial rate and a fresh
/// measuring interval.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Carry {
    /// The last rate measured (bytes/s).
    pub(crate) rate: Option<u64>,
    /// `tcpi_bytes_acked` and when it was read.
    pub(crate) anchor: Option<(u64, Instant)>,
    /// When the feed that measured it ended.
    pub(crate) at: Instant,
}

/// The refill's mark and rate anchor handed from one send to the next on
/// the same connection (`refill.rs`): a piece (a shared 1 MiB block, a
/// MODE E block, a keep-alive response) starts from the mark the last one
/// measured instead of guessing one from the kernel's delivery-rate sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefillCarry {
    /// The mark the refill last set on the socket.
    pub(crate) mark: u64,
    /// `tcpi_bytes_acked` and when it was read.
    pub(crate) anchor: Option<(u64, Instant)>,
    /// The rate's measuring span (two round trips, bounded).
    pub(crate) span: Duration,
    /// When the send that kept it ended.
    pub(crate) at: Instant,
}

/// The connection's `TCP_INFO`, read at most once per wake-up.
#[derive(Debug)]
pub(crate) struct Flow {
    last: Mutex<Option<(Instant, TcpInfo)>>,
    /// What the planner's last feed on this connection measured, for the
    /// next one (front doors send a stream in pieces: MODE S 64 MiB
    /// pieces, MODE E one block per send, HTTP one response per request).
    carry: Mutex<Option<Carry>>,
    /// What the refill of the connection's last send measured.
    refill: Mutex<Option<RefillCarry>>,
    /// `getsockopt(TCP_INFO)` calls made (for tests and counters).
    reads: AtomicU64,
    /// Ceiling of the not-sent mark set by the send side's DRS from its
    /// BDP estimate (`drs_socket::notsent_mark`); 0: none.
    pub(crate) mark_cap: Arc<AtomicU64>,
    /// The `TCP_NOTSENT_LOWAT` the engine last set on the socket, or
    /// [`MARK_UNKNOWN`]: every setter goes through [`Flow::set_mark`].
    pub(crate) mark_now: Arc<AtomicU64>,
}

/// [`Flow::mark_now`] before the engine has set a mark it knows of.
pub(crate) const MARK_UNKNOWN: u64 = u64::MAX;

impl Default for Flow {
    fn default() -> Flow {
        Flow {
            last: Mutex::default(),
            carry: Mutex::default(),
            refill: Mutex::default(),
            reads: AtomicU64::default(),
            mark_cap: Arc::default(),
            mark_now: Arc::new(AtomicU64::new(MARK_UNKNOWN)),
        }
    }
}

impl Flow {
    pub(crate) fn new() -> Flow {
        Flow::default()
    }

    /// Sets the socket's `TCP_NOTSENT_LOWAT` and remembers it.
    pub(crate) fn set_mark(&self, conn: &TcpStream, mark: u32) -> std::io::Result<()> {
        let r = tcp::set_notsent_lowat(conn.as_fd(), mark);
        self.mark_now.store(
            if r.is_ok() {
                u64::from(mark)
            } else {
                MARK_UNKNOWN
            },
            Relaxed,
        );
        r
    }

    /// Records a mark set on the socket before the flow existed
    /// (`prepare_socket`).
    pub(crate) fn mark_was_set(&self, mark: u32) {
        self.mark_now.store(u64::from(mark), Relaxed);
    }

    /// The socket's `TCP_INFO` and when it was read: the last reading if it
    /// is younger than [`SAME_WAKE`], else a new one. `None` when the socket
    /// is not TCP (tests on other sockets).
    pub(crate) fn info(&self, conn: &TcpStream) -> Option<(Instant, TcpInfo)> {
        self.info_at(conn, Instant::now())
    }

    /// [`Flow::info`] as of `now` (tests pass their own clock).
    fn info_at(&self, conn: &TcpStream, now: Instant) -> Option<(Instant, TcpInfo)> {
        // Only this connection's sender asks, so the lock is never contended.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, info)) = *last {
            if now.duration_since(at) < SAME_WAKE {
                return Some((at, info));
            }
        }
        self.reads.fetch_add(1, Relaxed);
        let info = tcp::tcp_info(conn.as_fd()).ok()?;
        *last = Some((now, info));
        Some((now, info))
    }

    /// The planner's rate state left by the connection's last feed.
    pub(crate) fn take_carry(&self) -> Option<Carry> {
        self.carry.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Keeps the planner's rate state for the connection's next feed.
    pub(crate) fn keep_carry(&self, carry: Carry) {
        *self.carry.lock().unwrap_or_else(|p| p.into_inner()) = Some(carry);
    }

    /// The refill state left by the connection's last send.
    pub(crate) fn take_refill(&self) -> Option<RefillCarry> {
        self.refill.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Keeps the refill state for the connection's next send.
    pub(crate) fn keep_refill(&self, carry: RefillCarry) {
        *self.refill.lock().unwrap_or_else(|p| p.into_inner()) = Some(carry);
    }

    /// `TCP_INFO` reads so far.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::pair;

    #[tokio::test]
    async fn one_read_serves_every_consumer_of_a_wake_up() {
        let (tx, _rx) = pair().await;
        let flow = Flow::new();
        // The clock is the test's: no assertion depends on how fast the
        // machine runs the calls.
        let t0 = Instant::now();
        let (a, first) = flow.info_at(&tx, t0).unwrap();
        let (b, second) = flow.info_at(&tx, t0 + SAME_WAKE / 2).unwrap();
        // The second consumer of the same moment got the same reading.
        assert_eq!((a, first), (b, second));
        assert_eq!(flow.reads(), 1);
        // A later wake-up reads again (the reading has aged past SAME_WAKE).
        let (c, _) = flow.info_at(&tx, t0 + SAME_WAKE).unwrap();
        assert!(c > a);
        assert_eq!(flow.reads(), 2);
    }
}
