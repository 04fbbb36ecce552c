//! The planner and the scheduler joined: the one object the engine's data
//! path drives. It routes flow events (close/reset -> cancel, cwnd cut ->
//! delay for `T / 2`) and read completions (scheduler slot freed, planner
//! budget moved from in-flight to cached) so callers cannot wire them apart.

use std::time::Duration;

use super::{Completion, ReqId, SchedConfig, Scheduler, Submission};
use crate::plan::{ConnId, FlowSample, FlowState, PlanConfig, Planner, TpfCounters};

/// Planner + scheduler. Inputs are `handle_*`, outputs `poll_*`; after any
/// input, drain `poll_cancel` then `poll_submit`, and wake at `poll_timeout`.
#[derive(Debug)]
pub struct Prefetcher {
    planner: Planner,
    sched: Scheduler,
    /// Reads that ran on the disk after their connection was gone.
    after_close: TpfCounters,
}

impl Prefetcher {
    /// A prefetcher with no connections.
    pub fn new(plan: PlanConfig, sched: SchedConfig) -> Prefetcher {
        Prefetcher {
            planner: Planner::new(plan),
            sched: Scheduler::new(sched),
            after_close: TpfCounters::default(),
        }
    }

    /// The planner (read-only: targets, holdings, counters).
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// The scheduler (read-only: queue lengths, counters).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// A connection starts delivering `start..end` of its file.
    pub fn handle_open(&mut self, now: Duration, conn: ConnId, start: u64, end: u64) {
        // A reused id must not inherit queued reads of its previous life.
        self.sched.handle_conn_gone(conn);
        self.planner.handle_open(now, conn, start, end);
    }

    /// A flow sample; acts on its events before returning them.
    pub fn handle_sample(&mut self, now: Duration, conn: ConnId, s: &FlowSample) -> FlowState {
        let st = self.planner.handle_sample(now, conn, s);
        if st.events.is_gone() {
            self.sched.handle_conn_gone(conn);
        } else if st.events.cwnd_cut {
            let half = self.planner.target() / 2;
            self.sched.handle_cwnd_cut(now, conn, half);
        }
        st
    }

    /// `bytes` of `conn`'s read-ahead went into its socket. Returns whether
    /// `poll_submit` may now find a read for it (`Planner::wants_read`):
    /// nothing else a send changes makes a read due.
    pub fn handle_sent(&mut self, now: Duration, conn: ConnId, bytes: u64) -> bool {
        self.planner.handle_sent_at(now, conn, bytes);
        self.planner.wants_read(conn, now)
    }

    /// The cache dropped unsent read-ahead of `conn`.
    pub fn handle_evicted(&mut self, conn: ConnId, offset: u64, len: u64) {
        self.planner.handle_evicted(conn, offset, len);
    }

    /// Read-ahead of `conn` was found evicted as it was about to be sent
    /// (it is sent anyway): shrink the budget in use.
    pub fn handle_pressure(&mut self, now: Duration, conn: ConnId, bytes: u64) {
        self.planner.handle_pressure(now, conn, bytes);
    }

    /// The memory the read-ahead budget may use (bytes) changed.
    pub fn set_budget(&mut self, budget: u64) {
        self.planner.set_budget(budget);
    }

    /// The transfer on `conn` ended (done, aborted or failed): cancel its
    /// reads and free its budget now. Returns its counters.
    pub fn handle_close(&mut self, conn: ConnId) -> TpfCounters {
        let mut c = self.planner.handle_close(conn).unwrap_or_default();
        self.sched.handle_conn_gone(conn);
        c += self.sched.take_conn_counters(conn);
        c
    }

