//! Circus's disk side: which block to read next for whom, and which
//! block to let go when the region or the budget is full (blocks nobody
//! still needs first, then the oldest).

use super::*;

impl Circus {
    pub(super) fn needed(&self, block: u64) -> bool {
        self.wanted.contains_key(&block)
    }

    pub(super) fn remove_block(&mut self, block: u64, out: &mut Vec<Action>) {
        if let Some(b) = self.blocks.remove(&block) {
            let slot = self.slot;
            self.budget().give(slot);
            if let State::Resident { seq } = b.state {
                self.by_age.remove(&seq);
            }
            out.push(Action::Drop { block });
        }
    }

    pub(super) fn drop_unneeded(&mut self, out: &mut Vec<Action>) {
        let idle: Vec<u64> = self
            .by_age
            .values()
            .copied()
            .filter(|b| self.blocks[b].refs == 0 && !self.needed(*b))
            .collect();
        for b in idle {
            self.remove_block(b, out);
        }
    }

    /// The block reader `r` should have read next, if it is hungry: its
    /// first needed block not in memory, from the head of the region on
    /// (cyclically), or from its own lowest if it is independent.
    pub(super) fn wants(&self, r: &Reader, loading: &[u64], full: bool) -> Option<(u64, Source)> {
        if !r.room() {
            return None;
        }
        if r.in_order {
            return self.wants_in_order(r, full);
        }
        // A block it needs is on its way: not hungry.
        if loading.iter().any(|b| r.need.contains_key(b)) {
            return None;
        }
        let indep = r.independent(self.cfg.independent_share);
        let from = if indep { 0 } else { self.head };
        r.need
            .range(from..)
            .chain(r.need.range(..from))
            .map(|(b, _)| *b)
            .find(|b| !self.blocks.contains_key(b))
            .map(|b| {
                let src = if indep {
                    Source::Independent
                } else {
                    Source::Head
                };
                (b, src)
            })
    }

    pub(super) fn read(&mut self, out: &mut Vec<Action>) {
        let n = self.n_blocks().max(1);
        while self.loading < self.cfg.read_depth {
            // Hungry readers' next blocks, with how many want each.
            let loading: Vec<u64> = self
                .blocks
                .iter()
                .filter(|(_, b)| b.state == State::Loading)
                .map(|(i, _)| *i)
                .collect();
            let mut votes: BTreeMap<u64, (usize, Source)> = BTreeMap::new();
            // Once per round, not per reader: it takes the budget's lock.
            let full = self.memory_full();
            for r in self.readers.values() {
                if let Some((b, src)) = self.wants(r, &loading, full) {
                    let v = votes.entry(b).or_insert((0, src));
                    v.0 += 1;
                    // The head moves if any voter rides it.
                    v.1 = v.1.min(src);
                }
            }
            let dist = |b: u64| (b + n - self.head % n) % n;
            let Some((&block, &(_, src))) = votes
                .iter()
                .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(dist(*b.0).cmp(&dist(*a.0))))
            else {
                return;
            };
            if !self.make_room(out) {
                return;
            }
            let slot = self.slot;
            self.budget().take(slot);
            let offset = block * self.cfg.block_size;
            let len = self.cfg.block_size.min(self.size - offset);
            self.blocks.insert(
                block,
                Block {
                    state: State::Loading,
                    refs: 0,
                },
            );
            self.loading += 1;
            self.counters.reads += 1;
            self.counters.bytes_read += len;
            match src {
                Source::Head => self.head = (block + 1) % n,
                Source::Independent => self.counters.independent_reads += 1,
                Source::InOrder => self.counters.in_order_reads += 1,
            }
            out.push(Action::Read { block, offset, len });
        }
    }

    /// Room for one more block: under this file's region and the budget,
    /// dropping blocks of our own where that is ours to do. False: wait
    /// (the budget is full of other files' blocks and ours is under its
    /// share, or nothing of ours can go now).
    pub(super) fn make_room(&mut self, out: &mut Vec<Action>) -> bool {
        loop {
            let own_full = self.blocks.len() >= self.own_cap();
            let slot = self.slot;
            let room = self.budget().room(slot);
            match (own_full, room) {
                (false, Room::Yes) => return true,
                (_, Room::Wait) => return false,
                _ => {
                    if !self.evict_oldest(out) {
                        return false;
                    }
                }
            }
        }
    }

    /// Memory is full: drops, of the blocks nobody is sending, first one
    /// no in-order reader needs (the oldest: the Circus order), then the
    /// in-order block whose next use is furthest in time (Belady with
    /// every reader's announced ranges and measured rate). No horizon: a
    /// block kept for a reader far behind costs only while nothing is
    /// needed later, and the bound (`circus_bound.rs`) is pure Belady.
    pub(super) fn evict_oldest(&mut self, out: &mut Vec<Action>) -> bool {
        let unmeasured = self.unmeasured_rate();
        let mut furthest: Option<(f64, u64)> = None;
        let mut victim = None;
        for &b in self.by_age.values() {
            if self.blocks[&b].refs != 0 {
                continue;
            }
            match self.next_use(b, unmeasured) {
                Some(t) => {
                    if furthest.is_none_or(|(f, _)| t > f) {
                        furthest = Some((t, b));
                    }
                }
                None => {
                    victim = Some(b);
                    break;
                }
            }
        }
        let Some(block) = victim.or(furthest.map(|(_, b)| b)) else {
            return false;
        };
        if self.needed(block) {
            self.counters.evicted_needed += 1;
        }
        self.remove_block(block, out);
        true
    }
}
