//! Progress of one transfer: bytes done, the byte ranges that reached the
//! file (for 111 restart and 112 range markers), and per-transfer counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sluice_engine::verdict::SendTally;
use sluice_engine::Counters;
use sluice_ftp::markers::RangeSet;

use crate::limits::MAX_RANGES;

/// Live progress of one transfer, shared with the session (markers, STAT).
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    ranges: Mutex<RangeSet>,
    counters: Arc<Counters>,
    /// Downloads: the kernel's accounting of the data connections, summed
    /// as each finishes (what limited the transfer, `verdict.rs`).
    tally: Mutex<SendTally>,
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

    /// Downloads: the summed `TCP_INFO` accounting of the connections
    /// that have finished sending (empty for uploads).
    pub fn send_tally(&self) -> SendTally {
        self.tally.lock().map(|t| *t).unwrap_or_default()
    }

    pub(crate) fn add_tally(&self, t: &SendTally) {
        if let Ok(mut mine) = self.tally.lock() {
            mine.add(t);
        }
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
        r.insert(offset..offset.saturating_add(len));
        r.len() <= MAX_RANGES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_ranges_merge_and_overflow_is_reported() {
        let p = Progress::new();
        assert!(p.add_range(10, 10));
        assert!(p.add_range(30, 10));
        assert!(p.add_range(20, 10));
        assert_eq!(p.ranges().to_string(), "10-40");
        assert_eq!((p.bytes(), p.ranges().total()), (30, 30));
        // Every other byte: disjoint ranges until the bound is passed.
        let p = Progress::new();
        for i in 0..MAX_RANGES as u64 {
            assert!(p.add_range(2 * i, 1));
        }
        assert!(!p.add_range(2 * MAX_RANGES as u64, 1));
        assert_eq!(p.ranges().len(), MAX_RANGES + 1);
    }
}