    /// A submitted read finished with `bytes_read` bytes (0 on error or for
    /// one cancelled in the kernel). `cancelled` in the result means the
    /// bytes are unwanted: drop them. A cancelled read that still brought
    /// bytes in reached the disk after its connection was gone and is
    /// counted in `reads_after_close`.
    pub fn handle_complete(
        &mut self,
        now: Duration,
        id: ReqId,
        bytes_read: u64,
    ) -> Option<Completion> {
        let c = self.sched.handle_complete(now, id)?;
        if c.cancelled && bytes_read > 0 {
            self.after_close.reads_after_close += 1;
            self.after_close.bytes_after_close += bytes_read;
        }
        // A cancelled read's connection is gone (its budget already freed),
        // and its time says nothing about the disk if the kernel dropped it.
        if !c.cancelled {
            self.planner
                .handle_read_done(now, &c.req, bytes_read, c.service_time);
        }
        Some(c)
    }

    /// The next read to hand to the kernel (new plans are queued first).
    #[must_use]
    pub fn poll_submit(&mut self, now: Duration) -> Option<Submission> {
        while let Some(r) = self.planner.poll_read(now) {
            self.sched.handle_request(now, r);
        }
        self.sched.poll_submit(now)
    }

    /// A submitted read to cancel in the kernel (its connection is gone).
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<ReqId> {
        self.sched.poll_cancel()
    }

    /// When a delayed read becomes due (call `poll_submit` then).
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.sched.poll_timeout()
    }

    /// When to call `poll_submit` again with no other input: a delayed read
    /// becomes due, or a connection's next read falls due as its socket
    /// drains (`Planner::next_due`), whichever comes first.
    pub fn poll_wake(&self, now: Duration) -> Option<Duration> {
        let due = self.planner.next_due(now);
        match (self.sched.poll_timeout(), due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Planner and scheduler totals together.
    pub fn counters(&self) -> TpfCounters {
        let mut c = self.planner.counters();
        c += self.sched.counters();
        c += self.after_close;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefetcher with `queue_depth` reads at once and one connection,
    /// open on a 1 GiB range and sampled at 10 MB/s.
    fn one_fast_connection(queue_depth: usize) -> (Prefetcher, Duration) {
        let mut p = Prefetcher::new(
            PlanConfig::default(),
            SchedConfig {
                queue_depth,
                max_merge: 0,
                batch_min: 1,
            },
        );
        let t = Duration::ZERO;
        p.handle_open(t, ConnId(1), 0, 1 << 30);
        p.handle_sample(
            t,
            ConnId(1),
            &FlowSample {
                delivery_rate: 10_000_000,
                cwnd: 10,
                ..FlowSample::default()
            },
        );
        (p, t)
    }

    #[test]
    fn close_cancels_queued_and_submitted_reads_and_frees_budget() {
        let (mut p, t) = one_fast_connection(1);
        let sub = p.poll_submit(t).expect("a read");
        assert!(
            p.scheduler().queued() > 0,
            "a fast connection plans several reads"
        );
        let c = p.handle_close(ConnId(1));
        assert!(c.reads_cancelled >= 2 && c.reads_issued >= 2);
        assert_eq!(p.planner().used(), 0);
        assert_eq!(p.poll_cancel(), Some(sub.id));
        let done = p.handle_complete(t, sub.id, 0).unwrap();
        assert!(done.cancelled);
        assert_eq!(p.planner().used(), 0);
        assert_eq!(p.poll_submit(t), None);
        assert_eq!(p.counters().reads_after_close, 0, "it read nothing");
    }

    #[test]
    fn a_read_that_ran_after_close_is_counted_once() {
        let (mut p, t) = one_fast_connection(2);
        let a = p.poll_submit(t).expect("a read");
        let b = p.poll_submit(t).expect("a second read");
        p.handle_close(ConnId(1));
        assert_eq!(p.poll_cancel(), Some(a.id));
        assert_eq!(p.poll_cancel(), Some(b.id));
        // `a` was already on the disk and ran; `b` was skipped in time.
        assert!(p.handle_complete(t, a.id, 4096).unwrap().cancelled);
        assert!(p.handle_complete(t, b.id, 0).unwrap().cancelled);
        let c = p.counters();
        assert_eq!((c.reads_after_close, c.bytes_after_close), (1, 4096));
        assert_eq!(
            p.poll_submit(t),
            None,
            "nothing planned for a closed connection"
        );
    }
}
