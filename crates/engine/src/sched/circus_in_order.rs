//! In-order readers of the Circus selector (mechanism 2 of issue 12; see
//! the module docs of `circus.rs`): which block one reads next, and how
//! far ahead a block's next in-order use is.

use super::{Circus, Reader};

/// Who a read is for (ordered: the head moves if any voter rides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Source {
    Head,
    Independent,
    InOrder,
}

impl Circus {
    /// An in-order reader's next block not in memory nor on its way, within
    /// its queue's room; one past its very next block only while memory
    /// has room (read-ahead never pushes out a block someone needs).
    /// `full`: whether memory is full ([`Circus::memory_full`]).
    pub(super) fn wants_in_order(&self, r: &Reader, full: bool) -> Option<(u64, Source)> {
        let room = r.cap.saturating_sub(r.outstanding);
        r.need
            .keys()
            .copied()
            .take(room)
            .enumerate()
            .find(|(_, b)| !self.blocks.contains_key(b))
            .filter(|(k, _)| *k == 0 || !full)
            .map(|(_, b)| (b, Source::InOrder))
    }

    /// Seconds until the nearest in-order reader needing `block` reaches
    /// it: its blocks still to take before it over its measured rate
    /// (`None`: no in-order reader needs it). In time, not blocks: a fast
    /// reader 20 blocks behind a block (45 Mbit/s: 4 s) needs it long
    /// before a slow one 2 blocks behind (1.5 Mbit/s: 11 s), and Belady
    /// drops the block needed last. `unmeasured`: the rate assumed for a
    /// reader that has sent too little to be measured.
    pub(super) fn next_use(&self, block: u64, unmeasured: f64) -> Option<f64> {
        if !self.wanted.contains_key(&block) {
            return None;
        }
        let bs = self.cfg.block_size as f64;
        self.readers
            .values()
            .filter(|r| r.in_order && r.need.contains_key(&block))
            .filter_map(|r| {
                let first = *r.need.keys().next()?;
                let rate = if r.rate > 0.0 { r.rate } else { unmeasured };
                Some((block - first) as f64 * bs / rate)
            })
            .min_by(f64::total_cmp)
    }

    /// The rate assumed for an in-order reader not measured yet: the
    /// slowest measured one's (one block per second if none is). A fast
    /// reader is measured within its first blocks; one still unmeasured
    /// has sent little, so it is likely slow (virtual clock, circus-steady
    /// at 80 %, 147 MiB: 760 MB read against 776 with the mean rate).
    pub(super) fn unmeasured_rate(&self) -> f64 {
        self.readers
            .values()
            .filter(|r| r.in_order && r.rate > 0.0)
            .map(|r| r.rate)
            .min_by(f64::total_cmp)
            .unwrap_or(self.cfg.block_size as f64)
    }
}
