//! The sendfile data path (see `send.rs` for what both paths share).
//!
//! A prefix goes first with `MSG_MORE` (the kernel holds it
//! to coalesce with the payload), then `sendfile` in `chunk_size` calls.
//! The socket's `TCP_NOTSENT_LOWAT` follows the connection's rate
//! (`refill.rs`), so each wake-up refills about `refill_time` of data.
//! In `tcp` and `fixed` prefetch modes `sendfile` only runs over ranges the
//! planner's disk jobs have already read into the page cache (through a
//! scratch buffer, off the loop; see `prefetch.rs`), and `cachestat` tells
//! whether any of those pages were evicted again before being sent (counted
//! as `evicted_unused`). In `kernel` mode it is plain `sendfile` and the
//! kernel's read-ahead: a cold page then makes `sendfile` wait for the disk
//! on the event loop. Remaining risk even with a planner: pages evicted
//! between the read and `sendfile`, and file-system metadata reads.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_platform::{sendfile, tcp};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::auto_prefetch::{Ahead, UP_FRONT_MAX};
use crate::counters::Counters;
use crate::flow::Flow;
use crate::plan::MissVerdict;
use crate::prefetch::pagecache::{fill_cache, missing_data_bytes};
use crate::send::{check, wait_writable, Turn};
use crate::splice_pump::SplicePump;
use crate::{Cancel, Engine, EngineError};
use crate::{DataPath, PrefetchMode};

