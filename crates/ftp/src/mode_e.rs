//! GridFTP extended block mode, MODE E (OGF GFD.20 section 3).
//!
//! Each data connection carries blocks, each a 17-byte header and a payload:
//!
//! ```text
//! +------------+---------------------+----------------------+-------------+
//! | descriptor | count (u64, BE)     | offset (u64, BE)     | count bytes |
//! |   1 byte   |   8 bytes           |   8 bytes            |   payload   |
//! +------------+---------------------+----------------------+-------------+
//! ```
//!
//! A data block says "these `count` bytes belong at file `offset`", so
//! blocks may arrive in any order over any stream. Each stream ends with a
//! header carrying EOD (end of data on this connection). Exactly one stream
//! also sends EOF; in an EOF header the *offset* field is not an offset but
//! the number of EODs (data connections) the receiver must see before the
//! transfer is complete, and the count field is 0 (no payload).
//!
//! What Globus sends (globus_ftp_control_data.c, globus_xio_mode_e_driver.c):
//! data blocks with descriptor 0; at the end, on each stream, one empty
//! header with EOD, plus CLOSE (0x04) if it will close the connection
//! rather than keep it cached for the next transfer; on one stream EOF is
//! folded into that header (descriptor 0x48) with offset = the total number
//! of data connections of the transfer. A cached connection may later get a
//! lone CLOSE header before it is closed. Its reader also accepts EOD on a
//! block with payload (EOD takes effect after the payload).

use crate::limits::MAX_MODE_E_BLOCK;
use std::fmt;
use std::ops::Range;

/// Length of a block header.
pub const HEADER_LEN: usize = 17;

/// The descriptor byte of a block header: a set of flag bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Descriptor(pub u8);

impl Descriptor {
    /// End of record (record structure; unused for files).
    pub const EOR: u8 = 0x80;
    /// End of file: the offset field carries the EOD count.
    pub const EOF: u8 = 0x40;
    /// Suspected errors in this block.
    pub const SUSPECT: u8 = 0x20;
    /// This block is a restart marker.
    pub const RESTART: u8 = 0x10;
    /// End of data on this connection.
    pub const EOD: u8 = 0x08;
    /// The sender will close this data connection (Globus; otherwise the
    /// connection may be cached for the next transfer).
    pub const CLOSE: u8 = 0x04;
    /// Every bit we know.
    pub const KNOWN: u8 =
        Self::EOR | Self::EOF | Self::SUSPECT | Self::RESTART | Self::EOD | Self::CLOSE;

    /// Whether every bit of `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag == flag
    }
}

/// One block header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    /// Flags.
    pub descriptor: Descriptor,
    /// Payload length in bytes.
    pub count: u64,
    /// File offset of the payload; in an EOF block, the EOD count.
    pub offset: u64,
}

/// Why a block header was refused. Any of these breaks framing: the data
/// connection must be closed and the transfer failed (426).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeEError {
    /// Payload longer than [`MAX_MODE_E_BLOCK`].
    BlockTooLarge(u64),
    /// `offset + count` overflows.
    OffsetOverflow,
    /// Descriptor bits we do not know, or a combination we refuse
    /// (EOF with a payload, a restart marker block).
    BadDescriptor(u8),
}

impl fmt::Display for ModeEError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BlockTooLarge(n) => write!(f, "MODE E block of {n} bytes is too large"),
            Self::OffsetOverflow => f.write_str("MODE E block offset overflows"),
            Self::BadDescriptor(d) => write!(f, "bad MODE E descriptor 0x{d:02x}"),
        }
    }
}

impl std::error::Error for ModeEError {}

impl BlockHeader {
    /// Header of a data block of `len` bytes at file `offset`.
    pub fn data(offset: u64, len: u64) -> Self {
        Self {
            descriptor: Descriptor(0),
            count: len,
            offset,
        }
    }

