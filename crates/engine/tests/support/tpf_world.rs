//! A virtual-clock world for the prefetch planner and disk scheduler: links
//! of fixed rate with a send buffer, a fake serial disk (per-request seek
//! time plus transfer time), and a page-cache model of fixed capacity that
//! evicts least recently filled data first. Test support shared by
//! tests/plan.rs and examples/tpf_sim.rs (both include it by path); it is a
//! model, not a measurement of anything.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::plan::{CaState, ConnId, FlowSample, PlanConfig, PrefetchMode, TpfCounters};
use crate::sched::{Prefetcher, ReqId, SchedConfig};

/// A serial disk: one request at a time, FIFO among submitted ones.
#[derive(Debug)]
pub struct FakeDisk {
    seek: f64,
    bw: f64,
    fifo: VecDeque<(u64, u64)>,
    busy: Option<(u64, u64, Duration)>,
    /// Bytes the disk read (completed requests).
    pub bytes_read: u64,
    /// Requests the disk served.
    pub reads: u64,
}

impl FakeDisk {
    /// `iops` seeks per second at most, `bw` bytes per second of transfer.
    pub fn new(iops: f64, bw: f64) -> FakeDisk {
        FakeDisk {
            seek: 1.0 / iops,
            bw,
            fifo: VecDeque::new(),
            busy: None,
            bytes_read: 0,
            reads: 0,
        }
    }
    fn service(&self, len: u64) -> Duration {
        Duration::from_secs_f64(self.seek + len as f64 / self.bw)
    }
    pub fn submit(&mut self, now: Duration, tag: u64, len: u64) {
        self.fifo.push_back((tag, len));
        self.start(now);
    }
    fn start(&mut self, now: Duration) {
        if self.busy.is_none() {
            if let Some((tag, len)) = self.fifo.pop_front() {
                self.busy = Some((tag, len, now + self.service(len)));
            }
        }
    }
    pub fn next_done(&self) -> Option<Duration> {
        self.busy.map(|b| b.2)
    }
    /// Finishes the request in service: (tag, len, time).
    pub fn complete(&mut self) -> Option<(u64, u64, Duration)> {
        let (tag, len, at) = self.busy.take()?;
        self.bytes_read += len;
        self.reads += 1;
        self.start(at);
        Some((tag, len, at))
    }
    /// Cancels a request not yet in service.
    pub fn cancel(&mut self, tag: u64) -> bool {
        let before = self.fifo.len();
        self.fifo.retain(|&(t, _)| t != tag);
        self.fifo.len() != before
    }
    pub fn is_idle(&self) -> bool {
        self.busy.is_none()
    }
}

/// Page-cache model: chunks of read data, evicted oldest-filled first when
/// over capacity (read-ahead pages are not touched until sent, so LRU order
/// is fill order). Sent bytes leave the model at once.
#[derive(Debug, Default)]
pub struct PageCache {
    cap: u64,
    used: u64,
    seq: u64,
    lru: BTreeMap<u64, (ConnId, u64)>,
    by_conn: HashMap<ConnId, BTreeMap<u64, (u64, u64)>>,
}

impl PageCache {
    pub fn new(cap: u64) -> PageCache {
        PageCache {
            cap,
            ..PageCache::default()
        }
    }
    pub fn used(&self) -> u64 {
        self.used
    }
    /// Adds a chunk; returns what had to be evicted (conn, offset, len).
    pub fn insert(&mut self, conn: ConnId, off: u64, len: u64) -> Vec<(ConnId, u64, u64)> {
        if len == 0 {
            return Vec::new();
        }
        self.seq += 1;
        self.lru.insert(self.seq, (conn, off));
        self.by_conn
            .entry(conn)
            .or_default()
            .insert(off, (len, self.seq));
        self.used += len;
        let mut ev = Vec::new();
        while self.used > self.cap {
            let Some((_, (c, o))) = self.lru.pop_first() else {
                break;
            };
            if let Some((l, _)) = self.by_conn.get_mut(&c).and_then(|m| m.remove(&o)) {
                self.used -= l;
                ev.push((c, o, l));
            }
        }
        ev
    }
    /// Whether byte `pos` of `conn` is cached.
    pub fn has(&self, conn: ConnId, pos: u64) -> bool {
        self.by_conn
            .get(&conn)
            .and_then(|m| m.range(..=pos).next_back())
            .is_some_and(|(&o, &(l, _))| pos < o + l)
    }
    /// Takes up to `max` contiguous bytes of `conn` from `pos`.
    pub fn consume(&mut self, conn: ConnId, mut pos: u64, max: u64) -> u64 {
        let mut got = 0;
        let Some(m) = self.by_conn.get_mut(&conn) else {
            return 0;
        };
        while got < max {
            let Some((&o, &(l, s))) = m.range(..=pos).next_back() else {
                break;
            };
            if pos >= o + l {
                break;
            }
            let skip = pos - o;
            let take = (l - skip).min(max - got);
            m.remove(&o);
            self.lru.remove(&s);
            self.used -= skip + take; // bytes before pos are stale: drop them too
            let rest = l - skip - take;
            if rest > 0 {
                m.insert(pos + take, (rest, s));
                self.lru.insert(s, (conn, pos + take));
            }
            got += take;
            pos += take;
        }
        got
    }
    pub fn drop_conn(&mut self, conn: ConnId) {
        if let Some(m) = self.by_conn.remove(&conn) {
            for (_, (l, s)) in m {
                self.used -= l;
                self.lru.remove(&s);
            }
        }
    }
}

