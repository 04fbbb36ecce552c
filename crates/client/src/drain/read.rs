//! Reading one stream of a download: MODE S up to its end, MODE E
//! headers through the decoder and payload straight into the chunk that
//! goes to the writer, in rounds so one fast stream cannot starve the rest.

use std::io::{ErrorKind, Read};
use std::sync::atomic::Ordering::Relaxed;

use sluice_ftp::mode_e::{Event, HEADER_LEN};

use super::{Chunk, DrainLoop, Framer, Turn, CHUNK, ROUND_BYTES};
use crate::error::{ClientError, Result};
use crate::stats::Stats;
use crate::writer::Block;

impl DrainLoop<'_> {
    /// Reads stream `i` until it would block, ends, or used its round.
    pub(super) fn service(&mut self, i: usize) -> Result<Turn> {
        let mut round = 0usize;
        while round < ROUND_BYTES {
            let target = match &self.streams[i].framer {
                Framer::S {
                    next,
                    end: Some(end),
                } => {
                    let end = match &self.cfg.span {
                        Some(s) => (*end).min(s.end()),
                        None => *end,
                    };
                    let end = &end;
                    if next >= end {
                        return Ok(Turn::Ended);
                    }
                    Some((*next, (end - next).min(CHUNK as u64)))
                }
                Framer::S { next, end: None } => Some((*next, CHUNK as u64)),
                Framer::E(dec, base) => match dec.pending_payload() {
                    None => None,
                    Some(p) => Some((
                        p.offset.checked_add(*base).ok_or_else(|| {
                            ClientError::Protocol("MODE E offset overflows".into())
                        })?,
                        p.remaining,
                    )),
                },
            };
            let n = match target {
                Some((offset, max)) => match self.read_payload(i, offset, max)? {
                    Some(n) => n,
                    None => return Ok(Turn::Idle),
                },
                None => match self.read_header(i)? {
                    HeaderRead::Blocked => return Ok(Turn::Idle),
                    HeaderRead::Ended => return Ok(Turn::Ended),
                    HeaderRead::Read(n) => n,
                },
            };
            if n == 0 {
                // Orderly close. In MODE S that is the end of the file; in
                // MODE E a stream must say EOD first.
                return match self.streams[i].framer {
                    Framer::S { .. } => Ok(Turn::Ended),
                    Framer::E(..) => Err(ClientError::Protocol(
                        "MODE E data connection closed before EOD".into(),
                    )),
                };
            }
            round += n;
        }
        Ok(Turn::Idle)
    }

    /// Reads payload for `offset` straight into the stream's chunk.
    /// `Ok(None)`: would block. `Ok(Some(0))`: EOF.
    pub(super) fn read_payload(
        &mut self,
        i: usize,
        offset: u64,
        max: u64,
    ) -> Result<Option<usize>> {
        self.ensure_chunk(i, offset, max)?;
        let st = &mut self.streams[i];
        let Some(c) = st.chunk.as_mut() else {
            return Err(ClientError::Bug("no chunk after ensure_chunk".into()));
        };
        let room = (c.buf.len() - c.filled).min(usize::try_from(max).unwrap_or(usize::MAX));
        let n = match read_some(&mut st.sock, &mut c.buf[c.filled..c.filled + room])? {
            None => return Ok(None),
            Some(n) => n,
        };
        Stats::add(&self.stats.socket_calls, 1);
        if n == 0 {
            return Ok(Some(0));
        }
        c.filled += n;
        let full = c.filled == c.buf.len();
        match &mut st.framer {
            Framer::S { next, .. } => {
                *next += n as u64;
                if let Some(s) = &self.cfg.span {
                    s.next.store(*next, Relaxed);
                }
            }
            Framer::E(dec, base) => {
                if dec
                    .consume_payload(n as u64)
                    .and_then(|o| o.checked_add(*base))
                    != Some(offset)
                {
                    return Err(ClientError::Bug("MODE E payload accounting".into()));
                }
            }
        }
        self.report.bytes += n as u64;
        Stats::add(&self.stats.bytes, n as u64);
        if full {
            self.flush(i)?;
        }
        Ok(Some(n))
    }

    /// Reads at most one header's worth of bytes and feeds the decoder.
    pub(super) fn read_header(&mut self, i: usize) -> Result<HeaderRead> {
        let mut hdr = [0u8; HEADER_LEN];
        let n = match read_some(&mut self.streams[i].sock, &mut hdr)? {
            None => return Ok(HeaderRead::Blocked),
            Some(n) => n,
        };
        Stats::add(&self.stats.socket_calls, 1);
        if n == 0 {
            return Ok(HeaderRead::Read(0));
        }
        let mut pos = 0;
        loop {
            let Framer::E(dec, base) = &mut self.streams[i].framer else {
                return Err(ClientError::Bug("header read in MODE S".into()));
            };
            let base = *base;
            let was_in_block = dec.pending_payload().is_some();
            let (used, ev) = dec
                .handle_input(&hdr[pos..n])
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            if !was_in_block && dec.pending_payload().is_some() {
                Stats::add(&self.stats.blocks, 1);
            }
            pos += used;
            match ev {
                Some(Event::Data { offset, range }) => {
                    let offset = offset
                        .checked_add(base)
                        .ok_or_else(|| ClientError::Protocol("MODE E offset overflows".into()))?;
                    // Payload bytes that shared the read with a header.
                    let start = pos - used;
                    let bytes = &hdr[start + range.start..start + range.end];
                    self.put(i, offset, bytes)?;
                }
                Some(Event::Eof { eod_count }) => {
                    if eod_count == 0 || eod_count > u64::from(sluice_ftp::limits::MAX_PARALLELISM)
                    {
                        return Err(ClientError::Protocol(format!(
                            "MODE E EOF expects {eod_count} EODs"
                        )));
                    }
                    self.eof_count = Some(eod_count);
                }
                Some(Event::Eod) => {
                    self.report.eods += 1;
                    // Bytes after EOD would belong to a next transfer on a
                    // cached connection; there is none for us.
                    return Ok(HeaderRead::Ended);
                }
                Some(Event::Close) => {}
                None if pos >= n => break,
                None => {}
            }
        }
        Ok(HeaderRead::Read(n))
    }

    /// Copies `bytes` (at file `offset`) into stream `i`'s chunk.
    pub(super) fn put(&mut self, i: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let mut off = offset;
        let mut rest = bytes;
        while !rest.is_empty() {
            self.ensure_chunk(i, off, rest.len() as u64)?;
            let Some(c) = self.streams[i].chunk.as_mut() else {
                return Err(ClientError::Bug("no chunk after ensure_chunk".into()));
            };
            let n = (c.buf.len() - c.filled).min(rest.len());
            c.buf[c.filled..c.filled + n].copy_from_slice(&rest[..n]);
            c.filled += n;
            let full = c.filled == c.buf.len();
            self.report.bytes += n as u64;
            Stats::add(&self.stats.bytes, n as u64);
            rest = &rest[n..];
            off += n as u64;
            if full {
                self.flush(i)?;
            }
        }
        Ok(())
    }

    /// Makes sure stream `i` has a chunk that continues at `offset`, with
    /// room; flushes the old one if it does not fit.
    pub(super) fn ensure_chunk(&mut self, i: usize, offset: u64, want: u64) -> Result<()> {
        let fits = self.streams[i]
            .chunk
            .as_ref()
            .is_some_and(|c| c.start + c.filled as u64 == offset && c.filled < c.buf.len());
        if fits {
            return Ok(());
        }
        self.flush(i)?;
        let len = usize::try_from(want).unwrap_or(CHUNK).clamp(1, CHUNK);
        let buf = self.take_buf(len);
        self.streams[i].chunk = Some(Chunk {
            start: offset,
            buf,
            filled: 0,
        });
        Ok(())
    }

    /// A buffer of exactly `len` bytes, recycled from the writer when one
    /// is back (no zeroing of pages already used), else fresh.
    pub(super) fn take_buf(&mut self, len: usize) -> Vec<u8> {
        match self.recycled.try_recv() {
            Ok(mut v) => {
                v.resize(len, 0);
                v
            }
            Err(_) => vec![0u8; len],
        }
    }

    /// Hands stream `i`'s chunk (if any bytes) to the writer.
    pub(super) fn flush(&mut self, i: usize) -> Result<()> {
        let Some(mut c) = self.streams[i].chunk.take() else {
            return Ok(());
        };
        if c.filled == 0 {
            return Ok(());
        }
        c.buf.truncate(c.filled);
        if !self.out.send(
            Block {
                offset: c.start,
                data: c.buf,
            },
            self.stats,
        ) {
            return Err(ClientError::Bug("writer stopped".into()));
        }
        Ok(())
    }
}

pub(super) enum HeaderRead {
    Blocked,
    Ended,
    Read(usize),
}

/// One `read`: `None` when it would block, `Some(0)` at EOF.
fn read_some(sock: &mut crate::tls::DataSock, buf: &mut [u8]) -> Result<Option<usize>> {
    loop {
        match sock.read(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(ClientError::net("read data connection", e)),
        }
    }
}
