//! What the sendfile sender already knows is in the page cache, sans I/O.
//!
//! The sender asks `cachestat` before `sendfile` so a cold page never makes
//! `sendfile` wait for the disk on the event loop. Asked before every
//! chunk, that was ~9 % of the server's CPU in lab send-wakeups (1000
//! readers at 1 Mbit/s: each wake-up moves ~400 kB, and every wake-up
//! asked twice, before the `sendfile` that fills the socket and before the
//! one that finds it full; profile s13-cost-f-profile). A span found
//! resident is now taken as resident until the sender has passed it or
//! [`RESIDENT_FOR`] has gone by, whichever comes first.

use std::time::Duration;

/// How long a span `cachestat` found resident is believed. A page of a
/// file being sent was just looked up; for the kernel to evict it within
/// seconds the memory must be so short that the planner's reads, not this
/// check, are what counts (`--prefetch auto` hands a send to the planner
/// at its first missing chunk). A slow reader (1 Mbit/s) wakes every few
/// seconds: it asks about once per wake-up or less, not twice per wake-up.
pub(crate) const RESIDENT_FOR: Duration = Duration::from_secs(5);

/// A span of the file found resident, and when.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ResidentSpan {
    from: u64,
    until: u64,
    at: Duration,
}

impl ResidentSpan {
    /// Bytes from `pos` known to be resident at `now` (0: ask again).
    pub(crate) fn ahead(&self, pos: u64, now: Duration) -> u64 {
        if pos < self.from || pos >= self.until || now.saturating_sub(self.at) >= RESIDENT_FOR {
            return 0;
        }
        self.until - pos
    }

    /// `cachestat` found `[pos, pos + len)` resident at `now`.
    pub(crate) fn found(&mut self, pos: u64, len: u64, now: Duration) {
        *self = ResidentSpan {
            from: pos,
            until: pos.saturating_add(len),
            at: now,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_span_found_resident_is_not_asked_again_while_the_sender_is_inside_it() {
        let mut s = ResidentSpan::default();
        assert_eq!(s.ahead(0, Duration::ZERO), 0, "nothing known yet");
        s.found(1000, 4 << 20, 10 * MS);
        assert_eq!(s.ahead(1000, 10 * MS), 4 << 20);
        // A wake-up later the sender is 400 kB further: the rest is known.
        assert_eq!(s.ahead(401_000, 3000 * MS), (4 << 20) - 400_000);
    }

    #[test]
    fn the_sender_past_the_span_or_before_it_asks_again() {
        let mut s = ResidentSpan::default();
        s.found(1000, 4096, Duration::ZERO);
        assert_eq!(s.ahead(1000 + 4096, MS), 0, "past its end");
        assert_eq!(s.ahead(999, MS), 0, "before its start");
        assert_eq!(s.ahead(5095, MS), 1, "its last byte");
    }

    #[test]
    fn a_span_is_believed_only_for_a_while() {
        let mut s = ResidentSpan::default();
        s.found(0, 1 << 20, 100 * MS);
        assert_eq!(s.ahead(0, 100 * MS + RESIDENT_FOR - MS), 1 << 20);
        assert_eq!(s.ahead(0, 100 * MS + RESIDENT_FOR), 0);
    }
}
