//! A virtual-clock model for the Circus selector's tests: readers of one
//! file as simulated streams of given rates, disk reads of a fixed
//! latency, and the checks every test makes (each byte delivered once, in
//! order where asked).

use super::*;
use std::collections::{HashMap, HashSet, VecDeque};

pub(super) const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
pub(super) struct SimReader {
    pub(super) queue: VecDeque<Piece>,
    /// Per stream: the piece on the wire and when it is out.
    pub(super) streams: Vec<Option<(Piece, Duration)>>,
    /// Bytes per millisecond per stream.
    pub(super) per_ms: u64,
    pub(super) got: Vec<Piece>,
    pub(super) demand: Vec<(u64, u64)>,
}

pub(super) struct Sim {
    pub(super) c: Circus,
    pub(super) now: Duration,
    pub(super) readers: BTreeMap<ReaderId, SimReader>,
    pub(super) in_memory: HashSet<u64>,
    pub(super) reads: Vec<(u64, Duration)>,
    pub(super) read_log: Vec<u64>,
    pub(super) read_latency: Duration,
}

impl Sim {
    pub(super) fn new(cfg: CircusConfig, size: u64) -> Sim {
        Sim::with(Circus::new(cfg, size))
    }

    pub(super) fn with(c: Circus) -> Sim {
        Sim {
            c,
            now: Duration::ZERO,
            readers: BTreeMap::new(),
            in_memory: HashSet::new(),
            reads: Vec::new(),
            read_log: Vec::new(),
            read_latency: 5 * MS,
        }
    }

    pub(super) fn add(&mut self, id: u64, ranges: &[(u64, u64)], streams: usize, per_ms: u64) {
        self.c
            .register(ReaderId(id), ranges, streams, per_ms * 1000);
        self.readers.insert(
            ReaderId(id),
            SimReader {
                streams: vec![None; streams],
                per_ms,
                demand: ranges.to_vec(),
                ..SimReader::default()
            },
        );
        self.batch();
    }

    /// An in-order reader: one stream, pieces must come in file order.
    pub(super) fn add_in_order(&mut self, id: u64, ranges: &[(u64, u64)], per_ms: u64) {
        self.c
            .register_in_order(ReaderId(id), ranges, per_ms * 1000);
        self.readers.insert(
            ReaderId(id),
            SimReader {
                streams: vec![None; 1],
                per_ms,
                demand: ranges.to_vec(),
                ..SimReader::default()
            },
        );
        self.batch();
    }

    /// Reader `id` got its pieces in file order (the order it sent them).
    pub(super) fn check_in_order(&self, id: u64) {
        let got = &self.readers[&ReaderId(id)].got;
        for w in got.windows(2) {
            assert_eq!(w[0].offset + w[0].len, w[1].offset, "reader {id}: {w:?}");
        }
    }

    /// Ticks until every reader is done, checking memory stays in the region.
    pub(super) fn run_bounded(&mut self, limit_ms: u64) {
        let region = self.c.config().region_blocks;
        for _ in 0..limit_ms {
            assert!(self.in_memory.len() + self.reads.len() <= region);
            if self.readers.keys().all(|id| self.finished(id.0)) {
                return;
            }
            self.tick();
        }
        panic!("not done after {limit_ms} ms: {:?}", self.c.counters());
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.readers.remove(&ReaderId(id));
        self.c.gone(ReaderId(id));
        self.batch();
    }

    pub(super) fn held(&self, block: u64) -> bool {
        self.readers.values().any(|r| {
            r.queue.iter().any(|p| p.block == block)
                || r.streams.iter().flatten().any(|(p, _)| p.block == block)
        })
    }