    /// End of data on this stream (sent on every stream but the EOF one).
    pub fn eod() -> Self {
        Self {
            descriptor: Descriptor(Descriptor::EOD),
            count: 0,
            offset: 0,
        }
    }

    /// End of file: the receiver should expect `eod_count` EODs in total.
    pub fn eof(eod_count: u64) -> Self {
        Self {
            descriptor: Descriptor(Descriptor::EOF),
            count: 0,
            offset: eod_count,
        }
    }

    /// EOF and this stream's EOD in one header (descriptor 0x48), as
    /// Globus ends the last stream of a transfer.
    pub fn eod_eof(eod_count: u64) -> Self {
        Self {
            descriptor: Descriptor(Descriptor::EOF | Descriptor::EOD),
            count: 0,
            offset: eod_count,
        }
    }

    /// The header that ends a stream: EOD, plus EOF carrying `eof_count`
    /// on the one stream that sends it, plus CLOSE if the sender will close
    /// the connection instead of caching it.
    pub fn end(eof_count: Option<u64>, close: bool) -> Self {
        let mut d = Descriptor::EOD;
        if close {
            d |= Descriptor::CLOSE;
        }
        let offset = match eof_count {
            Some(n) => {
                d |= Descriptor::EOF;
                n
            }
            None => 0,
        };
        Self {
            descriptor: Descriptor(d),
            count: 0,
            offset,
        }
    }

    /// The 17 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.descriptor.0;
        b[1..9].copy_from_slice(&self.count.to_be_bytes());
        b[9..17].copy_from_slice(&self.offset.to_be_bytes());
        b
    }

    /// Decode a header from the front of `buf`: `Ok(None)` if fewer than
    /// 17 bytes, else the header and 17 (bytes used). Validates it.
    pub fn decode(buf: &[u8]) -> Result<Option<(Self, usize)>, ModeEError> {
        let Some(b) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut count = [0u8; 8];
        let mut offset = [0u8; 8];
        count.copy_from_slice(&b[1..9]);
        offset.copy_from_slice(&b[9..17]);
        let h = Self {
            descriptor: Descriptor(b[0]),
            count: u64::from_be_bytes(count),
            offset: u64::from_be_bytes(offset),
        };
        h.validate()?;
        Ok(Some((h, HEADER_LEN)))
    }

    /// Check the header against our bounds.
    pub fn validate(&self) -> Result<(), ModeEError> {
        let d = self.descriptor;
        if d.0 & !Descriptor::KNOWN != 0 || d.has(Descriptor::RESTART) {
            return Err(ModeEError::BadDescriptor(d.0));
        }
        if d.has(Descriptor::EOF) {
            if self.count != 0 {
                return Err(ModeEError::BadDescriptor(d.0));
            }
            return Ok(());
        }
        if self.count > MAX_MODE_E_BLOCK {
            return Err(ModeEError::BlockTooLarge(self.count));
        }
        self.offset
            .checked_add(self.count)
            .ok_or(ModeEError::OffsetOverflow)?;
        Ok(())
    }

    /// The file byte range of a data block's payload.
    pub fn file_range(&self) -> Range<u64> {
        self.offset..self.offset.saturating_add(self.count)
    }
}

/// What a [`StreamDecoder`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `input[range]` belongs at file offset `offset`.
    Data {
        /// File offset of the first byte.
        offset: u64,
        /// Where the bytes are in the input just given.
        range: Range<usize>,
    },
    /// The sender says the file has ended; `eod_count` EODs in total
    /// will arrive, over all streams.
    Eof {
        /// EODs to wait for.
        eod_count: u64,
    },
    /// End of data on this stream for this transfer. The decoder consumes
    /// nothing more: bytes after it (on a cached connection) belong to the
    /// next transfer and need a new decoder.
    Eod,
    /// The sender will close this connection after this header: do not
    /// cache it for another transfer. Follows `Eod` when both are set.
    Close,
}

