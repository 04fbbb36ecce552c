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
//!
//! Two gates keep probes where they can pay (session 11; without them
//! `-p auto` cost 0.73x `-p 1` on 5 s downloads, 770-850 retransmits
//! where one stream had none):
//! - The first stream is left alone until its rate has stopped growing
//!   for [`FIRST_FLAT`] epochs in a row: a second stream started during
//!   the first one's slow start overflows the bottleneck queue together
//!   with it (the receiver sees the link's rate before the sender's slow
//!   start is over, so one flat epoch is not enough; it cannot read the
//!   sender's ssthresh), or grown more slowly than a slow start for
//!   [`FIRST_SLOW`] epochs (a window growing after slow start ended
//!   early: a late transfer's, behind another's queue).
//! - No count goes up when what is left of the file would be done in
//!   less than [`Controller::with_todo`]'s time at the rate seen: a probe
//!   on a full path costs a slow start and a queue overflow (an FTP count
//!   change restarts the transfer), which a download ending in a few
//!   seconds never earns back.

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

/// Epochs in a row whose rate did not grow before the first stream is
/// taken as past its slow start.
pub const FIRST_FLAT: u32 = 2;

/// A rate growing by more than this factor per round trip is a slow
/// start (which doubles it every round trip); slower growth is a window
/// growing after slow start ended.
const SLOW_START_GROWTH: f64 = 1.25;

/// Epochs in a row whose rate grew more slowly than a slow start (flat
/// ones included) after which the first stream is taken as past its slow
/// start even though its rate still grows. One more than [`FIRST_FLAT`]:
/// the epoch in which a slow start meets the path's rate grows by less
/// than `SLOW_START_GROWTH` per round trip, and the sender's slow start
/// is not over then (the receiver sees the link's rate first).
///
/// Why (lab auto-streams s13, `--trace`, two transfers 10 s apart at
/// 400 Mbit/s 50 ms, server cubic): the late transfer's connection left
/// slow start at 176 segments (cubic's HyStart: the round trip grew by
/// an eighth, the first transfer's queue already standing), then grew 5 %
/// per round trip (cubic before its first loss), 2.6 -> 9.5 MB/s in 5 s;
/// its rate never held still, so the controller waited its
/// `FIRST_TRIES`, and by then a loss had closed the room: it stayed at
/// one stream with a fifth of the path for the rest of the run (Jain
/// 0.79), its window held near cubic's remembered maximum. The same with
/// the server's DRS off (0.80), so not the buffers; bbr 0.95.
pub const FIRST_SLOW: u32 = FIRST_FLAT + 1;

/// Most epochs the first stream is measured before a decision, flat or
/// not (a path whose rate swings more than [`SETTLED`] every epoch).
const FIRST_TRIES: u32 = 16;

/// The time gate of [`Controller::with_todo`] in round trips: on a long
/// path slow start (and an FTP restart's handshakes) take longer.
pub const LEFT_RTTS: u32 = 100;

/// The time gate of a transfer whose every change of count is a restart
/// ([`Controller::restarting`], FTP's MODE E): a probe that does not pay
/// costs two restarts (up, then back), each a new set of handshakes and
/// slow starts on a path the running streams had full. Measured (lab
/// drs-wan s12-final, 160 MB at 100 Mbit/s 50 ms, 13 s at one stream):
/// one such probe cost 10 % of the download (10.3 MB/s against `-p 1`'s
/// 11.4); at 400 round trips the rest is long enough to earn a probe back.
/// In round trips, not seconds: a restart's handshakes and slow start
/// take round trips, and on a short path a restart costs next to nothing
/// (a paced loopback transfer of 12 s still pays for its streams).
pub const RESTART_LEFT_RTTS: u32 = 400;