    pub(super) fn batch(&mut self) {
        // The selector's counts of who needs each block match the readers
        // (every 64 ms of the clock: counting is slow for long runs).
        if self.now.as_millis().is_multiple_of(64) {
            let mut wanted: HashMap<u64, u32> = HashMap::new();
            for r in self.c.readers.values() {
                for b in r.need.keys() {
                    *wanted.entry(*b).or_default() += 1;
                }
            }
            assert_eq!(wanted, self.c.wanted, "demand counts drifted");
        }
        for a in self.c.poll() {
            match a {
                Action::Read { block, offset, len } => {
                    assert_eq!(offset, block * self.c.config().block_size);
                    assert!(len > 0);
                    assert!(!self.in_memory.contains(&block), "read twice at once");
                    self.reads.push((block, self.now + self.read_latency));
                    self.read_log.push(block);
                }
                Action::Queue { reader, piece } => {
                    assert!(self.in_memory.contains(&piece.block), "queued before read");
                    self.readers
                        .get_mut(&reader)
                        .unwrap()
                        .queue
                        .push_back(piece);
                }
                Action::Drop { block } => {
                    assert!(!self.held(block), "block {block} dropped while held");
                    assert!(self.in_memory.remove(&block), "dropped unknown block");
                }
            }
        }
    }

    /// Advances the clock one millisecond.
    pub(super) fn tick(&mut self) {
        self.now += MS;
        let now = self.now;
        let done: Vec<u64> = self
            .reads
            .iter()
            .filter(|r| r.1 <= now)
            .map(|r| r.0)
            .collect();
        self.reads.retain(|r| r.1 > now);
        for b in done {
            self.in_memory.insert(b);
            self.c.read_done(b);
        }
        let mut sent = Vec::new();
        for (id, r) in self.readers.iter_mut() {
            for s in r.streams.iter_mut() {
                if let Some((p, t)) = *s {
                    if t <= now {
                        r.got.push(p);
                        sent.push((*id, p));
                        *s = None;
                    }
                }
                if s.is_none() {
                    if let Some(p) = r.queue.pop_front() {
                        let ms = p.len.div_ceil(r.per_ms).max(1);
                        *s = Some((p, now + ms as u32 * MS));
                    }
                }
            }
        }
        for (id, p) in sent {
            self.c.sent(id, p, now);
        }
        self.batch();
    }

    pub(super) fn finished(&self, id: u64) -> bool {
        let r = &self.readers[&ReaderId(id)];
        self.c.handed_all(ReaderId(id))
            && r.queue.is_empty()
            && r.streams.iter().all(Option::is_none)
    }

    pub(super) fn run_until_done(&mut self, limit_ms: u64) {
        for _ in 0..limit_ms {
            if self.readers.keys().all(|id| self.finished(id.0)) {
                return;
            }
            self.tick();
        }
        panic!("not done after {limit_ms} ms: {:?}", self.c.counters());
    }

    /// Every reader got exactly its demand, each byte once, offsets right.
    pub(super) fn check_exactly_once(&self) {
        for (id, r) in &self.readers {
            let mut got = r.got.clone();
            got.sort();
            let mut want: Vec<(u64, u64)> = r.demand.clone();
            want.sort();
            // Merge the pieces back into ranges.
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for p in &got {
                assert_eq!(p.block, p.offset / self.c.config().block_size);
                match merged.last_mut() {
                    Some((o, l)) if *o + *l == p.offset => *l += p.len,
                    Some((o, l)) => {
                        assert!(
                            *o + *l < p.offset,
                            "{id:?}: piece {p:?} twice or overlapping"
                        );
                        merged.push((p.offset, p.len));
                    }
                    None => merged.push((p.offset, p.len)),
                }
            }
            let want: Vec<(u64, u64)> = want.into_iter().filter(|r| r.1 > 0).collect();
            assert_eq!(merged, want, "{id:?}");
        }
    }
}

pub(super) fn cfg(region_blocks: usize) -> CircusConfig {
    CircusConfig {
        block_size: 1000,
        region_blocks,
        queue_len: 2,
        queue_time: Duration::ZERO,
        independent_share: 0.75,
        read_depth: 2,
    }
}
