//! The tpf planner and disk scheduler ([`crate::plan`], [`crate::sched`])
//! driven for real: one [`Hub`] per engine, one [`Feed`] per download range.
//!
//! A sender opens a `Feed` for its range and then only asks it for the chunk
//! at its current offset, reports the bytes it sent, and lets it sample the
//! socket's `TCP_INFO` when it had to wait (at most every
//! `sample_interval`; an eighth of that while it starves for disk data, so
//! the planner sees the drained socket at once). While it waits for a read
//! it does not nap: the hub's tick looks at every feed's socket once a
//! second (`looks.rs`) for the planner and the drop-behind. The hub turns every
//! submission of the scheduler into one job on the engine's [`DiskPool`]
//! (`crate::disk`), under a token of its own: a read into pooled buffers
//! for the copy path, or a read through one scratch buffer for the sendfile
//! path (so `sendfile` finds the pages cached), both after a `WILLNEED` of
//! exactly that range (which keeps the kernel's read-ahead out of it). When a
//! feed ends (done, error, reset, cancel: it is dropped) the connection's
//! queued reads vanish, its submitted ones are cancelled (a disk thread
//! skips a job whose token fired before it started), and its buffered
//! chunks are freed in that call.
//!
//! Reads go to the disk in batches: everything the scheduler hands out in
//! one pump (it holds reads back until enough slots are free,
//! `SchedConfig::batch_min`) is one disk-thread job, and its results come
//! back in one call, which wakes every waiting sender in one turn of the
//! loop. The hub's mutex is never held across an `.await`; completions,
//! the delay-queue timer and the hub's one tick ([`TICK`]) run as small
//! tokio tasks that take it briefly.
//!
//! Memory: the planner's budget follows the room the process's memory
//! cgroup leaves for the page cache (`memory.rs`), re-read every second, and
//! shrinks while taken chunks turn out evicted (`cachestat`); files fed by
//! the planner are opened `POSIX_FADV_RANDOM` so the kernel adds no
//! read-ahead of its own; acknowledged pages of a file no other feed has
//! open are dropped (`DONTNEED`) so the cache holds unsent read-ahead.

mod feed;
mod looks;
pub(crate) mod memory;
pub(crate) mod pagecache;

pub(crate) use feed::Feed;
use looks::drop_pages;

use pagecache::{read_batch, DropBehind, PlannedRead, ReadOutcome};

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_platform::fadvise;
use tokio::sync::Notify;

use crate::buffers::PoolBuf;
use crate::disk::IoClass;
use crate::flow::Carry;
use crate::plan::{ConnId, FlowSample, PlanConfig, PrefetchMode, TpfCounters, DUE_STEP};
use crate::sched::{Prefetcher, ReqId, SchedConfig, Submission};
use crate::{Cancel, Engine, EngineConfig, EngineError};

/// `TCP_CLOSE` in `tcpi_state`: the connection was reset or fully closed.
const TCP_STATE_CLOSE: u8 = 7;
/// Starving connections are sampled this many times more often.
const STARVING_SAMPLE_DIV: u32 = 8;
/// The hub's one periodic look while any feed is open: the budget measured
/// again and the planner's time-driven parts pumped (a budget growing back
/// after memory pressure) when no connection's event does it. It replaces a
/// nap per waiting sender (lab tpf-abort: 300 senders each waiting ~3 s
/// for its next read woke ~100 times a second on their own timers).
/// It also samples every feed's socket (`Hub::sample_all`), which a waiting
/// sender's nap used to do: once a second, as those naps did at most.
const TICK: Duration = Duration::from_secs(1);
/// How often the room is measured again: cache pinned by receivers grows
/// by up to the send rate between two measurements (see `memory.rs`).
const BUDGET_EVERY: Duration = Duration::from_millis(250);

/// The engine's prefetch state (absent in `kernel` mode).
#[derive(Debug)]
pub(crate) struct Hub {
    state: Mutex<State>,
    start: Instant,
    next_conn: AtomicU64,
    eager_cancel: bool,
    sample_every: Duration,
    /// Configured budget (an upper bound on the measured one).
    budget_cap: u64,
    /// Share of the room not filled by untracked cache the budget may use
    /// (`EngineConfig::prefetch_budget_of_free`, e.g. `memory::BUDGET_OF_FREE`);
    /// `None` (the default) leaves untracked cache out.
    budget_of_free: Option<f64>,
    /// Milliseconds since `start` of the next budget measurement.
    budget_next_ms: AtomicU64,
    drop_sent: bool,
    /// The hub's tick task is running ([`TICK`]).
    ticking: AtomicBool,
}

