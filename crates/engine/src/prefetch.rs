//! The tpf planner and disk scheduler ([`crate::plan`], [`crate::sched`])
//! driven for real: one [`Hub`] per engine, one [`Feed`] per download range.
//!
//! A sender opens a `Feed` for its range and then only asks it for the chunk
//! at its current offset, reports the bytes it sent, and lets it sample the
//! socket's `TCP_INFO` when it had to wait (at most every
//! `sample_interval`; an eighth of that while it starves for disk data, so
//! the planner sees the drained socket at once). The hub turns every
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
//! The hub's mutex is never held across an `.await`; completions and the
//! delay-queue timer run as small tokio tasks that take it briefly.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_platform::{fadvise, tcp};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::buffers::{BufferPool, PoolBuf};
use crate::counters::{Counters, Tally};
use crate::plan::{CaState, ConnId, FlowSample, PlanConfig, PrefetchMode, TpfCounters};
use crate::sched::{Prefetcher, ReqId, SchedConfig, Submission};
use crate::send::read_full_at;
use crate::{Cancel, Engine, EngineConfig, EngineError};

/// `TCP_CLOSE` in `tcpi_state`: the connection was reset or fully closed.
const TCP_STATE_CLOSE: u8 = 7;
/// Starving connections are sampled this many times more often.
const STARVING_SAMPLE_DIV: u32 = 8;

/// The engine's prefetch state (absent in `kernel` mode).
#[derive(Debug)]
pub(crate) struct Hub {
    state: Mutex<State>,
    start: Instant,
    next_conn: AtomicU64,
    eager_cancel: bool,
    sample_every: Duration,
}

#[derive(Debug)]
struct State {
    pf: Prefetcher,
    conns: HashMap<ConnId, Slot>,
    /// The token of every read handed to the disk pool, to cancel it.
    reqs: HashMap<ReqId, Cancel>,
    /// When the armed delay-queue timer fires, if one is armed.
    timer_at: Option<Duration>,
    /// What the last feed on a connection knew, for the next one on it.
    streams: HashMap<StreamKey, Carry>,
}

/// A data connection, by its two addresses (unique while it is open).
type StreamKey = (SocketAddr, SocketAddr);

/// Rate state handed from one `send_file` call to the next on the same
/// connection: front doors send a stream in pieces (MODE S: 64 MiB pieces,
/// MODE E: one call per block), and each piece must not start over from the
/// planner's initial rate and a fresh 100 ms measuring interval.
#[derive(Debug, Clone, Copy)]
struct Carry {
    rate: Option<u64>,
    anchor: Option<(u64, Instant)>,
    at: Instant,
}

/// Carried state older than this is dropped (the connection is idle or gone).
const CARRY_TTL: Duration = Duration::from_secs(10);
/// Above this many remembered connections, stale entries are swept.
const CARRY_SWEEP: usize = 1024;

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
}

/// Bytes read for a feed: `len` bytes from the offset it was asked for, in
/// `bufs` (copy path, each buffer full but the last) or in the page cache.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) len: u64,
    pub(crate) bufs: Vec<PoolBuf>,
}

enum Take {
    Ready(Chunk),
    Failed(EngineError),
    Wait,
}

type ReadResult = Result<io::Result<(u64, Vec<PoolBuf>)>, EngineError>;