/// The payload still expected for the current block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingPayload {
    /// File offset of the next payload byte.
    pub offset: u64,
    /// Payload bytes still to come in this block.
    pub remaining: u64,
}

#[derive(Clone, Debug)]
enum State {
    Header { buf: [u8; HEADER_LEN], have: usize },
    Payload { header: BlockHeader, done: u64 },
    Ended,
}

/// Sans-I/O decoder for one MODE E data connection.
///
/// Feed bytes in any chunking with [`StreamDecoder::handle_input`]; each
/// call consumes some bytes and returns at most one [`Event`]. Call again
/// with the rest until the input is used up. Payload is never copied: a
/// `Data` event names a range of the input. A receiver that reads into its
/// own buffers can instead ask [`StreamDecoder::pending_payload`] where
/// the next payload bytes belong, read them straight there, and report them
/// with [`StreamDecoder::consume_payload`].
#[derive(Clone, Debug)]
pub struct StreamDecoder {
    state: State,
    queued: Vec<Event>,
    bytes: u64,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self {
            state: State::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            },
            queued: Vec::new(),
            bytes: 0,
        }
    }

    /// Consume a prefix of `input`; returns `(used, event)`. `used <=
    /// input.len()`. When `used < input.len()` or an event came out, call
    /// again with `&input[used..]` (ranges in a `Data` event are relative
    /// to the slice passed in that call).
    pub fn handle_input(&mut self, input: &[u8]) -> Result<(usize, Option<Event>), ModeEError> {
        if !self.queued.is_empty() {
            return Ok((0, Some(self.queued.remove(0))));
        }
        match &mut self.state {
            State::Ended => Ok((0, None)),
            State::Header { buf, have } => {
                let take = (HEADER_LEN - *have).min(input.len());
                buf[*have..*have + take].copy_from_slice(&input[..take]);
                *have += take;
                if *have < HEADER_LEN {
                    return Ok((take, None));
                }
                let header = match BlockHeader::decode(&buf[..])? {
                    Some((h, _)) => h,
                    None => return Ok((take, None)),
                };
                if header.count == 0 {
                    self.finish_block(header);
                    let ev = if self.queued.is_empty() {
                        None
                    } else {
                        Some(self.queued.remove(0))
                    };
                    return Ok((take, ev));
                }
                self.state = State::Payload { header, done: 0 };
                Ok((take, None))
            }
            State::Payload { header, done } => {
                let left = header.count - *done;
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                if n == 0 {
                    return Ok((0, None));
                }
                let offset = header.offset + *done;
                *done += n as u64;
                self.bytes += n as u64;
                if *done == header.count {
                    let h = *header;
                    self.finish_block(h);
                }
                Ok((
                    n,
                    Some(Event::Data {
                        offset,
                        range: 0..n,
                    }),
                ))
            }
        }
    }

    /// Where the next payload bytes go, if the decoder is inside a block's
    /// payload.
    pub fn pending_payload(&self) -> Option<PendingPayload> {
        match &self.state {
            State::Payload { header, done } if self.queued.is_empty() => Some(PendingPayload {
                offset: header.offset + done,
                remaining: header.count - done,
            }),
            _ => None,
        }
    }

    /// Report `n` payload bytes the caller read itself (at most
    /// `pending_payload().remaining`). Returns the file offset they belong
    /// at, or `None` if `n` is 0 or no payload is pending or `n` is too large.
    pub fn consume_payload(&mut self, n: u64) -> Option<u64> {
        let p = self.pending_payload()?;
        if n == 0 || n > p.remaining {
            return None;
        }
        if let State::Payload { header, done } = &mut self.state {
            *done += n;
            self.bytes += n;
            if *done == header.count {
                let h = *header;
                self.finish_block(h);
            }
        }
        Some(p.offset)
    }

    /// Whether this stream has seen its EOD (or CLOSE) and every event
    /// has been taken.
    pub fn is_ended(&self) -> bool {
        matches!(self.state, State::Ended) && self.queued.is_empty()
    }

    /// Payload bytes decoded so far on this stream.
    pub fn payload_bytes(&self) -> u64 {
        self.bytes
    }

    fn finish_block(&mut self, h: BlockHeader) {
        if h.descriptor.has(Descriptor::EOF) {
            self.queued.push(Event::Eof {
                eod_count: h.offset,
            });
        }
        if h.descriptor.has(Descriptor::EOD) {
            self.queued.push(Event::Eod);
        }
        if h.descriptor.has(Descriptor::CLOSE) {
            self.queued.push(Event::Close);
        }
        if h.descriptor.0 & (Descriptor::EOD | Descriptor::CLOSE) != 0 {
            self.state = State::Ended;
        } else {
            self.state = State::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_layout() {
        let h = BlockHeader::data(1 << 40, 262144);
        let b = h.encode();
        assert_eq!(b[0], 0);
        assert_eq!(&b[1..9], &262144u64.to_be_bytes());
        assert_eq!(&b[9..17], &(1u64 << 40).to_be_bytes());
        assert_eq!(BlockHeader::decode(&b).unwrap(), Some((h, 17)));
        assert_eq!(BlockHeader::decode(&b[..16]).unwrap(), None);
    }

    #[test]
    fn globus_end_headers() {
        assert_eq!(BlockHeader::eod_eof(4).encode()[0], 0x48);
        assert_eq!(BlockHeader::eod_eof(4).offset, 4);
        assert_eq!(BlockHeader::end(Some(4), false), BlockHeader::eod_eof(4));
        assert_eq!(BlockHeader::end(None, false), BlockHeader::eod());
        assert_eq!(BlockHeader::end(None, true).descriptor.0, 0x0c);
        assert_eq!(BlockHeader::eof(2).descriptor.0, 0x40);
    }

    #[test]
    fn validation() {
        let big = BlockHeader::data(0, MAX_MODE_E_BLOCK + 1);
        assert_eq!(
            BlockHeader::decode(&big.encode()),
            Err(ModeEError::BlockTooLarge(MAX_MODE_E_BLOCK + 1))
        );
        let over = BlockHeader::data(u64::MAX, 1);
        assert_eq!(
            BlockHeader::decode(&over.encode()),
            Err(ModeEError::OffsetOverflow)
        );
        let mut b = BlockHeader::data(0, 1).encode();
        b[0] = 0x01;
        assert_eq!(BlockHeader::decode(&b), Err(ModeEError::BadDescriptor(1)));
        b[0] = Descriptor::RESTART;
        assert!(BlockHeader::decode(&b).is_err());
        b[0] = Descriptor::EOF; // EOF with a payload
        assert!(BlockHeader::decode(&b).is_err());
        // EOF's offset is a count, not checked against the block bound.
        assert!(
            BlockHeader::decode(&BlockHeader::eod_eof(u64::MAX).encode())
                .unwrap()
                .is_some()
        );
        b[0] = Descriptor::SUSPECT | Descriptor::EOR;
        assert!(BlockHeader::decode(&b).unwrap().is_some());
    }

    /// Data events as (file offset, bytes).
    type Placed = Vec<(u64, Vec<u8>)>;

    /// Feed `input` in chunks of `chunk` bytes, collecting events with data
    /// ranges turned into (offset, bytes).
    fn run(input: &[u8], chunk: usize) -> (Placed, Vec<Event>, usize) {
        let mut d = StreamDecoder::new();
        let (mut data, mut other, mut consumed) = (Vec::new(), Vec::new(), 0);
        for piece in input.chunks(chunk.max(1)) {
            let mut at = 0;
            loop {
                let (used, ev) = d.handle_input(&piece[at..]).unwrap();
                assert!(used <= piece.len() - at);
                match ev {
                    Some(Event::Data { offset, range }) => {
                        data.push((offset, piece[at..][range].to_vec()));
                    }
                    Some(e) => other.push(e),
                    None if used == 0 => break,
                    None => {}
                }
                at += used;
                consumed += used;
            }
        }
        // Events queued behind the last byte.
        while let (0, Some(e)) = d.handle_input(&[]).unwrap() {
            other.push(e);
        }
        (data, other, consumed)
    }

    fn stream() -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&BlockHeader::data(100, 5).encode());
        s.extend_from_slice(b"hello");
        s.extend_from_slice(&BlockHeader::data(0, 3).encode());
        s.extend_from_slice(b"abc");
        s.extend_from_slice(&BlockHeader::data(50, 0).encode());
        s.extend_from_slice(&BlockHeader::end(Some(2), true).encode());
        s
    }

    #[test]
    fn decoder_events_in_any_chunking() {
        let s = stream();
        for chunk in [1, 2, 7, 17, 18, 1000] {
            let (data, other, consumed) = run(&s, chunk);
            let mut flat: Vec<(u64, u8)> = Vec::new();
            for (off, bytes) in data {
                flat.extend(bytes.iter().enumerate().map(|(i, &b)| (off + i as u64, b)));
            }
            let expect: Vec<(u64, u8)> = b"hello"
                .iter()
                .enumerate()
                .map(|(i, &b)| (100 + i as u64, b))
                .chain(b"abc".iter().enumerate().map(|(i, &b)| (i as u64, b)))
                .collect();
            assert_eq!(flat, expect, "chunk {chunk}");
            assert_eq!(
                other,
                vec![Event::Eof { eod_count: 2 }, Event::Eod, Event::Close],
                "chunk {chunk}"
            );
            assert_eq!(consumed, s.len());
        }
    }

    #[test]
    fn bytes_after_eod_are_left_for_the_next_transfer() {
        let mut s = BlockHeader::eod().encode().to_vec();
        s.extend_from_slice(b"next");
        let mut d = StreamDecoder::new();
        assert_eq!(d.handle_input(&s).unwrap(), (17, Some(Event::Eod)));
        assert!(d.is_ended());
        assert_eq!(d.handle_input(&s[17..]).unwrap(), (0, None));
    }

    #[test]
    fn eod_on_a_data_block_takes_effect_after_payload() {
        let h = BlockHeader {
            descriptor: Descriptor(Descriptor::EOD),
            count: 2,
            offset: 7,
        };
        let mut s = h.encode().to_vec();
        s.extend_from_slice(b"xy");
        let (data, other, _) = run(&s, 1000);
        assert_eq!(data, vec![(7, b"xy".to_vec())]);
        assert_eq!(other, vec![Event::Eod]);
    }

    #[test]
    fn caller_reads_payload_itself() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.pending_payload(), None);
        assert_eq!(
            d.handle_input(&BlockHeader::data(4096, 10).encode())
                .unwrap(),
            (17, None)
        );
        assert_eq!(
            d.pending_payload(),
            Some(PendingPayload {
                offset: 4096,
                remaining: 10
            })
        );
        assert_eq!(d.consume_payload(11), None);
        assert_eq!(d.consume_payload(4), Some(4096));
        assert_eq!(
            d.pending_payload(),
            Some(PendingPayload {
                offset: 4100,
                remaining: 6
            })
        );
        assert_eq!(d.consume_payload(6), Some(4100));
        assert_eq!(d.pending_payload(), None);
        assert_eq!(d.payload_bytes(), 10);
        assert_eq!(
            d.handle_input(&BlockHeader::eod().encode()).unwrap(),
            (17, Some(Event::Eod))
        );
    }

    #[test]
    fn bad_header_is_an_error() {
        let mut d = StreamDecoder::new();
        let b = BlockHeader::data(0, MAX_MODE_E_BLOCK + 1).encode();
        assert_eq!(d.handle_input(&b[..10]).unwrap(), (10, None));
        assert!(d.handle_input(&b[10..]).is_err());
    }
}
