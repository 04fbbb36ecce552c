//! Cue's fair shares without a configured cap (issue 14): the scheduler
//! measures each transfer's delivered rate and the aggregate over a window
//! and paces every transfer at its weighted max-min share of the measured
//! aggregate, a little above it (`HEADROOM`) so a transfer can still show
//! that it could use more.
//!
//! Why it is needed: with nothing configured the sender is rarely the
//! bottleneck. Flows in one drop-tail queue, or curls on one CPU, split the
//! capacity unequally however evenly the server hands out turns; only a
//! rate below what the winners would take lets the losers catch up.
//!
//! The level `l` (bytes/s per unit weight; a transfer's pace is
//! `weight * l * (1 + HEADROOM)`, under its other caps) is the max-min
//! share of the measured aggregate: the transfers held by a configured
//! cap, and those known to be limited elsewhere, keep their measured
//! rate; the rest of the aggregate is split by weight among the others.
//!
//! Which transfers are limited elsewhere (their client, their own path)?
//! A transfer below its pace may be one, or the loser of a drop-tail
//! queue the others share with it; one window's rates look the same. The
//! aggregate's answer to a change tells them apart, so every change of
//! the level is a *trial* judged by the next window:
//! - lowering `l` (the aggregate was split afresh) while some transfers
//!   ran below their pace: if the aggregate falls by at least half of what
//!   the others lost, those slow ones are limited elsewhere (they could
//!   not take it up) and join the set `elsewhere`; if it holds, they shared
//!   the bottleneck and took what the others gave up;
//! - when every transfer counted in `l` uses its whole pace, `l` is raised
//!   by `RAISE` (multiplicative increase), kept if the aggregate grows,
//!   so it follows a bottleneck that grows;
//! - now and then the set `elsewhere` is dropped for a window, kept if
//!   that costs the aggregate.
//!
//! A failed raise or check doubles the wait before the next (up to
//! `MAX_BACKOFF` windows). A transfer of `elsewhere` that reaches its pace
//! leaves the set.
//!
//! Computed when a report arrives and a window has passed (the caller
//! asks [`Cue::fair_due`]); no timer per transfer. A join or a departure
//! recomputes the level from the last window's measurements at once, so a
//! leaver's share is the others' in the same call.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{Cue, CueId};

/// Pace above the share, so a transfer that could go faster can show it
/// (and the aggregate is not held below the bottleneck by rounding). Kept
/// small: under a full bottleneck the excess is what the losers lose.
pub(super) const HEADROOM: f64 = 0.02;
/// A transfer delivering at least this fraction of its pace uses it all.
const SATURATED: f64 = 0.95;
/// Multiplicative raise of a trial when every transfer uses its pace.
const RAISE: f64 = 0.25;
/// A lowering or a check moving less than this fraction of the aggregate
/// is not judged (within the measurement's noise).
const MIN_GAIN: f64 = 0.03;
/// Longest wait between raises or checks, in windows.
const MAX_BACKOFF: u32 = 32;

/// Fair-share tuning (`--fair-share on`).
#[derive(Debug, Clone, PartialEq)]
pub struct FairConfig {
    /// Measurement window: rates are bytes delivered over at least this.
    pub window: Duration,
}

impl Default for FairConfig {
    fn default() -> Self {
        // Several RTTs of a WAN path, so a trial's effect is in the
        // window that judges it; short enough to converge in seconds.
        FairConfig {
            window: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// Every transfer counted in `l` used its pace: try more.
    Raise,
    /// `l` went down while these ran below their pace: are they limited
    /// elsewhere?
    Lower(Vec<CueId>),
    /// `elsewhere` dropped for a window: does that cost the aggregate?
    Check,
}

#[derive(Debug, Clone)]
struct Trial {
    kind: Kind,
    /// The aggregate before the trial.
    base: f64,
    /// The change of the aggregate (signed) predicted if the slow ones
    /// are limited elsewhere (for a raise: if there is room).
    expect: f64,
}

/// How a transfer looked in the last window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    /// Held by a configured cap below its fair pace: its rate is fixed.
    Capped,
    /// Below its pace: limited elsewhere, or losing a shared queue.
    Slow,
    /// At its pace, unpaced, or too new to tell.
    Full,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    weight: f64,
    rate: f64,
    seen: Seen,
}

/// Fair-share state, owned by [`Cue`].
#[derive(Debug)]
pub(super) struct Fair {
    cfg: FairConfig,
    started: Duration,
    /// Each transfer's delivered total at the window's start, and since when.
    base: HashMap<CueId, (u64, Duration)>,
    /// `l`; `None` until the first window (unpaced).
    level: Option<f64>,
    /// Transfers found limited elsewhere (module docs).
    elsewhere: HashSet<CueId>,
    trial: Option<Trial>,
    /// No raise before this; the wait after a failed one, in windows.
    next_raise: Duration,
    raise_backoff: u32,
    /// No check of `elsewhere` before this, and the wait after one.
    next_check: Duration,
    check_backoff: u32,
    /// The last window's measurements, and its aggregate.
    last: HashMap<CueId, Sample>,
    last_total: f64,
}

impl Fair {
    pub(super) fn new(cfg: FairConfig) -> Fair {
        Fair {
            cfg,
            started: Duration::ZERO,
            base: HashMap::new(),
            level: None,
            elsewhere: HashSet::new(),
            trial: None,
            next_raise: Duration::ZERO,
            raise_backoff: 1,
            next_check: Duration::ZERO,
            check_backoff: 1,
            last: HashMap::new(),
            last_total: 0.0,
        }
    }

