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
                let better = prev.is_none_or(|p| e.utility > p.utility * (1.0 + CLIMB_GAIN));
                if better && n < self.max && self.up_ok(&e) {
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
                let onward = !up || self.up_ok(&e);
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
                let room = self.up_ok(&e);
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
