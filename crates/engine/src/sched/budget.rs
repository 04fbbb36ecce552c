//! One memory budget for every shared file's blocks, sans-I/O.
//!
//! Each file's Circus selector used to hold up to its own region
//! (`circus_region`, 64 MiB): with 16 popular files that is 1 GiB of
//! engine buffers on a server whose memory, page cache included, was
//! 256 MiB (lab circus-files: the shared rows read 2.4x the bytes they
//! sent, sharing off 1.07x). Now the files draw on one engine-wide count
//! of blocks (`circus_budget`): a file may grow past its fair share
//! (budget / files) while the budget has room, and once it is full a
//! file under its share that needs a block waits, is recorded as
//! *wanting*, and every file over its share gives back its oldest blocks
//! at its next batch until it is at its share. The budget is never
//! exceeded: a block is counted before its read is issued.
//!
//! Shares are weighted: each file tells the budget how many blocks its
//! readers' queues may hold ([`Budget::weigh`]: one per slow reader, up
//! to `queue_len` per stream of a fast one), and its share is the budget
//! in that proportion. An even split gave a file of one slow reader as
//! much as a file with a fast reader queueing a second of 45 Mbit/s
//! (lab circus-files, 16 files: the middle and fast classes were held
//! to the file's even share while files of slow readers sat on theirs).
//!
//! Files register with [`Budget::join`] and leave with [`Budget::leave`]
//! (their blocks are returned). The I/O side drains [`Budget::wake`]
//! after each batch: files that were refused and may now find room must
//! run a batch, since nothing of their own may wake them.

use std::collections::{BTreeMap, BTreeSet};

/// A file's place in the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub u64);

/// May a file take one more block?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Yes: the budget has room.
    Yes,
    /// The budget is full and this file holds at least its share: it
    /// makes room by dropping one of its own blocks.
    EvictOwn,
    /// The budget is full of other files' blocks and this one is under
    /// its share: it waits (and is woken when blocks come back).
    Wait,
}

/// The engine-wide count of shared blocks. See the module docs.
#[derive(Debug)]
pub struct Budget {
    blocks: usize,
    held: BTreeMap<Slot, usize>,
    /// Each file's weight (blocks its readers' queues may hold, >= 1).
    weight: BTreeMap<Slot, usize>,
    weights: usize,
    total: usize,
    next: u64,
    wanting: BTreeSet<Slot>,
    wake: Vec<Slot>,
    /// Most blocks ever held at once (tests and counters).
    peak: usize,
}

impl Budget {
    /// A budget of `blocks` blocks (at least one).
    pub fn new(blocks: usize) -> Budget {
        Budget {
            blocks: blocks.max(1),
            held: BTreeMap::new(),
            weight: BTreeMap::new(),
            weights: 0,
            total: 0,
            next: 0,
            wanting: BTreeSet::new(),
            wake: Vec::new(),
            peak: 0,
        }
    }

    /// A new file draws on the budget.
    pub fn join(&mut self) -> Slot {
        let s = Slot(self.next);
        self.next += 1;
        self.held.insert(s, 0);
        self.weight.insert(s, 1);
        self.weights += 1;
        s
    }

    /// `slot`'s readers may queue `blocks` blocks now: its share follows.
    pub fn weigh(&mut self, slot: Slot, blocks: usize) {
        if let Some(w) = self.weight.get_mut(&slot) {
            self.weights = self.weights - *w + blocks.max(1);
            *w = blocks.max(1);
        }
    }

    /// A file is gone: its blocks are free.
    pub fn leave(&mut self, slot: Slot) {
        if let Some(w) = self.weight.remove(&slot) {
            self.weights -= w;
        }
        if let Some(n) = self.held.remove(&slot) {
            self.total -= n;
            self.freed();
        }
        self.wanting.remove(&slot);
    }

    /// Blocks `slot` may keep when every file wants memory: the budget
    /// in proportion to its weight.
    pub fn share(&self, slot: Slot) -> usize {
        let w = self.weight.get(&slot).copied().unwrap_or(1);
        (self.blocks * w / self.weights.max(1)).max(1)
    }

    /// Blocks `slot` holds.
    pub fn held(&self, slot: Slot) -> usize {
        self.held.get(&slot).copied().unwrap_or(0)
    }

    /// Blocks held by all files.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The budget in blocks.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Most blocks held at once so far.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Whether no block can be taken without giving one back.
    pub fn full(&self) -> bool {
        self.total >= self.blocks
    }