/// One simulated connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnSpec {
    /// Link rate, bytes per second.
    pub rate: u64,
    /// Class label for reports (e.g. 0 = fast, 1 = slow).
    pub class: usize,
    /// The peer resets the connection at this time.
    pub reset_at: Option<Duration>,
    /// The congestion window (and so the link rate) halves at this time.
    pub cut_at: Option<Duration>,
}

/// World tuning.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    pub plan: PlanConfig,
    pub sched: SchedConfig,
    /// Disk: seeks per second and bytes per second.
    pub iops: f64,
    pub disk_bw: f64,
    /// Page-cache capacity for read-ahead (all modes).
    pub cache: u64,
    /// Unsent bytes a socket takes.
    pub sndbuf: u64,
    pub file_len: u64,
    pub tick: Duration,
    pub sample_every: Duration,
    pub duration: Duration,
    /// Starvation before this time is start-up and not counted.
    pub warmup: Duration,
    /// Read-ahead window of the kernel model (`Kernel` mode).
    pub kernel_window: u64,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            plan: PlanConfig::default(),
            sched: SchedConfig::default(),
            iops: 150.0,
            disk_bw: 40e6,
            cache: 256 << 20,
            sndbuf: 64 << 10,
            file_len: 1 << 30,
            tick: Duration::from_millis(10),
            sample_every: Duration::from_millis(100),
            duration: Duration::from_secs(60),
            warmup: Duration::from_secs(10),
            kernel_window: 128 << 10,
        }
    }
}

/// Per-connection results.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnReport {
    pub class: usize,
    pub rate: u64,
    pub delivered: u64,
    /// Time with an empty socket after warm-up while alive.
    pub starved: Duration,
    /// Mean read-ahead held (planner's cached + in flight), sampled per tick after warm-up.
    pub mean_holding: f64,
    /// Mean bytes buffered ahead of the link (socket's unsent + read-ahead held).
    pub mean_buffered: f64,
}

/// What a run produced.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub conns: Vec<ConnReport>,
    pub disk_bytes: u64,
    pub disk_reads: u64,
    /// Read bytes evicted from the cache model before they were sent.
    pub evicted_unused: u64,
    /// Disk bytes read for connections after they were reset.
    pub read_after_reset: u64,
    pub max_planner_used: u64,
    pub max_cache_used: u64,
    pub counters: TpfCounters,
}

#[derive(Debug, Default)]
struct Link {
    rate: f64,
    carry: f64,
    notsent: u64,
    send_pos: u64,
    delivered: u64,
    alive: bool,
    cwnd: u32,
    cut_pending: bool,
    sent_since_sample: u64,
    starved_since_sample: bool,
    starved: Duration,
    holding_sum: f64,
    buffered_sum: f64,
    holding_n: u64,
    // Kernel mode read-ahead model.
    ra_next: u64,
    ra_inflight: Vec<(u64, u64)>,
}

/// Tags of kernel-mode reads (no scheduler) start here.
const KERNEL_TAG: u64 = 1 << 62;

/// The world. Build, then `run`.
pub struct World {
    cfg: WorldConfig,
    specs: Vec<ConnSpec>,
    links: Vec<Link>,
    pub pf: Prefetcher,
    disk: FakeDisk,
    cache: PageCache,
    kernel_reads: HashMap<u64, (usize, u64, u64)>,
    next_kernel_tag: u64,
    report: Report,
    /// Check planner/scheduler invariants after every step (tests).
    pub check: bool,
}

