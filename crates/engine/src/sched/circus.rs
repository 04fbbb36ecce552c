//! Circus sharing, sans-I/O: one selector per served file decides which
//! block to read from disk next, which reader gets which block already in
//! memory, and which block to drop (the Circus paper, "out-of-order
//! download server", and mechanism 1 of issue 12).
//!
//! Brief overview. The file is cut into blocks of `block_size` at fixed
//! offsets (so readers with different start offsets share them). A reader
//! (one download, of any number of streams) registers what it still
//! needs; it may take its blocks in any order (MODE E: every block carries
//! its offset and the client reassembles). Then, per batch ([`Circus::poll`]):
//! 1. blocks in memory that nobody still needs and nobody is sending are
//!    dropped;
//! 2. every reader with room in its queue (at most `queue_len` pieces per
//!    stream, counted until they are sent) is given the blocks in memory it
//!    still needs, oldest first: the oldest are the next to leave memory
//!    (followers ride the region behind the frontrunner);
//! 3. while a reader is left hungry (room in its queue, and no block it
//!    needs in memory or on its way), a block is read: the one most hungry
//!    readers need next from the head of the active region, which then
//!    advances past it (the hungriest reader is the frontrunner). A reader
//!    that already has `independent_share` of its demand is *independent*:
//!    it reads its own next block wherever that is, without moving the
//!    head. Reads stop at `read_depth` in flight and at `region_blocks`
//!    blocks in memory; when memory is full the oldest block nobody is
//!    sending is dropped (it fell out of the region; a reader that still
//!    needs it gets it again when the head comes round). Memory is one
//!    engine-wide budget shared by every file's selector (`budget.rs`:
//!    a file grows past its fair share only while the budget has room)
//!    as well as `region_blocks` for this file alone.
//!
//! A reader's queue is sized in time when `queue_time` is set: about
//! `queue_time` of its measured rate, so a slow reader pins few blocks.
//!
//! In-order readers ([`Circus::register_in_order`]: HTTP bodies, MODE S,
//! mechanism 2 of issue 12) must get their bytes in file order, so they
//! take only their next block, read it themselves when it is not in
//! memory (and up to their queue's room ahead while memory is not full),
//! never moving the head. What they share is what stays: when memory is
//! full the block dropped is the one whose next use is furthest away, its
//! next use being how many blocks the nearest in-order reader needing it
//! has still to take before it (Belady; every reader announced its
//! ranges). A trailing reader within the region of a leader so finds the
//! leader's blocks waiting; one further behind reads what fell out.
//!
//! A reader that goes away ([`Circus::gone`]) is forgotten at once: its
//! queued pieces no longer hold their blocks, and blocks only it needed go
//! at the next batch. No clock, no I/O: `now` is passed in (it only feeds
//! the readers' measured rates, which order the refill: fastest first).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::budget::{Budget, Room, Slot};

/// Identifies one registered reader (one download).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReaderId(pub u64);

/// Selector tuning (engine settings `circus_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CircusConfig {
    /// Bytes per block: the unit read from disk, held and handed out.
    pub block_size: u64,
    /// Most blocks in memory (in memory or being read) at once: the active
    /// region plus the independents' blocks.
    pub region_blocks: usize,
    /// Pieces queued per stream of a reader (its queue holds this times
    /// its streams), refilled per batch; with `queue_time` the most.
    pub queue_len: usize,
    /// A reader's queue holds about this much of its measured rate (at
    /// least one block, cut into a piece per stream when it has fewer
    /// blocks than streams; at most `queue_len` blocks per stream): a slow
    /// reader must not pin blocks a fast one needs (lab circus-files: a
    /// 1.5 Mbit/s 4-stream reader held 16 MiB, 85 s of its rate). Zero:
    /// `queue_len` per stream whatever the rate.
    pub queue_time: Duration,
    /// A reader with at least this share (0-1) of its demand handed out
    /// reads outside the region (independent).
    pub independent_share: f64,
    /// Most block reads in flight for one file.
    pub read_depth: usize,
}

