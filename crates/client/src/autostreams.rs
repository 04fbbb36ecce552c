//! How many parallel streams a download uses when `-p` is not given: an
//! online search in the spirit of Falcon (Arifuzzaman et al., IEEE TPDS
//! 2023). Sans-I/O: the caller feeds cumulative [`Sample`]s (time, payload
//! bytes, loss events, round-trip time) and applies the stream count the
//! controller answers with; time is only what the samples say, so the
//! tests run on a virtual clock.
//!
//! The controller measures one *epoch* at a stream count (after letting
//! new streams settle), scores it with Falcon's utility
//!
//! ```text
//! u(n) = T * (K^-n - B * L)      T throughput, L loss rate, K = 1.02, B = 10
//! ```
//!
//! and moves: first doubling (1, 2, 4, 8, ...) while each doubling gains
//! at least [`CLIMB_GAIN`], then one stream at a time, keeping a step only
//! when it pays. `K^-n` makes a stream that adds nothing cost about 2 %,
//! so the search stops at the knee of the throughput curve instead of
//! drifting upward; the loss term makes streams that only steal from each
//! other (or from a competitor) cost more than they bring, which is what
//! lets two transfers on one bottleneck settle at similar counts instead
//! of racing upward. A loss rate past [`LOSS_LIMIT`] cuts the count at
//! once, without waiting for a comparison.
//!
//! Streams are only added while the path shows room. It has none when
//! its bottleneck queue has overflowed (a loss was seen) and still stands
//! (the epoch's round trip above [`ROOM`] times the least seen in the
//! transfer): a stream that fills the bottleneck builds a queue there
//! and its round trip grows (a drop-tail queue of 2 BDP tripled it),
//! while one held back by random loss or by a window leaves the queue
//! empty. The round trip alone is not enough: the receiver's estimate
//! (`tcpi_rcv_rtt`) of a connection the sender paces grows with the
//! pacing (11 -> 15 ms on loopback at 8 MB/s), and more streams are what
//! a per-connection pace needs. Probing a second stream on a path one
//! stream fills cost 25-50 % of a 200 MB download at 400 Mbit/s 50 ms
//! (a split or an FTP restart and a new slow start, for nothing), which
//! is why `-p 1` was the default.

use std::time::Duration;

/// Most streams the controller asks for (the `-p` maximum).
pub const MAX_STREAMS: u32 = 64;

/// Falcon's per-stream cost base: each stream costs about 2 % of the
/// utility, so a stream must bring more than that to stay.
const K: f64 = 1.02;

/// Falcon's loss penalty: 1 % loss costs 10 % of the utility.
const B: f64 = 10.0;

/// A doubling must raise the utility by this share to be followed by the
/// next one (below it, measurement noise could be all it saw).
const CLIMB_GAIN: f64 = 0.05;

/// While doubling, a count's rate is taken as settled once an epoch
/// differs from the one before by less than this share.
const SETTLED: f64 = 0.10;

/// Most epochs measured at one count while doubling, settled or not.
const SETTLE_TRIES: u32 = 4;

/// A one-stream step up is kept when it raises the utility by this much.
const STEP_GAIN: f64 = 0.02;

/// A one-stream step down is kept when it loses less than this (fewer
/// streams for the same rate are better for everyone on the path).
const STEP_LOSS: f64 = 0.01;

/// Loss rate (loss events per segment) past which streams are cut at
/// once: 1 % is far beyond what a well-run path shows.
pub const LOSS_LIMIT: f64 = 0.01;

/// Bytes per segment used to turn bytes into a packet count for the loss
/// rate (an Ethernet MSS).
const SEGMENT: f64 = 1448.0;

/// Epochs held at a settled count before it is probed again (a competitor
/// may have come or gone).
const HOLD_EPOCHS: u32 = 4;

/// The path has room for another stream while the epoch's mean round trip
/// is below this multiple of the least seen (no standing queue).
pub const ROOM: f64 = 1.25;

