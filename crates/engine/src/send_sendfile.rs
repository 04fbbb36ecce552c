//! The sendfile data path (see `send.rs` for what both paths share).
//!
//! A prefix goes first with `MSG_MORE` (the kernel holds it
//! to coalesce with the payload), then `sendfile` in `chunk_size` calls.
//! Before `sendfile` touches a window of `sendfile_prefetch` bytes, the loop
//! asks `cachestat` whether it is all cached; if not, a disk thread reads it
//! through a scratch buffer (after a WILLNEED hint) and the sender waits for
//! that, and the next window is prepared the same way while this one is sent.
//! Remaining risk, where `sendfile` can still block the loop on the disk:
//! pages evicted between that check and `sendfile` (memory pressure); pages
//! that are present but still being read (`cachestat` counts them) so
//! `sendfile` waits for that I/O; file-system metadata (extent) reads; and
//! kernels without `cachestat` (before 6.5), where only the WILLNEED hint is
//! given. The copy path has none of these, one reason it is the default.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use sluice_platform::{fadvise, sendfile, tcp};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::counters::{Counters, Tally};
use crate::disk::Ticket;
use crate::send::{check, read_full_at, wait_writable, Turn};
use crate::{Cancel, Engine, EngineError};

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
    ) -> Result<u64, EngineError> {
        let t = self.tally(counters);
        let cfg = self.config();
        let idle = cfg.idle_timeout;
        let end = offset + len;
        let window = cfg.sendfile_prefetch.max(cfg.chunk_size).max(1) as u64;
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
        let mut turn = Turn::new(cfg.send_quantum);
        let mut pos = offset;
        let mut resident_until = offset;
        let mut ahead: Option<(u64, Ticket<io::Result<u64>>)> = None;
        while pos < end {
            check(cancel)?;
            if pos >= resident_until {
                let wend = (pos + window).min(end);
                match ahead.take() {
                    Some((until, ticket)) if until == wend => self.finish_touch(ticket, t).await?,
                    _ => {
                        if !self.is_resident(file, pos, wend - pos) {
                            let ticket = self.start_touch(file, pos, wend - pos, cancel).await?;
                            self.finish_touch(ticket, t).await?;
                        }
                    }
                }
                resident_until = wend;
                // Look one window ahead while this one is sent, unless the next
                // window is already cached (the common warm case: no thread hop).
                let nend = (wend + window).min(end);
                if wend < end && !self.is_resident(file, wend, nend - wend) {
                    ahead = Some((
                        nend,
                        self.start_touch(file, wend, nend - wend, cancel).await?,
                    ));
                }
            }
            let want = (resident_until - pos).min(cfg.chunk_size as u64) as usize;
            let mut off = pos;
            match conn.try_io(Interest::WRITABLE, || {
                sendfile::sendfile(conn.as_fd(), file.as_fd(), &mut off, want)
            }) {
                Ok(0) => return Err(EngineError::ShortFile { at: pos }),
                Ok(n) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    pos += n as u64;
                    turn.pushed(n as u64, t).await;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_writable(conn, t, cancel, idle).await?;
                    turn.waited();
                }
                Err(e) if sendfile::is_unsupported(&e) => {
                    // This file system cannot sendfile: finish by copying.
                    tracing::debug!("sendfile refused ({e}); copying instead");
                    let rest = self
                        .send_copy(conn, file, pos, end - pos, &[], counters, cancel)
                        .await?;
                    return Ok(pos + rest - offset);
                }
                Err(e) => return Err(EngineError::Connection(e)),
            }
        }
        Ok(pos - offset)
    }

    /// True when `cachestat` says every page of the range is cached (a page
    /// cache lookup that never waits for the disk). Without `cachestat`
    /// (kernels before 6.5) we cannot tell cheaply and say no.
    fn is_resident(&self, file: &Arc<File>, off: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        if !self.features().cachestat.is_supported() {
            return false;
        }
        let ps = fadvise::page_size() as u64;
        let pages = (off + len - 1) / ps - off / ps + 1;
        matches!(fadvise::cachestat(file.as_fd(), off, len), Ok(st) if st.cached_pages >= pages)
    }

    /// Off the loop: hint the kernel, then read the range through a scratch
    /// buffer so every page is cached before `sendfile` touches it. Without
    /// `cachestat` only the hint is given: touching every page of every
    /// window would cost the copy that sendfile exists to avoid, so a cold
    /// page can still stall the loop there (README: remaining risk).
    async fn start_touch(
        &self,
        file: &Arc<File>,
        off: u64,
        len: u64,
        cancel: &Cancel,
    ) -> Result<Ticket<io::Result<u64>>, EngineError> {
        let f = Arc::clone(file);
        let mut buf = self.buffers().take();
        let touch = self.features().cachestat.is_supported();
        self.inner
            .disk
            .submit(cancel, move || {
                let _ = fadvise::fadvise(f.as_fd(), off, len, fadvise::Advice::WillNeed);
                if !touch {
                    return Ok(0);
                }
                let mut done = 0u64;
                while done < len {
                    let want = (buf.len() as u64).min(len - done) as usize;
                    let n = read_full_at(&f, &mut buf[..want], off + done)?;
                    if n == 0 {
                        break;
                    }
                    done += n as u64;
                }
                Ok(done)
            })
            .await
    }

    async fn finish_touch(
        &self,
        ticket: Ticket<io::Result<u64>>,
        t: Tally<'_>,
    ) -> Result<(), EngineError> {
        let n = ticket.await?.map_err(EngineError::Disk)?;
        if n > 0 {
            t.disk_reads(1);
            t.read_disk(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{engine, pair, pattern, temp_file};
    use crate::DataPath;
    use tokio::io::AsyncReadExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sendfile_brings_cold_pages_in_off_the_loop() {
        let data = pattern(2 << 20);
        let file = temp_file(&data);
        file.sync_all().unwrap();
        fadvise::fadvise(file.as_fd(), 0, 0, fadvise::Advice::DontNeed).unwrap();
        let e = engine(DataPath::Sendfile, true);
        let cold = e.features().cachestat.is_supported() && !e.is_resident(&file, 0, 2 << 20);
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let c = Counters::new();
        e.send_file(&tx, &file, 0, 2 << 20, &[], &c, &Cancel::new())
            .await
            .unwrap();
        drop(tx);
        assert_eq!(reader.await.unwrap(), data);
        if cold {
            // Every window was read through a disk thread before sendfile ran.
            assert!(c.snapshot().disk_reads >= 1);
            assert_eq!(c.snapshot().bytes_read_disk, 2 << 20);
        }
    }
}