#[derive(Debug)]
struct State {
    pf: Prefetcher,
    conns: HashMap<ConnId, Slot>,
    /// The token of every read handed to the disk pool, to cancel it.
    reqs: HashMap<ReqId, Cancel>,
    /// When the armed delay-queue timer fires, if one is armed.
    timer_at: Option<Duration>,
    /// Open feeds per file (device, inode): pages of a file another feed
    /// reads are never dropped behind a sender.
    files: HashMap<(u64, u64), usize>,
}

/// Carried state older than this is dropped (the connection was idle: its
/// acked count says nothing about its rate now).
const CARRY_TTL: Duration = Duration::from_secs(10);

/// One open range: its file and the chunks read for it, not yet taken.
#[derive(Debug)]
struct Slot {
    file: Arc<File>,
    /// Read into buffers (copy path) rather than only into the page cache.
    copy: bool,
    done: BTreeMap<u64, Chunk>,
    /// The file ended here (a short read).
    eof: Option<u64>,
    failed: Option<io::Error>,
    notify: Arc<Notify>,
    /// The file's (device, inode), if `fstat` worked.
    inode: Option<(u64, u64)>,
    /// Acknowledged pages dropped so far (sendfile path, `drop_sent`).
    behind: Option<DropBehind>,
    /// The sender's offset: the range's start plus bytes reported sent.
    pos: u64,
    /// A duplicate of the connection's socket, for the tick's `TCP_INFO`
    /// look (`Hub::sample_all`); closed with the slot, which goes when the
    /// feed does.
    sock: Option<OwnedFd>,
}

/// Bytes read for a feed: `len` bytes from the offset it was asked for, in
/// `bufs` (copy path, each buffer full but the last) or in the page cache.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) len: u64,
    pub(crate) bufs: Vec<PoolBuf>,
    /// Bytes of a page-cache chunk found evicted when it was taken (read
    /// ahead, then lost before being sent); set by [`Feed::next`].
    pub(crate) evicted: u64,
}

enum Take {
    Ready(Chunk),
    Failed(EngineError),
    Wait,
}

impl Hub {
    /// The hub for `cfg`, or `None` when the kernel does read-ahead alone.
    pub(crate) fn new(cfg: &EngineConfig) -> Option<Hub> {
        if cfg.prefetch == PrefetchMode::Kernel {
            return None;
        }
        let k = cfg.prefetch_queue_depth.max(1);
        let h_max = cfg.prefetch_h_max.max(4096);
        let budget_cap = cfg.prefetch_budget;
        let plan = PlanConfig {
            mode: cfg.prefetch.planner_policy(),
            budget: measured_budget(budget_cap),
            h_max,
            fixed_window: (cfg.sendfile_prefetch as u64).max(4096),
            queue_depth: k,
            page: fadvise::page_size() as u64,
            device_read: cfg.prefetch_min_read,
            // With sendfile the socket holds page-cache pages.
            count_socket: true,
            drain_at_rate: cfg.prefetch_drain_estimate,
            ..PlanConfig::default()
        };
        let sched = SchedConfig {
            queue_depth: k,
            max_merge: h_max,
            batch_min: cfg.prefetch_batch_min.clamp(1, k),
        };
        tracing::info!(
            budget = plan.budget,
            room = memory::cache_room(),
            device_read = plan.device_read,
            queue_depth = k,
            "prefetch planner"
        );
        // `fixed` stays the conventional baseline: no dropping behind it.
        let drop_sent =
            cfg.prefetch.planner_policy() == PrefetchMode::Tcp && cfg.prefetch_drop_sent;
        Some(Hub {
            state: Mutex::new(State {
                pf: Prefetcher::new(plan, sched),
                conns: HashMap::new(),
                reqs: HashMap::new(),
                timer_at: None,
                files: HashMap::new(),
            }),
            start: Instant::now(),
            next_conn: AtomicU64::new(1),
            eager_cancel: cfg.cancel,
            sample_every: cfg.sample_interval.max(Duration::from_millis(1)),
            budget_cap,
            budget_of_free: cfg
                .prefetch_budget_of_free
                .filter(|v| (0.0..=1.0).contains(v)),
            budget_next_ms: AtomicU64::new(BUDGET_EVERY.as_millis() as u64),
            drop_sent,
            ticking: AtomicBool::new(false),
        })
    }