mod cork;
mod idle;
mod resident;
use cork::Cork;
use idle::{Fired, IdleClock};
use resident::{ask_len, FileKey, ResidentMap, ResidentSpan};

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_sendfile(
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
    ) -> Result<u64, EngineError> {
        let t = self.tally(counters);
        let cfg = self.config();
        let idle = cfg.idle_timeout;
        let end = offset + len;
        // Rate-sized NOTSENT_LOWAT (refill.rs), resized after wake-ups.
        let mut refill = self.refill(flow);
        // Wake-ups in a row that found no room (see `pressure_pause`).
        let mut empty_wakes = 0u64;
        // The prefix goes with MSG_MORE, so the kernel holds it back and
        // coalesces it with the first sendfile bytes into full segments.
        let mut rest = prefix;
        while !rest.is_empty() {
            check(cancel)?;
            match conn.try_io(Interest::WRITABLE, || tcp::send_more(conn.as_fd(), rest)) {
                Ok(n) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    rest = &rest[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_writable(conn, t, cancel, idle).await?
                }
                Err(e) => return Err(EngineError::Connection(e)),
            }
        }
        // Full segments only while a long send runs (cork.rs); the tail
        // goes when `_cork` is dropped at the send's end.
        let _cork = Cork::new(conn, len);
        let mut pump = self.splice_pump();
        // `auto`: a send whose range is mostly not in memory is planned
        // from its start; otherwise sendfile over the kernel's read-ahead
        // while the range is in the page cache, and the planner takes the
        // rest of the send from the first chunk that is not (without
        // `cachestat` nothing tells: the planner from the start).
        let auto = cfg.prefetch == PrefetchMode::Auto;
        let can_tell = self.features().cachestat.is_supported();
        // What `cachestat` last found resident (resident.rs): asked once
        // per span, not before every chunk.
        let mut resident = ResidentSpan::default();
        // The idle bound of the waits below: one timer per send (idle.rs).
        let mut clock = IdleClock::new(idle, tokio::time::Instant::now());
        // The file's device and inode, asked once per send when needed.
        let mut file_key: Option<Option<FileKey>> = None;
        let started = Instant::now();
        let mut feed = if auto && can_tell {
            // `auto`'s question up front (`Engine::auto_verdict`) and the
            // first chunks' residency check in one `cachestat`: a range
            // found all resident is not asked about again chunk by chunk.
            // A send of one shared piece or MODE E block asked twice.
            let len = (end - offset).min(UP_FRONT_MAX);
            match missing_data_bytes(file, offset, len) {
                Some(m) => {
                    if m == 0 {
                        resident.found(offset, len, started.elapsed());
                    }
                    match self.verdict_for(file, m, len, Ahead::Rest) {
                        MissVerdict::Kernel => None,
                        _ => self.feed(flow, file, offset, end, false, counters),
                    }
                }
                // `cachestat` could not tell: the kernel keeps it.
                None => None,
            }
        } else {
            self.feed(flow, file, offset, end, false, counters)
        };
        let mut pos = offset;
        // Without a feed (`kernel` mode) sendfile takes pages as they come
        // and the kernel's read-ahead brings them in.
        let mut ready_until = if feed.is_some() { offset } else { end };
        while pos < end {
            check(cancel)?;
            if pos >= ready_until {
                if let Some(f) = feed.as_mut() {
                    let chunk = f.next(conn, pos, cancel).await?;
                    ready_until = pos + chunk.len;
                    // Read ahead, then evicted before sendfile got to it
                    // (the feed's one cachestat of the chunk said so).
                    t.evicted_unused(chunk.evicted);
                }
            }
            let mut want = (ready_until - pos).min(cfg.chunk_size as u64) as usize;
            // Data bytes of the chunk out of the page cache: `Some(0)` when
            // all are in (or not asked: a feed, a pump holding bytes, the
            // check off), `None` when `cachestat` could not tell. Inside a
            // span found resident lately nothing is asked, and `sendfile`
            // stops at the span's end so it never runs into unasked pages.
            let missing = if feed.is_none()
                && pump.as_ref().is_none_or(|p| p.held() == 0)
                && (cfg.sendfile_resident_check || auto)
                && can_tell
            {
                let now = started.elapsed();
                match resident.ahead(pos, now) {
                    0 => {
                        // What another sender of the file found lately
                        // (resident.rs, `ResidentMap`), else ask about the
                        // rest of this unit and tell the others.
                        let key = *file_key.get_or_insert_with(|| file_key_of(file));
                        let (map, map_now) = resident::shared();
                        let (known, age) = match key {
                            Some(k) => lock(map).known(k, pos, map_now),
                            None => (0, Duration::ZERO),
                        };
                        if known > 0 {
                            resident.found(pos, known, now.saturating_sub(age));
                            want = (want as u64).min(known) as usize;
                            Some(0)
                        } else {
                            want = ask_len(pos, want as u64) as usize;
                            let m = missing_data_bytes(file, pos, want as u64);
                            if m == Some(0) {
                                resident.found(pos, want as u64, now);
                                if let Some(k) = key {
                                    lock(map).found(k, pos, want as u64, map_now);
                                }
                            }
                            m
                        }
                    }
                    known => {
                        want = (want as u64).min(known) as usize;
                        Some(0)
                    }
                }
            } else {
                Some(0)
            };
            if missing != Some(0) {
                // A few pages missing (evicted here and there) are read on
                // a disk thread as in `kernel` mode; most of the chunk
                // missing is a cold range: the planner takes the rest.
                // The judge has no measured read at the first miss: the
                // chunk is read in below (a timed disk-thread read), and
                // the judge's verdict on it may hand the rest to the planner.
                // Without a feed `ready_until` is `end`: `want` is the
                // chunk `auto_verdict` would ask `cachestat` about again.
                let verdict = match missing {
                    Some(m) if auto => self.verdict_for(file, m, want as u64, Ahead::Chunk),
                    _ => MissVerdict::Kernel,
                };
                if verdict == MissVerdict::Planner {
                    feed = self.feed(flow, file, pos, end, false, counters);
                    if feed.is_some() {
                        ready_until = pos;
                        continue;
                    }
                }
                // Not (all) in the page cache: sendfile would wait for the
                // disk on the event loop. The chunk is read into the page
                // cache on a disk thread (through one pooled buffer, let go
                // when the read is done) and then sent by `sendfile`. It
                // used to go by the copy path, whose buffer stays pinned
                // until the socket takes it all: 1 MiB per slow reader for
                // ~8 s at 1 Mbit/s, and a copy per byte (lab send-wakeups,
                // 1000 readers alone when a few pages of the warm file were
                // paged out: 1064 MiB and 1.2-1.5 CPU s/GiB against 58 MiB
                // and 0.5). Without `cachestat`'s count nothing tells when
                // the pages are in, and the copy path stays.
                let Some(_) = missing else {
                    let n = (want as u64).min(cfg.read_buffer_size as u64);
                    pos += self
                        .send_copy(
                            conn,
                            file,
                            pos,
                            n,
                            &[],
                            counters,
                            cancel,
                            turn,
                            flow,
                            refill.as_mut(),
                            false,
                        )
                        .await?;
                    turn.waited();
                    continue;
                };
                let (n, took) = self.fault_in(file, pos, want as u64, t, cancel).await?;
                if n == 0 {
                    return Err(EngineError::ShortFile { at: pos });
                }
                if auto {
                    // What this miss really cost decides `auto`'s choice
                    // below, for every reader of the file.
                    self.read_cost(file, n, took);
                }
                // Just read: `sendfile` takes it without asking again.
                resident.found(pos, n, started.elapsed());
                turn.waited();
                // The measuring read cost a disk's: the planner takes the
                // rest of the send now, not at a next miss (the next chunk
                // may be just resident, and evicted before a slow send
                // reaches the one after).
                if verdict == MissVerdict::Measure
                    && pos < end
                    && self.judged_disk_bound(file) == Some(true)
                {
                    feed = self.feed(flow, file, pos, end, false, counters);
                    if feed.is_some() {
                        ready_until = pos;
                    }
                }
                continue;
            }
            let mut off = pos;
            // Bytes a short `sendfile` moved (see `full_after`).
            let mut short = 0;
            let r = conn.try_io(Interest::WRITABLE, || match pump.as_mut() {
                Some(p) => p.send(conn.as_fd(), file.as_fd(), &mut off, want),
                None => {
                    let r = sendfile::sendfile(conn.as_fd(), file.as_fd(), &mut off, want);
                    match r {
                        // The file's length is asked only after a short
                        // call (once a wake-up), never before every call.
                        Ok(n) if n > 0 && n < want && full_after(n, want, off, file_len(file)) => {
                            short = n;
                            Err(io::ErrorKind::WouldBlock.into())
                        }
                        r => r,
                    }
                }
            });
            if short > 0 {
                // The socket is full: count the bytes, then wait below as
                // after `EAGAIN` (readiness was cleared by `try_io`).
                t.sent(short as u64);
                t.send_calls(1);
                pos += short as u64;
                clock.moved(tokio::time::Instant::now());
                if let Some(r) = refill.as_mut() {
                    r.wrote(conn, short as u64, false);
                }
                if let Some(f) = &feed {
                    f.sent(short as u64);
                }
                turn.pushed(short as u64, t).await;
            }
            match r {
                Ok(0) => return Err(EngineError::ShortFile { at: pos }),
                Ok(n) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    pos += n as u64;
                    empty_wakes = 0;
                    clock.moved(tokio::time::Instant::now());
                    if let Some(r) = refill.as_mut() {
                        r.wrote(conn, n as u64, false);
                    }
                    if let Some(f) = &feed {
                        f.sent(n as u64);
                    }
                    turn.pushed(n as u64, t).await;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if short > 0 {
                        empty_wakes = 0;
                    } else if empty_wakes > 0 {
                        pressure_pause(empty_wakes, cancel).await?;
                    }
                    if short == 0 {
                        empty_wakes += 1;
                    }
                    wait_room(conn, t, cancel, &mut clock).await?;
                    turn.waited();
                    if let Some(r) = refill.as_mut() {
                        r.woke(conn);
                    }
                    if let Some(f) = feed.as_mut() {
                        f.sample(conn, false)?;
                    }
                }
                Err(e) if sendfile::is_unsupported(&e) => {
                    // This file system cannot sendfile: finish by copying.
                    tracing::debug!("sendfile refused ({e}); copying instead");
                    drop(feed);
                    let rest = self
                        .send_copy(
                            conn,
                            file,
                            pos,
                            end - pos,
                            &[],
                            counters,
                            cancel,
                            turn,
                            flow,
                            refill.as_mut(),
                            true,
                        )
                        .await?;
                    return Ok(pos + rest - offset);
                }
                Err(e) => return Err(EngineError::Connection(e)),
            }
        }
        Ok(pos - offset)
    }

    /// Reads `[pos, pos + len)` of `file` into the page cache on a disk
    /// thread (`pagecache::fill_cache`: no copy where the file can be
    /// spliced, else one pooled buffer). Returns the bytes read (fewer at
    /// the file's end) and how long the read took. `auto` reads exactly the
    /// range (WILLNEED, no read-ahead marks: as the copy path's measuring
    /// read, `Engine::start_read`).
    async fn fault_in(
        &self,
        file: &Arc<File>,
        pos: u64,
        len: u64,
        t: crate::counters::Tally<'_>,
        cancel: &Cancel,
    ) -> Result<(u64, std::time::Duration), EngineError> {
        let f = Arc::clone(file);
        let pool = Arc::clone(self.buffers());
        let exact = self.config().prefetch == PrefetchMode::Auto;
        let (r, took) = self
            .inner
            .disk
            .run(crate::disk::IoClass::Transfer, cancel, move || {
                let t0 = Instant::now();
                if exact {
                    let _ = sluice_platform::fadvise::fadvise(
                        f.as_fd(),
                        pos,
                        len,
                        sluice_platform::fadvise::Advice::WillNeed,
                    );
                }
                let r = fill_cache(&f, &pool, pos, len);
                (r, t0.elapsed())
            })
            .await?;
        let n = r.map_err(EngineError::Disk)?;
        t.disk_reads(1);
        t.read_disk(n);
        Ok((n, took))
    }

    /// The splice data path's pipe, or `None` for plain `sendfile` (also
    /// when no pipe can be made: out of descriptors is no reason to fail).
    fn splice_pump(&self) -> Option<SplicePump> {
        if self.config().data_path != DataPath::Splice {
            return None;
        }
        SplicePump::new()
            .inspect_err(|e| tracing::debug!("no pipe for splice ({e}); using sendfile"))
            .ok()
    }

    /// True when `cachestat` says every page of the range's data is cached
    /// (a page cache lookup that never waits for the disk; holes read as
    /// zeroes and never wait either). Without `cachestat`
    /// (kernels before 6.5) we cannot tell cheaply and say no.
    #[cfg(test)]
    fn is_resident(&self, file: &Arc<File>, off: u64, len: u64) -> bool {
        self.features().cachestat.is_supported() && missing_data_bytes(file, off, len) == Some(0)
    }
}

