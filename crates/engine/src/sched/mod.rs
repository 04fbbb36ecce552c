//! The disk scheduler (the EDRC half of the tpf paper), sans-I/O.
//!
//! Brief overview: read requests from the planner wait in a queue ordered by
//! deadline (earliest first). At most `K` are submitted to the kernel at a
//! time ([`Scheduler::poll_submit`]); the caller reports each one back with
//! [`Scheduler::handle_complete`]. Two reactions to TCP:
//! - a connection closed, reset or failed ([`Scheduler::handle_conn_gone`]):
//!   its queued and delayed requests vanish in that call, and its submitted
//!   ones are listed for the caller to cancel in the kernel
//!   ([`Scheduler::poll_cancel`], e.g. `IORING_OP_ASYNC_CANCEL`);
//! - a connection's congestion window was cut ([`Scheduler::handle_cwnd_cut`]):
//!   while the disk is busy, its queued requests (and new ones) wait in a
//!   delay queue for the given delay (about `T_D / 2`); they come back when
//!   the delay ends or as soon as the disk has nothing else to do.
//!
//! Contiguous reads of one connection that meet in the queue are merged
//! (up to `max_merge` bytes), one seek instead of two.
//! No clock, no I/O: `now` is passed in.
//!
//! Depends on `crate::plan` for the request and id types, nothing else.

pub mod budget;
pub mod circus;
pub mod cue;
mod delay_queue;
mod prefetcher;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::plan::{ConnId, ReadRequest, TpfCounters};
use delay_queue::DelayQueue;
pub use prefetcher::Prefetcher;

/// Identifies one request from queueing to completion or cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

/// A request to hand to the kernel now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submission {
    /// Quote this in `handle_complete` and cancellations.
    pub id: ReqId,
    /// What to read.
    pub req: ReadRequest,
}

/// A finished submitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// What was read.
    pub req: ReadRequest,
    /// Its connection went away while it was in the kernel: its bytes are
    /// not wanted (the planner already freed their budget).
    pub cancelled: bool,
    /// Submission to completion (feed to the planner's `handle_read_done`).
    pub service_time: Duration,
}

/// What `handle_conn_gone` removed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dropped {
    /// Queued or delayed requests dropped without touching the disk.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Submitted requests now waiting for the caller to cancel.
    pub submitted: u64,
}

/// Scheduler tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedConfig {
    /// Most requests submitted to the kernel at once (`K`): enough to keep
    /// the device's queue busy, few enough that late decisions (cancel,
    /// delay, a more urgent deadline) still apply to most requests.
    pub queue_depth: usize,
    /// A queued request grows to take in the next contiguous read of the
    /// same connection up to this many bytes (one seek instead of two, as
    /// the block layer's back-merge); 0 turns merging off.
    pub max_merge: u64,
    /// While reads are in the kernel, queued ones are handed out only once
    /// this many slots are free, so they go to the disk (and come back) as
    /// one batch: the engine runs a batch as one disk-thread job and wakes
    /// its loop once for all of it, instead of a thread hand-off and a loop
    /// wake-up per read (lab tpf-abort: ~2.7 context switches per planned
    /// read). An idle disk takes any read at once. 1 (or 0) hands each read
    /// out as soon as a slot frees.
    pub batch_min: usize,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            queue_depth: 4,
            max_merge: 1 << 20,
            batch_min: 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct InKernel {
    req: ReadRequest,
    submitted_at: Duration,
    cancelled: bool,
}

