//! The sendfile sender's idle bound without a timer per wait.
//!
//! A stalled reader must not hold a transfer forever: a send that moves no
//! byte for `idle_timeout` ends with `EngineError::Idle`. Bounding each
//! wait for room with its own `tokio::time::timeout` registered and
//! removed a timer in the runtime's wheel at every wake-up of every
//! sender (~2 % of the server's CPU with 1000 slow readers, lab
//! send-wakeups profile s15-sendcpu-prof-before). The send now keeps one
//! timer, armed at the first wait for `idle` after the last byte moved and
//! moved on only when it fires while bytes have moved since: about once
//! per `idle_timeout` per connection instead of once per wake-up.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// When the send last moved bytes, and its one timer.
pub(crate) struct IdleClock {
    idle: Duration,
    last: Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

/// What a fired timer means ([`IdleClock::fired`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// Nothing moved for `idle`: the send is idle.
    Idle,
    /// Bytes moved since the timer was armed: it is moved to this
    /// deadline (`idle` after the last move) and the wait goes on.
    Rearm(Instant),
}

impl IdleClock {
    pub(crate) fn new(idle: Duration, now: Instant) -> IdleClock {
        IdleClock {
            idle,
            last: now,
            timer: None,
        }
    }

    /// Bytes moved at `now`.
    pub(crate) fn moved(&mut self, now: Instant) {
        self.last = now;
    }

    /// The deadline in force: `idle` after the last move.
    pub(crate) fn deadline(&self) -> Instant {
        self.last + self.idle
    }

    /// The timer fired at `now`: idle, or where to move it.
    pub(crate) fn fired(&self, now: Instant) -> Fired {
        if now >= self.deadline() {
            Fired::Idle
        } else {
            Fired::Rearm(self.deadline())
        }
    }

    /// The timer, armed for the deadline in force the first time.
    pub(crate) fn timer(&mut self) -> Pin<&mut Sleep> {
        let at = self.deadline();
        self.timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_send_that_moved_bytes_is_not_idle_when_the_first_deadline_passes() {
        let t0 = Instant::now();
        let mut c = IdleClock::new(300 * S, t0);
        assert_eq!(c.deadline(), t0 + 300 * S);
        // Bytes moved at every wake-up, every 3 s.
        for k in 1..=120u32 {
            c.moved(t0 + 3 * k * S);
        }
        // The timer armed at the first wait fires at +300 s: moved on.
        assert_eq!(c.fired(t0 + 300 * S), Fired::Rearm(t0 + 660 * S));
    }

    #[test]
    fn a_send_that_moved_nothing_for_idle_is_idle() {
        let t0 = Instant::now();
        let mut c = IdleClock::new(300 * S, t0);
        c.moved(t0 + 10 * S);
        assert_eq!(c.fired(t0 + 300 * S), Fired::Rearm(t0 + 310 * S));
        assert_eq!(c.fired(t0 + 310 * S), Fired::Idle);
        // Nothing ever moved: idle `idle` after the send began.
        let c = IdleClock::new(300 * S, t0);
        assert_eq!(c.fired(t0 + 300 * S), Fired::Idle);
    }
}
