//! What to send: the file, its byte ranges and the transfer mode.

use std::fs::File;
use std::sync::Arc;

use crate::limits::{DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use crate::TransferError;

/// `len` bytes of a file starting at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

impl ByteRange {
    /// `len` bytes from `offset`.
    pub fn new(offset: u64, len: u64) -> Self {
        ByteRange { offset, len }
    }

    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

impl From<(u64, u64)> for ByteRange {
    fn from((offset, len): (u64, u64)) -> Self {
        ByteRange { offset, len }
    }
}

/// FTP transfer mode of the data connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// MODE S: one connection, raw bytes, end of data = connection close.
    Stream,
    /// MODE E: framed blocks of at most `block_size` bytes over 1..n connections.
    Extended {
        /// Payload bytes per block.
        block_size: u64,
    },
}

impl Mode {
    /// MODE E with the default block size.
    pub fn extended() -> Self {
        Mode::Extended {
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// A download: which bytes of which file, in which mode.
#[derive(Debug, Clone)]
pub struct SendSpec {
    /// The open file (shared with the disk threads).
    pub file: Arc<File>,
    /// Byte ranges to send, in order (REST offset; ERET offset/length).
    pub ranges: Vec<ByteRange>,
    /// Transfer mode.
    pub mode: Mode,
}

impl SendSpec {
    /// Everything from `offset` to the file's current end (RETR after REST).
    pub fn from_offset(file: Arc<File>, offset: u64, mode: Mode) -> std::io::Result<SendSpec> {
        let size = file.metadata()?.len();
        let len = size.saturating_sub(offset);
        Ok(SendSpec {
            file,
            ranges: vec![ByteRange::new(offset.min(size), len)],
            mode,
        })
    }

    /// Total payload bytes of all ranges.
    pub fn total_len(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }

    /// Checks the mode's block size and that ranges do not overflow.
    pub(crate) fn validate(&self) -> Result<(), TransferError> {
        if let Mode::Extended { block_size } = self.mode {
            if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
                return Err(TransferError::Setup("MODE E block size out of range"));
            }
        }
        if self.ranges.iter().any(|r| {
            r.offset
                .checked_add(r.len)
                .is_none_or(|e| e > i64::MAX as u64)
        }) {
            return Err(TransferError::Setup(
                "byte range beyond the largest file offset",
            ));
        }
        Ok(())
    }
}

/// Hands out MODE E blocks in file order to whichever stream asks next.
#[derive(Debug)]
pub(crate) struct BlockQueue {
    ranges: Vec<ByteRange>,
    idx: usize,
    pos: u64,
    block: u64,
    base: u64,
}

impl BlockQueue {
    /// Blocks of at most `block` bytes; header offsets are `offset - base`.
    pub(crate) fn new(ranges: &[ByteRange], block: u64, base: u64) -> Self {
        let ranges: Vec<ByteRange> = ranges.iter().copied().filter(|r| r.len > 0).collect();
        let pos = ranges.first().map_or(0, |r| r.offset);
        BlockQueue {
            ranges,
            idx: 0,
            pos,
            block: block.max(1),
            base,
        }
    }

    /// The next block and the offset its header carries, or `None` when
    /// all are handed out.
    pub(crate) fn next_block(&mut self) -> Option<(ByteRange, u64)> {
        loop {
            let r = *self.ranges.get(self.idx)?;
            if self.pos >= r.end() {
                self.idx += 1;
                self.pos = self.ranges.get(self.idx).map_or(0, |r| r.offset);
                continue;
            }
            let len = (r.end() - self.pos).min(self.block);
            let b = ByteRange::new(self.pos, len);
            self.pos += len;
            return Some((b, b.offset.saturating_sub(self.base)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_range_exactly() {
        let mut q = BlockQueue::new(
            &[
                ByteRange::new(10, 25),
                ByteRange::new(0, 0),
                ByteRange::new(100, 10),
            ],
            10,
            10,
        );
        let got: Vec<_> = std::iter::from_fn(|| q.next_block())
            .map(|(b, wire)| (b.offset, b.len, wire))
            .collect();
        assert_eq!(
            got,
            vec![(10, 10, 0), (20, 10, 10), (30, 5, 20), (100, 10, 90)]
        );
        assert!(q.next_block().is_none());
        let mut empty = BlockQueue::new(&[], 10, 0);
        assert!(empty.next_block().is_none());
    }
}
