//! Senders: file ranges (optionally behind a framing prefix) out of a
//! non-blocking socket, on the sendfile or the copy data path.
//!
//! Both paths try the socket first and wait for writability only after
//! `EAGAIN`; with `TCP_NOTSENT_LOWAT` set, writability means "the kernel's
//! unsent queue has drained below the mark", so one wake-up refills a lot.
//! After `send_quantum` bytes without a wait a sender yields the loop.
//! Every resume after a wait is counted as a wake-up (`wake.rs`); the
//! `blocking` data path (`send_blocking.rs`) runs on a thread of its own.
//!
//! Copy path: a chunk is read with `RWF_NOWAIT` on the loop when its pages
//! are cached (no thread hop, no wait), else on a disk thread; the next
//! chunk's read starts before the current chunk is written (double
//! buffering), and a prefix goes out with the first chunk in one `writev`.
//! That is the `kernel` prefetch mode; in `tcp` and `fixed` modes the chunks
//! come from the prefetch planner's reads instead (`prefetch.rs`), which
//! skips the inline `RWF_NOWAIT` fast path (measured: about 28 % slower than
//! `kernel` for two unlimited warm-cache streams over loopback).

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_platform::{fadvise, fileio};
use tokio::net::TcpStream;

use crate::auto_prefetch::Ahead;
use crate::buffers::PoolBuf;
use crate::conn::Link;
use crate::counters::{Counters, Tally};
use crate::disk::{IoClass, Ticket};
use crate::flow::Flow;
use crate::plan::MissVerdict;
use crate::prefetch::pagecache::missing_data_bytes;
use crate::prefetch::Feed;
use crate::refill::Refill;
use crate::wake::{counted, yield_turn};
use crate::{Cancel, DataPath, Engine, EngineError, PrefetchMode};

/// A chunk read for the copy path: ready now (page cache) or on a disk thread.
enum PendingRead {
    Ready(PoolBuf, usize),
    Disk(Ticket<(PoolBuf, io::Result<usize>)>),
}

