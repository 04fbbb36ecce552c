//! Progress of one transfer: bytes done, the byte ranges that reached the
//! file (for 111 restart and 112 range markers), and per-transfer counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sluice_engine::Counters;

use crate::limits::MAX_RANGES;

/// A set of disjoint, non-adjacent half-open byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end, kept merged.
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // A range starting at or before `e` and ending at or after `s` touches us.
        let touching: Vec<(u64, u64)> = self
            .map
            .range(..=e)
            .rev()
            .take_while(|&(_, &re)| re >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in touching {
            self.map.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.map.insert(s, e);
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no bytes are in the set.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Total bytes covered.
    pub fn covered(&self) -> u64 {
        self.map.iter().map(|(s, e)| e - s).sum()
    }

    /// True when every byte of `[start, end)` is in the set.
    pub fn contains(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        matches!(self.map.range(..=start).next_back(), Some((_, &e)) if e >= end)
    }

    /// The ranges in ascending order as `(start, end)`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }
}

/// Live progress of one transfer, shared with the session (markers, STAT).
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    ranges: Mutex<RangeSet>,
    counters: Arc<Counters>,
}

impl Progress {
    /// Fresh progress with its own engine counters.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Payload bytes sent (downloads) or written to the file (uploads).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The byte ranges that have been written to the file (uploads).
    pub fn ranges(&self) -> RangeSet {
        self.ranges.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// This transfer's engine counters (sends, wake-ups, EAGAINs, disk bytes).
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    pub(crate) fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Records `[offset, offset+len)` as written; false when the set would
    /// exceed [`MAX_RANGES`] (the caller fails the transfer).
    pub(crate) fn add_range(&self, offset: u64, len: u64) -> bool {
        self.add_bytes(len);
        let Ok(mut r) = self.ranges.lock() else {
            return false;
        };
        r.insert(offset, offset.saturating_add(len));
        r.len() <= MAX_RANGES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_they_touch() {
        let mut r = RangeSet::new();
        r.insert(10, 20);
        r.insert(30, 40);
        assert_eq!(r.len(), 2);
        r.insert(20, 30);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(10, 40)]);
        r.insert(0, 5);
        r.insert(3, 12);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 40)]);
        r.insert(50, 60);
        r.insert(45, 55);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 40), (45, 60)]);
        assert!(r.contains(46, 60));
        assert!(!r.contains(39, 46));
        assert_eq!(r.covered(), 55);
        r.insert(7, 7);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn range_set_matches_a_bitmap() {
        // Deterministic pseudo-random inserts checked against a byte map.
        let mut r = RangeSet::new();
        let mut bits = vec![false; 500];
        let mut x = 12345u64;
        for _ in 0..300 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let s = (x >> 33) % 490;
            let l = (x >> 20) % 10;
            r.insert(s, s + l);
            for b in &mut bits[s as usize..(s + l) as usize] {
                *b = true;
            }
        }
        let mut expect = RangeSet::new();
        let mut i = 0;
        while i < bits.len() {
            if bits[i] {
                let j = (i..bits.len()).find(|&j| !bits[j]).unwrap_or(bits.len());
                expect.map.insert(i as u64, j as u64);
                i = j;
            } else {
                i += 1;
            }
        }
        assert_eq!(r, expect);
    }
}
