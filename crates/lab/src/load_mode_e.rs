//! MODE E downloads for the workload generator (GridFTP extended block
//! mode, GFD.20): `OPTS RETR Parallelism=N,N,N;`, `MODE E`, `PORT`, the
//! server connects its data streams to us; each stream's blocks are parsed
//! ([`BlockParser`], sans-I/O), their payload discarded and their offsets
//! recorded ([`Extents`]) so a download is complete only when every byte of
//! the file (from the start offset on: `REST 0-X`, the GridFTP restart
//! marker saying the client has [0, X), blocks keep their file offsets)
//! arrived exactly once, in whatever order. One thread per stream,
//! the rate split evenly between them; hundreds of streams fit on one
//! machine because nothing is written anywhere.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::load::{
    connect, ftp_cmd, ftp_login, ftp_reply, percent_decode, read_some, rst, split_url, Ctx,
    DownloadResult, DownloadSpec, POLL_TICK, READ_CHUNK,
};

/// MODE E descriptor bits (GFD.20).
const EOD: u8 = 0x08;
const EOF: u8 = 0x40;
const HEADER: usize = 17;

/// What one stream's bytes said, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `len` payload bytes at file offset `offset` (discarded).
    Data {
        /// File offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// This stream ended its data (EOD).
    Eod,
    /// The EOF block: `streams` EODs end the transfer.
    Eof {
        /// The EOD count (the header's offset field).
        streams: u64,
    },
}

/// Parses one MODE E stream: headers and payload across any chunk
/// boundaries, no copies of the payload.
#[derive(Debug, Default)]
pub struct BlockParser {
    header: [u8; HEADER],
    have: usize,
    /// Payload bytes of the current block still to come.
    left: u64,
    /// File offset of the next payload byte of the current block.
    at: u64,
}

impl BlockParser {
    /// Feeds `buf`; calls `ev` for every payload run and descriptor seen.
    pub fn feed(&mut self, mut buf: &[u8], ev: &mut impl FnMut(Event)) {
        while !buf.is_empty() {
            if self.left > 0 {
                let n = (buf.len() as u64).min(self.left);
                ev(Event::Data {
                    offset: self.at,
                    len: n,
                });
                self.at += n;
                self.left -= n;
                buf = &buf[n as usize..];
                continue;
            }
            let n = (HEADER - self.have).min(buf.len());
            self.header[self.have..self.have + n].copy_from_slice(&buf[..n]);
            self.have += n;
            buf = &buf[n..];
            if self.have < HEADER {
                return;
            }
            self.have = 0;
            let desc = self.header[0];
            let count = u64::from_be_bytes(self.header[1..9].try_into().expect("8 bytes"));
            let offset = u64::from_be_bytes(self.header[9..17].try_into().expect("8 bytes"));
            if desc & EOF != 0 {
                // The EOF block's offset field is the EOD count.
                ev(Event::Eof { streams: offset });
            } else {
                self.left = count;
                self.at = offset;
            }
            if desc & EOD != 0 {
                ev(Event::Eod);
            }
        }
    }

    /// Whether the stream stopped between blocks (not inside a header or payload).
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }
}

/// File ranges received, merged; overlaps counted (a byte twice is an error).
#[derive(Debug, Default)]
pub struct Extents {
    /// start -> end, disjoint and not touching.
    runs: BTreeMap<u64, u64>,
    /// Bytes that arrived more than once.
    pub overlap: u64,
}