impl Engine {
    /// Sends `prefix` (e.g. a MODE E header; may be empty) followed by `len`
    /// bytes of `file` starting at `offset`, on the configured data path.
    /// Returns the file bytes sent (`len` on success).
    // The arguments are all distinct roles; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub async fn send_file(
        &self,
        conn: &TcpStream,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let mut link = Link::new(self, conn, None);
        self.send_range_on(conn, &mut link, file, offset, len, prefix, counters, cancel)
            .await
    }

    /// One send of a connection's life, with the state its
    /// [`crate::DataConn`] keeps between sends ([`Link`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_range_on(
        &self,
        conn: &TcpStream,
        link: &mut Link,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        if len == 0 {
            self.send_bytes(conn, prefix, counters, cancel).await?;
            return Ok(0);
        }
        let t = self.tally(counters);
        let path = match self.config().data_path {
            DataPath::Auto => auto_choice(link.local, len),
            p => p,
        };
        let Link {
            turn, flow, thread, ..
        } = link;
        match path {
            DataPath::Copy => {
                let mut refill = self.refill(flow);
                let f = self.send_copy(
                    conn,
                    file,
                    offset,
                    len,
                    prefix,
                    counters,
                    cancel,
                    turn,
                    flow,
                    refill.as_mut(),
                    true,
                );
                counted(f, t).await
            }
            DataPath::Sendfile | DataPath::Splice | DataPath::Auto => {
                let f = self.send_sendfile(
                    conn, file, offset, len, prefix, counters, cancel, turn, flow,
                );
                counted(f, t).await
            }
            // Its own thread counts its own wake-ups; this task sleeps once.
            // It clears the socket's mark (0) first; DRS's ceiling check
            // reads the mark from the flow.
            DataPath::Blocking => {
                flow.mark_was_set(0);
                self.send_blocking(thread, conn, file, offset, len, prefix, counters, cancel)
                    .await
            }
        }
    }

    /// Sends `bytes` in full (framing with no payload: MODE E EOD/EOF).
    pub async fn send_bytes(
        &self,
        conn: &TcpStream,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        let t = self.tally(counters);
        let f = write_all(conn, [bytes, &[]], t, cancel, self.config().idle_timeout);
        counted(f, t).await.map(|_| ())
    }

    /// The copy path. `refill` is the connection's rate-sized mark
    /// (`refill.rs`), resized after each wait; the sendfile path passes its
    /// own when it copies a cold range, so the mark is not started again.
    /// `up_front`: `auto` may plan the whole send from its start when its
    /// range is mostly not in memory (false for the sendfile path's
    /// measuring read of one buffer, which must go to a disk thread).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_copy(
        &self,
        conn: &TcpStream,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
        turn: &mut Turn,
        flow: &Flow,
        mut refill: Option<&mut Refill<'_>>,
        up_front: bool,
    ) -> Result<u64, EngineError> {
        // `auto` plans a send whose range is mostly not in memory from its
        // start; one that is starts on the inline path and hands the rest
        // of the send to the planner at the first chunk that had to come
        // from a disk.
        let auto = self.config().prefetch == PrefetchMode::Auto;
        let end = offset + len;
        if !auto
            || (up_front
                && self.auto_verdict(file, offset, end, Ahead::Rest) == MissVerdict::Planner)
        {
            if let Some(mut feed) = self.feed(flow, file, offset, offset + len, true, counters) {
                return self
                    .send_copy_planned(
                        conn, &mut feed, offset, len, prefix, counters, cancel, turn, refill,
                    )
                    .await;
            }
        }
        let t = self.tally(counters);
        let mut prefix = prefix;
        let mut pos = offset;
        let mut next = Some(self.start_read(file, pos, end - pos, t, cancel).await?);
        let mut started = Instant::now();
        while let Some(pending) = next.take() {
            let cold = matches!(pending, PendingRead::Disk(_));
            let (buf, n) = self.finish_read(pending, pos, t).await?;
            if cold && auto {
                // What this miss really cost decides `auto`'s choice below,
                // for every reader of the file.
                self.read_cost(file, n as u64, started.elapsed());
            }
            let after = pos + n as u64;
            // Double buffering after a disk read: the next chunk's read is
            // under way while this one goes out. A cached chunk is read
            // inline anyway, so the next one waits until this one is out:
            // a stalled reader then pins one buffer, not two (probe: 2 MiB
            // per stalled download).
            if after < end && cold && !auto {
                next = Some(self.start_read(file, after, end - after, t, cancel).await?);
                started = Instant::now();
            }
            let waited = write_all(
                conn,
                [prefix, &buf[..n]],
                t,
                cancel,
                self.config().idle_timeout,
            )
            .await?;
            if let Some(r) = refill.as_deref_mut() {
                r.wrote(conn, (prefix.len() + n) as u64, waited);
            }
            if waited {
                turn.waited();
            }
            turn.pushed((prefix.len() + n) as u64, t).await;
            prefix = &[];
            pos = after;
            if pos < end
                && cold
                && auto
                && self.auto_verdict(file, pos, end, Ahead::Chunk) == MissVerdict::Planner
            {
                // A miss: the range is not (all) in memory; the planner
                // reads the rest ahead at this connection's rate.
                drop(buf);
                if let Some(mut feed) = self.feed(flow, file, pos, end, true, counters) {
                    let rest = self
                        .send_copy_planned(
                            conn,
                            &mut feed,
                            pos,
                            end - pos,
                            &[],
                            counters,
                            cancel,
                            turn,
                            refill,
                        )
                        .await?;
                    return Ok(pos + rest - offset);
                }
                next = Some(self.start_read(file, pos, end - pos, t, cancel).await?);
                started = Instant::now();
                continue;
            }
            if pos < end && next.is_none() {
                drop(buf);
                next = Some(self.start_read(file, pos, end - pos, t, cancel).await?);
                started = Instant::now();
            }
        }
        Ok(pos - offset)
    }

    /// The copy path under the prefetch planner: chunks arrive in pooled
    /// buffers read by the planner's disk jobs, in offset order.
    #[allow(clippy::too_many_arguments)]
    async fn send_copy_planned(
        &self,
        conn: &TcpStream,
        feed: &mut Feed<'_>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
        turn: &mut Turn,
        mut refill: Option<&mut Refill<'_>>,
    ) -> Result<u64, EngineError> {
        let t = self.tally(counters);
        let idle = self.config().idle_timeout;
        let end = offset + len;
        let mut prefix = prefix;
        let mut pos = offset;
        while pos < end {
            let chunk = feed.next(conn, pos, cancel).await?;
            let mut left = chunk.len;
            for buf in &chunk.bufs {
                let n = (buf.len() as u64).min(left) as usize;
                left -= n as u64;
                let waited = write_all(conn, [prefix, &buf[..n]], t, cancel, idle).await?;
                if let Some(r) = refill.as_deref_mut() {
                    r.wrote(conn, (prefix.len() + n) as u64, waited);
                }
                if waited {
                    turn.waited();
                    feed.sample(conn, false)?;
                }
                turn.pushed((prefix.len() + n) as u64, t).await;
                feed.sent(n as u64);
                prefix = &[];
                pos += n as u64;
            }
        }
        Ok(pos - offset)
    }

    /// Starts reading up to one buffer at `pos`: inline when the pages are
    /// cached (`RWF_NOWAIT` never waits for the disk), else on a disk thread.
    async fn start_read(
        &self,
        file: &Arc<File>,
        pos: u64,
        remaining: u64,
        t: Tally<'_>,
        cancel: &Cancel,
    ) -> Result<PendingRead, EngineError> {
        let mut buf = self.buffers().take();
        let want = (buf.len() as u64).min(remaining) as usize;
        // `RWF_NOWAIT` returns at once on a cold page, but only after it
        // started the kernel's read-ahead: allocating the window's pages,
        // charged to the memory cgroup, which when full reclaims right
        // there, on the event loop (tpf-abort, 256 MiB: 43 % of the loop's
        // CPU, profile s13-cost-profile-c). `cachestat` tells a cold range
        // without touching it; then the read goes to a disk thread at once.
        if self.config().inline_cached_reads && !self.surely_cold(file, pos, want as u64) {
            match fileio::pread_nowait(file.as_fd(), &mut buf[..want], pos) {
                Ok(n) if n > 0 => {
                    t.read_disk(n as u64);
                    return Ok(PendingRead::Ready(buf, n));
                }
                Ok(_) => return Err(EngineError::ShortFile { at: pos }),
                Err(_) => {} // not cached (or not supported): go to a disk thread
            }
        }
        let f = Arc::clone(file);
        // `auto` times this read to judge the file, and may hand the rest
        // to the planner: it must not start the kernel's read-ahead, whose
        // marks the planner's reads would then keep running into (each
        // one reading the next window ahead, for the memory cgroup to
        // evict). WILLNEED reads exactly the range and leaves no marks (as
        // the planner's own reads do, `pagecache::read_range`).
        let exact = self.config().prefetch == PrefetchMode::Auto;
        let ticket = self
            .inner
            .disk
            .submit(IoClass::Transfer, cancel, move || {
                if exact {
                    let _ =
                        fadvise::fadvise(f.as_fd(), pos, want as u64, fadvise::Advice::WillNeed);
                }
                let r = read_full_at(&f, &mut buf[..want], pos);
                (buf, r)
            })
            .await?;
        Ok(PendingRead::Disk(ticket))
    }

    /// True when `cachestat` says some of the range's data is not in the
    /// page cache (false when it cannot tell).
    pub(crate) fn surely_cold(&self, file: &File, pos: u64, len: u64) -> bool {
        self.features().cachestat.is_supported()
            && missing_data_bytes(file, pos, len).is_some_and(|m| m > 0)
    }

    async fn finish_read(
        &self,
        p: PendingRead,
        pos: u64,
        t: Tally<'_>,
    ) -> Result<(PoolBuf, usize), EngineError> {
        match p {
            PendingRead::Ready(buf, n) => Ok((buf, n)),
            PendingRead::Disk(ticket) => {
                let (buf, r) = ticket.await?;
                let n = r.map_err(EngineError::Disk)?;
                t.disk_reads(1);
                if n == 0 {
                    return Err(EngineError::ShortFile { at: pos });
                }
                t.read_disk(n as u64);
                Ok((buf, n))
            }
        }
    }
}

