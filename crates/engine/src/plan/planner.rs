//! The prefetch planner: which file bytes to read next, for whom, how many.
//!
//! The rule (tpf paper, eq. 5-7), per connection n with smoothed rate `B_n`:
//! `T_n = (pending + cached + in_flight) / B_n` is its time to starvation.
//! When `T_n <= T/2` it gets a read of
//! `min((T - T_n) * B_n, H_max, budget share - holding, budget - used)`,
//! where the budget share is `budget * B_n / B_net` (memory in proportion to
//! rate). The target `T` is the smaller of
//! - `T_D = 2 * max(disk cycle, read latency)`: the disk cycle is the time the
//!   disk needs to serve one read for every active connection, `n_active *
//!   service time / K`, from the service times the caller reports; a read
//!   issued at `T_n = T_D / 2` thus completes before the connection runs dry,
//!   and `T_D / 2` of data makes each read worth its seek;
//! - `budget / B_net`: the time the whole budget lasts at the aggregate rate,
//!   so every connection's share holds a full `T` and nothing is read that
//!   would have to be evicted before it is sent.
//!
//! Two additions for a seek-bound disk and a memory cgroup:
//! - a connection's window is `max(T * B_n, device_read)` and it gets a read
//!   when less than `trigger` of its window is buffered: on a disk that
//!   charges a whole I/O for a small read (lab: 150 IOPS, 40 MB/s, so reads
//!   under ~270 kB waste disk time), a slow connection gets one large read
//!   every few seconds rather than many small ones; its share of the budget
//!   is raised to one `device_read`;
//! - the budget is the memory really there: the caller sets it from the
//!   cgroup's room ([`Planner::set_budget`]), pages pinned in sockets count
//!   against it (`count_socket`), and read-ahead found evicted before it was
//!   sent cuts the budget in use at once ([`Planner::handle_pressure`]); it
//!   grows back slowly after a quiet spell.
//!
//! Accounting: `used = sum(cached + in_flight) <= budget` always in `Tcp`
//! mode. `Fixed` mode ignores both rate and budget on purpose (baseline).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::counters::TpfCounters;
use super::sampler::{FlowSample, FlowState, Sampler};
use super::{ConnId, PrefetchMode, ReadRequest};

/// Rate assumed for a connection whose samples say 0 B/s (stalled): low
/// enough that it gets almost nothing, high enough to avoid dividing by 0.
const MIN_RATE: u64 = 1024;
/// Weight of a new service-time or latency measurement: 1/8, as TCP's srtt.
const EWMA_WEIGHT: f64 = 0.125;
/// Each report of read-ahead evicted before it was sent shrinks the budget
/// in use to this fraction of itself (the memory was not really there)...
const PRESSURE_CUT: f64 = 0.9;
/// ...but never below this fraction of the configured budget.
const PRESSURE_FLOOR: f64 = 0.5;
/// After this long without evictions the budget grows back...
const PRESSURE_QUIET: Duration = Duration::from_secs(2);
/// ...by this fraction of the configured budget per second.
const PRESSURE_RECOVERY_PER_S: f64 = 0.02;

#[derive(Debug)]
struct Conn {
    /// End of the byte range to deliver (exclusive).
    end: u64,
    /// Next offset never yet planned.
    next: u64,
    /// Read, not yet handed to the socket.
    cached: u64,
    /// Planned, not yet read.
    in_flight: u64,
    /// Ranges read once and evicted before being sent: read again first.
    holes: VecDeque<(u64, u64)>,
    /// Bytes in its socket (unsent + unacknowledged) at the last sample,
    /// plus what was sent since.
    socket: u64,
    /// Bytes handed to the socket since the last sample: still unsent as
    /// far as the planner can tell, until a sample says otherwise.
    sent_since_sample: u64,
    sampler: Sampler,
    sampled: bool,
    /// The drain estimate (`drain.rs`): unsent and all socket bytes as of
    /// `est_at` (the last sample or send), draining at the rate since.
    est_pending: u64,
    est_socket: u64,
    est_at: Duration,
    epoch: u64,
    counters: TpfCounters,
}

