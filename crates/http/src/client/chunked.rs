//! Decoder for a `Transfer-Encoding: chunked` response body (RFC 9112
//! 7.1), for the client. Sans-I/O: [`ChunkedDecoder::decode`] takes the
//! bytes as they come off the socket and says which of them are payload;
//! it keeps at most one chunk-size or trailer line, so a server cannot
//! make it buffer without bound.

use std::ops::Range;

use super::ClientError;
use crate::limits::MAX_RESPONSE_HEAD_BYTES;

/// Longest chunk-size line, extensions included. The size itself is at
/// most 16 hex digits; extensions are rare and short in practice.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Where the decoder is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    Size,
    /// This many payload bytes of the current chunk are still to come.
    Data(u64),
    /// The CRLF after a chunk's payload.
    DataEnd,
    /// Trailer fields after the last chunk, up to an empty line.
    Trailer,
    /// The body is complete.
    Done,
}

/// Decodes one chunked body.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// The line being read (size line, CRLF after data, trailer line).
    line: Vec<u8>,
    /// Trailer bytes so far (bounded like a response head).
    trailer_bytes: usize,
    /// Payload bytes so far.
    payload: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size,
            line: Vec::new(),
            trailer_bytes: 0,
            payload: 0,
        }
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the last chunk and the trailer have been seen. Bytes after
    /// that are not part of this body.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Payload bytes decoded so far.
    pub fn payload_len(&self) -> u64 {
        self.payload
    }

    /// Takes bytes from the front of `input`. Returns how many were used
    /// and, if some of them are payload, where they are in `input`. Call
    /// again with the rest until all is used or the body is done.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<Range<usize>>), ClientError> {
        let mut used = 0;
        while used < input.len() {
            match self.state {
                State::Done => break,
                State::Data(left) => {
                    let take = left.min((input.len() - used) as u64) as usize;
                    let range = used..used + take;
                    self.state = if left == take as u64 {
                        State::DataEnd
                    } else {
                        State::Data(left - take as u64)
                    };
                    self.payload += take as u64;
                    return Ok((used + take, Some(range)));
                }
                State::Size | State::DataEnd | State::Trailer => {
                    let rest = &input[used..];
                    let (chunk, complete) = match rest.iter().position(|&b| b == b'\n') {
                        Some(nl) => (&rest[..=nl], true),
                        None => (rest, false),
                    };
                    let limit = if self.state == State::Trailer {
                        MAX_RESPONSE_HEAD_BYTES
                    } else {
                        MAX_CHUNK_LINE
                    };
                    if self.line.len() + chunk.len() > limit {
                        return Err(ClientError::BadChunk("chunk line too long"));
                    }
                    self.line.extend_from_slice(chunk);
                    used += chunk.len();
                    if complete {
                        let line = std::mem::take(&mut self.line);
                        self.end_of_line(&line)?;
                    }
                }
            }
        }
        Ok((used, None))
    }

    /// Acts on one complete line (with its LF).
    fn end_of_line(&mut self, line: &[u8]) -> Result<(), ClientError> {
        let text = line
            .strip_suffix(b"\n")
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .unwrap_or(line);
        match self.state {
            State::Size => {
                let size = parse_size(text)?;
                self.state = if size == 0 {
                    State::Trailer
                } else {
                    State::Data(size)
                };
            }
            State::DataEnd if text.is_empty() => self.state = State::Size,
            State::DataEnd => {
                return Err(ClientError::BadChunk(
                    "chunk longer than its size (no CRLF after the data)",
                ))
            }
            State::Trailer if text.is_empty() => self.state = State::Done,
            State::Trailer => {
                self.trailer_bytes += line.len();
                if self.trailer_bytes > MAX_RESPONSE_HEAD_BYTES {
                    return Err(ClientError::BadChunk("trailer too large"));
                }
            }
            State::Data(_) | State::Done => {}
        }
        Ok(())
    }
}

