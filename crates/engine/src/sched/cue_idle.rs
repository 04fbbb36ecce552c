//! Cue: when a quiet transfer still counts as sending (`keep_alive`).

use std::time::Duration;

use super::{Cue, CueId};

impl Cue {
    /// A transfer whose sender waits on a full socket reports nothing
    /// until the socket drains, which at a low pace with a large unsent
    /// mark (`refill.rs`: a wake-up per `refill_time`, longer for the
    /// first fill) can outlast `idle_after`: it would lose its share while
    /// its socket still sends at the old pace, and the others, given that
    /// share, would take the total over a server cap (the classes case of
    /// lab/results/cue-caps ran 1.02-1.13x the cap this way). So a transfer
    /// quiet for half of `idle_after` whose delivered total (`delivered`,
    /// bytes acknowledged by the peer) still grows counts as sending now.
    /// Looked at most every `idle_after / 8`, for the quiet ones only.
    pub fn keep_alive(&mut self, now: Duration, delivered: &dyn Fn(CueId) -> Option<u64>) {
        let idle = self.cfg.idle_after;
        if now < self.alive_checked + idle / 8 {
            return;
        }
        self.alive_checked = now;
        let mut woke = false;
        for (&id, t) in self.transfers.iter_mut() {
            if now.saturating_sub(t.last_sent) <= idle / 2 {
                continue;
            }
            if let Some(d) = delivered(id) {
                if d > t.acked {
                    woke |= now.saturating_sub(t.last_sent) > idle;
                    t.acked = d;
                    t.last_sent = now;
                }
            }
        }
        if woke {
            self.allocate();
        }
    }
}