    /// Measures the memory room again if a second has passed (outside the
    /// lock: it reads three small files).
    fn refresh_budget(&self) {
        let now_ms = self.now().as_millis() as u64;
        let next = self.budget_next_ms.load(Ordering::Relaxed);
        if now_ms < next
            || self
                .budget_next_ms
                .compare_exchange(
                    next,
                    now_ms + BUDGET_EVERY.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let room = memory::cache_room_and_use();
        let mut st = self.lock();
        let tracked = st.pf.planner().cached() + st.pf.planner().socket_held();
        let b = room.map_or(self.budget_cap, |r| {
            memory::budget_for(r, tracked, self.budget_cap, self.budget_of_free)
        });
        st.pf.set_budget(b);
        let (p, q) = (st.pf.planner(), st.pf.scheduler());
        tracing::debug!(
            budget = b,
            cache = room.map_or(0, |r| r.cache),
            in_use = p.budget(),
            used = p.used(),
            socket = p.socket_held(),
            target_ms = p.target().as_millis() as u64,
            service_ms = p.service_time().map_or(0, |d| d.as_millis() as u64),
            latency_ms = p.read_latency().map_or(0, |d| d.as_millis() as u64),
            queued = q.queued(),
            submitted = q.submitted(),
            reads = st.pf.counters().reads_issued,
            "prefetch"
        );
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Planner and scheduler totals, closed connections included.
    pub(crate) fn totals(&self) -> TpfCounters {
        self.lock().pf.counters()
    }

    /// Hands out new reads and cancellations, and arms the timer for the
    /// next delayed or due read.
    fn pump(&self, engine: &Engine, st: &mut State) {
        self.pump_and(engine, st, true);
    }

    /// [`Hub::pump`]; `due`: also look for the next read the sockets' drain
    /// brings due (`Planner::next_due`, one pass over every connection),
    /// unless the timer is armed within `DUE_STEP` already (no due time
    /// can be sooner).
    fn pump_and(&self, engine: &Engine, st: &mut State, due: bool) {
        let now = self.now();
        let due = due && st.timer_at.is_none_or(|armed| armed > now + DUE_STEP);
        while let Some(id) = st.pf.poll_cancel() {
            if self.eager_cancel {
                if let Some(token) = st.reqs.get(&id) {
                    token.cancel();
                }
            }
        }
        let rt = tokio::runtime::Handle::try_current().ok();
        let mut batch = Vec::new();
        while let Some(sub) = st.pf.poll_submit(now) {
            let slot = st.conns.get(&sub.req.conn);
            let (Some(_), Some(slot)) = (&rt, slot) else {
                // No runtime to run it on (engine used outside tokio) or no
                // such range: end it unread so its slot frees.
                let _ = st.pf.handle_complete(now, sub.id, 0);
                continue;
            };
            let token = Cancel::new();
            st.reqs.insert(sub.id, token.clone());
            let read = PlannedRead {
                file: Arc::clone(&slot.file),
                off: sub.req.offset,
                len: sub.req.len,
                copy: slot.copy,
                token,
            };
            batch.push((sub, read));
        }
        if let (Some(rt), false) = (&rt, batch.is_empty()) {
            rt.spawn(run_reads(engine.clone(), batch));
        }
        let wake = if due {
            st.pf.poll_wake(now)
        } else {
            st.pf.poll_timeout()
        };
        if let (Some(rt), Some(at)) = (&rt, wake) {
            if st.timer_at.is_none_or(|armed| at < armed) {
                st.timer_at = Some(at);
                let e = engine.clone();
                let when = tokio::time::Instant::from_std(self.start + at);
                rt.spawn(async move {
                    tokio::time::sleep_until(when).await;
                    if let Some(hub) = &e.inner.prefetch {
                        let drops = {
                            let mut st = hub.lock();
                            if st.timer_at == Some(at) {
                                st.timer_at = None;
                            }
                            hub.pump(&e, &mut st);
                            hub.due_drops(&mut st, None)
                        };
                        drop_pages(drops);
                    }
                });
            }
        }
    }

    fn open(
        &self,
        engine: &Engine,
        file: &Arc<File>,
        start: u64,
        end: u64,
        copy: bool,
        carry: Option<Carry>,
    ) -> (ConnId, Arc<Notify>, Option<Carry>) {
        let id = ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed));
        let notify = Arc::new(Notify::new());
        // The planner decides what is read: a sendfile over a page it did
        // not bring in (evicted) reads just that page, not a second
        // read-ahead window of the kernel's.
        let _ = fadvise::fadvise(file.as_fd(), 0, 0, fadvise::Advice::Random);
        let inode = {
            use std::os::unix::fs::MetadataExt;
            file.metadata().ok().map(|m| (m.dev(), m.ino()))
        };
        let mut st = self.lock();
        if let Some(k) = inode {
            *st.files.entry(k).or_insert(0) += 1;
        }
        let carry = carry.filter(|c| c.at.elapsed() < CARRY_TTL);
        st.conns.insert(
            id,
            Slot {
                file: Arc::clone(file),
                copy,
                done: BTreeMap::new(),
                eof: None,
                failed: None,
                notify: Arc::clone(&notify),
                inode,
                behind: (!copy && self.drop_sent)
                    .then(|| DropBehind::new(start, fadvise::page_size() as u64)),
                pos: start,
                sock: None,
            },
        );
        st.pf.handle_open(self.now(), id, start, end);
        if let Some(rate) = carry.and_then(|c| c.rate) {
            // The connection's rate as the previous piece left it.
            let s = FlowSample {
                delivery_rate: rate,
                ..FlowSample::default()
            };
            st.pf.handle_sample(self.now(), id, &s);
        }
        self.pump(engine, &mut st);
        drop(st);
        self.start_tick(engine);
        (id, notify, carry)
    }

