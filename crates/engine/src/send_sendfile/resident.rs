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

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// What any sender found resident, for every sender of the same file.
///
/// The page cache is the machine's, not a connection's: when 1000 slow
/// readers of one warm file each asked `cachestat` about their own next
/// 4 MiB once their span was 5 s old, that was ~2000 calls per GiB sent at
/// ~23 µs each (a 4 MiB range is 1024 pages to walk), 9 % of the server's
/// CPU and its largest item after `sendfile` and `epoll_wait` (lab
/// send-wakeups, profile s15-sendcpu-prof-before). A span found resident
/// is now kept per file (device and inode) and per [`UNIT`] of the file,
/// and believed by every sender of the file for [`RESIDENT_FOR`] from when
/// it was asked, as a sender believes its own span: a unit is asked about
/// about once per `RESIDENT_FOR` whatever the number of readers.
#[derive(Debug, Default)]
pub(crate) struct ResidentMap {
    files: HashMap<FileKey, HashMap<u64, Found>>,
    entries: usize,
}

/// A file: device and inode.
pub(crate) type FileKey = (u64, u64);

/// Units of a file the map keeps spans for: a sender asks about at most
/// the rest of its position's unit, so a span never crosses one.
pub(crate) const UNIT: u64 = 4 << 20;

/// Above this many spans the map forgets the stale ones.
const MAX_ENTRIES: usize = 1 << 14;

#[derive(Debug, Clone, Copy)]
struct Found {
    from: u64,
    until: u64,
    at: Duration,
}

impl ResidentMap {
    /// Bytes from `pos` of `file` known resident at `now`, and how long
    /// ago that was found (0 bytes: ask).
    pub(crate) fn known(&self, file: FileKey, pos: u64, now: Duration) -> (u64, Duration) {
        let Some(f) = self
            .files
            .get(&file)
            .and_then(|units| units.get(&(pos / UNIT)))
        else {
            return (0, Duration::ZERO);
        };
        let age = now.saturating_sub(f.at);
        if pos < f.from || pos >= f.until || age >= RESIDENT_FOR {
            return (0, Duration::ZERO);
        }
        (f.until - pos, age)
    }

    /// `[pos, pos + len)` of `file` was found resident at `now` (`len`
    /// within `pos`'s unit: see [`ask_len`]).
    pub(crate) fn found(&mut self, file: FileKey, pos: u64, len: u64, now: Duration) {
        if self.entries >= MAX_ENTRIES {
            self.forget_stale(now);
        }
        let units = self.files.entry(file).or_default();
        let new = Found {
            from: pos,
            until: pos.saturating_add(len).min((pos / UNIT + 1) * UNIT),
            at: now,
        };
        if units.insert(pos / UNIT, new).is_none() {
            self.entries += 1;
        }
    }

    fn forget_stale(&mut self, now: Duration) {
        for units in self.files.values_mut() {
            units.retain(|_, f| now.saturating_sub(f.at) < RESIDENT_FOR);
        }
        self.files.retain(|_, units| !units.is_empty());
        self.entries = self.files.values().map(HashMap::len).sum();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries
    }
}

/// The process's map (the page cache is the machine's; the engines of one
/// process share it) and its clock.
pub(crate) fn shared() -> (&'static Mutex<ResidentMap>, Duration) {
    static MAP: OnceLock<(Mutex<ResidentMap>, Instant)> = OnceLock::new();
    let (map, epoch) = MAP.get_or_init(|| (Mutex::default(), Instant::now()));
    (map, epoch.elapsed())
}

/// How much of a `want`-byte chunk at `pos` a sender asks `cachestat`
/// about: the chunk, but not past `pos`'s unit (so what it finds can be
/// kept for the unit).
pub(crate) fn ask_len(pos: u64, want: u64) -> u64 {
    want.min((pos / UNIT + 1) * UNIT - pos)
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

    const F: FileKey = (1, 42);
    const G: FileKey = (1, 43);

    #[test]
    fn a_span_one_sender_found_serves_every_sender_of_the_file() {
        let mut m = ResidentMap::default();
        assert_eq!(m.known(F, 1 << 20, Duration::ZERO).0, 0);
        // One reader at 1 MiB asked about the rest of the first unit.
        m.found(F, 1 << 20, ask_len(1 << 20, 4 << 20), 100 * MS);
        // Another reader further in the unit, 2 s later: known, and how old.
        assert_eq!(m.known(F, 3 << 20, 2100 * MS), (1 << 20, 2000 * MS));
        // Before the span, in the next unit, or another file: ask.
        assert_eq!(m.known(F, 0, 2100 * MS).0, 0);
        assert_eq!(m.known(F, 4 << 20, 2100 * MS).0, 0);
        assert_eq!(m.known(G, 3 << 20, 2100 * MS).0, 0);
        // Believed for RESIDENT_FOR from when it was asked, not longer.
        assert_eq!(m.known(F, 3 << 20, 100 * MS + RESIDENT_FOR).0, 0);
    }

    #[test]
    fn a_sender_asks_at_most_the_rest_of_its_unit() {
        assert_eq!(ask_len(0, 4 << 20), 4 << 20);
        assert_eq!(ask_len(1 << 20, 4 << 20), 3 << 20);
        assert_eq!(ask_len(1 << 20, 1 << 20), 1 << 20);
        assert_eq!(ask_len((4 << 20) - 1, 4 << 20), 1);
        // A span is kept within its unit whatever it was given.
        let mut m = ResidentMap::default();
        m.found(F, 1 << 20, 64 << 20, Duration::ZERO);
        assert_eq!(m.known(F, 1 << 20, MS).0, 3 << 20);
    }

    #[test]
    fn a_later_find_replaces_the_units_span_and_stale_spans_are_forgotten() {
        let mut m = ResidentMap::default();
        m.found(F, 2 << 20, 2 << 20, Duration::ZERO);
        // A reader behind it asked later: its span covers more of the unit.
        m.found(F, 1 << 20, 3 << 20, 1000 * MS);
        assert_eq!(m.known(F, 1 << 20, 1000 * MS).0, 3 << 20);
        assert_eq!(m.len(), 1);
        // Past the bound, spans older than RESIDENT_FOR go.
        for i in 0..MAX_ENTRIES as u64 {
            m.found((2, i), 0, UNIT, 2000 * MS);
        }
        assert_eq!(m.len(), MAX_ENTRIES + 1);
        m.found(G, 0, UNIT, 2000 * MS + RESIDENT_FOR);
        assert_eq!(m.len(), 1, "every older span was stale");
        assert_eq!(m.known(G, 0, 2000 * MS + RESIDENT_FOR).0, UNIT);
    }
}
