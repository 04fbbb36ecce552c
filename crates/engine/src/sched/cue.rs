//! Cue: fair, paced sending across transfers, sans-I/O (issue 14; the
//! name and the "k blocks per turn, then yield" idea are from the Cue
//! paper in ../shared/papers).
//!
//! Two decisions, both computed here without sockets or clocks:
//! - **Turns** (deficit round robin): among the transfers whose sockets
//!   are writable, the one at the head of the ring may send up to its
//!   deficit, topped up by its quantum (`k` times its share of the
//!   largest weight) each time its turn comes, then goes to the back.
//!   Where the CPU or the event loop is the bottleneck this gives each
//!   transfer (and each class) bytes in proportion to its weight, and it
//!   bounds how long one sender holds the loop (the paper's point).
//! - **Rates** (weighted water-filling, "progressive filling"): the rate
//!   of every active transfer rises in proportion to its weight until it
//!   meets a cap: its own, its user's (shared by the user's transfers)
//!   or the server's (shared by all). A transfer that meets a cap keeps
//!   that rate and the rest go on rising, so a share nobody can use is
//!   taken by the others. A transfer with no binding cap gets no rate
//!   (unpaced). Transfers idle for `idle_after` hold no share; a
//!   transfer that leaves frees its share in the same call.
//!
//! A transfer's weight is its class's weight divided by the active
//! transfers of that class, so classes share by weight whatever their
//! number of transfers, and transfers of one class share equally.
//!
//! The caller applies the rates with the kernel's pacing
//! (`SO_MAX_PACING_RATE`, [`Cue::poll_pace`]); [`Cue::next_turn`] also
//! holds a capped transfer to its rate with a token bucket (for callers
//! that cannot pace in the kernel, and for the virtual-clock tests).
//! Events in: [`Cue::register`], [`Cue::gone`], [`Cue::writable`],
//! [`Cue::sent`], [`Cue::advance`]; `now` is passed in.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

#[path = "cue_fair.rs"]
mod fair;
#[path = "cue_idle.rs"]
mod idle;
#[path = "cue_rates.rs"]
mod rates;
pub use fair::FairConfig;

/// Identifies one transfer (a data connection) to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CueId(pub u64);

/// Scheduler tuning.
#[derive(Debug, Clone, PartialEq)]
pub struct CueConfig {
    /// Bytes per turn of a transfer of the largest weight (`k`).
    pub quantum: u64,
    /// Server-wide cap in bytes/s, shared by all active transfers.
    pub server_cap: Option<u64>,
    /// A transfer that sent nothing for this long holds no share.
    pub idle_after: Duration,
    /// Token bucket depth of a capped transfer, in time at its rate (its
    /// largest burst after a pause).
    pub burst: Duration,
    /// Class weights; a class not named here weighs 1.
    pub classes: Vec<(String, f64)>,
    /// Fair shares of the measured aggregate (`cue_fair.rs`); `None`: off.
    pub fair: Option<FairConfig>,
}

impl Default for CueConfig {
    fn default() -> Self {
        CueConfig {
            quantum: 4 << 20,
            server_cap: None,
            // Longer than a paced sender's sleep between wake-ups (half a
            // rate-sized mark, ~2 s with the default refill time), or a
            // slow transfer would lose and regain its share every wake-up.
            idle_after: Duration::from_secs(5),
            burst: Duration::from_millis(100),
            classes: Vec::new(),
            fair: None,
        }
    }
}

/// What a transfer registers with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CueSpec {
    /// Its class (empty: `default`).
    pub class: String,
    /// Its user, whose cap its user's transfers share.
    pub user: Option<String>,
    /// Its own cap, bytes/s.
    pub cap: Option<u64>,
    /// Its user's cap, bytes/s (the latest registration's value holds).
    pub user_cap: Option<u64>,
}

/// A turn: `id` may send up to `bytes` now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Whose turn.
    pub id: CueId,
    /// Most bytes it may send in this turn.
    pub bytes: u64,
}

