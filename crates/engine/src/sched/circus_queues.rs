//! The readers' queues of the Circus selector (see the module docs of
//! `circus.rs`): how much each may hold, in how many pieces a block goes
//! to it, the refill per batch and the sends that free its blocks.

use std::time::Duration;

use super::{Action, Circus, CircusConfig, Piece, ReaderId, State};

/// Shortest span of sends one rate sample covers.
const RATE_SAMPLE: Duration = Duration::from_millis(100);

/// How much a reader of `streams` streams at `rate` bytes/s may have
/// queued (see [`CircusConfig::queue_time`]): `(pieces, split)`, its
/// blocks being cut into `split` pieces each. The floor is one block per
/// reader, not per stream: a slow reader's streams share its block, each
/// sending a part (lab circus-files, 16 files: with a block per stream,
/// 30 slow 4-stream readers pinned the whole 64-block budget and paced
/// every fast reader of the same files to them). An unmeasured reader
/// starts at the floor and grows once its sends show its rate.
pub(super) fn queue_cap(cfg: &CircusConfig, streams: usize, rate: f64) -> (usize, usize) {
    let streams = streams.max(1);
    let most = cfg.queue_len * streams;
    if cfg.queue_time.is_zero() {
        return (most, 1);
    }
    let blocks = (rate * cfg.queue_time.as_secs_f64() / cfg.block_size as f64).ceil();
    let blocks = (blocks as usize).clamp(1, most);
    // A reader whose queue is short for its streams takes each block as
    // a piece per stream, so every stream has one even when the budget
    // gives it fewer blocks than its cap (cut only by the cap, the middle
    // class of the 16-file test got 2-3 blocks for 4 streams and ran at
    // 85 %); a long queue keeps whole blocks (fewer pieces to hand out).
    let split = if blocks >= 2 * streams {
        1
    } else {
        streams.min(MAX_SPLIT)
    };
    (blocks * split, split)
}

/// Most pieces one block is cut into for one reader.
const MAX_SPLIT: usize = 16;

impl Circus {
    /// Reader `id` has sent `piece` (it no longer holds its block).
    pub fn sent(&mut self, id: ReaderId, piece: Piece, now: Duration) {
        let Some(r) = self.readers.get_mut(&id) else {
            return;
        };
        match r.held.get_mut(&piece.block) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    r.held.remove(&piece.block);
                }
            }
            // Not one of its pieces (reported twice): nothing to release.
            _ => return,
        }
        r.outstanding = r.outstanding.saturating_sub(1);
        // One sample per `RATE_SAMPLE` at least: a reader's streams finish
        // pieces nearly together, and a sample per piece read that as a
        // burst of megabytes per second.
        match r.last_sent {
            None => r.last_sent = Some(now),
            Some(start) => {
                r.sample_bytes += piece.len;
                let dt = now.saturating_sub(start);
                if dt >= RATE_SAMPLE {
                    let sample = r.sample_bytes as f64 / dt.as_secs_f64();
                    r.rate = if r.rate == 0.0 {
                        sample
                    } else {
                        0.8 * r.rate + 0.2 * sample
                    };
                    r.sample_bytes = 0;
                    r.last_sent = Some(now);
                }
            }
        }
        (r.cap, r.split) = queue_cap(&self.cfg, r.streams, r.rate);
        if let Some(b) = self.blocks.get_mut(&piece.block) {
            b.refs = b.refs.saturating_sub(1);
        }
    }

    /// Readers with room in their queues in refill order: fastest first
    /// (the frontrunner leads), then by id (arrival). Most readers of a
    /// busy file have a full queue at any batch: they are not sorted.
    fn by_rate(&self) -> Vec<ReaderId> {
        let mut ids: Vec<(f64, ReaderId)> = self
            .readers
            .iter()
            .filter(|(_, r)| r.room())
            .map(|(i, r)| (r.rate, *i))
            .collect();
        ids.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        ids.into_iter().map(|(_, i)| i).collect()
    }

    pub(super) fn refill(&mut self, out: &mut Vec<Action>) {
        let resident: Vec<u64> = self.by_age.values().copied().collect();
        for id in self.by_rate() {
            let r = self.readers.get_mut(&id).expect("listed");
            // In order: its next blocks while they are in memory.
            let next: Vec<u64> = if r.in_order {
                r.need
                    .keys()
                    .copied()
                    .take_while(|b| {
                        self.blocks
                            .get(b)
                            .is_some_and(|b| matches!(b.state, State::Resident { .. }))
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let order = if r.in_order { &next } else { &resident };
            for &block in order {
                if !r.room() {
                    break;
                }
                let Some(pieces) = r.need.remove(&block) else {
                    continue;
                };
                if let Some(n) = self.wanted.get_mut(&block) {
                    *n -= 1;
                    if *n == 0 {
                        self.wanted.remove(&block);
                    }
                }
                let b = self.blocks.get_mut(&block).expect("resident");
                let part = self.cfg.block_size.div_ceil(r.split as u64).max(1);
                for (start, whole) in pieces {
                    r.handed += whole;
                    self.counters.bytes_queued += whole;
                    let mut offset = start;
                    while offset < start + whole {
                        let len = part.min(start + whole - offset);
                        r.outstanding += 1;
                        *r.held.entry(block).or_default() += 1;
                        b.refs += 1;
                        self.counters.pieces += 1;
                        out.push(Action::Queue {
                            reader: id,
                            piece: Piece { block, offset, len },
                        });
                        offset += len;
                    }
                }
            }
        }
    }
}
