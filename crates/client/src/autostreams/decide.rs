//! The stream-count controller's moves after each epoch: climb, step,
//! hold (the rules are in the parent module's documentation).

use std::time::Duration;

use super::*;

impl Controller {
    pub(super) fn decide(&mut self, e: Epoch, at: Duration) {
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
                // A doubling pays when the utility grew and the streams it
                // added each brought [`MARGIN`] of a mean stream (a rate
                // up by half): more than that is a path with room, less a
                // path that is full, of this transfer's streams or of
                // others' (`2 (n + m) / (2n + m)` against a competitor's
                // `m`: doubling stops once `n` is half of `m`).
                let pays = |p: &Epoch| share(p, &e) >= MARGIN;
                let better =
                    prev.is_none_or(|p| e.utility > p.utility * (1.0 + CLIMB_GAIN) && pays(&p));
                if let Some(p) = prev {
                    let carried = share(&p, &e);
                    self.crowded = carried >= UP_SHARE;
                    // A doubling that brought less than a stream's worth
                    // each took from others: grow by half from here.
                    self.gentle |= carried < LINEAR;
                }
                if better && n < self.max && self.up_ok(&e) {
                    self.phase = Phase::Climb { prev: Some(e) };
                    self.set(grow(n, self.gentle), at);
                } else if better {
                    self.settle_at(e, at);
                } else {
                    // The knee is between the last count and this one:
                    // go back to the better one and step from there.
                    let p = prev.unwrap_or(e);
                    let best = if p.utility >= e.utility || !pays(&p) {
                        p
                    } else {
                        e
                    };
                    if best.streams == n {
                        self.settle_at(e, at);
                    } else {
                        // Down towards the knee from the higher count:
                        // fewer streams for the same rate win.
                        self.phase = Phase::Step { from: e, up: false };
                        self.gentle = false;
                        self.set(n - ((n - best.streams) / 2).max(1), at);
                    }
                }
            }
            Phase::Step { from, up } => {
                // A step up must pay in utility and bring [`MARGIN`] of a
                // mean stream per stream added; a step down stands when it
                // cost little utility or the streams dropped carried under
                // [`MARGIN`] (they only held a lead over the others).
                let carried = share(&from, &e);
                let kept = if up {
                    e.utility > from.utility * (1.0 + STEP_GAIN) && carried >= MARGIN
                } else {
                    e.utility >= from.utility * (1.0 - STEP_LOSS) || carried < MARGIN
                };
                // Others hold most of the path when a stream added brought,
                // or one dropped took away, [`UP_SHARE`] of a mean stream.
                self.crowded = kept == up && carried >= UP_SHARE;
                let next = if up {
                    n + step(n)
                } else {
                    n.saturating_sub(step(n))
                };
                let onward = !up || self.up_ok(&e);
                let next = next.min(self.max);
                if kept && up && self.crowded && n < self.max && self.up_ok(&e) {
                    // Others hold most of the path: a late transfer next to
                    // an incumbent's dozens of streams. Double, as at the
                    // start, until a doubling stops paying: one stream at a
                    // time took 10-15 s to reach a fair count (the model in
                    // the tests), the lab's whole measuring window.
                    self.phase = Phase::Climb { prev: Some(e) };
                    self.gentle = true;
                    self.set(grow(n, true), at);
                } else if kept && onward && next >= 1 && next != n {
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
                // only cost: probe down instead, or hold at one stream. A
                // transfer at one stream cannot learn by a step down that
                // others hold the path (four transfers at 400 Mbit/s 50 ms
                // in lab auto-streams s13: one whose slow start overflowed
                // the queue kept one stream at 4-8 MB/s while others held
                // 2-4): every [`ONE_PROBE_HOLDS`]-th hold it probes up all
                // the same, unless a change of count restarts the transfer.
                self.holds += 1;
                let lone_probe = n == 1
                    && self.left_rtts == LEFT_RTTS
                    && self.holds.is_multiple_of(ONE_PROBE_HOLDS)
                    && self.time_left(&e, self.seen);
                let room = self.up_ok(&e) || lone_probe;
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
                self.set(if step_up { n + step(n) } else { n - step(n) }, at);
            }
        }
    }

    fn settle_at(&mut self, e: Epoch, at: Duration) {
        self.gentle = false;
        self.last = Some(e);
        self.phase = Phase::Hold {
            left: HOLD_EPOCHS,
            up: false,
        };
        self.changed_at = at;
        self.start = None;
    }
}

/// The count a climb goes to from `n`: double, or half as many again
/// when `gentle`.
fn grow(n: u32, gentle: bool) -> u32 {
    if gentle {
        n + (n / 2).max(1)
    } else {
        n.saturating_mul(2)
    }
}

/// The size of a one-step probe from `n` streams ([`STEP_SHARE`]).
fn step(n: u32) -> u32 {
    (n / STEP_SHARE).max(1)
}

/// What each stream added (or dropped) between `from` and `e` carried, as
/// a share of `from`'s mean stream (1: a stream's worth each; 0: nothing).
fn share(from: &Epoch, e: &Epoch) -> f64 {
    let dn = f64::from(e.streams) - f64::from(from.streams);
    if dn == 0.0 || from.rate <= 0.0 {
        return 1.0;
    }
    let mean = from.rate / f64::from(from.streams);
    (e.rate - from.rate) / dn / mean
}

/// Falcon's utility of `rate` bytes/s at `loss` with `n` streams.
pub fn utility(rate: f64, loss: f64, n: u32) -> f64 {
    rate * (K.powi(-(n as i32)) - B * loss)
}