/// A pacing rate to set on a transfer's socket (`None`: unpaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Whose socket.
    pub id: CueId,
    /// Bytes per second, or no cap.
    pub rate: Option<u64>,
}

/// A class as `/metrics` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassStat {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: f64,
    /// Bytes its transfers reported sent.
    pub bytes: u64,
    /// Registered transfers.
    pub transfers: u64,
    /// Transfers holding a share now (not idle).
    pub active: u64,
    /// Sum of its transfers' rates (bytes/s) when all are capped; `None`
    /// when one of them is unpaced.
    pub rate: Option<u64>,
}

#[derive(Debug)]
struct Transfer {
    class: usize,
    user: Option<String>,
    cap: Option<u64>,
    last_sent: Duration,
    ready: bool,
    in_ring: bool,
    deficit: u64,
    /// Token bucket (bytes) and when it was last filled; only used while
    /// `rate` is `Some`.
    tokens: f64,
    filled: Duration,
    rate: Option<u64>,
    paced: Option<Option<u64>>,
    /// Queued in `pace`.
    in_pace: bool,
    weight: f64,
    /// Bytes reported sent over its life (the fair shares' measure when
    /// the caller has no delivered count).
    sent_total: u64,
    /// Its delivered total when [`Cue::keep_alive`] last looked.
    acked: u64,
}

#[derive(Debug)]
struct Class {
    name: String,
    weight: f64,
    bytes: u64,
}

/// The scheduler. See the module docs.
#[derive(Debug)]
pub struct Cue {
    cfg: CueConfig,
    classes: Vec<Class>,
    transfers: BTreeMap<CueId, Transfer>,
    user_caps: HashMap<String, u64>,
    ring: VecDeque<CueId>,
    pace: VecDeque<CueId>,
    now: Duration,
    /// When `advance` last looked for transfers gone idle.
    scanned: Duration,
    /// When `keep_alive` last looked.
    alive_checked: Duration,
    /// The largest weight of an active transfer (for quanta).
    max_weight: f64,
    /// Active transfers (at the last `reweight`).
    active_count: usize,
    /// Fair shares without a configured cap (`cue_fair.rs`).
    fair: Option<fair::Fair>,
}

/// Relative slack when comparing fill levels (floating point).
const EPS: f64 = 1e-9;
/// Smallest quantum, so a light transfer's turn is still worth a wake-up.
const MIN_QUANTUM: u64 = 16 << 10;

impl Cue {
    /// An empty scheduler.
    pub fn new(cfg: CueConfig) -> Cue {
        let classes = cfg
            .classes
            .iter()
            .map(|(n, w)| Class {
                name: n.clone(),
                weight: if *w > 0.0 { *w } else { 1.0 },
                bytes: 0,
            })
            .collect();
        Cue {
            fair: cfg.fair.clone().map(fair::Fair::new),
            cfg,
            classes,
            transfers: BTreeMap::new(),
            user_caps: HashMap::new(),
            ring: VecDeque::new(),
            pace: VecDeque::new(),
            now: Duration::ZERO,
            scanned: Duration::ZERO,
            alive_checked: Duration::ZERO,
            max_weight: 1.0,
            active_count: 0,
        }
    }

    fn class_index(&mut self, name: &str) -> usize {
        let name = if name.is_empty() { "default" } else { name };
        if let Some(i) = self.classes.iter().position(|c| c.name == name) {
            return i;
        }
        self.classes.push(Class {
            name: name.to_string(),
            weight: 1.0,
            bytes: 0,
        });
        self.classes.len() - 1
    }

