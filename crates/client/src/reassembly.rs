//! Reassembly of blocks that arrive by offset (MODE E) into writes.
//!
//! Sans-I/O: [`Reassembly::handle_block`] takes `(offset, bytes)` as they
//! come off the data connections, in any order, [`Reassembly::poll_write`]
//! gives back what to write where. For a seekable destination a block is
//! written at its own offset as soon as it arrives (`pwrite`); for a pipe
//! (`-`) blocks are held until everything before them has arrived. The
//! received ranges are tracked either way, so duplicates are counted and
//! gaps are found when the transfer ends.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::Range;

use sluice_ftp::markers::RangeSet;

/// Why a block cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReassemblyError {
    /// `offset + len` overflows a file offset.
    OffsetOverflow {
        /// Block offset.
        offset: u64,
        /// Block length.
        len: u64,
    },
    /// The block ends past the size the server announced.
    PastEnd {
        /// One past the block's last byte.
        end: u64,
        /// The announced size.
        size: u64,
    },
    /// In-order mode: more than the allowed bytes are waiting for a gap to fill.
    WindowFull {
        /// Bytes held.
        held: u64,
        /// The limit.
        limit: u64,
    },
}

impl fmt::Display for ReassemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReassemblyError::OffsetOverflow { offset, len } => {
                write!(f, "block at offset {offset} of {len} bytes overflows")
            }
            ReassemblyError::PastEnd { end, size } => {
                write!(f, "block ends at {end}, past the file size {size}")
            }
            ReassemblyError::WindowFull { held, limit } => write!(
                f,
                "{held} bytes arrived out of order waiting for a gap (limit {limit})"
            ),
        }
    }
}

/// One write for the writer thread.
#[derive(Debug, PartialEq, Eq)]
pub struct Write {
    /// Where in the destination (for a pipe: always the next byte).
    pub offset: u64,
    /// What to write.
    pub data: Vec<u8>,
}

/// Tracks received ranges and turns blocks into writes.
#[derive(Debug)]
pub struct Reassembly {
    received: RangeSet,
    size: Option<u64>,
    duplicate_bytes: u64,
    ready: VecDeque<Write>,
    in_order: Option<InOrder>,
}

/// State for a destination that can only be appended to.
#[derive(Debug)]
struct InOrder {
    next: u64,
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: u64,
    limit: u64,
}

impl Reassembly {
    /// Writes go to the block's own offset (a seekable file). `already` is
    /// what an earlier, resumed run left (e.g. `0..prefix`); `size` is the
    /// file size if the server told us.
    pub fn seekable(already: Range<u64>, size: Option<u64>) -> Self {
        let mut received = RangeSet::new();
        received.insert(already);
        Reassembly {
            received,
            size,
            duplicate_bytes: 0,
            ready: VecDeque::new(),
            in_order: None,
        }
    }

    /// Writes must come in order (a pipe). At most `limit` bytes may wait
    /// for an earlier gap to be filled.
    pub fn in_order(size: Option<u64>, limit: u64) -> Self {
        Reassembly {
            received: RangeSet::new(),
            size,
            duplicate_bytes: 0,
            ready: VecDeque::new(),
            in_order: Some(InOrder {
                next: 0,
                held: BTreeMap::new(),
                held_bytes: 0,
                limit,
            }),
        }
    }