    /// Whether `slot` may take a block now (a `Wait` answer records it as
    /// wanting, to be woken when blocks come back).
    pub fn room(&mut self, slot: Slot) -> Room {
        // Room freed while a file under its share waits is kept for it: a
        // file at its share may only swap blocks of its own.
        let at_share = self.held(slot) >= self.share(slot);
        let reserved = at_share && self.wanting.iter().any(|w| *w != slot);
        if !self.full() && !reserved {
            return Room::Yes;
        }
        if at_share {
            return Room::EvictOwn;
        }
        self.wanting.insert(slot);
        Room::Wait
    }

    /// Whether `slot` holds more than its share while some file under
    /// its share waits: it should give blocks back.
    pub fn over_share(&self, slot: Slot) -> bool {
        !self.wanting.is_empty()
            && !self.wanting.contains(&slot)
            && self.held(slot) > self.share(slot)
    }

    /// `slot` takes a block (its read is about to be issued).
    pub fn take(&mut self, slot: Slot) {
        if let Some(n) = self.held.get_mut(&slot) {
            *n += 1;
            self.total += 1;
            self.peak = self.peak.max(self.total);
            self.wanting.remove(&slot);
        }
    }

    /// `slot` gives a block back.
    pub fn give(&mut self, slot: Slot) {
        if let Some(n) = self.held.get_mut(&slot) {
            if *n > 0 {
                *n -= 1;
                self.total -= 1;
                self.freed();
            }
        }
    }

    fn freed(&mut self) {
        if !self.full() {
            self.wake.extend(self.wanting.iter().copied());
        }
    }

    /// `slot` runs a batch: it is wanting again only if it is refused
    /// again (one that no longer needs memory must not hold the others
    /// to their shares).
    pub fn unwant(&mut self, slot: Slot) {
        self.wanting.remove(&slot);
    }

    /// Files to run a batch for: refused earlier, there is room now.
    pub fn wake(&mut self) -> Vec<Slot> {
        let mut w = std::mem::take(&mut self.wake);
        w.sort_unstable();
        w.dedup();
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_alone_may_use_the_whole_budget() {
        let mut b = Budget::new(8);
        let a = b.join();
        for _ in 0..8 {
            assert_eq!(b.room(a), Room::Yes);
            b.take(a);
        }
        assert_eq!(b.room(a), Room::EvictOwn);
        assert_eq!(b.total(), 8);
    }

    #[test]
    fn a_newcomer_under_its_share_waits_and_is_woken_when_the_big_one_gives_back() {
        let mut b = Budget::new(8);
        let (a, c) = (b.join(), b.join());
        for _ in 0..8 {
            b.take(a);
        }
        assert_eq!(b.room(c), Room::Wait);
        assert!(b.over_share(a), "a holds 8 of a share of 4 while c waits");
        assert!(!b.over_share(c));
        b.give(a);
        assert_eq!(b.wake(), vec![c]);
        // The freed block is kept for c: a may only swap its own.
        assert_eq!(b.room(a), Room::EvictOwn);
        assert_eq!(b.room(c), Room::Yes);
        b.take(c);
        assert!(!b.over_share(a), "nobody waits now");
    }

    #[test]
    fn leaving_returns_every_block() {
        let mut b = Budget::new(4);
        let (a, c) = (b.join(), b.join());
        for _ in 0..4 {
            b.take(a);
        }
        assert_eq!(b.room(c), Room::Wait);
        b.leave(a);
        assert_eq!(b.total(), 0);
        assert_eq!(b.wake(), vec![c]);
        assert_eq!(b.share(c), 4);
    }

    #[test]
    fn a_file_whose_readers_queue_more_gets_a_larger_share() {
        let mut b = Budget::new(12);
        let (slow, fast) = (b.join(), b.join());
        assert_eq!((b.share(slow), b.share(fast)), (6, 6), "even until weighed");
        b.weigh(slow, 1);
        b.weigh(fast, 5);
        assert_eq!((b.share(slow), b.share(fast)), (2, 10));
        for _ in 0..12 {
            b.take(slow);
        }
        assert_eq!(b.room(fast), Room::Wait);
        assert!(b.over_share(slow), "slow holds 12 of a share of 2");
        b.leave(fast);
        assert_eq!(b.share(slow), 12);
    }
}