/// Whether a `sendfile` that moved `n` of the `want` bytes asked, ending
/// at file offset `off` of a file `len` bytes long (`None`: unknown), left
/// the socket full. A non-blocking socket takes less than asked only when
/// its send buffer or `TCP_NOTSENT_LOWAT` mark stops it (the kernel then
/// sets `SOCK_NOSPACE`, so the ACKs that make room wake the sender), or
/// the file ended: short of the file's end the next call would only return
/// `EAGAIN`. nginx stops at a short `sendfile` the same way
/// (`ngx_linux_sendfile_chain`). The call saved is not free: `sendfile`
/// reads up to a pipe's worth of pages (16) from the page cache before the
/// socket refuses them; the `fstat` that tells the file's end is a lookup.
/// At the file's end (a file cut short under the sender) the next call
/// returns 0 at once (`ShortFile`); waiting there would wait for a
/// wake-up that never comes.
pub(crate) fn full_after(n: usize, want: usize, off: u64, len: Option<u64>) -> bool {
    n > 0 && n < want && len.is_some_and(|l| off < l)
}

/// Waits until the socket is writable, the send is cancelled, or it has
/// moved nothing for the idle timeout (`send::wait_writable`'s bound,
/// with one timer per send: idle.rs).
async fn wait_room(
    conn: &TcpStream,
    t: crate::counters::Tally<'_>,
    cancel: &Cancel,
    clock: &mut IdleClock,
) -> Result<(), EngineError> {
    // The wake-up itself is counted by `wake::counted` around the send.
    t.eagains(1);
    loop {
        tokio::select! {
            r = conn.writable() => return r.map_err(EngineError::Connection),
            _ = clock.timer() => match clock.fired(tokio::time::Instant::now()) {
                Fired::Idle => return Err(EngineError::Idle),
                Fired::Rearm(at) => clock.timer().reset(at),
            },
            _ = cancel.cancelled() => return Err(EngineError::Cancelled),
        }
    }
}

/// The file's device and inode (`None` when `fstat` fails).
fn file_key_of(file: &File) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

fn lock(map: &std::sync::Mutex<ResidentMap>) -> std::sync::MutexGuard<'_, ResidentMap> {
    map.lock().unwrap_or_else(|p| p.into_inner())
}

/// The file's length now (`None` when `fstat` fails).
fn file_len(file: &File) -> Option<u64> {
    file.metadata().ok().map(|m| m.len())
}

/// After a wake-up that found no room: under TCP memory pressure
/// (`tcp_mem`) a socket reports writable on every ACK while refusing data.
/// A blocking sender sleeps a random 2 jiffies to HZ/5 there
/// (`sk_stream_wait_memory`); this pauses likewise instead of spinning.
async fn pressure_pause(n: u64, cancel: &Cancel) -> Result<(), EngineError> {
    let ms = 2 + (n.wrapping_mul(2654435761) >> 7) % 200;
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => Ok(()),
        _ = cancel.cancelled() => Err(EngineError::Cancelled),
    }
}

#[cfg(test)]
mod tests;