/// The least time left for a count to go up (see [`Controller::with_todo`]):
/// a probe's cost (a new connection's slow start, an FTP restart's
/// handshakes, the queue overflow on a full path: 25-50 % of a 5 s
/// download at 400 Mbit/s 50 ms) is a second or more.
pub const MIN_LEFT_TIME: Duration = Duration::from_secs(5);

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
    /// Epochs in a row the current count's rate did not grow.
    flat: u32,
    /// Epochs in a row it grew more slowly than a slow start.
    slow: u32,
    /// Bytes of the last sample.
    seen: u64,
    /// Best epoch rate seen in the transfer.
    rate_max: f64,
    /// Bytes the whole transfer moves (None: unknown, no time gate) and
    /// the least time left, at the rate seen, for a count to go up.
    todo: Option<u64>,
    min_left: Duration,
    /// Round trips of the rest that [`Controller::time_left`] asks for.
    left_rtts: u32,
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
            flat: 0,
            slow: 0,
            seen: 0,
            rate_max: 0.0,
            todo: None,
            min_left: Duration::ZERO,
            left_rtts: LEFT_RTTS,
        }
    }

    /// The transfer moves `todo` bytes in all (as counted in
    /// [`Sample::bytes`]): no count goes up once the rest would be done in
    /// less than `min_left` (or [`LEFT_RTTS`] round trips, if longer) at the
    /// rate of the last epoch.
    pub fn with_todo(mut self, todo: u64, min_left: Duration) -> Controller {
        self.todo = Some(todo);
        self.min_left = min_left;
        self
    }

    /// Every change of count restarts the transfer (FTP: GridFTP fixes
    /// a transfer's connections when it starts): a count goes up only
    /// with [`RESTART_LEFT_RTTS`] round trips left.
    pub fn restarting(mut self) -> Controller {
        self.left_rtts = self.left_rtts.max(RESTART_LEFT_RTTS);
        self
    }

    /// Whether the rest of the transfer is long enough, at the best rate
    /// seen (an epoch of a BBR probe cycle or of a slow start's last
    /// round trips reads low, and a probe it lets through costs the most
    /// on the short transfers this gate is for), for a count to go up.
    fn time_left(&self, e: &Epoch, bytes: u64) -> bool {
        let Some(todo) = self.todo else { return true };
        let left = todo.saturating_sub(bytes) as f64;
        // A restart's round trips are the path's: the least seen, not the
        // epoch's (a paced sender's queue lengthens the receiver's estimate:
        // 4 MB/s pacing on loopback read as tens of ms).
        let rtt = match self.rtt_min {
            Some(min) if self.left_rtts > LEFT_RTTS => min,
            _ => e.rtt,
        };
        let need = self.min_left.max(rtt * self.left_rtts).as_secs_f64();
        let rate = self.rate_max.max(e.rate);
        rate > 0.0 && left / rate >= need
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

    /// Whether the rest of the transfer, at the last epoch's rate, still
    /// has time to earn back a change of count (always, without
    /// [`Controller::with_todo`]): an FTP caller asks before restarting,
    /// which costs as much going down as up.
    pub fn change_pays(&self, bytes: u64) -> bool {
        self.history.last().is_none_or(|e| self.time_left(e, bytes))
    }

    /// Whether a count may go up after `e`: the path has room and the
    /// transfer has time left to earn the change back.
    fn up_ok(&self, e: &Epoch) -> bool {
        self.room(e) && self.time_left(e, self.seen)
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
        self.flat = 0;
        self.slow = 0;
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
            self.flat = 0;
            self.slow = 0;
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
        self.seen = s.bytes;
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
        self.rate_max = self.rate_max.max(e.rate);
        self.history.push(e);
        let moving = self
            .here
            .is_none_or(|h| (e.rate - h.rate).abs() > h.rate.max(e.rate) * SETTLED);
        // While doubling only: one-stream steps are judged at once (two
        // transfers probing side by side disturb each other's epochs, and
        // waiting for calm let an unfair split stand in the simulation).
        let climbing = matches!(self.phase, Phase::Climb { .. });
        // The first stream waits out its slow start: its rate must have
        // stopped growing for a few epochs, not just held still once.
        let first = self.n == 1 && matches!(self.phase, Phase::Climb { prev: None });
        let growing = self.here.is_none_or(|h| e.rate > h.rate * (1.0 + SETTLED));
        self.flat = if growing { 0 } else { self.flat + 1 };
        let slow_growth = self.here.is_some_and(|h| !Self::slow_start(&h, &e));
        self.slow = if slow_growth { self.slow + 1 } else { 0 };
        let wait = if first {
            self.flat < FIRST_FLAT && self.slow < FIRST_SLOW && self.tries + 1 < FIRST_TRIES
        } else {
            climbing && moving && self.tries + 1 < SETTLE_TRIES
        };
        if wait {
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

    /// Whether the rate grew from `before` to `e` as a slow start grows
    /// it (more than [`SLOW_START_GROWTH`] per round trip). Without a
    /// round trip, any growth past [`SETTLED`] counts.
    fn slow_start(before: &Epoch, e: &Epoch) -> bool {
        let span = e.at.saturating_sub(before.at).as_secs_f64();
        if e.rtt.is_zero() || span <= 0.0 || before.rate <= 0.0 {
            return e.rate > before.rate * (1.0 + SETTLED);
        }
        let rtts = span / e.rtt.as_secs_f64();
        e.rate / before.rate > SLOW_START_GROWTH.powf(rtts.max(1.0))
    }
}

mod decide;
pub use decide::utility;

#[cfg(test)]
mod tests;