impl Hub {
    /// The hub for `cfg`, or `None` when the kernel does read-ahead alone.
    pub(crate) fn new(cfg: &EngineConfig) -> Option<Hub> {
        if cfg.prefetch == PrefetchMode::Kernel {
            return None;
        }
        let k = cfg.prefetch_queue_depth.max(1);
        let h_max = cfg.prefetch_h_max.max(4096);
        let plan = PlanConfig {
            mode: cfg.prefetch,
            budget: cfg.prefetch_budget,
            h_max,
            fixed_window: (cfg.sendfile_prefetch as u64).max(4096),
            queue_depth: k,
            page: fadvise::page_size() as u64,
            ..PlanConfig::default()
        };
        let sched = SchedConfig {
            queue_depth: k,
            max_merge: h_max,
        };
        Some(Hub {
            state: Mutex::new(State {
                pf: Prefetcher::new(plan, sched),
                conns: HashMap::new(),
                reqs: HashMap::new(),
                timer_at: None,
                streams: HashMap::new(),
            }),
            start: Instant::now(),
            next_conn: AtomicU64::new(1),
            eager_cancel: cfg.cancel,
            sample_every: cfg.sample_interval.max(Duration::from_millis(1)),
        })
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

    /// Hands out new reads and cancellations, and arms the delay timer.
    fn pump(&self, engine: &Engine, st: &mut State) {
        let now = self.now();
        while let Some(id) = st.pf.poll_cancel() {
            if self.eager_cancel {
                if let Some(token) = st.reqs.get(&id) {
                    token.cancel();
                }
            }
        }
        let rt = tokio::runtime::Handle::try_current().ok();
        while let Some(sub) = st.pf.poll_submit(now) {
            let slot = st.conns.get(&sub.req.conn);
            let (Some(rt), Some(slot)) = (&rt, slot) else {
                // No runtime to run it on (engine used outside tokio) or no
                // such range: end it unread so its slot frees.
                let _ = st.pf.handle_complete(now, sub.id, 0);
                continue;
            };
            let token = Cancel::new();
            st.reqs.insert(sub.id, token.clone());
            let job = (
                engine.clone(),
                sub,
                Arc::clone(&slot.file),
                slot.copy,
                token,
            );
            rt.spawn(async move {
                let (engine, sub, file, copy, token) = job;
                run_read(engine, sub, file, copy, token).await
            });
        }
        if let (Some(rt), Some(at)) = (&rt, st.pf.poll_timeout()) {
            if st.timer_at.is_none_or(|armed| at < armed) {
                st.timer_at = Some(at);
                let e = engine.clone();
                let when = tokio::time::Instant::from_std(self.start + at);
                rt.spawn(async move {
                    tokio::time::sleep_until(when).await;
                    if let Some(hub) = &e.inner.prefetch {
                        let mut st = hub.lock();
                        if st.timer_at == Some(at) {
                            st.timer_at = None;
                        }
                        hub.pump(&e, &mut st);
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
        key: Option<StreamKey>,
    ) -> (ConnId, Arc<Notify>, Option<Carry>) {
        let id = ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed));
        let notify = Arc::new(Notify::new());
        let mut st = self.lock();
        let carry = key
            .and_then(|k| st.streams.remove(&k))
            .filter(|c| c.at.elapsed() < CARRY_TTL);
        st.conns.insert(
            id,
            Slot {
                file: Arc::clone(file),
                copy,
                done: BTreeMap::new(),
                eof: None,
                failed: None,
                notify: Arc::clone(&notify),
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
        (id, notify, carry)
    }

    fn remember(&self, key: StreamKey, carry: Carry) {
        let mut st = self.lock();
        if st.streams.len() >= CARRY_SWEEP {
            st.streams.retain(|_, c| c.at.elapsed() < CARRY_TTL);
        }
        st.streams.insert(key, carry);
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
        st.pf.handle_sent(id, n);
        self.pump(engine, &mut st);
    }

    fn sample(&self, engine: &Engine, id: ConnId, s: &FlowSample) {
        let mut st = self.lock();
        st.pf.handle_sample(self.now(), id, s);
        self.pump(engine, &mut st);
    }

    /// Ends `id`: queued reads dropped, submitted ones cancelled, its
    /// chunks freed (after the lock is released). Returns its counters.
    fn close(&self, engine: &Engine, id: ConnId) -> TpfCounters {
        let (c, slot) = {
            let mut st = self.lock();
            let c = st.pf.handle_close(id);
            let slot = st.conns.remove(&id);
            self.pump(engine, &mut st);
            (c, slot)
        };
        drop(slot);
        c
    }

    fn complete(&self, engine: &Engine, sub: Submission, r: ReadResult) {
        let garbage;
        {
            let mut st = self.lock();
            st.reqs.remove(&sub.id);
            let n = match &r {
                Ok(Ok((n, _))) => *n,
                _ => 0,
            };
            if n > 0 {
                engine.inner.counters.add_disk_read(n);
            }
            let Some(done) = st.pf.handle_complete(self.now(), sub.id, n) else {
                return;
            };
            let req = done.req;
            match st.conns.get_mut(&req.conn).filter(|_| !done.cancelled) {
                None => {
                    let skipped = matches!(r, Err(EngineError::Cancelled));
                    engine.inner.counters.add_wasted(skipped, n);
                    garbage = Some(r);
                }
                Some(slot) => {
                    match r {
                        Ok(Ok((n, bufs))) => {
                            if n > 0 {
                                slot.done.insert(req.offset, Chunk { len: n, bufs });
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
                    garbage = None;
                }
            }
            self.pump(engine, &mut st);
        }
        drop(garbage);
    }
}

/// Runs one scheduled read on the disk pool and reports it back.
async fn run_read(engine: Engine, sub: Submission, file: Arc<File>, copy: bool, token: Cancel) {
    let pool = Arc::clone(engine.buffers());
    let (off, len) = (sub.req.offset, sub.req.len);
    let submitted = engine
        .inner
        .disk
        .submit(&token, move || read_range(&file, &pool, off, len, copy))
        .await;
    let r = match submitted {
        Ok(ticket) => ticket.await,
        Err(e) => Err(e),
    };
    if let Some(hub) = &engine.inner.prefetch {
        hub.complete(&engine, sub, r);
    }
}

/// On a disk thread: reads `len` bytes at `off` into pooled buffers (copy)
/// or through one scratch buffer into the page cache (sendfile). Returns
/// the bytes read; fewer than `len` means the file ends there.
fn read_range(
    file: &File,
    pool: &Arc<BufferPool>,
    off: u64,
    len: u64,
    copy: bool,
) -> io::Result<(u64, Vec<PoolBuf>)> {
    let mut bufs = Vec::new();
    // WILLNEED first reads exactly the planned range and leaves no
    // read-ahead marks, so the pread below finds cached pages and the
    // kernel's own read-ahead (8 MiB windows on the lab disk) never reads
    // past what the planner asked for. Measured: without it the copy path's
    // planned 1 MiB preads made the kernel read about twice the planned bytes.
    let _ = fadvise::fadvise(file.as_fd(), off, len, fadvise::Advice::WillNeed);
    let mut scratch = (!copy).then(|| pool.take());
    let mut done = 0u64;
    while done < len {
        let mut buf = match scratch.take() {
            Some(s) => s,
            None => pool.take(),
        };
        let want = (buf.len() as u64).min(len - done) as usize;
        let n = read_full_at(file, &mut buf[..want], off + done)?;
        done += n as u64;
        if copy {
            if n > 0 {
                bufs.push(buf);
            }
        } else {
            scratch = Some(buf);
        }
        if n < want {
            break;
        }
    }
    Ok((done, bufs))
}

/// A sender's handle on the hub for one range; closing it (drop) cancels
/// what is left and adds its counters to the transfer's.
pub(crate) struct Feed<'a> {
    engine: &'a Engine,
    hub: &'a Hub,
    id: ConnId,
    notify: Arc<Notify>,
    local: &'a Counters,
    last_sample: Option<Instant>,
    /// `tcpi_bytes_acked` and when it was read, for the rate estimate.
    anchor: Option<(u64, Instant)>,
    /// A rate has been measured (over one full `sample_interval`).
    rated: bool,
    /// The sender waited for disk data since the rate interval began: the
    /// acked rate then shows our supply, a lower bound on the reader's.
    starved: bool,
    key: Option<StreamKey>,
    /// The last rate measured, carried to the next feed on this connection.
    last_rate: Option<u64>,
}

impl Engine {
    /// A feed for `start..end` of `file`, or `None` in `kernel` mode.
    pub(crate) fn feed<'a>(
        &'a self,
        conn: &TcpStream,
        file: &Arc<File>,
        start: u64,
        end: u64,
        copy: bool,
        local: &'a Counters,
    ) -> Option<Feed<'a>> {
        let hub = self.inner.prefetch.as_ref()?;
        let key = conn.local_addr().ok().zip(conn.peer_addr().ok());
        let (id, notify, carry) = hub.open(self, file, start, end, copy, key);
        let last_rate = carry.and_then(|c| c.rate);
        Some(Feed {
            engine: self,
            hub,
            id,
            notify,
            local,
            last_sample: None,
            anchor: carry.and_then(|c| c.anchor),
            rated: last_rate.is_some(),
            starved: false,
            key,
            last_rate,
        })
    }
}

impl Feed<'_> {
    /// Waits for the chunk that starts at `pos` (the sender's offset).
    pub(crate) async fn next(
        &mut self,
        conn: &TcpStream,
        pos: u64,
        cancel: &Cancel,
    ) -> Result<Chunk, EngineError> {
        let idle = self.engine.config().idle_timeout;
        let deadline = tokio::time::Instant::now() + idle;
        loop {
            match self.hub.take(self.id, pos) {
                Take::Ready(c) => {
                    self.local.add_disk_read(c.len);
                    return Ok(c);
                }
                Take::Failed(e) => return Err(e),
                Take::Wait => self.starved = true,
            }
            // Starving: a fresh sample shows the planner the drained socket.
            self.sample(conn, true)?;
            let nap = self.hub.sample_every / STARVING_SAMPLE_DIV;
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(nap) => {}
                _ = tokio::time::sleep_until(deadline) => return Err(EngineError::Idle),
                _ = cancel.cancelled() => return Err(EngineError::Cancelled),
            }
        }
    }

    /// `n` bytes of the range went into the socket.
    pub(crate) fn sent(&self, n: u64) {
        self.hub.sent(self.engine, self.id, n);
    }

    /// Feeds a `TCP_INFO` sample to the planner if the last one is old
    /// enough; a connection found reset/closed ends the transfer.
    pub(crate) fn sample(&mut self, conn: &TcpStream, starving: bool) -> Result<(), EngineError> {
        let every = if starving {
            self.hub.sample_every / STARVING_SAMPLE_DIV
        } else {
            self.hub.sample_every
        };
        if self.last_sample.is_some_and(|l| l.elapsed() < every) {
            return Ok(());
        }
        self.last_sample = Some(Instant::now());
        let Ok(info) = tcp::tcp_info(conn.as_fd()) else {
            return Ok(()); // not TCP (tests on other sockets): plan blind
        };
        if info.state == TCP_STATE_CLOSE {
            return Err(EngineError::Connection(
                io::ErrorKind::ConnectionReset.into(),
            ));
        }
        // The rate is bytes acked per second between two samples, not the
        // kernel's `tcpi_delivery_rate`: a receive-window-limited reader on a
        // short path acks each small window in microseconds, so the kernel's
        // per-flight samples can show the link's burst rate rather than how
        // fast the reader drains; what was acked over a span cannot.
        // Measured over at least a whole interval, whatever the sampling
        // cadence: over a few ms the acked count moves in window-sized steps.
        let now = Instant::now();
        let mut fresh = None;
        // Application-limited means *we* had nothing to send (waited for the
        // disk). The kernel's `delivery_rate_app_limited` also fires when the
        // send buffer, not the reader, is the limit, which would keep the
        // estimate from ever coming down; it is not used.
        let mut app_limited = false;
        match self.anchor {
            None => self.anchor = Some((info.bytes_acked, now)),
            Some((acked, at)) => {
                let dt = now.duration_since(at);
                if dt >= self.hub.sample_every {
                    let bytes = info.bytes_acked.saturating_sub(acked) as f64;
                    fresh = Some((bytes / dt.as_secs_f64()) as u64);
                    self.last_rate = fresh;
                    self.anchor = Some((info.bytes_acked, now));
                    app_limited = std::mem::take(&mut self.starved);
                }
            }
        }
        let mut sample = flow_sample(&info, fresh.unwrap_or(0), app_limited);
        if fresh.is_none() {
            if !self.rated {
                // Before the first whole interval the planner keeps its initial rate.
                return Ok(());
            }
            // No new rate: an app-limited 0 leaves the estimate as it is, and
            // the queue lengths still reach the planner.
            sample.app_limited = true;
        }
        self.rated = true;
        let t = Tally {
            global: &self.engine.inner.counters,
            local: self.local,
        };
        t.flow_samples(1);
        self.hub.sample(self.engine, self.id, &sample);
        Ok(())
    }
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        let c = self.hub.close(self.engine, self.id);
        self.local.add_tpf(&c);
        if let Some(key) = self.key {
            let carry = Carry {
                rate: self.last_rate,
                anchor: self.anchor,
                at: Instant::now(),
            };
            self.hub.remember(key, carry);
        }
    }
}

/// What the planner needs from `TCP_INFO`. Close and reset are not set
/// here: the sender sees them as errors and drops its feed.
fn flow_sample(i: &tcp::TcpInfo, rate: u64, app_limited: bool) -> FlowSample {
    FlowSample {
        delivery_rate: rate,
        app_limited,
        rtt: Duration::from_micros(u64::from(i.rtt_us)),
        cwnd: i.snd_cwnd,
        notsent_bytes: u64::from(i.notsent_bytes),
        unacked_bytes: u64::from(i.unacked) * u64::from(i.snd_mss),
        total_retrans: i.total_retrans,
        ca_state: CaState::from_raw(i.ca_state),
        ..FlowSample::default()
    }
}
