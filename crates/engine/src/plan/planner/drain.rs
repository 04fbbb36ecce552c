//! Sockets draining between samples (`PlanConfig::drain_at_rate`, off by
//! default), and a send's one-connection look ([`Planner::wants_read`]).
//!
//! With the drain on, a sample says how many bytes a connection's socket
//! holds and until the next one the planner takes them to leave at the
//! connection's smoothed rate: the time to starvation falls with the clock
//! and [`Planner::next_due`] tells the caller when the next read falls due
//! (one timer for all connections), so no sender has to wake to sample.
//! Measured in lab tpf-mixed-rates (session 15, README there): the sender
//! wake-ups fell 25k -> 5k per GiB, but reads came earlier than samples
//! would have brought them, their pages waited in the page cache while the
//! sockets were still full, and the 256 MiB memory cgroup filled (48 MB of
//! read-ahead evicted unsent, the 1 Mbit/s class at 79 %; with the drain
//! also taken off the memory counted against the budget, 56-59 %). What is
//! kept instead: the hub's tick samples every socket once a second
//! (`prefetch.rs`, `Hub::sample_all`), the information a sender's nap
//! used to bring, for one wake-up of the loop rather than one per sender
//! (s15-naps-D: 3.1k switches per GiB, both classes at 100 %).
//!
//! The memory counted against the budget is always the sampled count (sent
//! bytes added at once, drained only by a sample): a page the socket let go
//! stays in the page cache until it is dropped.

use std::time::Duration;

use super::{Conn, ConnId, Planner, PrefetchMode};

/// The earliest a due read wakes the caller after now: with hundreds of
/// connections due at scattered times, one wake-up plans all reads due in
/// this span (each comes at most this late against `T_n`'s trigger, a
/// fraction of a target of seconds).
pub const DUE_STEP: Duration = Duration::from_millis(250);

impl Planner {
    /// Bytes `c`'s socket has sent at its rate since its estimate was last
    /// set (a sample or a send).
    fn drained(&self, c: &Conn, now: Duration) -> u64 {
        if !self.cfg.drain_at_rate || !c.sampled {
            return 0;
        }
        let dt = now.saturating_sub(c.est_at).as_secs_f64();
        (self.rate_of(c) as f64 * dt) as u64
    }

    /// Unsent bytes in `c`'s socket at `now` as the planner estimates them.
    fn pending_at(&self, c: &Conn, now: Duration) -> u64 {
        c.est_pending.saturating_sub(self.drained(c, now))
    }