    /// Takes one block. Empty blocks are ignored.
    pub fn handle_block(&mut self, offset: u64, data: Vec<u8>) -> Result<(), ReassemblyError> {
        let len = data.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= sluice_ftp::limits::MAX_OFFSET)
            .ok_or(ReassemblyError::OffsetOverflow { offset, len })?;
        if let Some(size) = self.size {
            if end > size {
                return Err(ReassemblyError::PastEnd { end, size });
            }
        }
        let fresh = len - overlap(&self.received, offset..end);
        self.duplicate_bytes += len - fresh;
        if fresh == 0 {
            return Ok(());
        }
        match &mut self.in_order {
            // Only the new bytes are written: the first copy of a byte
            // wins, as it does for a pipe, so a later conflicting copy (a
            // confused server re-sending a range) cannot overwrite data
            // already written.
            None if fresh < len => {
                for r in missing(&self.received, offset..end) {
                    let from = (r.start - offset) as usize;
                    let to = (r.end - offset) as usize;
                    self.ready.push_back(Write {
                        offset: r.start,
                        data: data[from..to].to_vec(),
                    });
                }
            }
            None => self.ready.push_back(Write { offset, data }),
            Some(io) => io.handle(offset, data, &mut self.ready)?,
        }
        self.received.insert(offset..end);
        Ok(())
    }

    /// The next write to perform, if any.
    pub fn poll_write(&mut self) -> Option<Write> {
        self.ready.pop_front()
    }

    /// Bytes that arrived more than once.
    pub fn duplicate_bytes(&self) -> u64 {
        self.duplicate_bytes
    }

    /// Length of the contiguous prefix `0..n` received so far.
    pub fn prefix(&self) -> u64 {
        match self.received.ranges().first() {
            Some(r) if r.start == 0 => r.end,
            _ => 0,
        }
    }

    /// Ranges of `0..len` still missing.
    pub fn gaps(&self, len: u64) -> Vec<Range<u64>> {
        self.received.gaps(len)
    }

    /// Highest byte received plus one (0 if nothing).
    pub fn end(&self) -> u64 {
        self.received.ranges().last().map_or(0, |r| r.end)
    }
}