impl Conn {
    fn holding(&self) -> u64 {
        self.cached + self.in_flight
    }
    fn has_work(&self) -> bool {
        self.next < self.end || !self.holes.is_empty()
    }
}

/// Plans reads for all connections of one engine. See the module docs.
#[derive(Debug)]
pub struct Planner {
    cfg: PlanConfig,
    conns: BTreeMap<ConnId, Conn>,
    used: u64,
    service_s: Option<f64>,
    latency_s: Option<f64>,
    totals: TpfCounters,
    epochs: u64,
    /// Sum of every open connection's `socket` bytes.
    socket_held: u64,
    /// Fraction of `cfg.budget` in use (cut by evictions, grows back).
    budget_scale: f64,
    /// Last eviction report and last recovery step.
    last_pressure: Option<Duration>,
    last_recover: Duration,
    /// `T` and `B_net` as the last `poll_read` found them (`drain.rs`'s
    /// one-connection look after a send).
    last_view: (Duration, f64),
    /// The latest time any input carried.
    clock: Duration,
}

impl Planner {
    /// A planner with no connections.
    pub fn new(cfg: PlanConfig) -> Planner {
        Planner {
            cfg,
            conns: BTreeMap::new(),
            used: 0,
            service_s: None,
            latency_s: None,
            totals: TpfCounters::default(),
            epochs: 0,
            socket_held: 0,
            budget_scale: 1.0,
            last_pressure: None,
            last_recover: Duration::ZERO,
            last_view: (Duration::ZERO, 0.0),
            clock: Duration::ZERO,
        }
    }

    /// The read-ahead memory available to the process changed (the caller
    /// measures it: cgroup limit minus memory not in the page cache).
    /// Holdings above a smaller budget drain as they are sent.
    pub fn set_budget(&mut self, budget: u64) {
        self.cfg.budget = budget;
    }

    /// The budget in use now: the configured one, shrunk while pages of
    /// the planner's own reads are being evicted before they are sent.
    pub fn budget(&self) -> u64 {
        (self.cfg.budget as f64 * self.budget_scale) as u64
    }