/// The disk scheduler. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedConfig,
    next_id: u64,
    /// Ready requests by (deadline, id): earliest deadline first, FIFO on ties.
    queue: BTreeMap<(Duration, ReqId), ReadRequest>,
    delayed: DelayQueue,
    submitted: HashMap<ReqId, InKernel>,
    to_cancel: VecDeque<ReqId>,
    totals: TpfCounters,
    per_conn: HashMap<ConnId, TpfCounters>,
    /// `poll_submit` is handing out a batch (see there).
    batch_open: bool,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(cfg: SchedConfig) -> Scheduler {
        Scheduler {
            cfg,
            next_id: 0,
            queue: BTreeMap::new(),
            delayed: DelayQueue::default(),
            submitted: HashMap::new(),
            to_cancel: VecDeque::new(),
            totals: TpfCounters::default(),
            per_conn: HashMap::new(),
            batch_open: false,
        }
    }

    /// Queues a read. If its connection is in a delay period it waits in the
    /// delay queue with the connection's other reads. If it continues a read
    /// of the same connection still in the queue, that read takes it in and
    /// its id is returned.
    pub fn handle_request(&mut self, now: Duration, req: ReadRequest) -> ReqId {
        if let Some(id) = self.merge(req) {
            return id;
        }
        let id = ReqId(self.next_id);
        self.next_id += 1;
        if self.delayed.delays(req.conn, now) {
            self.delayed.push(id, req);
            self.count(req.conn, |c| c.reads_delayed += 1);
        } else {
            self.queue.insert((req.deadline, id), req);
        }
        id
    }

    fn merge(&mut self, req: ReadRequest) -> Option<ReqId> {
        let key = *self
            .queue
            .iter()
            .find(|(_, q)| {
                q.conn == req.conn
                    && q.epoch == req.epoch
                    && q.offset + q.len == req.offset
                    && q.len + req.len <= self.cfg.max_merge
            })?
            .0;
        let mut q = self.queue.remove(&key)?;
        q.len += req.len;
        q.deadline = q.deadline.min(req.deadline);
        self.queue.insert((q.deadline, key.1), q);
        Some(key.1)
    }

    /// `conn`'s congestion window was cut. If the disk is busy, its queued
    /// reads (and any it asks for before `now + delay`) wait until then;
    /// if the disk is idle nothing changes. Returns how many were moved.
    pub fn handle_cwnd_cut(&mut self, now: Duration, conn: ConnId, delay: Duration) -> usize {
        if self.disk_idle() {
            return 0;
        }
        self.delayed.start(conn, now + delay);
        let ids: Vec<(Duration, ReqId)> = self
            .queue
            .iter()
            .filter(|(_, r)| r.conn == conn)
            .map(|(k, _)| *k)
            .collect();
        for k in &ids {
            if let Some(req) = self.queue.remove(k) {
                self.delayed.push(k.1, req);
            }
        }
        let n = ids.len() as u64;
        self.count(conn, |c| c.reads_delayed += n);
        ids.len()
    }

    /// `conn` closed, was reset or failed: drop its queued and delayed reads
    /// now and list its submitted ones for [`Scheduler::poll_cancel`].
    pub fn handle_conn_gone(&mut self, conn: ConnId) -> Dropped {
        let mut d = Dropped::default();
        let keys: Vec<(Duration, ReqId)> = self
            .queue
            .iter()
            .filter(|(_, r)| r.conn == conn)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(r) = self.queue.remove(&k) {
                d.queued += 1;
                d.queued_bytes += r.len;
            }
        }
        for (_, r) in self.delayed.remove_conn(conn) {
            d.queued += 1;
            d.queued_bytes += r.len;
        }
        let mut ids: Vec<ReqId> = self
            .submitted
            .iter()
            .filter(|(_, k)| k.req.conn == conn && !k.cancelled)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        let mut sub_bytes = 0;
        for id in ids {
            if let Some(k) = self.submitted.get_mut(&id) {
                k.cancelled = true;
                sub_bytes += k.req.len;
                d.submitted += 1;
                self.to_cancel.push_back(id);
            }
        }
        let (n, b) = (d.queued + d.submitted, d.queued_bytes + sub_bytes);
        self.count(conn, |c| {
            c.reads_cancelled += n;
            c.bytes_cancelled += b;
        });
        d
    }

    /// The next request to submit to the kernel, if a slot is free. Delayed
    /// requests whose time has come rejoin the queue first; if the queue is
    /// then empty, the disk would idle, so the earliest delayed request goes.
    #[must_use]
    pub fn poll_submit(&mut self, now: Duration) -> Option<Submission> {
        for (id, req) in self.delayed.take_due(now) {
            self.queue.insert((req.deadline, id), req);
        }
        let depth = self.cfg.queue_depth.max(1);
        // A batch is what one caller's run of `poll_submit` hands out until
        // it returns `None`: it starts only on an idle disk or with
        // `batch_min` free slots, and then fills every free slot. Held back
        // reads wait for the in-flight ones, whose completion comes back here.
        let free = depth.saturating_sub(self.submitted.len());
        let may_start = self.submitted.is_empty() || free >= self.cfg.batch_min.min(depth);
        if free == 0 || !(self.batch_open || may_start) {
            self.batch_open = false;
            return None;
        }
        let Some((id, req)) = self
            .queue
            .pop_first()
            .map(|((_, id), req)| (id, req))
            .or_else(|| self.delayed.pop_earliest())
        else {
            self.batch_open = false;
            return None;
        };
        self.batch_open = true;
        self.submitted.insert(
            id,
            InKernel {
                req,
                submitted_at: now,
                cancelled: false,
            },
        );
        Some(Submission { id, req })
    }

    /// A submitted request of the connection that went away, to cancel in
    /// the kernel. Its completion still comes through `handle_complete`.
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<ReqId> {
        self.to_cancel.pop_front()
    }

    /// A submitted request finished (read, failed, or cancelled in the
    /// kernel); its slot is free. Unknown ids give `None`.
    pub fn handle_complete(&mut self, now: Duration, id: ReqId) -> Option<Completion> {
        let k = self.submitted.remove(&id)?;
        Some(Completion {
            req: k.req,
            cancelled: k.cancelled,
            service_time: now.saturating_sub(k.submitted_at),
        })
    }

    /// When a delay ends next (call `poll_submit` then), if any.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.delayed.next_due()
    }

    /// No request waits in the queue and a kernel slot is free (the batch
    /// rule aside: what matters to a cwnd cut is whether reads wait).
    pub fn disk_idle(&self) -> bool {
        self.queue.is_empty() && self.submitted.len() < self.cfg.queue_depth.max(1)
    }

    /// Requests ready in the queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Requests in the delay queue.
    pub fn delayed(&self) -> usize {
        self.delayed.len()
    }

    /// Requests in the kernel (cancelled ones included until they complete).
    pub fn submitted(&self) -> usize {
        self.submitted.len()
    }

    /// Whether any request of `conn` is queued, delayed or submitted-live.
    pub fn holds(&self, conn: ConnId) -> bool {
        self.queue.values().any(|r| r.conn == conn)
            || self.delayed.holds(conn)
            || self
                .submitted
                .values()
                .any(|k| k.req.conn == conn && !k.cancelled)
    }

    /// Totals (cancelled and delayed fields; the planner fills the rest).
    pub fn counters(&self) -> TpfCounters {
        self.totals
    }

    /// One connection's counters.
    pub fn conn_counters(&self, conn: ConnId) -> TpfCounters {
        self.per_conn.get(&conn).copied().unwrap_or_default()
    }

    /// Forgets a finished connection's counters and returns them.
    pub fn take_conn_counters(&mut self, conn: ConnId) -> TpfCounters {
        self.per_conn.remove(&conn).unwrap_or_default()
    }

    fn count(&mut self, conn: ConnId, f: impl Fn(&mut TpfCounters)) {
        f(&mut self.totals);
        f(self.per_conn.entry(conn).or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(conn: u64, deadline_ms: u64) -> ReadRequest {
        ReadRequest {
            conn: ConnId(conn),
            offset: 0,
            len: 4096,
            deadline: Duration::from_millis(deadline_ms),
            issued_at: Duration::ZERO,
            epoch: 0,
        }
    }

    #[test]
    fn earliest_deadline_goes_first_and_k_bounds_submissions() {
        let mut s = Scheduler::new(SchedConfig {
            queue_depth: 1,
            max_merge: 0,
            batch_min: 1,
        });
        let t = Duration::ZERO;
        s.handle_request(t, req(1, 50));
        let urgent = s.handle_request(t, req(2, 10));
        let first = s.poll_submit(t).unwrap();
        assert_eq!(first.id, urgent);
        assert!(s.poll_submit(t).is_none());
        s.handle_complete(t, first.id).unwrap();
        assert_eq!(s.poll_submit(t).unwrap().req.conn, ConnId(1));
    }

    #[test]
    fn a_contiguous_read_of_the_same_connection_merges_into_the_queued_one() {
        let mut s = Scheduler::new(SchedConfig {
            queue_depth: 1,
            max_merge: 3 * 4096,
            batch_min: 1,
        });
        let t = Duration::ZERO;
        let a = s.handle_request(t, req(1, 50));
        let b = s.handle_request(
            t,
            ReadRequest {
                offset: 4096,
                ..req(1, 40)
            },
        );
        assert_eq!(a, b);
        assert_eq!(s.queued(), 1);
        // Not contiguous, other connection, or too big: separate requests.
        assert_ne!(
            s.handle_request(
                t,
                ReadRequest {
                    offset: 3 * 4096,
                    ..req(1, 60)
                }
            ),
            a
        );
        assert_ne!(
            s.handle_request(
                t,
                ReadRequest {
                    offset: 8192,
                    ..req(2, 60)
                }
            ),
            a
        );
        let sub = s.poll_submit(t).unwrap();
        assert_eq!(
            (sub.id, sub.req.len, sub.req.deadline),
            (a, 8192, Duration::from_millis(40))
        );
    }

    /// Submits everything `poll_submit` hands out now, as the engine does
    /// after each event (one batch per call).
    fn batch(s: &mut Scheduler, now: Duration) -> Vec<Submission> {
        std::iter::from_fn(|| s.poll_submit(now)).collect()
    }

    #[test]
    fn reads_go_to_the_disk_in_batches_once_enough_slots_are_free() {
        let mut s = Scheduler::new(SchedConfig {
            queue_depth: 6,
            max_merge: 0,
            batch_min: 3,
        });
        let ms = Duration::from_millis;
        // Connections open one after another: an idle disk takes the first
        // read alone, the next ones join while at least 3 slots are free.
        let first = s.handle_request(ms(0), req(1, 100));
        assert_eq!(batch(&mut s, ms(0)).len(), 1);
        for c in 2..=9 {
            s.handle_request(ms(1), req(c, 100 + c));
        }
        let second = batch(&mut s, ms(1));
        assert_eq!(second.len(), 5, "a batch fills every free slot");
        // One read completing frees one slot: it is not handed out alone.
        s.handle_complete(ms(10), first).unwrap();
        assert!(s.poll_submit(ms(10)).is_none());
        // Two more complete: three free slots make the next batch.
        s.handle_complete(ms(20), second[0].id).unwrap();
        assert!(s.poll_submit(ms(20)).is_none());
        s.handle_complete(ms(20), second[1].id).unwrap();
        assert_eq!(batch(&mut s, ms(20)).len(), 3);
        assert_eq!(s.queued(), 0);
        // Once everything in the kernel is back, a lone read goes at once.
        for sub in &second[2..] {
            s.handle_complete(ms(30), sub.id).unwrap();
        }
        let ids: Vec<ReqId> = s.submitted.keys().copied().collect();
        for id in ids {
            s.handle_complete(ms(40), id).unwrap();
        }
        s.handle_request(ms(50), req(20, 200));
        assert_eq!(batch(&mut s, ms(50)).len(), 1);
    }

    #[test]
    fn batches_keep_their_size_when_they_complete_together() {
        // The engine reports a batch's reads back together: after the first
        // batches, every batch is at least `batch_min` reads, so the disk
        // threads and the loop are woken once per batch.
        let mut s = Scheduler::new(SchedConfig {
            queue_depth: 6,
            max_merge: 0,
            batch_min: 3,
        });
        let ms = Duration::from_millis;
        let mut in_kernel: VecDeque<Vec<Submission>> = VecDeque::new();
        let mut sizes = Vec::new();
        let mut t = 0;
        for round in 0..40u64 {
            // Three connections ask for reads every round (busy disk).
            for c in 0..3 {
                s.handle_request(ms(t), req(round * 3 + c, t + 100));
            }
            let b = batch(&mut s, ms(t));
            if !b.is_empty() {
                sizes.push(b.len());
                in_kernel.push_back(b);
            }
            t += 10;
            // The oldest batch comes back whole.
            if round % 2 == 1 {
                if let Some(done) = in_kernel.pop_front() {
                    for sub in done {
                        s.handle_complete(ms(t), sub.id).unwrap();
                    }
                }
            }
        }
        assert!(sizes.len() > 10);
        assert!(sizes[2..].iter().all(|&n| n >= 3), "batch sizes {sizes:?}");
        assert!(s.submitted() <= 6);
    }
}