impl Extents {
    /// Records `len` bytes at `offset`.
    pub fn add(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut s, mut e) = (offset, offset + len);
        // Merge with every run touching [s, e].
        let touching: Vec<(u64, u64)> = self
            .runs
            .range(..=e)
            .rev()
            .take_while(|(_, &re)| re >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in touching {
            self.overlap += e.min(b).saturating_sub(s.max(a));
            self.runs.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.runs.insert(s, e);
    }

    /// Whether exactly `[0, size)` arrived.
    pub fn covers(&self, size: u64) -> bool {
        self.covers_range(0, size)
    }

    /// Whether exactly `[start, end)` arrived (nothing outside it, nothing twice).
    pub fn covers_range(&self, start: u64, end: u64) -> bool {
        self.overlap == 0
            && (end <= start && self.runs.is_empty() || self.runs.get(&start) == Some(&end))
            && self.runs.len() <= 1
    }
}

/// Per-transfer state the stream threads share.
#[derive(Default)]
struct Shared {
    extents: Mutex<Extents>,
    eods: AtomicU64,
    /// EOD count from the EOF block (0: not seen yet).
    eof: AtomicU64,
    payload: AtomicU64,
}

/// One MODE E download of `d` (`d.streams` streams) into `r`.
pub(crate) fn mode_e_get(
    d: &DownloadSpec,
    offset: u64,
    ctx: &Ctx,
    abort_at: Option<Instant>,
    r: &mut DownloadResult,
) -> Result<()> {
    let (addr, path) = split_url(&d.url, 21)?;
    let path = percent_decode(&path);
    let n = d.streams.max(1);
    let mut ctl = connect(addr, None)?;
    let mut rd = BufReader::new(ctl.try_clone()?);
    let size = ftp_login(&mut ctl, &mut rd, &path)?;
    r.expected = size.map(|s| s.saturating_sub(offset));
    ftp_cmd(&mut ctl, &mut rd, "MODE E", &[200])?;
    // Globus wants the parallelism before the data channel.
    let _ = ftp_cmd(
        &mut ctl,
        &mut rd,
        &format!("OPTS RETR Parallelism={n},{n},{n};"),
        &[200],
    );
    let me = SocketAddr::new(ctl.local_addr()?.ip(), 0);
    let l = TcpListener::bind(me)?;
    let SocketAddr::V4(v4) = l.local_addr()? else {
        bail!("MODE E over IPv6 not supported by the generator");
    };
    let (ip, port) = (v4.ip().octets(), v4.port());
    ftp_cmd(
        &mut ctl,
        &mut rd,
        &format!(
            "PORT {},{},{},{},{},{}",
            ip[0],
            ip[1],
            ip[2],
            ip[3],
            port >> 8,
            port & 0xff
        ),
        &[200],
    )?;
    if offset > 0 {
        // The restart marker of a client that has [0, offset) (GFD.20):
        // sluice and globus-gridftp-server send the rest with file offsets.
        ftp_cmd(&mut ctl, &mut rd, &format!("REST 0-{offset}"), &[350])?;
    }
    ftp_cmd(&mut ctl, &mut rd, &format!("RETR {path}"), &[125, 150])?;
    l.set_nonblocking(true)?;
    let shared = Arc::new(Shared::default());
    let per_stream = d.rate_bps.map(|b| (b / n as u64).max(8));
    let mut threads = Vec::new();
    let mut conns: Vec<TcpStream> = Vec::new();
    let began = Instant::now();
    let stop = loop {
        let now = Instant::now();
        if abort_at.is_some_and(|a| now >= a) {
            r.aborted = true;
            break false;
        }
        if ctx.deadline.is_some_and(|dl| now >= dl) {
            r.cut = true;
            break false;
        }
        let eof = shared.eof.load(Ordering::Relaxed);
        if eof > 0 && shared.eods.load(Ordering::Relaxed) >= eof {
            break true;
        }
        // Streams are accepted until the EOD count is met (the server may
        // open fewer than asked).
        if eof == 0 || (conns.len() as u64) < eof {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    conns.push(s.try_clone()?);
                    let (shared, counter, received) =
                        (shared.clone(), ctx.counter.clone(), ctx.received.clone());
                    let deadline = [abort_at, ctx.deadline].into_iter().flatten().min();
                    let prior = ctx.prior;
                    threads.push(std::thread::Builder::new().stack_size(256 * 1024).spawn(
                        move || {
                            let received = received.map(|c| (c, prior));
                            stream(s, per_stream, &shared, &counter, received, deadline)
                        },
                    )?);
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        if threads.iter().all(|t| t.is_finished()) && !threads.is_empty() && eof == 0 {
            // Every stream closed and no EOF block: the transfer failed.
            break true;
        }
        if now.duration_since(began) > Duration::from_secs(120)
            && shared.payload.load(Ordering::Relaxed) == 0
        {
            bail!("no MODE E data for 120 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if !stop {
        for c in &conns {
            rst(c);
        }
        rst(&ctl);
    } else {
        // Every stream sent its EOD, so nothing more comes; servers keep
        // MODE E data connections open for a next transfer (sluice, globus),
        // so the stream threads would wait for a close until the deadline.
        for c in &conns {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
    let mut errors = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("stream thread panicked".into()),
        }
    }
    r.bytes = shared.payload.load(Ordering::Relaxed);
    if !stop {
        return Ok(());
    }
    if let Some(e) = errors.first() {
        bail!("MODE E stream: {e}");
    }
    // Restart and performance markers (111, 112) may come first.
    let (c, l) = loop {
        let (c, l) = ftp_reply(&mut rd)?;
        if !(100..200).contains(&c) {
            break (c, l);
        }
    };
    if c != 226 && c != 250 {
        bail!("after transfer: {l}");
    }
    let ext = shared.extents.lock().unwrap_or_else(|p| p.into_inner());
    r.complete = size.is_none_or(|e| ext.covers_range(offset, e));
    if ext.overlap > 0 {
        bail!("{} bytes arrived twice", ext.overlap);
    }
    let _ = std::io::Write::write_all(&mut ctl, b"QUIT\r\n");
    Ok(())
}

/// Reads one data stream to its close at `rate` bit/s (if set), recording
/// payload extents; the bytes are dropped.
fn stream(
    mut s: TcpStream,
    rate: Option<u64>,
    shared: &Shared,
    counter: &AtomicU64,
    received: Option<(Arc<AtomicU64>, u64)>,
    stop_at: Option<Instant>,
) -> Result<()> {
    s.set_read_timeout(Some(POLL_TICK))?;
    let chunk = match rate {
        Some(rate) => ((rate / 8 / 20) as usize).clamp(1024, READ_CHUNK),
        None => READ_CHUNK,
    };
    let mut buf = vec![0u8; chunk];
    let mut p = BlockParser::default();
    let began = Instant::now();
    let mut got = 0u64;
    let mut idle = Instant::now();
    loop {
        let now = Instant::now();
        if stop_at.is_some_and(|t| now >= t) {
            return Ok(());
        }
        if let Some(rate) = rate {
            let allowed = began + Duration::from_secs_f64(got as f64 * 8.0 / rate as f64);
            if allowed > now {
                std::thread::sleep((allowed - now).min(POLL_TICK));
                continue;
            }
        }
        match read_some(&mut s, &mut buf, idle)? {
            Some(0) => {
                if !p.at_boundary() {
                    bail!("stream closed inside a block");
                }
                return Ok(());
            }
            Some(n) => {
                got += n as u64;
                idle = Instant::now();
                let mut ext = Vec::new();
                p.feed(&buf[..n], &mut |e| match e {
                    Event::Data { offset, len } => ext.push((offset, len)),
                    Event::Eod => {
                        shared.eods.fetch_add(1, Ordering::Relaxed);
                    }
                    Event::Eof { streams } => shared.eof.store(streams.max(1), Ordering::Relaxed),
                });
                let payload: u64 = ext.iter().map(|e| e.1).sum();
                if payload > 0 {
                    let mut x = shared.extents.lock().unwrap_or_else(|p| p.into_inner());
                    for (o, l) in ext {
                        x.add(o, l);
                    }
                    drop(x);
                    let total = shared.payload.fetch_add(payload, Ordering::Relaxed) + payload;
                    counter.fetch_add(payload, Ordering::Relaxed);
                    // Plus what earlier requests of the download received.
                    if let Some((c, prior)) = &received {
                        c.fetch_max(prior + total, Ordering::Relaxed);
                    }
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(desc: u8, count: u64, offset: u64) -> Vec<u8> {
        let mut v = vec![desc];
        v.extend_from_slice(&count.to_be_bytes());
        v.extend_from_slice(&offset.to_be_bytes());
        v.extend(std::iter::repeat_n(0xAB, count as usize));
        v
    }

    #[test]
    fn blocks_parse_across_any_chunk_boundaries() {
        // Out of order, one stream: 100 bytes at 300, 300 at 0, then EOD
        // and an EOF saying 2 streams.
        let mut wire = block(0, 100, 300);
        wire.extend(block(0, 300, 0));
        wire.extend(block(EOD | EOF | 0x04, 0, 2));
        for chunk in [1, 2, 16, 17, 18, 99, 1000] {
            let mut p = BlockParser::default();
            let mut ext = Extents::default();
            let mut evs = Vec::new();
            for c in wire.chunks(chunk) {
                p.feed(c, &mut |e| {
                    if let Event::Data { offset, len } = e {
                        ext.add(offset, len);
                    } else {
                        evs.push(e);
                    }
                });
            }
            assert!(p.at_boundary(), "chunk {chunk}");
            assert!(ext.covers(400), "chunk {chunk}: {ext:?}");
            assert_eq!(evs, vec![Event::Eof { streams: 2 }, Event::Eod]);
        }
    }

    #[test]
    fn extents_see_gaps_and_overlaps() {
        let mut x = Extents::default();
        x.add(10, 10);
        x.add(0, 5);
        assert!(!x.covers(20));
        x.add(5, 5);
        assert!(x.covers(20));
        assert!(!x.covers(21));
        x.add(15, 10);
        assert_eq!(x.overlap, 5);
        assert!(!x.covers(25));
        assert!(Extents::default().covers(0));
    }

    #[test]
    fn a_partial_retrieve_covers_exactly_the_rest_of_the_file() {
        // REST 0-300 of a 1000-byte file: blocks at 300.. in any order.
        let mut wire = block(0, 400, 600);
        wire.extend(block(0, 300, 300));
        wire.extend(block(EOD | EOF, 0, 1));
        let mut p = BlockParser::default();
        let mut x = Extents::default();
        p.feed(&wire, &mut |e| {
            if let Event::Data { offset, len } = e {
                x.add(offset, len);
            }
        });
        assert!(x.covers_range(300, 1000));
        assert!(!x.covers(1000), "the first 300 bytes were not asked for");
        assert!(!x.covers_range(200, 1000));
        assert!(
            !x.covers_range(300, 999),
            "a byte past the end is not the rest"
        );
        // A block before the start offset (the server ignored REST) fails it.
        x.add(0, 10);
        assert!(!x.covers_range(300, 1000));
    }
}