    /// Starts the hub's tick ([`TICK`]) unless it runs; it ends once no
    /// feed is open (checked under the lock a new feed registers under, so
    /// a feed never opens between the last look and the end).
    fn start_tick(&self, engine: &Engine) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.ticking.swap(true, Ordering::AcqRel) {
            return;
        }
        let e = engine.clone();
        rt.spawn(async move {
            loop {
                tokio::time::sleep(TICK).await;
                let Some(hub) = &e.inner.prefetch else { return };
                hub.refresh_budget();
                let drops = {
                    let mut st = hub.lock();
                    if st.conns.is_empty() {
                        hub.ticking.store(false, Ordering::Release);
                        return;
                    }
                    hub.sample_all(&mut st);
                    hub.pump(&e, &mut st);
                    hub.due_drops(&mut st, None)
                };
                drop_pages(drops);
            }
        });
    }

    fn take(&self, id: ConnId, pos: u64) -> Take {
        let mut st = self.lock();
        let Some(slot) = st.conns.get_mut(&id) else {
            return Take::Failed(EngineError::Cancelled);
        };
        if let Some(e) = slot.failed.take() {
            return Take::Failed(EngineError::Disk(e));
        }
        if let Some(c) = slot.done.remove(&pos) {
            return Take::Ready(c);
        }
        if slot.eof.is_some_and(|eof| pos >= eof) {
            return Take::Failed(EngineError::ShortFile { at: pos });
        }
        Take::Wait
    }

    fn sent(&self, engine: &Engine, id: ConnId, n: u64) {
        let mut st = self.lock();
        if let Some(slot) = st.conns.get_mut(&id) {
            slot.pos += n;
        }
        // A pump per `sendfile` call was a pass over every connection
        // (or several) each time; a send changes only the sender's own
        // share, so only when that brings it a read.
        if st.pf.handle_sent(self.now(), id, n) {
            self.pump(engine, &mut st);
        }
    }

    /// A sample for `id`; its acknowledged pages are dropped if due.
    fn sample(&self, engine: &Engine, id: ConnId, s: &FlowSample) {
        self.refresh_budget();
        let drops = {
            let mut st = self.lock();
            st.pf.handle_sample(self.now(), id, s);
            self.pump(engine, &mut st);
            self.due_drops(&mut st, Some(id))
        };
        drop_pages(drops);
    }

    /// A chunk of `id` was found partly evicted when it was taken.
    fn pressure(&self, engine: &Engine, id: ConnId, bytes: u64) {
        let mut st = self.lock();
        st.pf.handle_pressure(self.now(), id, bytes);
        self.pump(engine, &mut st);
    }

    /// Ends `id`: queued reads dropped, submitted ones cancelled, its
    /// chunks freed (after the lock is released). Returns its counters.
    fn close(&self, engine: &Engine, id: ConnId) -> TpfCounters {
        let (c, slot) = {
            let mut st = self.lock();
            let c = st.pf.handle_close(id);
            let slot = st.conns.remove(&id);
            if let Some(k) = slot.as_ref().and_then(|s| s.inode) {
                if let Some(n) = st.files.get_mut(&k) {
                    *n -= 1;
                    if *n == 0 {
                        st.files.remove(&k);
                    }
                }
            }
            self.pump(engine, &mut st);
            (c, slot)
        };
        drop(slot);
        c
    }

    /// A batch of reads is back: each result filed with its feed (whose
    /// sender is woken), then one pump for the next batch.
    fn complete_batch(&self, engine: &Engine, done: Vec<(Submission, ReadOutcome)>) {
        let mut garbage = Vec::new();
        {
            let mut st = self.lock();
            let now = self.now();
            for (sub, r) in done {
                if let Some(g) = self.file_result(engine, &mut st, now, sub, r) {
                    garbage.push(g);
                }
            }
            self.pump(engine, &mut st);
        }
        drop(garbage);
    }

    /// Files one read's result; returns what nobody wants any more (freed
    /// after the lock is released).
    fn file_result(
        &self,
        engine: &Engine,
        st: &mut State,
        now: Duration,
        sub: Submission,
        r: ReadOutcome,
    ) -> Option<ReadOutcome> {
        st.reqs.remove(&sub.id);
        let n = match &r {
            Ok(Ok((n, _))) => *n,
            _ => 0,
        };
        if n > 0 {
            engine.inner.counters.add_disk_read(n);
        }
        let done = st.pf.handle_complete(now, sub.id, n)?;
        let req = done.req;
        let Some(slot) = st.conns.get_mut(&req.conn).filter(|_| !done.cancelled) else {
            let skipped = matches!(r, Err(EngineError::Cancelled));
            engine.inner.counters.add_wasted(skipped, n);
            return Some(r);
        };
        match r {
            Ok(Ok((n, bufs))) => {
                if n > 0 {
                    slot.done.insert(
                        req.offset,
                        Chunk {
                            len: n,
                            bufs,
                            evicted: 0,
                        },
                    );
                }
                if n < req.len {
                    let at = req.offset + n;
                    slot.eof = Some(slot.eof.map_or(at, |e| e.min(at)));
                }
            }
            Ok(Err(e)) => slot.failed = Some(e),
            Err(e) => slot.failed = Some(io::Error::other(e.to_string())),
        }
        slot.notify.notify_one();
        None
    }
}