impl World {
    pub fn new(cfg: WorldConfig, specs: Vec<ConnSpec>) -> World {
        let mut pf = Prefetcher::new(cfg.plan.clone(), cfg.sched);
        let mut links = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            pf.handle_open(Duration::ZERO, ConnId(i as u64), 0, cfg.file_len);
            links.push(Link {
                rate: s.rate as f64,
                alive: true,
                cwnd: 10,
                ..Link::default()
            });
        }
        World {
            disk: FakeDisk::new(cfg.iops, cfg.disk_bw),
            cache: PageCache::new(cfg.cache),
            cfg,
            specs,
            links,
            pf,
            kernel_reads: HashMap::new(),
            next_kernel_tag: KERNEL_TAG,
            report: Report::default(),
            check: false,
        }
    }

    pub fn run(mut self) -> Report {
        let mut now = Duration::ZERO;
        let mut next_sample = Duration::ZERO;
        self.pump(now);
        while now < self.cfg.duration {
            let end = now + self.cfg.tick;
            while let Some(t) = self.disk.next_done() {
                if t > end {
                    break;
                }
                if let Some((tag, len, at)) = self.disk.complete() {
                    self.disk_done(at, tag, len);
                    self.pump(at);
                }
            }
            now = end;
            self.links_step(now);
            self.events(now);
            if now >= next_sample {
                self.samples(now);
                next_sample = now + self.cfg.sample_every;
            }
            self.pump(now);
            self.observe(now);
            if std::env::var_os("TPF_TRACE").is_some() && now.as_millis().is_multiple_of(5000) {
                eprintln!(
                    "t={:?} T={:?} T_D={:?} lat={:?} svc={:?} used={}MiB q={} d={} s={}",
                    now,
                    self.pf.planner().target(),
                    self.pf.planner().disk_target(),
                    self.pf.planner().read_latency(),
                    self.pf.planner().service_time(),
                    self.pf.planner().used() >> 20,
                    self.pf.scheduler().queued(),
                    self.pf.scheduler().delayed(),
                    self.pf.scheduler().submitted()
                );
            }
        }
        self.finish()
    }

    fn disk_done(&mut self, at: Duration, tag: u64, len: u64) {
        if tag >= KERNEL_TAG {
            let Some((i, off, l)) = self.kernel_reads.remove(&tag) else {
                return;
            };
            let link = &mut self.links[i];
            link.ra_inflight.retain(|&(o, _)| o != off);
            if !link.alive {
                self.report.read_after_reset += l;
                return;
            }
            let ev = self.cache.insert(ConnId(i as u64), off, l);
            self.report.evicted_unused += ev.iter().map(|e| e.2).sum::<u64>();
            return;
        }
        let Some(c) = self.pf.handle_complete(at, ReqId(tag), len) else {
            return;
        };
        if c.cancelled {
            self.report.read_after_reset += len;
            return;
        }
        let ev = self.cache.insert(c.req.conn, c.req.offset, len);
        for (conn, off, l) in ev {
            self.report.evicted_unused += l;
            self.pf.handle_evicted(conn, off, l);
        }
    }

    fn pump(&mut self, now: Duration) {
        if self.cfg.plan.mode == PrefetchMode::Kernel {
            self.kernel_readahead(now);
            return;
        }
        while let Some(id) = self.pf.poll_cancel() {
            if self.disk.cancel(id.0) {
                let _ = self.pf.handle_complete(now, id, 0);
            }
        }
        while let Some(s) = self.pf.poll_submit(now) {
            self.disk.submit(now, s.id.0, s.req.len);
        }
    }

    /// Linux-like read-ahead: a sync read on a miss, and the next window
    /// queued whenever less than one window is ahead of the sender.
    fn kernel_readahead(&mut self, now: Duration) {
        let w = self.cfg.kernel_window;
        for i in 0..self.links.len() {
            let conn = ConnId(i as u64);
            let (alive, pos) = (self.links[i].alive, self.links[i].send_pos);
            if !alive || pos >= self.cfg.file_len {
                continue;
            }
            let covered =
                |l: &Link, p: u64| l.ra_inflight.iter().any(|&(o, n)| p >= o && p < o + n);
            if !self.cache.has(conn, pos) && !covered(&self.links[i], pos) {
                // Miss (never read, or evicted): read from here.
                let len = w.min(self.cfg.file_len - pos);
                self.kernel_read(now, i, pos, len);
                let l = &mut self.links[i];
                l.ra_next = l.ra_next.max(pos + len);
            }
            let l = &self.links[i];
            if l.ra_next < self.cfg.file_len && l.ra_next.saturating_sub(pos) < w {
                let off = l.ra_next;
                let len = w.min(self.cfg.file_len - off);
                self.kernel_read(now, i, off, len);
                self.links[i].ra_next = off + len;
            }
        }
    }

    fn kernel_read(&mut self, now: Duration, i: usize, off: u64, len: u64) {
        let tag = self.next_kernel_tag;
        self.next_kernel_tag += 1;
        self.kernel_reads.insert(tag, (i, off, len));
        self.links[i].ra_inflight.push((off, len));
        self.disk.submit(now, tag, len);
    }

    fn links_step(&mut self, now: Duration) {
        let dt = self.cfg.tick.as_secs_f64();
        for (i, l) in self.links.iter_mut().enumerate() {
            if !l.alive {
                continue;
            }
            let budget = l.rate * dt + l.carry;
            let want = budget.floor() as u64;
            l.carry = budget - want as f64;
            let sent = want.min(l.notsent);
            if sent < want && l.send_pos < self.cfg.file_len {
                l.starved_since_sample = true;
                if now > self.cfg.warmup {
                    l.starved += self.cfg.tick;
                }
                l.carry = 0.0;
            }
            l.notsent -= sent;
            l.delivered += sent;
            l.sent_since_sample += sent;
            let space = self.cfg.sndbuf - l.notsent;
            let got = self.cache.consume(ConnId(i as u64), l.send_pos, space);
            l.notsent += got;
            l.send_pos += got;
            let _ = self.pf.handle_sent(now, ConnId(i as u64), got);
        }
    }

    fn events(&mut self, now: Duration) {
        for i in 0..self.links.len() {
            let s = self.specs[i];
            let l = &mut self.links[i];
            if l.alive && s.cut_at.is_some_and(|t| now >= t) && l.cwnd == 10 {
                l.rate /= 2.0;
                l.cwnd = 5;
                l.cut_pending = true;
            }
            if l.alive && s.reset_at.is_some_and(|t| now >= t) {
                l.alive = false;
                let conn = ConnId(i as u64);
                let st = self.pf.handle_sample(
                    now,
                    conn,
                    &FlowSample {
                        reset: true,
                        ..FlowSample::default()
                    },
                );
                assert!(st.events.reset);
                self.cache.drop_conn(conn);
            }
        }
    }

    fn samples(&mut self, now: Duration) {
        let every = self.cfg.sample_every.as_secs_f64();
        for i in 0..self.links.len() {
            let l = &mut self.links[i];
            if !l.alive {
                continue;
            }
            let (rate, app_limited) = if l.starved_since_sample {
                ((l.sent_since_sample as f64 / every) as u64, true)
            } else {
                (l.rate as u64, false)
            };
            let s = FlowSample {
                delivery_rate: rate,
                app_limited,
                rtt: Duration::from_millis(50),
                cwnd: l.cwnd,
                notsent_bytes: l.notsent,
                ca_state: if l.cut_pending {
                    CaState::Recovery
                } else {
                    CaState::Open
                },
                ..FlowSample::default()
            };
            l.cut_pending = false;
            l.sent_since_sample = 0;
            l.starved_since_sample = false;
            let conn = ConnId(i as u64);
            self.pf.handle_sample(now, conn, &s);
        }
    }

    fn observe(&mut self, now: Duration) {
        let used = self.pf.planner().used();
        self.report.max_planner_used = self.report.max_planner_used.max(used);
        self.report.max_cache_used = self.report.max_cache_used.max(self.cache.used());
        if now > self.cfg.warmup {
            for (i, l) in self.links.iter_mut().enumerate() {
                if let Some(h) = self.pf.planner().holding(ConnId(i as u64)) {
                    l.holding_sum += h as f64;
                    l.buffered_sum += (h + l.notsent) as f64;
                    l.holding_n += 1;
                }
            }
        }
        if self.check {
            assert_eq!(
                used,
                self.pf.planner().used_recomputed(),
                "planner accounting drifted"
            );
            if self.cfg.plan.mode == PrefetchMode::Tcp {
                assert!(used <= self.cfg.plan.budget, "budget exceeded: {used}");
            }
            for (i, l) in self.links.iter().enumerate() {
                if !l.alive {
                    assert!(
                        !self.pf.scheduler().holds(ConnId(i as u64)),
                        "reads kept for a reset connection"
                    );
                    assert!(!self.pf.planner().is_open(ConnId(i as u64)));
                }
            }
        }
    }

    fn finish(mut self) -> Report {
        self.report.counters = self.pf.counters();
        self.report.disk_bytes = self.disk.bytes_read;
        self.report.disk_reads = self.disk.reads;
        self.report.conns = self
            .links
            .iter()
            .zip(&self.specs)
            .map(|(l, s)| ConnReport {
                class: s.class,
                rate: s.rate,
                delivered: l.delivered,
                starved: l.starved,
                mean_holding: if l.holding_n > 0 {
                    l.holding_sum / l.holding_n as f64
                } else {
                    0.0
                },
                mean_buffered: if l.holding_n > 0 {
                    l.buffered_sum / l.holding_n as f64
                } else {
                    0.0
                },
            })
            .collect();
        self.report
    }
}