impl Default for CircusConfig {
    fn default() -> Self {
        CircusConfig {
            block_size: 1 << 20,
            region_blocks: 64,
            queue_len: 4,
            queue_time: Duration::ZERO,
            independent_share: 0.75,
            read_depth: 2,
        }
    }
}

/// Part of one block a reader needs: `len` bytes at file offset `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Piece {
    /// Block index (`offset / block_size`).
    pub block: u64,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// What the caller must do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read block `block` (`len` bytes at `offset`) and report it with
    /// [`Circus::read_done`].
    Read {
        /// Block index.
        block: u64,
        /// File offset.
        offset: u64,
        /// Bytes (short for the last block).
        len: u64,
    },
    /// Put `piece` (of a block in memory) on `reader`'s queue; report it
    /// with [`Circus::sent`] once it is out.
    Queue {
        /// Whose queue.
        reader: ReaderId,
        /// What to send.
        piece: Piece,
    },
    /// Forget block `block`: nobody holds it any more.
    Drop {
        /// Block index.
        block: u64,
    },
}

/// What the selector did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CircusCounters {
    /// Blocks read.
    pub reads: u64,
    /// Bytes of those reads.
    pub bytes_read: u64,
    /// Pieces queued to readers.
    pub pieces: u64,
    /// Bytes of those pieces.
    pub bytes_queued: u64,
    /// Blocks dropped while some reader still needed them (read again later).
    pub evicted_needed: u64,
    /// Reads made for independent readers, outside the region.
    pub independent_reads: u64,
    /// Reads made for in-order readers (their next blocks).
    pub in_order_reads: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Loading,
    /// In memory since batch sequence number `seq` (older first).
    Resident {
        seq: u64,
    },
}

#[derive(Debug)]
struct Block {
    state: State,
    /// Pieces of it queued or being sent.
    refs: u32,
}

#[derive(Debug)]
struct Reader {
    /// Still to hand out: pieces by block.
    need: BTreeMap<u64, Vec<(u64, u64)>>,
    /// Pieces queued and not yet reported sent.
    outstanding: usize,
    /// Those pieces' blocks, with counts (released if the reader goes).
    held: HashMap<u64, u32>,
    /// Pieces it may have queued; its blocks are cut into `split` pieces.
    cap: usize,
    split: usize,
    streams: usize,
    total: u64,
    handed: u64,
    /// Bytes per second, smoothed from `sent` reports.
    rate: f64,
    /// Start of the current rate sample and the bytes sent since.
    last_sent: Option<Duration>,
    sample_bytes: u64,
    /// Takes its blocks in file order (HTTP, MODE S).
    in_order: bool,
}

impl Reader {
    fn room(&self) -> bool {
        self.outstanding < self.cap
    }

    fn independent(&self, share: f64) -> bool {
        self.total > 0 && self.handed as f64 >= share * self.total as f64
    }
}

/// The selector of one file. See the module docs.
#[derive(Debug)]
pub struct Circus {
    cfg: CircusConfig,
    size: u64,
    blocks: HashMap<u64, Block>,
    /// Blocks in memory by age (their `seq`).
    by_age: BTreeMap<u64, u64>,
    readers: BTreeMap<ReaderId, Reader>,
    /// How many readers still need each block (absent: none). A batch
    /// asked every reader instead, and with a thousand in-order readers
    /// of one file (lab send-wakeups, `--sharing auto`) `poll` was 45 %
    /// of the server's CPU.
    wanted: HashMap<u64, u32>,
    /// Next block of the active region to read.
    head: u64,
    /// In-order readers registered: while there are any, this file's
    /// blocks may fill the whole budget, not only `region_blocks` (what
    /// they share is what stays; see [`Circus::own_cap`]).
    in_order: usize,
    loading: usize,
    seq: u64,
    counters: CircusCounters,
    /// The memory this file draws on, shared with other files' selectors
    /// (lock order: a file's state, then the budget).
    budget: Arc<Mutex<Budget>>,
    slot: Slot,
}

impl Drop for Circus {
    fn drop(&mut self) {
        let slot = self.slot;
        self.budget().leave(slot);
    }
}