    /// The pace of a transfer of weight `w` (bytes/s), if measured.
    pub(super) fn pace(&self, w: f64) -> Option<u64> {
        self.level
            .map(|l| (w * l * (1.0 + HEADROOM)).max(1.0) as u64)
    }

    pub(super) fn joined(&mut self, id: CueId, now: Duration) {
        self.base.insert(id, (0, now));
        self.last.remove(&id);
        self.elsewhere.remove(&id);
    }

    pub(super) fn left(&mut self, id: CueId) {
        self.base.remove(&id);
        self.last.remove(&id);
        self.elsewhere.remove(&id);
    }

    /// The max-min level of `total` over `xs`, where the capped ones and
    /// the slow ones `limited` says are limited keep their rate (lowest
    /// first, while below the level the rest would get); and the weight
    /// it applies to.
    fn level_of(total: f64, xs: &[(CueId, Sample)], limited: &dyn Fn(CueId) -> bool) -> (f64, f64) {
        let mut rem = total;
        let mut w_rem: f64 = xs.iter().map(|(_, s)| s.weight).sum();
        let mut fixed: Vec<&Sample> = xs
            .iter()
            .filter(|(id, s)| s.seen == Seen::Capped || (s.seen == Seen::Slow && limited(*id)))
            .map(|(_, s)| s)
            .collect();
        fixed.sort_by(|a, b| (a.rate / a.weight).total_cmp(&(b.rate / b.weight)));
        for s in fixed {
            if w_rem - s.weight <= 1e-12 || s.rate / s.weight >= rem / w_rem {
                break;
            }
            rem -= s.rate;
            w_rem -= s.weight;
        }
        (rem.max(0.0) / w_rem.max(1e-12), w_rem)
    }
}

impl Cue {
    /// Whether a fair-share window has passed (fair shares on): the caller
    /// then reads each transfer's delivered bytes and calls
    /// [`Cue::fair_window`].
    pub fn fair_due(&self, now: Duration) -> bool {
        self.fair
            .as_ref()
            .is_some_and(|f| now >= f.started + f.cfg.window)
    }