/// `1a3f[;ext...]`: the hex size before any extension.
fn parse_size(line: &[u8]) -> Result<u64, ClientError> {
    let end = line.iter().position(|&b| b == b';').unwrap_or(line.len());
    let hex = line[..end].trim_ascii();
    if hex.is_empty() || hex.len() > 16 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(ClientError::BadChunk("bad chunk size"));
    }
    let s = std::str::from_utf8(hex).map_err(|_| ClientError::BadChunk("bad chunk size"))?;
    u64::from_str_radix(s, 16).map_err(|_| ClientError::BadChunk("bad chunk size"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `input` fed in pieces of `piece` bytes; the payload and
    /// whether the body ended.
    fn decode_in_pieces(input: &[u8], piece: usize) -> Result<(Vec<u8>, bool), ClientError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        for p in input.chunks(piece.max(1)) {
            let mut at = 0;
            while at < p.len() && !d.is_done() {
                let (used, data) = d.decode(&p[at..])?;
                if let Some(r) = data {
                    out.extend_from_slice(&p[at..][r]);
                }
                at += used;
            }
        }
        Ok((out, d.is_done()))
    }

    #[test]
    fn chunks_extensions_and_trailers() {
        let body = b"5\r\nhello\r\n6;name=v\r\n world\r\nA \r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\n";
        for piece in [1, 2, 3, 7, 1000] {
            let (out, done) = decode_in_pieces(body, piece).unwrap();
            assert_eq!(out, b"hello world0123456789", "piece {piece}");
            assert!(done);
        }
    }

    #[test]
    fn bare_lf_line_ends_are_taken() {
        let (out, done) = decode_in_pieces(b"3\nabc\n0\n\n", 2).unwrap();
        assert_eq!(out, b"abc");
        assert!(done);
    }

    #[test]
    fn bytes_after_the_last_chunk_are_not_used() {
        let mut d = ChunkedDecoder::new();
        let input = b"2\r\nab\r\n0\r\n\r\nGARBAGE";
        let mut at = 0;
        while !d.is_done() {
            at += d.decode(&input[at..]).unwrap().0;
        }
        assert_eq!(&input[at..], b"GARBAGE");
        assert_eq!(d.payload_len(), 2);
    }

    #[test]
    fn an_unfinished_body_is_not_done() {
        let (out, done) = decode_in_pieces(b"5\r\nhel", 100).unwrap();
        assert_eq!(out, b"hel");
        assert!(!done);
    }

    #[test]
    fn hostile_sizes_and_lines_are_refused() {
        for bad in [
            &b"zz\r\n"[..],
            b"-5\r\n",
            b"\r\n",
            b"10000000000000000\r\n", // 17 hex digits: past u64
            b"3\r\nabcX\r\n",         // data longer than its size
        ] {
            assert!(
                matches!(decode_in_pieces(bad, 100), Err(ClientError::BadChunk(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // An endless size line is refused once past the bound.
        let long = vec![b'1'; MAX_CHUNK_LINE + 1];
        assert!(decode_in_pieces(&long, 512).is_err());
        // So is an endless trailer.
        let mut t = b"0\r\n".to_vec();
        t.extend(std::iter::repeat_n(b"X: y\r\n".as_slice(), 20_000).flatten());
        assert!(decode_in_pieces(&t, 4096).is_err());
    }

    #[test]
    fn a_huge_declared_chunk_needs_no_memory() {
        // 2^60 bytes announced: the decoder only counts.
        let mut d = ChunkedDecoder::new();
        let (used, data) = d.decode(b"1000000000000000\r\n").unwrap();
        assert_eq!((used, data), (18, None));
        let (used, data) = d.decode(b"abc").unwrap();
        assert_eq!((used, data), (3, Some(0..3)));
    }

    proptest! {
        #[test]
        fn round_trip_in_any_pieces(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..50), 0..8),
            piece in 1usize..40,
        ) {
            let mut body = Vec::new();
            for c in &chunks {
                body.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                body.extend_from_slice(c);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n\r\n");
            let (out, done) = decode_in_pieces(&body, piece).unwrap();
            prop_assert_eq!(out, chunks.concat());
            prop_assert!(done);
        }

        #[test]
        fn never_panics_and_never_uses_more_than_given(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut d = ChunkedDecoder::new();
            let mut at = 0;
            while at < input.len() && !d.is_done() {
                match d.decode(&input[at..]) {
                    Ok((used, data)) => {
                        prop_assert!(used <= input.len() - at);
                        if let Some(r) = data { prop_assert!(r.end <= used); }
                        if used == 0 { break; }
                        at += used;
                    }
                    Err(_) => break,
                }
            }
        }
    }
}