impl Circus {
    /// A selector for a file of `size` bytes with a budget of its own
    /// (`region_blocks`).
    pub fn new(cfg: CircusConfig, size: u64) -> Circus {
        let budget = Arc::new(Mutex::new(Budget::new(cfg.region_blocks.max(1))));
        Circus::in_budget(cfg, size, budget)
    }

    /// A selector for a file of `size` bytes drawing on `budget` with
    /// other files; `region_blocks` still caps this file alone.
    pub fn in_budget(cfg: CircusConfig, size: u64, budget: Arc<Mutex<Budget>>) -> Circus {
        let slot = budget.lock().unwrap_or_else(|p| p.into_inner()).join();
        let cfg = CircusConfig {
            block_size: cfg.block_size.max(1),
            region_blocks: cfg.region_blocks.max(1),
            queue_len: cfg.queue_len.max(1),
            read_depth: cfg.read_depth.max(1),
            ..cfg
        };
        Circus {
            cfg,
            size,
            blocks: HashMap::new(),
            by_age: BTreeMap::new(),
            readers: BTreeMap::new(),
            wanted: HashMap::new(),
            head: 0,
            in_order: 0,
            loading: 0,
            seq: 0,
            counters: CircusCounters::default(),
            budget,
            slot,
        }
    }

    fn budget(&self) -> MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This file's place in the budget (the I/O side maps
    /// [`Budget::wake`]'s answers back to files with it).
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Whether no block can come in without another going.
    pub(super) fn memory_full(&self) -> bool {
        self.blocks.len() >= self.own_cap() || self.budget().full()
    }

    /// Most blocks this file may hold: its region, or, while it has
    /// in-order readers, the whole budget (its fair share still applies
    /// when other files want memory). The region is the Circus sweep's
    /// length; in-order readers share only what stays in memory until a
    /// trailing reader reaches it, and on circus-steady's readers the
    /// least disk a memory of B blocks allows falls from 0.77 to 0.59
    /// bytes per byte sent between 64 and 160 blocks (`circus_bound.rs`).
    pub(super) fn own_cap(&self) -> usize {
        if self.in_order > 0 {
            self.cfg.region_blocks.max(self.budget().blocks())
        } else {
            self.cfg.region_blocks
        }
    }

    /// Pieces reader `id` may have queued now (0 for an unknown reader).
    pub fn queue_cap(&self, id: ReaderId) -> usize {
        self.readers.get(&id).map_or(0, |r| r.cap)
    }

    /// The settings in force.
    pub fn config(&self) -> &CircusConfig {
        &self.cfg
    }

    /// Counts so far.
    pub fn counters(&self) -> CircusCounters {
        self.counters
    }

    /// Number of blocks.
    fn n_blocks(&self) -> u64 {
        self.size.div_ceil(self.cfg.block_size)
    }

    /// Registers reader `id` needing `ranges` (`(offset, len)`, clipped to
    /// the file), sending over `streams` connections, at `rate` bytes/s if
    /// known (0 if not).
    pub fn register(&mut self, id: ReaderId, ranges: &[(u64, u64)], streams: usize, rate: u64) {
        self.add_reader(id, ranges, streams, rate, false);
    }

    /// Registers reader `id` that must get `ranges` in file order over one
    /// connection (ranges in increasing offset order, not overlapping),
    /// at `rate` bytes/s if known.
    pub fn register_in_order(&mut self, id: ReaderId, ranges: &[(u64, u64)], rate: u64) {
        self.add_reader(id, ranges, 1, rate, true);
    }