    /// Bytes handed to `conn`'s socket at `now`: the estimate drained so
    /// far is fixed, then grows by them (bytes sent after a sample drain
    /// from when they were sent, not from the sample).
    pub(super) fn add_to_estimate(&mut self, now: Duration, conn: ConnId, bytes: u64) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let gone = self.drained(c, now);
        let c = self.conns.get_mut(&conn).expect("looked up above");
        c.est_pending = c.est_pending.saturating_sub(gone) + bytes;
        c.est_socket = c.est_socket.saturating_sub(gone) + bytes;
        c.est_at = c.est_at.max(now);
    }

    /// `T_n` at `now`: buffered bytes (socket's estimate, cached, in
    /// flight) over the rate.
    pub(super) fn starvation_secs_at(&self, c: &Conn, now: Duration) -> f64 {
        (self.pending_at(c, now) + c.holding()) as f64 / self.rate_of(c) as f64
    }

    /// The window `c` keeps buffered at target `t` seconds, bytes and
    /// seconds: `T` at its rate, but at least one device-friendly read.
    pub(super) fn window_of(&self, c: &Conn, t: f64) -> (u64, f64) {
        let rate = self.rate_of(c) as f64;
        let window = ((t * rate) as u64).max(self.cfg.device_read);
        (window, window as f64 / rate)
    }

    /// Bytes in `conn`'s socket (unsent and unacknowledged) at `now` as
    /// estimated from its last sample and rate; `None` if it is not open.
    pub fn socket_estimate(&self, conn: ConnId, now: Duration) -> Option<u64> {
        let c = self.conns.get(&conn)?;
        Some(c.est_socket.saturating_sub(self.drained(c, now)))
    }

    /// Whether `conn` is open and has had a sample (a rate of its own).
    pub fn is_sampled(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.sampled)
    }

    /// Whether `conn` alone would get a read at `now`, judged with the
    /// target and aggregate rate of the last `poll_read` (one connection's
    /// look, not a pass over all). A send moves bytes from read-ahead to
    /// the socket: no time to starvation changes and no memory frees, but
    /// the sender's own share does (or, in `fixed` mode, its window); the
    /// caller pumps after a send only if this says so.
    pub fn wants_read(&self, conn: ConnId, now: Duration) -> bool {
        let Some(c) = self.conns.get(&conn).filter(|c| c.has_work()) else {
            return false;
        };
        let (target, net) = self.last_view;
        let tn = self.starvation_secs_at(c, now);
        self.size_for(c, tn, target, net) > 0
    }

    /// When a connection's next read falls due by its socket's drain alone,
    /// at least [`DUE_STEP`] after `now`: the caller polls again then.
    /// Connections already due (waiting for budget) or whose time to
    /// starvation waits on their sender (bytes read, not yet sent) are not
    /// counted: a completion, a send or a sample pumps for them.
    pub fn next_due(&self, now: Duration) -> Option<Duration> {
        if !self.cfg.drain_at_rate
            || !matches!(self.cfg.mode, PrefetchMode::Tcp | PrefetchMode::Auto)
        {
            return None;
        }
        let t = self.target().as_secs_f64();
        self.conns
            .values()
            .filter(|c| c.has_work() && c.holes.is_empty())
            .filter_map(|c| {
                let rate = self.rate_of(c) as f64;
                let (_, tw) = self.window_of(c, t);
                let ahead = self.starvation_secs_at(c, now) - tw * self.cfg.trigger;
                let pending = self.pending_at(c, now) as f64;
                (ahead > 0.0 && pending >= ahead * rate)
                    .then(|| now + Duration::from_secs_f64(ahead.min(1e6)))
            })
            .min()
            .map(|due| due.max(now + DUE_STEP))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PlanConfig, Planner};
    use super::*;
    use crate::plan::FlowSample;

    const RATE: u64 = 125_000; // 1 Mbit/s

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// One connection, rated, whose socket holds `notsent` unsent bytes at
    /// t = 0, on a planner with a fixed 4 s target.
    fn one(drain_at_rate: bool, notsent: u64) -> Planner {
        let mut p = Planner::new(PlanConfig {
            budget: 64 << 20,
            min_target: secs(4.0),
            initial_target: secs(4.0),
            drain_at_rate,
            ..PlanConfig::default()
        });
        p.handle_open(Duration::ZERO, ConnId(1), 0, 1 << 30);
        let s = FlowSample {
            delivery_rate: RATE,
            notsent_bytes: notsent,
            ..FlowSample::default()
        };
        p.handle_sample(Duration::ZERO, ConnId(1), &s);
        p
    }

    #[test]
    fn a_socket_drained_at_its_rate_brings_the_next_read_due_without_a_sample() {
        // 4 s of data in the socket: the trigger (half the 4 s window) is
        // 2 s away at the measured rate.
        let mut p = one(true, 4 * RATE);
        assert_eq!(p.poll_read(Duration::ZERO), None, "4 s buffered");
        let due = p.next_due(Duration::ZERO).expect("a due time");
        assert!((due.as_secs_f64() - 2.0).abs() < 0.01, "due at {due:?}");
        assert_eq!(p.poll_read(secs(1.9)), None, "not yet");
        let r = p
            .poll_read(due + secs(0.001))
            .expect("due by the drain alone");
        assert_eq!(r.offset, 0);
        // The read tops the window up to 4 s again; the next falls due
        // once the socket's 2 s left have drained, and the in-flight read
        // (2 s) counts as buffered.
        let next = p.next_due(due).expect("a next due time");
        assert!(
            (next.as_secs_f64() - 4.0).abs() < 0.01,
            "next due at {next:?}"
        );
    }

    #[test]
    fn without_the_drain_the_socket_counts_as_full_until_a_sample() {
        let mut p = one(false, 4 * RATE);
        assert_eq!(p.next_due(Duration::ZERO), None);
        assert_eq!(p.poll_read(secs(10.0)), None, "no sample, no read");
        let s = FlowSample {
            delivery_rate: RATE,
            ..FlowSample::default()
        };
        p.handle_sample(secs(10.0), ConnId(1), &s);
        assert!(p.poll_read(secs(10.0)).is_some(), "the sample shows it dry");
    }

    #[test]
    fn a_due_time_is_never_sooner_than_one_step_away() {
        // 2.1 s buffered: due 0.1 s from now, woken at DUE_STEP.
        let p = one(true, 2 * RATE + RATE / 10);
        assert_eq!(p.next_due(Duration::ZERO), Some(DUE_STEP));
    }

    #[test]
    fn the_socket_estimate_falls_at_the_rate_and_stops_at_empty() {
        let mut p = one(true, RATE);
        assert_eq!(p.socket_estimate(ConnId(1), Duration::ZERO), Some(RATE));
        assert_eq!(p.socket_estimate(ConnId(1), secs(0.5)), Some(RATE / 2));
        assert_eq!(p.socket_estimate(ConnId(1), secs(3.0)), Some(0));
        // Bytes handed to the socket after the sample drain from when they
        // were sent.
        p.handle_sent_at(secs(3.0), ConnId(1), 1000);
        assert_eq!(p.socket_estimate(ConnId(1), secs(3.0)), Some(1000));
        assert_eq!(p.socket_estimate(ConnId(1), secs(3.004)), Some(500));
        assert_eq!(p.socket_estimate(ConnId(2), Duration::ZERO), None);
    }

    #[test]
    fn a_send_asks_for_a_pump_only_when_it_frees_the_senders_own_share() {
        // A 1 MiB budget, one connection: its first read takes its share.
        let mut p = Planner::new(PlanConfig {
            budget: 1 << 20,
            min_target: secs(20.0),
            initial_target: secs(20.0),
            ..PlanConfig::default()
        });
        let t = Duration::ZERO;
        p.handle_open(t, ConnId(1), 0, 1 << 30);
        let r = p.poll_read(t).expect("a first read");
        assert_eq!(p.poll_read(t), None);
        p.handle_read_done(t, &r, r.len, secs(0.01));
        assert!(!p.wants_read(ConnId(1), t), "its share is held");
        // Sent: the memory is in the socket now (counted against the
        // budget only with `count_socket`, off here) and the share is
        // free, but the socket holds the bytes: not due yet.
        p.handle_sent_at(t, ConnId(1), r.len);
        assert!(!p.wants_read(ConnId(1), t));
        assert_eq!(p.poll_read(t), None, "and the pump finds the same");
        // Once the socket has drained (the initial rate) it is.
        let later = secs(r.len as f64 / PlanConfig::default().initial_rate as f64);
        p.handle_sample(later, ConnId(1), &FlowSample::default());
        assert!(p.wants_read(ConnId(1), later));
        assert!(p.poll_read(later).is_some(), "and the pump finds the same");
        assert!(!p.wants_read(ConnId(9), t), "unknown");
    }
}