/// Runs one batch of scheduled reads as one job on the disk pool and
/// reports them back together.
async fn run_reads(engine: Engine, batch: Vec<(Submission, PlannedRead)>) {
    let pool = Arc::clone(engine.buffers());
    let (subs, reads): (Vec<Submission>, Vec<PlannedRead>) = batch.into_iter().unzip();
    let n = reads.len();
    let job = move || read_batch(&reads, &pool);
    // Each read carries its own token (checked before it begins); the
    // batch as a whole is never cancelled.
    let whole = Cancel::new();
    let submitted = engine
        .inner
        .disk
        .submit(IoClass::Transfer, &whole, job)
        .await;
    let results = match submitted {
        Ok(ticket) => ticket.await,
        Err(e) => Err(e),
    };
    let results: Vec<ReadOutcome> = match results {
        Ok(r) => r,
        Err(e) => (0..n).map(|_| Err(same_error(&e))).collect(),
    };
    if let Some(hub) = &engine.inner.prefetch {
        hub.complete_batch(&engine, subs.into_iter().zip(results).collect());
    }
}

/// The error a whole batch failed with, for each of its reads.
fn same_error(e: &EngineError) -> EngineError {
    match e {
        EngineError::DiskJobPanicked => EngineError::DiskJobPanicked,
        EngineError::Cancelled => EngineError::Cancelled,
        _ => EngineError::PoolClosed,
    }
}

/// The read-ahead budget before any read: see [`memory::budget_for`].
fn measured_budget(cap: u64) -> u64 {
    match memory::cache_room_and_use() {
        Some(room) => memory::budget_for(room, 0, cap, None),
        None => cap,
    }
}