impl InOrder {
    fn handle(
        &mut self,
        mut offset: u64,
        mut data: Vec<u8>,
        ready: &mut VecDeque<Write>,
    ) -> Result<(), ReassemblyError> {
        // Part of this block may already have gone out (overlap with data
        // before `next`): drop that part.
        if offset < self.next {
            let skip = (self.next - offset) as usize;
            if skip >= data.len() {
                return Ok(());
            }
            data.drain(..skip);
            offset = self.next;
        }
        self.held_bytes += data.len() as u64;
        // An overlapping block at the same offset replaces the shorter one.
        if let Some(old) = self.held.insert(offset, data) {
            self.held_bytes -= old.len() as u64;
            if let Some(cur) = self.held.get_mut(&offset) {
                if old.len() > cur.len() {
                    self.held_bytes += (old.len() - cur.len()) as u64;
                    *cur = old;
                }
            }
        }
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() > self.next {
                break;
            }
            let (start, mut d) = entry.remove_entry();
            self.held_bytes -= d.len() as u64;
            let end = start + d.len() as u64;
            if end <= self.next {
                continue;
            }
            d.drain(..(self.next - start) as usize);
            ready.push_back(Write {
                offset: self.next,
                data: d,
            });
            self.next = end;
        }
        if self.held_bytes > self.limit {
            return Err(ReassemblyError::WindowFull {
                held: self.held_bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

/// The parts of `r` not yet in `set`, in order.
fn missing(set: &RangeSet, r: Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = r.start;
    for s in set.ranges() {
        if s.end <= at {
            continue;
        }
        if s.start >= r.end {
            break;
        }
        if s.start > at {
            out.push(at..s.start);
        }
        at = at.max(s.end);
    }
    if at < r.end {
        out.push(at..r.end);
    }
    out
}

/// Bytes of `r` already in `set`.
fn overlap(set: &RangeSet, r: Range<u64>) -> u64 {
    set.ranges()
        .iter()
        .map(|s| {
            let a = s.start.max(r.start);
            let b = s.end.min(r.end);
            b.saturating_sub(a)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut Reassembly) -> Vec<(u64, Vec<u8>)> {
        std::iter::from_fn(|| r.poll_write())
            .map(|w| (w.offset, w.data))
            .collect()
    }

    #[test]
    fn seekable_writes_out_of_order_blocks_at_their_offsets() {
        let mut r = Reassembly::seekable(0..0, Some(9));
        r.handle_block(6, b"ghi".to_vec()).unwrap();
        r.handle_block(0, b"abc".to_vec()).unwrap();
        assert_eq!(r.prefix(), 3);
        assert_eq!(r.gaps(9), vec![3..6]);
        r.handle_block(3, b"def".to_vec()).unwrap();
        assert_eq!(
            drain(&mut r),
            vec![
                (6, b"ghi".to_vec()),
                (0, b"abc".to_vec()),
                (3, b"def".to_vec())
            ]
        );
        assert!(r.gaps(9).is_empty());
        assert_eq!(r.prefix(), 9);
    }

    #[test]
    fn duplicates_are_counted_and_not_rewritten() {
        let mut r = Reassembly::seekable(0..0, None);
        r.handle_block(0, vec![1; 10]).unwrap();
        r.handle_block(0, vec![1; 10]).unwrap();
        r.handle_block(5, vec![1; 10]).unwrap(); // half old, half new
        assert_eq!(r.duplicate_bytes(), 15);
        assert_eq!(drain(&mut r).len(), 2);
        assert_eq!(r.end(), 15);
    }

    #[test]
    fn seekable_overlap_writes_only_new_bytes() {
        let mut r = Reassembly::seekable(0..0, Some(12));
        r.handle_block(0, b"abcdef".to_vec()).unwrap();
        r.handle_block(8, b"ij".to_vec()).unwrap();
        // Conflicting copy of 4..6 and 8..10: only 6..8 and 10..12 are new.
        r.handle_block(4, b"XXghYYkl".to_vec()).unwrap();
        assert_eq!(
            drain(&mut r),
            vec![
                (0, b"abcdef".to_vec()),
                (8, b"ij".to_vec()),
                (6, b"gh".to_vec()),
                (10, b"kl".to_vec())
            ]
        );
        assert_eq!(r.duplicate_bytes(), 4);
        assert!(r.gaps(12).is_empty());
    }

    #[test]
    fn resumed_prefix_counts_as_received() {
        let mut r = Reassembly::seekable(0..100, Some(200));
        assert_eq!(r.gaps(200), vec![100..200]);
        r.handle_block(100, vec![0; 100]).unwrap();
        assert!(r.gaps(200).is_empty());
    }

    #[test]
    fn gaps_found_at_the_end() {
        let mut r = Reassembly::seekable(0..0, None);
        r.handle_block(0, vec![0; 4]).unwrap();
        r.handle_block(8, vec![0; 4]).unwrap();
        assert_eq!(r.gaps(16), vec![4..8, 12..16]);
    }

    #[test]
    fn past_end_and_overflow_are_errors() {
        let mut r = Reassembly::seekable(0..0, Some(10));
        assert_eq!(
            r.handle_block(8, vec![0; 4]),
            Err(ReassemblyError::PastEnd { end: 12, size: 10 })
        );
        let mut r = Reassembly::seekable(0..0, None);
        assert!(matches!(
            r.handle_block(u64::MAX - 1, vec![0; 4]),
            Err(ReassemblyError::OffsetOverflow { .. })
        ));
    }

    #[test]
    fn in_order_holds_until_gap_filled() {
        let mut r = Reassembly::in_order(None, 1 << 20);
        r.handle_block(3, b"def".to_vec()).unwrap();
        r.handle_block(6, b"ghi".to_vec()).unwrap();
        assert!(r.poll_write().is_none());
        r.handle_block(0, b"abc".to_vec()).unwrap();
        let out: Vec<u8> = drain(&mut r).into_iter().flat_map(|(_, d)| d).collect();
        assert_eq!(out, b"abcdefghi");
    }

    #[test]
    fn in_order_trims_overlaps() {
        let mut r = Reassembly::in_order(None, 1 << 20);
        r.handle_block(0, b"abcd".to_vec()).unwrap();
        r.handle_block(2, b"cdef".to_vec()).unwrap();
        r.handle_block(0, b"ab".to_vec()).unwrap();
        let w = drain(&mut r);
        let out: Vec<u8> = w.iter().flat_map(|(_, d)| d.clone()).collect();
        assert_eq!(out, b"abcdef");
        assert_eq!(w[1].0, 4);
        assert_eq!(r.duplicate_bytes(), 4);
    }

    #[test]
    fn in_order_window_is_bounded() {
        let mut r = Reassembly::in_order(None, 8);
        r.handle_block(10, vec![0; 8]).unwrap();
        assert!(matches!(
            r.handle_block(20, vec![0; 1]),
            Err(ReassemblyError::WindowFull { .. })
        ));
    }
}