    fn add_reader(
        &mut self,
        id: ReaderId,
        ranges: &[(u64, u64)],
        streams: usize,
        rate: u64,
        in_order: bool,
    ) {
        let bs = self.cfg.block_size;
        let mut need: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        let mut total = 0;
        for &(offset, len) in ranges {
            let end = offset.saturating_add(len).min(self.size);
            let mut pos = offset;
            while pos < end {
                let block = pos / bs;
                let piece_end = ((block + 1) * bs).min(end);
                need.entry(block).or_default().push((pos, piece_end - pos));
                total += piece_end - pos;
                pos = piece_end;
            }
        }
        let (cap, split) = queue_cap(&self.cfg, streams, rate as f64);
        for block in need.keys() {
            *self.wanted.entry(*block).or_default() += 1;
        }
        if let Some(old) = self.readers.remove(&id) {
            self.forget(old);
        }
        if in_order {
            self.in_order += 1;
        }
        self.readers.insert(
            id,
            Reader {
                need,
                outstanding: 0,
                held: HashMap::new(),
                cap,
                split,
                streams: streams.max(1),
                total,
                handed: 0,
                rate: rate as f64,
                last_sent: None,
                sample_bytes: 0,
                in_order,
            },
        );
    }

    /// Reader `id` is gone (done, failed, reset): its demand and its
    /// queued pieces' hold on their blocks are dropped now; blocks nobody
    /// needs any more go at the next [`Circus::poll`].
    pub fn gone(&mut self, id: ReaderId) {
        if let Some(r) = self.readers.remove(&id) {
            self.forget(r);
        }
    }

    /// A reader's demand and holds are gone.
    fn forget(&mut self, r: Reader) {
        if r.in_order {
            self.in_order -= 1;
        }
        for block in r.need.keys() {
            self.unwant(*block);
        }
        // Its queued pieces are thrown away with it by the caller.
        for (block, n) in r.held {
            if let Some(b) = self.blocks.get_mut(&block) {
                b.refs = b.refs.saturating_sub(n);
            }
        }
    }

    /// One reader less needs `block`.
    fn unwant(&mut self, block: u64) {
        if let Some(n) = self.wanted.get_mut(&block) {
            *n -= 1;
            if *n == 0 {
                self.wanted.remove(&block);
            }
        }
    }

    /// Whether reader `id` has been handed everything it needs (its queue
    /// may still hold pieces). True for an unknown reader.
    pub fn handed_all(&self, id: ReaderId) -> bool {
        self.readers.get(&id).is_none_or(|r| r.need.is_empty())
    }

    /// Readers registered.
    pub fn readers(&self) -> usize {
        self.readers.len()
    }

    /// Block `block` has been read (it is in memory now).
    pub fn read_done(&mut self, block: u64) {
        if let Some(b) = self.blocks.get_mut(&block) {
            if b.state == State::Loading {
                self.loading -= 1;
                self.seq += 1;
                b.state = State::Resident { seq: self.seq };
                self.by_age.insert(self.seq, block);
            }
        }
    }

    /// Reading block `block` failed: it is forgotten (a later batch may
    /// read it again).
    pub fn read_failed(&mut self, block: u64) {
        if let Some(b) = self.blocks.remove(&block) {
            let slot = self.slot;
            self.budget().give(slot);
            match b.state {
                State::Loading => self.loading -= 1,
                State::Resident { seq } => {
                    self.by_age.remove(&seq);
                }
            }
        }
    }

    /// One batch: drops, queue refills and reads, in that order.
    pub fn poll(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let slot = self.slot;
        // Our share of the budget follows what our readers may queue.
        let weight = self.readers.values().map(|r| r.streams).sum();
        let mut budget = self.budget();
        budget.unwant(slot);
        budget.weigh(slot, weight);
        drop(budget);
        self.drop_unneeded(&mut out);
        // A file under its share waits for memory: give back down to ours.
        while self.budget().over_share(self.slot) && self.evict_oldest(&mut out) {}
        self.refill(&mut out);
        self.read(&mut out);
        out
    }
}

#[path = "circus_reads.rs"]
mod reads;

#[path = "circus_in_order.rs"]
mod in_order;
use in_order::Source;

#[path = "circus_queues.rs"]
mod queues;
use queues::queue_cap;

#[cfg(test)]
#[path = "circus_sim.rs"]
mod sim;

#[cfg(test)]
#[path = "circus_bound.rs"]
mod bound;

#[cfg(test)]
#[path = "circus_tests.rs"]
mod tests;