/// A cumulative reading of the transfer, taken by the caller (about every
/// 100 ms is plenty).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Time since the transfer started.
    pub at: Duration,
    /// Payload bytes received so far, over all streams.
    pub bytes: u64,
    /// Loss events so far, over all streams (retransmits at a sender; at
    /// a receiver, the looks at a connection that found new out-of-order
    /// segments: one loss puts a whole window out of order, so the
    /// segments themselves would count each loss hundreds of times).
    pub lost: u64,
    /// A round-trip estimate (zero if unknown): epochs scale with it.
    pub rtt: Duration,
}

/// What one epoch measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epoch {
    /// When it ended (time since the transfer started).
    pub at: Duration,
    /// Streams during the epoch.
    pub streams: u32,
    /// Bytes per second.
    pub rate: f64,
    /// Loss events per segment.
    pub loss: f64,
    /// Falcon utility.
    pub utility: f64,
    /// Mean round trip of the samples in the epoch (zero: unknown).
    pub rtt: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Doubling; `prev` is the last epoch before this count.
    Climb { prev: Option<Epoch> },
    /// One step away from `from`, to see whether it pays.
    Step { from: Epoch, up: bool },
    /// At a settled count; probe after `left` more epochs, upward first
    /// when `up`.
    Hold { left: u32, up: bool },
}

/// The stream-count controller of one transfer.
#[derive(Debug, Clone)]
pub struct Controller {
    n: u32,
    max: u32,
    phase: Phase,
    /// Measuring starts here (after the settle time), from these counts.
    start: Option<Sample>,
    /// The stream count changed at this time: wait before measuring.
    changed_at: Duration,
    /// The last epoch's measurement at the current count.
    last: Option<Epoch>,
    /// Every epoch, for `--stats` and tests.
    history: Vec<Epoch>,
    /// The last epoch at this count and how many were measured: a count
    /// is judged once its rate holds still (a new connection's slow
    /// start, or a restarted transfer's first blocks, are not the count's
    /// doing).
    here: Option<Epoch>,
    tries: u32,
    /// Least round trip seen in the transfer (the path without a queue).
    rtt_min: Option<Duration>,
    /// A loss was seen in the transfer (a queue somewhere overflowed).
    lost_any: bool,
    /// Round trips summed over the epoch being measured, and their count.
    rtt_sum: Duration,
    rtt_n: u32,
}

impl Controller {
    /// A controller that starts at one stream and never asks for more
    /// than `max` (at least 1).
    pub fn new(max: u32) -> Controller {
        Controller {
            n: 1,
            max: max.clamp(1, MAX_STREAMS),
            phase: Phase::Climb { prev: None },
            start: None,
            changed_at: Duration::ZERO,
            last: None,
            history: Vec::new(),
            here: None,
            tries: 0,
            rtt_min: None,
            lost_any: false,
            rtt_sum: Duration::ZERO,
            rtt_n: 0,
        }
    }

    /// Whether the path had room for more streams during `e`: no queue
    /// that has overflowed and still stands (unknown round trips: room,
    /// as before the gate existed).
    fn room(&self, e: &Epoch) -> bool {
        match self.rtt_min {
            Some(min) if !e.rtt.is_zero() && self.lost_any => {
                e.rtt.as_secs_f64() < min.as_secs_f64() * ROOM
            }
            _ => true,
        }
    }

    /// The stream count wanted now.
    pub fn streams(&self) -> u32 {
        self.n
    }

    /// Every epoch measured so far.
    pub fn history(&self) -> &[Epoch] {
        &self.history
    }

    /// The caller could not reach `n` (the server gave fewer connections,
    /// or the file has too few bytes left to split): the controller goes
    /// on from there and stops climbing above it.
    pub fn capped_at(&mut self, n: u32, at: Duration) {
        let n = n.max(1);
        if n < self.n {
            self.max = n;
            self.set(n, at);
            self.phase = Phase::Hold {
                left: HOLD_EPOCHS,
                up: false,
            };
        }
    }