    /// `bytes` of read-ahead were found evicted before they were sent
    /// (the caller checks residency when it takes a chunk; the bytes are
    /// sent anyway, so nothing is re-planned): the memory the budget
    /// assumed is not there, so the budget in use shrinks at once and
    /// grows back slowly once evictions stop.
    pub fn handle_pressure(&mut self, now: Duration, conn: ConnId, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.budget_scale = (self.budget_scale * PRESSURE_CUT).max(PRESSURE_FLOOR);
        self.last_pressure = Some(now);
        self.last_recover = now;
        self.totals.bytes_evicted_unused += bytes;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.counters.bytes_evicted_unused += bytes;
        }
    }

    /// Grows the budget back after a quiet spell (see `handle_pressure`).
    fn recover(&mut self, now: Duration) {
        let dt = now.saturating_sub(self.last_recover);
        self.last_recover = self.last_recover.max(now);
        let quiet = self
            .last_pressure
            .is_none_or(|p| now.saturating_sub(p) >= PRESSURE_QUIET);
        if quiet && self.budget_scale < 1.0 {
            self.budget_scale =
                (self.budget_scale + PRESSURE_RECOVERY_PER_S * dt.as_secs_f64()).min(1.0);
        }
    }

    /// Bytes in all open connections' sockets at their last samples.
    pub fn socket_held(&self) -> u64 {
        self.socket_held
    }

    /// The configuration in use.
    pub fn config(&self) -> &PlanConfig {
        &self.cfg
    }

    /// A connection starts delivering file bytes `start..end`. Re-opening a
    /// known id replaces it (its budget is freed first).
    pub fn handle_open(&mut self, _now: Duration, conn: ConnId, start: u64, end: u64) {
        self.handle_close(conn);
        self.epochs += 1;
        self.conns.insert(
            conn,
            Conn {
                end: end.max(start),
                next: start,
                cached: 0,
                in_flight: 0,
                holes: VecDeque::new(),
                socket: 0,
                sent_since_sample: 0,
                sampler: Sampler::new(),
                sampled: false,
                est_pending: 0,
                est_socket: 0,
                est_at: _now,
                epoch: self.epochs,
                counters: TpfCounters::default(),
            },
        );
    }

    /// A flow sample for `conn`. A close or reset drops the connection and
    /// frees its whole budget in this call; the caller then cancels its
    /// reads in the scheduler (see the returned events). Unknown ids get a
    /// default state.
    pub fn handle_sample(&mut self, now: Duration, conn: ConnId, s: &FlowSample) -> FlowState {
        let Some(c) = self.conns.get_mut(&conn) else {
            return FlowState::default();
        };
        self.clock = self.clock.max(now);
        let st = c.sampler.update(now, s);
        c.sampled = true;
        c.est_at = now;
        c.est_pending = st.pending;
        c.est_socket = st.pending + st.unacked;
        let socket = st.pending + st.unacked;
        self.socket_held = self.socket_held - c.socket + socket;
        c.socket = socket;
        c.sent_since_sample = 0;
        if st.events.is_gone() {
            self.handle_close(conn);
        }
        st
    }

    /// A read finished: `bytes_read` of `req` are now cached. A short read
    /// means the file ends there. `service_time` is submission to
    /// completion as the disk saw it. Reads of closed connections only
    /// teach the planner about the disk.
    pub fn handle_read_done(
        &mut self,
        now: Duration,
        req: &ReadRequest,
        bytes_read: u64,
        service_time: Duration,
    ) {
        ewma(&mut self.service_s, service_time.as_secs_f64());
        ewma(
            &mut self.latency_s,
            now.saturating_sub(req.issued_at).as_secs_f64(),
        );
        let Some(c) = self
            .conns
            .get_mut(&req.conn)
            .filter(|c| c.epoch == req.epoch)
        else {
            return;
        };
        let freed = req.len.min(c.in_flight);
        c.in_flight -= freed;
        self.used -= freed;
        let got = bytes_read.min(req.len);
        c.cached += got;
        self.used += got;
        if got < req.len {
            let eof = req.offset + got;
            c.end = c.end.min(eof);
            c.next = c.next.min(c.end);
            c.holes.retain(|&(off, _)| off < eof);
        }
    }

    /// `bytes` of `conn`'s cached read-ahead went into the socket (at the
    /// latest time the planner was given).
    pub fn handle_sent(&mut self, conn: ConnId, bytes: u64) {
        self.handle_sent_at(self.clock, conn, bytes);
    }

    /// `bytes` of `conn`'s cached read-ahead went into the socket at `now`.
    pub fn handle_sent_at(&mut self, now: Duration, conn: ConnId, bytes: u64) {
        self.clock = self.clock.max(now);
        self.add_to_estimate(now, conn, bytes);
        if let Some(c) = self.conns.get_mut(&conn) {
            let n = bytes.min(c.cached);
            c.cached -= n;
            self.used -= n;
            // The bytes now wait in the socket: neither the time to
            // starvation nor the memory in use drops until a sample shows
            // them gone.
            c.sent_since_sample += bytes;
            c.socket += bytes;
            self.socket_held += bytes;
        }
    }

    /// The cache dropped `len` bytes at `offset` of `conn`'s read-ahead
    /// before they were sent: count it and read them again first.
    pub fn handle_evicted(&mut self, conn: ConnId, offset: u64, len: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let n = len.min(c.cached);
            c.cached -= n;
            self.used -= n;
            c.counters.bytes_evicted_unused += n;
            self.totals.bytes_evicted_unused += n;
            if n > 0 {
                c.holes.push_back((offset, n));
            }
        }
    }

    /// The connection is finished or gone: forget it and free its budget at
    /// once. Returns its counters, or `None` if it was not known.
    pub fn handle_close(&mut self, conn: ConnId) -> Option<TpfCounters> {
        let c = self.conns.remove(&conn)?;
        self.used -= c.holding();
        self.socket_held -= c.socket;
        Some(c.counters)
    }

    /// The next read to queue, if any connection needs one now. Call until
    /// `None` after every input.
    #[must_use]
    pub fn poll_read(&mut self, now: Duration) -> Option<ReadRequest> {
        if self.cfg.mode == PrefetchMode::Kernel {
            return None;
        }
        self.clock = self.clock.max(now);
        self.recover(now);
        let target = self.target();
        let net = self.net_rate();
        self.last_view = (target, net);
        // Most urgent first; O(connections) per read, fine for thousands.
        let mut best: Option<(ConnId, f64, u64)> = None;
        for (&id, c) in &self.conns {
            if !c.has_work() {
                continue;
            }
            let tn = self.starvation_secs_at(c, now);
            let len = self.size_for(c, tn, target, net);
            if len > 0 && best.is_none_or(|(_, b, _)| tn < b) {
                best = Some((id, tn, len));
            }
        }
        let (id, tn, len) = best?;
        let c = self.conns.get_mut(&id)?;
        // Fixed mode is the rate-blind baseline: first come, first served.
        let tn = if self.cfg.mode == PrefetchMode::Fixed {
            0.0
        } else {
            tn
        };
        let offset = match c.holes.front_mut() {
            Some(h) => {
                let off = h.0;
                h.0 += len;
                h.1 -= len;
                if h.1 == 0 {
                    c.holes.pop_front();
                }
                off
            }
            None => {
                let off = c.next;
                c.next += len;
                off
            }
        };
        c.in_flight += len;
        self.used += len;
        let epoch = c.epoch;
        c.counters.reads_issued += 1;
        c.counters.bytes_planned += len;
        self.totals.reads_issued += 1;
        self.totals.bytes_planned += len;
        Some(ReadRequest {
            conn: id,
            offset,
            len,
            deadline: now + Duration::from_secs_f64(tn.min(1e6)),
            issued_at: now,
            epoch,
        })
    }

    /// Bytes of `c`'s next read now, 0 for none.
    fn size_for(&self, c: &Conn, tn: f64, target: Duration, net: f64) -> u64 {
        let cfg = &self.cfg;
        if let Some(&(_, hole)) = c.holes.front() {
            let len = hole.min(cfg.h_max);
            // Re-reads obey the budget too in Tcp mode; Fixed never looks.
            return match cfg.mode {
                PrefetchMode::Tcp | PrefetchMode::Auto
                    if self.used + self.socket_bytes() + len > self.budget() =>
                {
                    0
                }
                _ => len,
            };
        }
        let remaining = c.end - c.next;
        match cfg.mode {
            PrefetchMode::Kernel => 0,
            PrefetchMode::Fixed => {
                if c.holding() < cfg.fixed_window {
                    cfg.fixed_window.min(remaining)
                } else {
                    0
                }
            }
            // The hub hands `auto` over as `tcp` (`planner_policy`).
            PrefetchMode::Tcp | PrefetchMode::Auto => {
                let t = target.as_secs_f64();
                let rate = self.rate_of(c) as f64;
                let budget = self.budget();
                // The window a connection keeps buffered: `T` at its rate,
                // but at least one device-friendly read.
                let (window, tw) = self.window_of(c, t);
                if tn > tw * cfg.trigger {
                    return 0;
                }
                let floor = cfg
                    .min_read
                    .max(cfg.device_read / 2)
                    .min(cfg.h_max)
                    .min(remaining);
                let buffered = (tn * rate) as u64;
                let want = window.saturating_sub(buffered).min(cfg.h_max).max(floor);
                let free = budget.saturating_sub(self.used + self.socket_bytes());
                let share = ((budget as f64) * rate / net.max(1.0)) as u64;
                let share = share
                    .max(cfg.device_read.min(budget))
                    .saturating_sub(c.holding());
                let mut len = want.min(free).min(share).min(remaining);
                if len < remaining {
                    len -= len % cfg.page.max(1);
                }
                // Wait for a worthwhile read; near starvation half of one
                // will do, but never a crumb (each read costs a whole I/O,
                // and crumbs under memory pressure made the lab's disk
                // IOPS-bound: ~30 kB reads at 600/s).
                let near = tn <= tw * cfg.trigger / 2.0;
                if len == 0 || (len < floor && !near) || (len < floor / 2 && near) {
                    return 0;
                }
                len
            }
        }
    }

    /// Socket bytes counted against the budget (0 unless `count_socket`).
    fn socket_bytes(&self) -> u64 {
        if self.cfg.count_socket {
            // The sampled count, not the drain estimate: pages acknowledged
            // since the sample stay in the page cache until dropped
            // (`drain.rs`, module docs).
            self.socket_held
        } else {
            0
        }
    }

    /// The target buffering time `T` now (see the module docs).
    pub fn target(&self) -> Duration {
        let td = self.disk_target();
        let net = self.net_rate();
        if net > 0.0 {
            let mem = self.budget().saturating_sub(self.socket_bytes());
            td.min(Duration::from_secs_f64(mem as f64 / net))
        } else {
            td
        }
    }

    /// `T_D`, from the disk's measured service time and read latency alone.
    pub fn disk_target(&self) -> Duration {
        let Some(s) = self.service_s else {
            return self.cfg.initial_target;
        };
        let active = self.conns.values().filter(|c| c.has_work()).count().max(1);
        let cycle = active as f64 * s / self.cfg.queue_depth.max(1) as f64;
        let lat = self.latency_s.unwrap_or(0.0);
        let td = Duration::from_secs_f64((2.0 * cycle.max(lat)).min(1e6));
        td.clamp(
            self.cfg.min_target,
            self.cfg.max_target.max(self.cfg.min_target),
        )
    }

    /// Sum of the rates of connections that still have bytes to plan (`B_net`).
    fn net_rate(&self) -> f64 {
        self.conns
            .values()
            .filter(|c| c.has_work())
            .map(|c| self.rate_of(c) as f64)
            .sum()
    }

    fn rate_of(&self, c: &Conn) -> u64 {
        if c.sampled {
            c.sampler.state().rate.max(MIN_RATE)
        } else {
            self.cfg.initial_rate.max(MIN_RATE)
        }
    }

    fn starvation_secs(&self, c: &Conn) -> f64 {
        let pending = c.sampler.state().pending + c.sent_since_sample;
        (pending + c.holding()) as f64 / self.rate_of(c) as f64
    }

    /// Smoothed end-to-end read latency (issue to completion), if measured.
    pub fn read_latency(&self) -> Option<Duration> {
        self.latency_s.map(|s| Duration::from_secs_f64(s.min(1e6)))
    }

    /// Smoothed disk service time (as reported by the caller), if measured.
    pub fn service_time(&self) -> Option<Duration> {
        self.service_s.map(|s| Duration::from_secs_f64(s.min(1e6)))
    }

    /// Read-ahead bytes held now (cached + in flight, all connections).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Read-ahead bytes read and not yet sent (all connections): the part
    /// of `used` that is in memory.
    pub fn cached(&self) -> u64 {
        self.conns.values().map(|c| c.cached).sum()
    }

    /// Totals over all connections, closed ones included.
    pub fn counters(&self) -> TpfCounters {
        self.totals
    }

    /// One open connection's counters.
    pub fn conn_counters(&self, conn: ConnId) -> Option<TpfCounters> {
        self.conns.get(&conn).map(|c| c.counters)
    }

    /// One open connection's read-ahead held (cached + in flight).
    pub fn holding(&self, conn: ConnId) -> Option<u64> {
        self.conns.get(&conn).map(Conn::holding)
    }

    /// One open connection's time to starvation `T_n`.
    pub fn time_to_starvation(&self, conn: ConnId) -> Option<Duration> {
        self.conns
            .get(&conn)
            .map(|c| Duration::from_secs_f64(self.starvation_secs(c).min(1e6)))
    }

    /// Whether `conn` is open (known and not closed).
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Recomputes `used` from the connections (for tests and debug checks).
    pub fn used_recomputed(&self) -> u64 {
        self.conns.values().map(Conn::holding).sum()
    }
}

fn ewma(slot: &mut Option<f64>, x: f64) {
    *slot = Some(match *slot {
        None => x,
        Some(old) => old + (x - old) * EWMA_WEIGHT,
    });
}

mod config;
mod drain;
pub use config::PlanConfig;
pub use drain::DUE_STEP;

#[cfg(test)]
mod tests;