    /// A transfer arrives (or changes its spec: registering an id again
    /// replaces it). It counts as active from now.
    pub fn register(&mut self, now: Duration, id: CueId, spec: CueSpec) {
        self.now = self.now.max(now);
        let class = self.class_index(&spec.class);
        if let (Some(u), Some(c)) = (&spec.user, spec.user_cap) {
            self.user_caps.insert(u.clone(), c);
        }
        let old = self.transfers.remove(&id);
        self.transfers.insert(
            id,
            Transfer {
                class,
                user: spec.user,
                cap: spec.cap.filter(|&c| c > 0),
                last_sent: now,
                ready: old.as_ref().is_some_and(|t| t.ready),
                in_ring: old.as_ref().is_some_and(|t| t.in_ring),
                deficit: 0,
                tokens: 0.0,
                filled: now,
                rate: None,
                paced: old.as_ref().and_then(|t| t.paced),
                in_pace: old.is_some_and(|t| t.in_pace),
                weight: 1.0,
                sent_total: 0,
                acked: 0,
            },
        );
        if let Some(f) = self.fair.as_mut() {
            f.joined(id, now);
        }
        self.reshare();
    }

    /// Membership changed: weights, then the fair level, then the rates.
    fn reshare(&mut self) {
        self.reweight();
        self.fair_reshare();
        self.allocate();
    }

    /// A transfer left: its share is free from this call on.
    pub fn gone(&mut self, now: Duration, id: CueId) {
        self.now = self.now.max(now);
        if self.transfers.remove(&id).is_some() {
            self.ring.retain(|&r| r != id);
            self.pace.retain(|&r| r != id);
            if let Some(f) = self.fair.as_mut() {
                f.left(id);
            }
            self.reshare();
        }
    }

    /// A transfer's socket can take data: it joins the ring.
    pub fn writable(&mut self, now: Duration, id: CueId) {
        self.advance(now);
        if let Some(t) = self.transfers.get_mut(&id) {
            t.ready = true;
            if !t.in_ring {
                t.in_ring = true;
                self.ring.push_back(id);
            }
        }
    }

    /// A transfer sent `bytes` (in its turn, or on its own when the
    /// caller does not ask for turns); `still_writable` false takes it out
    /// of the ring until [`Cue::writable`].
    pub fn sent(&mut self, now: Duration, id: CueId, bytes: u64, still_writable: bool) {
        let idle_after = self.cfg.idle_after;
        let was_idle;
        {
            let Some(t) = self.transfers.get_mut(&id) else {
                return;
            };
            was_idle = now.saturating_sub(t.last_sent) > idle_after;
            if bytes > 0 {
                t.last_sent = now;
            }
            t.sent_total += bytes;
            t.deficit = t.deficit.saturating_sub(bytes);
            Self::fill(t, now, self.cfg.burst, self.cfg.quantum);
            t.tokens -= bytes as f64;
            t.ready = still_writable;
            if !still_writable {
                // DRR: a flow that empties its queue loses its deficit.
                t.deficit = 0;
            }
            let c = t.class;
            self.classes[c].bytes += bytes;
        }
        if was_idle && bytes > 0 {
            self.allocate();
        }
        self.advance(now);
    }

    /// Time passes: transfers idle for `idle_after` give up their share.
    /// Looked for at most every `idle_after / 50` (a scan of every
    /// transfer; a report per turn must not pay it each time).
    pub fn advance(&mut self, now: Duration) {
        if now <= self.now {
            return;
        }
        self.now = now;
        if now < self.scanned + self.cfg.idle_after / 50 {
            return;
        }
        let before = self.scanned;
        self.scanned = now;
        let idle = self.cfg.idle_after;
        // Only a transfer that crossed into idleness since the last call
        // changes the allocation.
        let crossed = self.transfers.values().any(|t| {
            before.saturating_sub(t.last_sent) <= idle && now.saturating_sub(t.last_sent) > idle
        });
        if crossed {
            self.allocate();
        }
    }

    fn active(&self, t: &Transfer) -> bool {
        self.now.saturating_sub(t.last_sent) <= self.cfg.idle_after
    }

    fn fill(t: &mut Transfer, now: Duration, burst: Duration, quantum: u64) {
        if let Some(r) = t.rate {
            let dt = now.saturating_sub(t.filled).as_secs_f64();
            let depth = (r as f64 * burst.as_secs_f64()).max(MIN_QUANTUM.min(quantum) as f64);
            t.tokens = (t.tokens + r as f64 * dt).min(depth);
        }
        t.filled = now;
    }