    /// A window ends: `delivered(id)` is a transfer's total bytes delivered
    /// (acknowledged by the peer; `None`: the bytes it reported sent).
    /// Measures, decides the level (module docs) and re-allocates.
    pub fn fair_window(&mut self, now: Duration, delivered: &dyn Fn(CueId) -> Option<u64>) {
        self.advance(now);
        let idle = self.cfg.idle_after;
        let Some(f) = self.fair.as_mut() else {
            return;
        };
        let window = f.cfg.window;
        let cur = f.level;
        let mut xs: Vec<(CueId, Sample)> = Vec::new();
        let mut total = 0.0;
        for (&id, t) in &self.transfers {
            let tot = delivered(id).unwrap_or(t.sent_total);
            let (b, since) = f.base.get(&id).copied().unwrap_or((tot, now));
            f.base.insert(id, (tot, now));
            if now.saturating_sub(t.last_sent) > idle {
                continue;
            }
            let dt = now.saturating_sub(since.max(f.started)).as_secs_f64();
            let rate = if dt > 0.0 {
                tot.saturating_sub(b) as f64 / dt
            } else {
                0.0
            };
            total += rate;
            let fair_pace = cur.map(|l| t.weight * l * (1.0 + HEADROOM));
            let seen = match (t.rate, fair_pace) {
                // Too new to judge, or unpaced: its demand is unknown.
                _ if dt < window.as_secs_f64() / 2.0 => Seen::Full,
                (None, _) => Seen::Full,
                (Some(r), Some(fp)) if (r as f64) < fp * 0.99 => Seen::Capped,
                (Some(r), _) if rate < r as f64 * SATURATED => Seen::Slow,
                _ => Seen::Full,
            };
            xs.push((
                id,
                Sample {
                    weight: t.weight,
                    rate,
                    seen,
                },
            ));
        }
        f.started = now;
        f.last = xs.iter().copied().collect();
        f.last_total = total;
        if xs.is_empty() {
            return;
        }
        // One that reached its pace is not limited elsewhere (any more).
        f.elsewhere
            .retain(|id| f.last.get(id).is_some_and(|s| s.seen == Seen::Slow));
        // Judge the last window's trial.
        if let Some(tr) = f.trial.take() {
            let confirmed = tr.expect != 0.0 && (total - tr.base) / tr.expect >= 0.5;
            let back = |b: &mut u32| {
                *b = (*b * 2).min(MAX_BACKOFF);
                now + window * *b
            };
            match tr.kind {
                Kind::Raise if confirmed => {
                    f.raise_backoff = 1;
                    f.next_raise = now;
                }
                Kind::Raise => f.next_raise = back(&mut f.raise_backoff),
                Kind::Lower(ids) if confirmed => {
                    f.elsewhere.extend(
                        ids.into_iter()
                            .filter(|id| f.last.get(id).is_some_and(|s| s.seen == Seen::Slow)),
                    );
                    f.check_backoff = 4;
                    f.next_check = now + window * 4;
                }
                Kind::Lower(_) => {}
                Kind::Check if confirmed => f.next_check = back(&mut f.check_backoff),
                Kind::Check => f.elsewhere.clear(),
            }
        }
        let ew = f.elsewhere.clone();
        let (mut level, w_level) = Fair::level_of(total, &xs, &|id| ew.contains(&id));
        if let Some(cur) = cur {
            let big = |d: f64| d.abs() >= MIN_GAIN * total;
            let trial = |kind, expect| {
                Some(Trial {
                    kind,
                    base: total,
                    expect,
                })
            };
            let counted = |(id, s): &&(CueId, Sample)| {
                s.seen != Seen::Capped && !(s.seen == Seen::Slow && ew.contains(id))
            };
            let suspects: Vec<CueId> = xs
                .iter()
                .filter(counted)
                .filter(|(_, s)| s.seen == Seen::Slow)
                .map(|(id, _)| *id)
                .collect();
            if level < cur && big((cur - level) * w_level) && !suspects.is_empty() {
                f.trial = trial(Kind::Lower(suspects), (level - cur) * w_level);
            } else if suspects.is_empty() && w_level > 0.0 && now >= f.next_raise {
                f.trial = trial(Kind::Raise, level * RAISE * w_level);
                level *= 1.0 + RAISE;
            } else if !ew.is_empty() && now >= f.next_check {
                let (l0, w0) = Fair::level_of(total, &xs, &|_| false);
                if big((level - l0) * w0) {
                    f.trial = trial(Kind::Check, (l0 - level) * w0);
                    level = l0;
                }
            }
        }
        if level > 0.0 {
            f.level = Some(level);
        }
        self.allocate();
    }

    /// A join or a departure: the level from the last window's
    /// measurements and the transfers there are now (the aggregate is
    /// taken to stay, so a leaver's rate is the others' and a newcomer
    /// takes its share from them).
    pub(super) fn fair_reshare(&mut self) {
        let Some(f) = self.fair.as_ref() else {
            return;
        };
        if f.level.is_none() {
            return;
        }
        let xs: Vec<(CueId, Sample)> = self
            .transfers
            .iter()
            .filter(|(_, t)| self.now.saturating_sub(t.last_sent) <= self.cfg.idle_after)
            .map(|(&id, t)| {
                let s = f.last.get(&id).copied().unwrap_or(Sample {
                    weight: 0.0,
                    rate: 0.0,
                    seen: Seen::Full,
                });
                (
                    id,
                    Sample {
                        weight: t.weight,
                        ..s
                    },
                )
            })
            .collect();
        let (level, _) = Fair::level_of(f.last_total, &xs, &|id| f.elsewhere.contains(&id));
        if level > 0.0 {
            if let Some(f) = self.fair.as_mut() {
                f.level = Some(level);
            }
        }
    }
}

#[cfg(test)]
#[path = "cue_fair_tests.rs"]
mod tests;
