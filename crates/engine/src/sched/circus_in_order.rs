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

    /// How many blocks the nearest in-order reader needing `block` still
    /// has to take before it (`None`: no in-order reader needs it).
    pub(super) fn next_use(&self, block: u64) -> Option<usize> {
        if !self.wanted.contains_key(&block) {
            return None;
        }
        self.readers
            .values()
            .filter(|r| r.in_order && r.need.contains_key(&block))
            // Blocks from its next one: its count of blocks still to take
            // for one range, cheap to compute per eviction.
            .filter_map(|r| r.need.keys().next().map(|f| (block - f) as usize))
            .min()
    }
}