    /// The caller kept `n` streams instead of the count asked for (too
    /// little of the file left to pay for a change): measure on from
    /// there, holding.
    pub fn pin(&mut self, n: u32, at: Duration) {
        self.n = n.clamp(1, self.max);
        self.last = None;
        self.here = None;
        self.tries = 0;
        self.changed_at = at;
        self.start = None;
        self.phase = Phase::Hold {
            left: HOLD_EPOCHS,
            up: false,
        };
    }

    /// How long new streams get before an epoch is measured: a few round
    /// trips of slow start.
    fn settle(rtt: Duration) -> Duration {
        (rtt * 4).clamp(Duration::from_millis(100), Duration::from_secs(2))
    }

    /// How long an epoch measures: long enough to average over many round
    /// trips, short enough to find the count within a few seconds.
    fn epoch_len(rtt: Duration) -> Duration {
        (rtt * 6).clamp(Duration::from_millis(300), Duration::from_secs(3))
    }

    fn set(&mut self, n: u32, at: Duration) {
        let n = n.clamp(1, self.max);
        if n != self.n {
            self.n = n;
            self.last = None;
            self.here = None;
            self.tries = 0;
        }
        self.changed_at = at;
        self.start = None;
    }

    /// Takes a reading; returns the stream count wanted from now on
    /// (the same as before unless an epoch just ended).
    pub fn on_sample(&mut self, s: Sample) -> u32 {
        if !s.rtt.is_zero() {
            self.rtt_min = Some(self.rtt_min.map_or(s.rtt, |m| m.min(s.rtt)));
        }
        self.lost_any |= s.lost > 0;
        if s.at < self.changed_at + Self::settle(s.rtt) {
            return self.n;
        }
        let Some(start) = self.start else {
            self.start = Some(s);
            self.rtt_sum = Duration::ZERO;
            self.rtt_n = 0;
            return self.n;
        };
        if !s.rtt.is_zero() {
            self.rtt_sum += s.rtt;
            self.rtt_n += 1;
        }
        let span = s.at.saturating_sub(start.at);
        if span < Self::epoch_len(s.rtt) {
            return self.n;
        }
        let bytes = s.bytes.saturating_sub(start.bytes);
        let lost = s.lost.saturating_sub(start.lost);
        let rate = bytes as f64 / span.as_secs_f64();
        let segments = (bytes as f64 / SEGMENT).max(1.0);
        let loss = (lost as f64 / segments).min(1.0);
        let e = Epoch {
            at: s.at,
            streams: self.n,
            rate,
            loss,
            utility: utility(rate, loss, self.n),
            rtt: self.rtt_sum / self.rtt_n.max(1),
        };
        self.rtt_sum = Duration::ZERO;
        self.rtt_n = 0;
        self.history.push(e);
        let moving = self
            .here
            .is_none_or(|h| (e.rate - h.rate).abs() > h.rate.max(e.rate) * SETTLED);
        // While doubling only: one-stream steps are judged at once (two
        // transfers probing side by side disturb each other's epochs, and
        // waiting for calm let an unfair split stand in the simulation).
        let climbing = matches!(self.phase, Phase::Climb { .. });
        if climbing && moving && self.tries + 1 < SETTLE_TRIES {
            // Measure this count again from here.
            self.here = Some(e);
            self.tries += 1;
            self.start = Some(s);
            return self.n;
        }
        self.here = Some(e);
        self.decide(e, s.at);

        self.n
    }