/// Sends up to this size go by `copy` whoever the peer is: one `pread`
/// and one `writev` with the headers, no buffer held for long.
const AUTO_COPY_MAX: u64 = 256 << 10;

/// The `auto` data path's choice for one send of `len` bytes to a peer
/// that is (`local`) or is not on this host (see `DataPath::Auto`).
pub(crate) fn auto_choice(local: bool, len: u64) -> DataPath {
    if len <= AUTO_COPY_MAX || local {
        DataPath::Copy
    } else {
        DataPath::Sendfile
    }
}

/// True when the peer is on this host: loopback, or our own address.
pub(crate) fn peer_is_local(conn: &TcpStream) -> bool {
    match (conn.peer_addr(), conn.local_addr()) {
        (Ok(p), Ok(l)) => {
            let p = p.ip().to_canonical();
            p.is_loopback() || p == l.ip().to_canonical()
        }
        _ => false,
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(crate) fn read_full_at(f: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Counts bytes pushed since this sender last gave up the event loop and
/// yields once a quantum is used, so one fast connection cannot starve others.
#[derive(Debug)]
pub(crate) struct Turn {
    used: u64,
    quantum: u64,
    /// Cue (`--cue on`): the connection's place in the engine's scheduler,
    /// told the turn's bytes when a turn ends, and deciding the next
    /// quantum (scaled by the connection's weight).
    cue: Option<crate::cue_hub::CueTicket>,
}

impl Turn {
    pub(crate) fn new(quantum: usize) -> Self {
        Turn {
            used: 0,
            quantum: quantum.max(1) as u64,
            cue: None,
        }
    }

    /// A turn under Cue's scheduler.
    pub(crate) fn with_cue(quantum: usize, cue: Option<crate::cue_hub::CueTicket>) -> Self {
        Turn {
            cue,
            ..Turn::new(quantum)
        }
    }

    /// A wait for writability also ends the turn.
    pub(crate) fn waited(&mut self) {
        self.used = 0;
        self.end_turn();
    }

    fn end_turn(&mut self) {
        if let Some(c) = self.cue.as_mut() {
            self.quantum = c.turn_ended().max(1);
        }
    }

    pub(crate) async fn pushed(&mut self, n: u64, t: Tally<'_>) {
        self.used += n;
        if let Some(c) = self.cue.as_mut() {
            c.pushed(n);
        }
        if self.used >= self.quantum {
            self.used = 0;
            self.end_turn();
            yield_turn(t).await;
        }
    }
}

pub(crate) fn check(cancel: &Cancel) -> Result<(), EngineError> {
    if cancel.is_cancelled() {
        Err(EngineError::Cancelled)
    } else {
        Ok(())
    }
}

/// Waits until the socket is writable, the transfer is cancelled, or the
/// peer has taken nothing for `idle` (a stalled reader must not hold a
/// transfer, its buffers and its file forever).
pub(crate) async fn wait_writable(
    conn: &TcpStream,
    t: Tally<'_>,
    cancel: &Cancel,
    idle: Duration,
) -> Result<(), EngineError> {
    // The wake-up itself is counted by `wake::counted` around the send.
    t.eagains(1);
    tokio::select! {
        r = tokio::time::timeout(idle, conn.writable()) => match r {
            Ok(r) => r.map_err(EngineError::Connection),
            Err(_) => Err(EngineError::Idle),
        },
        _ = cancel.cancelled() => Err(EngineError::Cancelled),
    }
}

/// Writes both parts in full, in one `writev` per attempt.
pub(crate) async fn write_all(
    conn: &TcpStream,
    mut parts: [&[u8]; 2],
    t: Tally<'_>,
    cancel: &Cancel,
    idle: Duration,
) -> Result<bool, EngineError> {
    let mut waited = false;
    loop {
        if parts[0].is_empty() {
            parts = [parts[1], &[]];
        }
        if parts[0].is_empty() {
            return Ok(waited);
        }
        check(cancel)?;
        let iov = [IoSlice::new(parts[0]), IoSlice::new(parts[1])];
        let n_iov = if parts[1].is_empty() { 1 } else { 2 };
        match conn.try_write_vectored(&iov[..n_iov]) {
            Ok(0) => return Err(EngineError::Connection(io::ErrorKind::WriteZero.into())),
            Ok(mut n) => {
                t.sent(n as u64);
                t.send_calls(1);
                let first = n.min(parts[0].len());
                parts[0] = &parts[0][first..];
                n -= first;
                parts[1] = &parts[1][n..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_writable(conn, t, cancel, idle).await?;
                waited = true;
            }
            Err(e) => return Err(EngineError::Connection(e)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