    /// The next turn: who may send and how much. `None` when no transfer
    /// in the ring may send now (none writable, or the capped ones have
    /// used their tokens: [`Cue::next_refill`] says when to ask again).
    pub fn next_turn(&mut self, now: Duration) -> Option<Grant> {
        self.advance(now);
        for _ in 0..self.ring.len() {
            let id = self.ring.pop_front()?;
            let q = self.quantum(id);
            let (burst, quantum) = (self.cfg.burst, self.cfg.quantum);
            let Some(t) = self.transfers.get_mut(&id) else {
                continue;
            };
            if !t.ready {
                t.in_ring = false;
                t.deficit = 0;
                continue;
            }
            self.ring.push_back(id);
            Self::fill(t, now, burst, quantum);
            if t.rate.is_some() && t.tokens < 1.0 {
                continue;
            }
            t.deficit += q;
            let mut bytes = t.deficit;
            if t.rate.is_some() {
                bytes = bytes.min(t.tokens as u64);
                // Tokens cap this turn; what is left of the quantum is
                // not banked beyond one quantum.
                t.deficit = t.deficit.min(q);
            }
            return Some(Grant { id, bytes });
        }
        None
    }

    /// When the earliest capped transfer in the ring has a token again.
    pub fn next_refill(&self) -> Option<Duration> {
        self.ring
            .iter()
            .filter_map(|id| self.transfers.get(id))
            .filter(|t| t.ready)
            .filter_map(|t| {
                let r = t.rate? as f64;
                let need = (1.0 - t.tokens).max(0.0);
                Some(t.filled + Duration::from_secs_f64(need / r))
            })
            .min()
    }

    /// `id`'s quantum: `k` scaled by its weight against the heaviest
    /// active transfer's.
    pub fn quantum(&self, id: CueId) -> u64 {
        let Some(t) = self.transfers.get(&id) else {
            return self.cfg.quantum;
        };
        let max = self.max_weight;
        if max <= 0.0 || t.weight >= max {
            return self.cfg.quantum;
        }
        ((self.cfg.quantum as f64 * t.weight / max) as u64).max(MIN_QUANTUM.min(self.cfg.quantum))
    }

    /// `id`'s allocated rate (bytes/s; `None`: unpaced).
    pub fn rate(&self, id: CueId) -> Option<u64> {
        self.transfers.get(&id).and_then(|t| t.rate)
    }

    /// The next pacing change to apply to a socket.
    pub fn poll_pace(&mut self) -> Option<Pace> {
        while let Some(id) = self.pace.pop_front() {
            if let Some(t) = self.transfers.get_mut(&id) {
                t.in_pace = false;
                if t.paced != Some(t.rate) {
                    t.paced = Some(t.rate);
                    return Some(Pace { id, rate: t.rate });
                }
            }
        }
        None
    }

    /// Every class with its counters.
    pub fn classes(&self) -> Vec<ClassStat> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mine = self.transfers.values().filter(|t| t.class == i);
                let mut rate = Some(0u64);
                let (mut n, mut active) = (0, 0);
                for t in mine {
                    n += 1;
                    if self.active(t) {
                        active += 1;
                    }
                    rate = match (rate, t.rate) {
                        (Some(a), Some(b)) => Some(a + b),
                        _ => None,
                    };
                }
                ClassStat {
                    name: c.name.clone(),
                    weight: c.weight,
                    bytes: c.bytes,
                    transfers: n,
                    active,
                    rate,
                }
            })
            .collect()
    }
}

/// Jain's fairness index of `xs`: 1 when all are equal, 1/n when one
/// has everything.
pub fn jain(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if s2 == 0.0 {
        1.0
    } else {
        s * s / (n * s2)
    }
}

#[cfg(test)]
#[path = "cue_tests.rs"]
mod tests;