    fn decide(&mut self, e: Epoch, at: Duration) {
        let n = self.n;
        if e.loss > LOSS_LIMIT && n > 1 {
            // Far too much loss: cut a quarter (at least one) now.
            self.set(n - (n / 4).max(1), at);
            self.phase = Phase::Hold {
                left: HOLD_EPOCHS,
                up: false,
            };
            return;
        }
        match self.phase {
            Phase::Climb { prev } => {
                let better = prev.is_none_or(|p| e.utility > p.utility * (1.0 + CLIMB_GAIN));
                if better && n < self.max && self.room(&e) {
                    self.phase = Phase::Climb { prev: Some(e) };
                    self.set(n.saturating_mul(2), at);
                } else if better {
                    self.settle_at(e, at);
                } else {
                    // The knee is between the last count and this one:
                    // go back to the better one and step from there.
                    let p = prev.unwrap_or(e);
                    let best = if p.utility >= e.utility { p } else { e };
                    if best.streams == n {
                        self.settle_at(e, at);
                    } else {
                        // Down towards the knee from the higher count:
                        // fewer streams for the same rate win.
                        self.phase = Phase::Step { from: e, up: false };
                        self.set(n - ((n - best.streams) / 2).max(1), at);
                    }
                }
            }
            Phase::Step { from, up } => {
                let kept = if up {
                    e.utility > from.utility * (1.0 + STEP_GAIN)
                } else {
                    e.utility >= from.utility * (1.0 - STEP_LOSS)
                };
                let next = if up { n + 1 } else { n.saturating_sub(1) };
                let onward = !up || self.room(&e);
                if kept && onward && next >= 1 && next <= self.max && next != n {
                    // It paid: one more step the same way.
                    self.phase = Phase::Step { from: e, up };
                    self.set(next, at);
                } else if kept {
                    self.settle_at(e, at);
                } else {
                    // It did not: back to where the step came from, and
                    // probe the other way next time.
                    self.set(from.streams, at);
                    self.last = Some(from);
                    self.phase = Phase::Hold {
                        left: HOLD_EPOCHS,
                        up: !up,
                    };
                }
            }
            Phase::Hold { left, up } => {
                self.last = Some(e);
                if left > 1 {
                    self.phase = Phase::Hold { left: left - 1, up };
                    self.changed_at = at;
                    self.start = None;
                    return;
                }
                // Without room (the bottleneck is full) a probe up would
                // only cost: probe down instead, or hold at one stream.
                let room = self.room(&e);
                let step_up = ((up && n < self.max) || n == 1) && room;
                if (step_up && n >= self.max) || (!room && n == 1) {
                    self.phase = Phase::Hold {
                        left: HOLD_EPOCHS,
                        up: false,
                    };
                    self.changed_at = at;
                    self.start = None;
                    return;
                }
                self.phase = Phase::Step {
                    from: e,
                    up: step_up,
                };
                self.set(if step_up { n + 1 } else { n - 1 }, at);
            }
        }
    }

    fn settle_at(&mut self, e: Epoch, at: Duration) {
        self.last = Some(e);
        self.phase = Phase::Hold {
            left: HOLD_EPOCHS,
            up: false,
        };
        self.changed_at = at;
        self.start = None;
    }
}

/// Falcon's utility of `rate` bytes/s at `loss` with `n` streams.
pub fn utility(rate: f64, loss: f64, n: u32) -> f64 {
    rate * (K.powi(-(n as i32)) - B * loss)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);
    const MB: f64 = 1e6;

    /// A path seen by one transfer: its rate and loss at `n` streams.
    struct Path<F: Fn(u32) -> (f64, f64)> {
        at: Duration,
        bytes: f64,
        lost: f64,
        shape: F,
    }

    impl<F: Fn(u32) -> (f64, f64)> Path<F> {
        fn new(shape: F) -> Self {
            Path {
                at: Duration::ZERO,
                bytes: 0.0,
                lost: 0.0,
                shape,
            }
        }

        /// Runs `c` for `secs` on the path; returns the stream count at
        /// every tick.
        fn run(&mut self, c: &mut Controller, secs: u64) -> Vec<u32> {
            let mut trace = Vec::new();
            let end = self.at + Duration::from_secs(secs);
            while self.at < end {
                let (rate, loss) = (self.shape)(c.streams());
                self.at += TICK;
                self.bytes += rate * TICK.as_secs_f64();
                self.lost += rate * TICK.as_secs_f64() / SEGMENT * loss;
                c.on_sample(Sample {
                    at: self.at,
                    bytes: self.bytes as u64,
                    lost: self.lost as u64,
                    rtt: Duration::from_millis(50),
                });
                trace.push(c.streams());
            }
            trace
        }
    }

    /// Each stream moves `per` bytes/s (its window over the RTT) until the
    /// bottleneck's `cap` is full; past the knee the queue overflows and
    /// loss grows with every extra stream.
    fn knee(per: f64, cap: f64) -> impl Fn(u32) -> (f64, f64) {
        move |n| {
            let want = per * n as f64;
            if want <= cap {
                (want, 0.0)
            } else {
                (cap, 0.0002 * (want / cap))
            }
        }
    }

    fn settled(trace: &[u32], last: usize) -> (u32, u32) {
        let tail = &trace[trace.len() - last..];
        (*tail.iter().min().unwrap(), *tail.iter().max().unwrap())
    }

    #[test]
    fn starts_at_one_and_climbs_while_throughput_scales() {
        let mut c = Controller::new(64);
        assert_eq!(c.streams(), 1);
        // 10 MB/s a stream up to 160 MB/s: the knee is at 16.
        let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
        let trace = p.run(&mut c, 30);
        // Doubling reaches 16 in a few seconds.
        let t16 = trace.iter().position(|&n| n >= 16).unwrap();
        assert!(t16 * 100 <= 6_000, "16 streams only after {t16} ticks");
        let (lo, hi) = settled(&trace, 100);
        assert!((14..=18).contains(&lo) && hi <= 18, "{lo}..{hi}: {trace:?}");
    }

    #[test]
    fn stops_at_the_knee() {
        // Five streams fill the path; more only add loss.
        let mut c = Controller::new(64);
        let mut p = Path::new(knee(20.0 * MB, 100.0 * MB));
        let trace = p.run(&mut c, 40);
        let (lo, hi) = settled(&trace, 150);
        assert!(lo >= 4 && hi <= 7, "{lo}..{hi}: {trace:?}");
        // Never far past the knee for long: doubling overshoots once.
        assert!(trace.iter().all(|&n| n <= 16), "{trace:?}");
    }

    #[test]
    fn a_path_that_one_stream_fills_stays_at_one() {
        let mut c = Controller::new(64);
        let mut p = Path::new(knee(100.0 * MB, 100.0 * MB));
        let trace = p.run(&mut c, 30);
        let (lo, hi) = settled(&trace, 150);
        assert!(lo == 1 && hi <= 2, "{lo}..{hi}: {trace:?}");
    }

    #[test]
    fn a_path_whose_queue_fills_is_never_probed_with_more_streams() {
        // One stream fills a 40 MB/s bottleneck; once it does, the
        // drop-tail queue triples the round trip (50 -> 150 ms), and slow
        // start's overshoot lost a packet. Another stream could bring
        // nothing, so none is tried.
        let mut c = Controller::new(64);
        let (mut at, mut bytes) = (Duration::ZERO, 0u64);
        while at < Duration::from_secs(60) {
            at += TICK;
            bytes += (40.0 * MB * TICK.as_secs_f64()) as u64;
            let full = at >= Duration::from_millis(500);
            let n = c.on_sample(Sample {
                at,
                bytes,
                lost: u64::from(full),
                rtt: Duration::from_millis(if full { 150 } else { 50 }),
            });
            assert_eq!(n, 1, "at {at:?}: {:?}", c.history());
        }
        assert!(c.history().len() > 10);
    }

    #[test]
    fn a_paced_stream_whose_round_trip_grows_without_loss_still_climbs() {
        // The sender paces each connection to 8 MB/s: the receiver's
        // round-trip estimate grows with the pacing, but nothing was
        // lost, so no queue overflowed: a second stream is tried and kept.
        let mut c = Controller::new(64);
        let (mut at, mut bytes) = (Duration::ZERO, 0f64);
        let mut peak = 1;
        while at < Duration::from_secs(30) {
            at += TICK;
            bytes += 8.0 * MB * f64::from(c.streams()) * TICK.as_secs_f64();
            let rtt = if at < Duration::from_millis(300) {
                1
            } else {
                15
            };
            peak = peak.max(c.on_sample(Sample {
                at,
                bytes: bytes as u64,
                lost: 0,
                rtt: Duration::from_millis(rtt),
            }));
        }
        assert!(peak >= 4, "{:?}", c.history());
    }

    #[test]
    fn a_loss_limited_path_with_no_queue_still_climbs() {
        // 0.1 % random loss holds each stream to 4 MB/s and the queue
        // stays empty (round trip flat): streams are added.
        let mut c = Controller::new(64);
        let mut p = Path::new(|n| ((4.0 * MB * n as f64).min(100.0 * MB), 0.0));
        let trace = p.run(&mut c, 30);
        assert!(*trace.iter().max().unwrap() >= 8, "{trace:?}");
    }

    #[test]
    fn a_ramp_after_each_change_is_not_taken_for_a_gain() {
        // One stream fills the path, but every change of count costs a
        // second and a half: nothing for half a second (a restart), then
        // a linear climb (slow start). Judged on its first epoch, each
        // count would look better than the last.
        let mut c = Controller::new(64);
        let cap = 50.0 * MB;
        let (mut at, mut bytes) = (Duration::ZERO, 0.0f64);
        let (mut n, mut since) = (c.streams(), Duration::ZERO);
        let mut trace = Vec::new();
        while at < Duration::from_secs(60) {
            at += TICK;
            let t = (at - since).as_secs_f64();
            let rate = cap * ((t - 0.5) / 1.0).clamp(0.0, 1.0);
            bytes += rate * TICK.as_secs_f64();
            let want = c.on_sample(Sample {
                at,
                bytes: bytes as u64,
                lost: 0,
                rtt: Duration::from_millis(50),
            });
            if want != n {
                n = want;
                since = at;
            }
            trace.push(n);
        }
        // Never climbs away; mostly at one or two, probing a step around.
        assert!(trace.iter().all(|&n| n <= 4), "{trace:?}");
        let tail = &trace[trace.len() - 200..];
        let mean = tail.iter().sum::<u32>() as f64 / tail.len() as f64;
        assert!(mean <= 2.5, "{mean}: {trace:?}");
    }

    #[test]
    fn backs_off_under_loss() {
        // Throughput keeps scaling, but past 6 streams the path drops 3 %.
        let mut c = Controller::new(64);
        let mut p = Path::new(|n: u32| (10.0 * MB * n as f64, if n > 6 { 0.03 } else { 0.0 }));
        let trace = p.run(&mut c, 40);
        let (lo, hi) = settled(&trace, 100);
        assert!(hi <= 7 && lo >= 3, "{lo}..{hi}: {trace:?}");
    }

    #[test]
    fn loss_that_appears_later_brings_the_count_down() {
        let mut c = Controller::new(64);
        let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
        p.run(&mut c, 20);
        assert!(c.streams() >= 14, "{}", c.streams());
        // Someone else's traffic: every stream now sees 2 % loss.
        let mut q = Path {
            at: p.at,
            bytes: p.bytes,
            lost: p.lost,
            shape: |n: u32| ((10.0 * MB * n as f64).min(160.0 * MB), 0.02),
        };
        let trace = q.run(&mut c, 20);
        let (_, hi) = settled(&trace, 50);
        assert!(hi <= 4, "{hi}: {trace:?}");
    }

    #[test]
    fn respects_its_maximum_and_a_cap() {
        let mut c = Controller::new(4);
        let mut p = Path::new(knee(10.0 * MB, 1000.0 * MB));
        let trace = p.run(&mut c, 20);
        assert!(trace.iter().all(|&n| n <= 4));
        // At the maximum but for a probe now and then.
        let at_max = trace[100..].iter().filter(|&&n| n == 4).count();
        assert!(at_max * 10 >= trace[100..].len() * 7, "{trace:?}");
        c.capped_at(2, p.at);
        let trace = p.run(&mut c, 20);
        assert!(trace.iter().all(|&n| n <= 2)); // Kept at one by the caller: it holds there before probing again.
        c.pin(1, p.at);
        assert_eq!(c.streams(), 1);
        let trace = p.run(&mut c, 1);
        assert!(trace.iter().all(|&n| n == 1));
    }

    /// Two transfers on one bottleneck of `cap` bytes/s whose streams are
    /// each window-limited to `per`: below the capacity every stream gets
    /// `per`; above it the capacity is shared per stream (TCP's fairness)
    /// and the queue's loss grows with the overload.
    fn shared(per: f64, cap: f64, n: [u32; 2]) -> [(f64, f64); 2] {
        let total = (n[0] + n[1]) as f64;
        let want = per * total;
        let (each, loss) = if want <= cap {
            (per, 0.0)
        } else {
            (cap / total, 0.0004 * (want / cap).powi(2))
        };
        [(each * n[0] as f64, loss), (each * n[1] as f64, loss)]
    }

    fn jain(x: &[f64]) -> f64 {
        let s: f64 = x.iter().sum();
        let q: f64 = x.iter().map(|v| v * v).sum();
        s * s / (x.len() as f64 * q)
    }

    #[test]
    fn two_transfers_on_one_bottleneck_converge_to_similar_counts() {
        let (per, cap) = (25.0 * MB, 200.0 * MB);
        let mut c = [Controller::new(64), Controller::new(64)];
        let mut bytes = [0.0f64; 2];
        let mut lost = [0.0f64; 2];
        let mut at = Duration::ZERO;
        // The second starts 10 s after the first.
        let second = Duration::from_secs(10);
        let mut counts = Vec::new();
        let mut rates = Vec::new();
        while at < Duration::from_secs(240) {
            at += TICK;
            let on = [true, at > second];
            let n = [c[0].streams(), if on[1] { c[1].streams() } else { 0 }];
            let r = shared(per, cap, n);
            for i in 0..2 {
                if !on[i] {
                    continue;
                }
                bytes[i] += r[i].0 * TICK.as_secs_f64();
                lost[i] += r[i].0 * TICK.as_secs_f64() / SEGMENT * r[i].1;
                c[i].on_sample(Sample {
                    at: if i == 0 { at } else { at - second },
                    bytes: bytes[i] as u64,
                    lost: lost[i] as u64,
                    rtt: Duration::from_millis(50),
                });
            }
            counts.push(n);
            rates.push([r[0].0, r[1].0]);
        }
        // Over the last 60 s: similar counts and a fair share of the rate.
        let tail = counts.len() - 600;
        let mean = |i: usize| counts[tail..].iter().map(|n| n[i] as f64).sum::<f64>() / 600.0;
        let (a, b) = (mean(0), mean(1));
        assert!(
            (a - b).abs() <= 0.25 * a.max(b) + 1.0,
            "mean streams {a:.1} and {b:.1}: {:?}",
            &counts[tail..]
        );
        let ra = rates[tail..].iter().map(|r| r[0]).sum::<f64>();
        let rb = rates[tail..].iter().map(|r| r[1]).sum::<f64>();
        assert!(jain(&[ra, rb]) >= 0.95, "rates {ra:.0} {rb:.0}");
        // And together they still fill the path.
        assert!((ra + rb) / 600.0 >= 0.9 * cap);
    }

    #[test]
    fn utility_charges_streams_and_loss() {
        assert!(utility(100.0, 0.0, 1) > utility(100.0, 0.0, 2));
        assert!(utility(100.0, 0.0, 8) > utility(100.0, 0.01, 8));
        assert!(utility(100.0, 0.0, 1) < utility(200.0, 0.0, 2));
    }
}
