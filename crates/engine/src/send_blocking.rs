//! The `blocking` data path: the baseline the event-loop senders are
//! measured against (issue 5, `send-wakeups`): one OS thread per
//! connection ([`SenderThread`], made at its first send and kept by its
//! [`crate::DataConn`], so a MODE E stream's blocks or a keep-alive
//! connection's responses do not start a thread each),
//! sleeping in the kernel until its socket takes more, then `sendfile` of
//! everything that fits, as vsftpd and other thread- or process-per-
//! connection servers do. No event loop, no quantum, no `TCP_NOTSENT_LOWAT`.
//!
//! The thread works on a duplicate of the socket's descriptor. A duplicate
//! shares the open file description, and so the `O_NONBLOCK` flag, with the
//! tokio socket; clearing it would make every other use of that socket
//! block a worker thread. So the thread does not sleep *inside* `sendfile`
//! but in `poll(2)` right before it. The kernel wakes both with the same
//! write-space callback (`sk_stream_write_space`), so the thread wakes as
//! often as a blocking `sendfile` would; it costs one extra `poll` call per
//! wake-up, no extra context switch. The same `poll` watches a stop socket
//! whose other end the async side drops on cancel (or when its future is
//! dropped), and its timeout is the engine's idle timeout.
//!
//! Counters: the thread cannot borrow the caller's per-transfer counters,
//! so it counts into its own, attached to the caller's while it runs
//! (`Counters::attach`), which keeps both the transfer's and the engine's
//! counts live. Each `poll` that followed `EAGAIN` is one wake-up.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use sluice_platform::sys::{self, WriteWait};
use sluice_platform::{sendfile, tcp};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::counters::{Counters, Tally};
use crate::{Cancel, Engine, EngineError};

/// Stack of a sender thread: it only makes system calls (no deep frames,
/// no large locals); small, so a thousand of them cost little memory.
const THREAD_STACK: usize = 128 << 10;

/// Most bytes asked of one `sendfile` call: more than any send buffer, so
/// one call moves all the room a wake-up found.
const CALL_MAX: u64 = 1 << 30;

/// Longest pause after a wake-up that found no room (see [`Job::wait`]).
const PRESSURE_PAUSE_MAX_MS: u64 = 200;

/// A send handed to a connection's thread, and where its result goes.
type Order = (Job, oneshot::Sender<Result<u64, EngineError>>);

/// The baseline's thread of one connection: it runs that connection's
/// sends one after another and ends when the connection is dropped.
#[derive(Debug)]
pub(crate) struct SenderThread {
    orders: std::sync::mpsc::Sender<Order>,
    /// Shown in `Debug` and compared by tests.
    #[allow(dead_code)]
    id: std::thread::ThreadId,
}

impl SenderThread {
    fn spawn() -> io::Result<SenderThread> {
        let (orders, rx) = std::sync::mpsc::channel::<Order>();
        let handle = std::thread::Builder::new()
            .name("sluice-send".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                while let Ok((job, done)) = rx.recv() {
                    let _ = done.send(job.run());
                }
            })?;
        Ok(SenderThread {
            orders,
            id: handle.thread().id(),
        })
    }

    /// The thread's id (tests: one thread serves every send).
    #[cfg(test)]
    pub(crate) fn id(&self) -> std::thread::ThreadId {
        self.id
    }

    /// Hands `job` to the thread (a new one if there is none yet, or if
    /// the last one died).
    fn order(slot: &mut Option<SenderThread>, job: Job) -> Result<Receiver, EngineError> {
        let (tx, rx) = oneshot::channel();
        let mut order = (job, tx);
        for _ in 0..2 {
            if slot.is_none() {
                *slot = Some(SenderThread::spawn().map_err(EngineError::Connection)?);
            }
            match slot.as_ref().map(|t| t.orders.send(order)) {
                Some(Ok(())) => return Ok(rx),
                Some(Err(std::sync::mpsc::SendError(back))) => {
                    order = back;
                    *slot = None;
                }
                None => unreachable!("filled above"),
            }
        }
        Err(EngineError::Connection(io::Error::other(
            "cannot start a sender thread",
        )))
    }
}

type Receiver = oneshot::Receiver<Result<u64, EngineError>>;

impl Engine {
    /// One send on the blocking baseline, on `thread` (the connection's;
    /// made here at its first send).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_blocking(
        &self,
        thread: &mut Option<SenderThread>,
        conn: &TcpStream,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let sock = conn
            .as_fd()
            .try_clone_to_owned()
            .map_err(EngineError::Connection)?;
        // The baseline has no NOTSENT_LOWAT: 0 puts back the kernel default
        // (net.ipv4.tcp_notsent_lowat, unlimited unless changed).
        let _ = tcp::set_notsent_lowat(sock.as_fd(), 0);
        let (stop_rx, stop_tx) = UnixStream::pair().map_err(EngineError::Connection)?;
        let mirror = Arc::new(Counters::new());
        counters.attach(&mirror);
        let _fold = Fold {
            into: counters,
            mirror: &mirror,
        };
        let job = Job {
            engine: self.clone(),
            sock: std::net::TcpStream::from(sock),
            stop: stop_rx,
            file: Arc::clone(file),
            offset,
            len,
            prefix: prefix.to_vec(),
            mirror: Arc::clone(&mirror),
            idle: self.config().idle_timeout,
        };
        let mut rx = SenderThread::order(thread, job)?;
        tokio::select! {
            r = &mut rx => {
                // A dropped sender means the thread panicked.
                r.unwrap_or_else(|_| Err(EngineError::Connection(io::Error::other("sender thread died"))))
            }
            _ = cancel.cancelled() => {
                // Hang up the stop socket; the thread sees it at its next
                // wait, at most one sendfile call away.
                drop(stop_tx);
                let _ = rx.await;
                Err(EngineError::Cancelled)
            }
        }
    }
}

/// Folds the thread's counts into the transfer's when the send ends or is
/// dropped.
struct Fold<'a> {
    into: &'a Counters,
    mirror: &'a Arc<Counters>,
}

impl Drop for Fold<'_> {
    fn drop(&mut self) {
        self.into.detach(self.mirror);
    }
}

/// Everything a sender thread owns.
struct Job {
    engine: Engine,
    sock: std::net::TcpStream,
    stop: UnixStream,
    file: Arc<File>,
    offset: u64,
    len: u64,
    prefix: Vec<u8>,
    mirror: Arc<Counters>,
    idle: Duration,
}

/// Whether the last wait ended in a wake-up that then found no room.
#[derive(Default)]
struct Waits {
    woke: bool,
    spins: u64,
}

impl Job {
    fn run(self) -> Result<u64, EngineError> {
        let t = Tally {
            global: &self.engine.inner.counters,
            local: &self.mirror,
        };
        let fd = self.sock.as_fd();
        let mut w = Waits::default();
        // The prefix goes with MSG_MORE so it shares segments with the file.
        let mut rest = &self.prefix[..];
        while !rest.is_empty() {
            match tcp::send_more(fd, rest) {
                Ok(n) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    rest = &rest[n..];
                    w.woke = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(t, &mut w)?,
                Err(e) => return Err(EngineError::Connection(e)),
            }
        }
        let end = self.offset + self.len;
        let mut pos = self.offset;
        while pos < end {
            let want = (end - pos).min(CALL_MAX) as usize;
            let mut off = pos;
            match sendfile::sendfile(fd, self.file.as_fd(), &mut off, want) {
                Ok(0) => return Err(EngineError::ShortFile { at: pos }),
                Ok(n) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    pos += n as u64;
                    w.woke = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(t, &mut w)?,
                Err(e) if sendfile::is_unsupported(&e) => {
                    pos = self.copy_rest(pos, end, t, &mut w)?;
                }
                Err(e) => return Err(EngineError::Connection(e)),
            }
        }
        Ok(pos - self.offset)
    }

    /// Sleeps until the socket has room; each return is one wake-up.
    ///
    /// Under TCP memory pressure (`tcp_mem`) `poll` reports a socket
    /// writable while `sendfile` still refuses data; a blocking `sendfile`
    /// then sleeps a random 2 jiffies to HZ/5 in the kernel
    /// (`sk_stream_wait_memory`). A wake-up that found no room pauses
    /// likewise, so this baseline does not spin where a blocking one sleeps.
    fn wait(&self, t: Tally<'_>, w: &mut Waits) -> Result<(), EngineError> {
        t.eagains(1);
        if w.woke {
            w.spins += 1;
            let ms = 2 + (w.spins.wrapping_mul(2654435761) >> 7) % PRESSURE_PAUSE_MAX_MS;
            // Sleep on the stop socket: a hang-up ends the pause early.
            let _ = self.stop.set_read_timeout(Some(Duration::from_millis(ms)));
            match (&self.stop).read(&mut [0u8; 1]) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                _ => return Err(EngineError::Cancelled),
            }
            t.wakeups(1);
        }
        w.woke = true;
        let r = sys::wait_writable_or_stop(self.sock.as_fd(), self.stop.as_fd(), Some(self.idle));
        match r.map_err(EngineError::Connection)? {
            WriteWait::Writable => {
                t.wakeups(1);
                Ok(())
            }
            WriteWait::Stopped => Err(EngineError::Cancelled),
            WriteWait::TimedOut => Err(EngineError::Idle),
        }
    }

    /// For files `sendfile` refuses: `pread` + `write` through one buffer.
    fn copy_rest(
        &self,
        mut pos: u64,
        end: u64,
        t: Tally<'_>,
        w: &mut Waits,
    ) -> Result<u64, EngineError> {
        let mut buf = vec![0u8; self.engine.config().read_buffer_size.max(4096)];
        while pos < end {
            let want = (end - pos).min(buf.len() as u64) as usize;
            let n = crate::send::read_full_at(&self.file, &mut buf[..want], pos)
                .map_err(EngineError::Disk)?;
            if n == 0 {
                return Err(EngineError::ShortFile { at: pos });
            }
            t.read_disk(n as u64);
            let mut part = &buf[..n];
            while !part.is_empty() {
                match (&self.sock).write(part) {
                    Ok(0) => return Err(EngineError::Connection(io::ErrorKind::WriteZero.into())),
                    Ok(k) => {
                        t.sent(k as u64);
                        t.send_calls(1);
                        part = &part[k..];
                        w.woke = false;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(t, w)?,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(EngineError::Connection(e)),
                }
            }
            pos += n as u64;
        }
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{pair, pattern, temp_file};
    use crate::{DataPath, EngineConfig};
    use tokio::io::AsyncReadExt;

    fn blocking_engine() -> Engine {
        Engine::new(EngineConfig {
            data_path: DataPath::Blocking,
            ..EngineConfig::default()
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_path_sends_the_exact_range() {
        let data = pattern(24 << 20);
        let file = temp_file(&data);
        let e = blocking_engine();
        let (tx, mut rx) = pair().await;
        e.prepare_socket(&tx);
        // A slow start for the reader, so the sender finds its buffer full
        // and has to sleep and wake at least once.
        let reader = tokio::spawn(async move {
            let mut first = vec![0u8; 1];
            tokio::time::sleep(Duration::from_millis(50)).await;
            rx.read_exact(&mut first).await.unwrap();
            let mut got = first;
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let c = Counters::new();
        let off = 4_321u64;
        let len = (20 << 20) as u64;
        let n = e
            .send_file(&tx, &file, off, len, b"PFX", &c, &Cancel::new())
            .await
            .unwrap();
        assert_eq!(n, len);
        drop(tx);
        let got = reader.await.unwrap();
        let want: Vec<u8> = b"PFX"
            .iter()
            .copied()
            .chain(data[off as usize..(off + len) as usize].iter().copied())
            .collect();
        // Byte-for-byte (stronger than equal digests), without printing MiBs.
        assert!(got == want, "received {} bytes, not the range", got.len());
        let s = c.snapshot();
        assert_eq!(s.bytes_sent, len + 3);
        assert!(s.wakeups >= 1, "{s:?}");
        assert_eq!(e.counters().bytes_sent, len + 3);
        assert_eq!(e.counters().wakeups, s.wakeups);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_path_counts_live_and_stops_on_cancel() {
        let e = blocking_engine();
        let file = temp_file(&pattern(64 << 20));
        // The peer never reads: the thread fills the buffers and sleeps.
        let (tx, _rx) = pair().await;
        let cancel = Cancel::new();
        let counters = Arc::new(Counters::new());
        let (k, c2, e2) = (Arc::clone(&counters), cancel.clone(), e.clone());
        let h =
            tokio::spawn(async move { e2.send_file(&tx, &file, 0, 64 << 20, &[], &k, &c2).await });
        // Live: bytes show up in the transfer's and the engine's counters
        // while the thread is still blocked.
        while counters.snapshot().eagains == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(counters.snapshot().bytes_sent > 0);
        assert_eq!(e.counters().bytes_sent, counters.snapshot().bytes_sent);
        cancel.cancel();
        assert!(matches!(h.await.unwrap(), Err(EngineError::Cancelled)));
        assert_eq!(e.counters().bytes_sent, counters.snapshot().bytes_sent);
    }

    #[tokio::test]
    async fn one_thread_serves_every_send_of_a_connection() {
        let e = blocking_engine();
        let data = pattern(1 << 20);
        let file = temp_file(&data);
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut conn = e.data_conn(tx);
        let (c, cancel) = (Counters::new(), Cancel::new());
        let mut threads = Vec::new();
        // MODE E-sized blocks, each behind a header-like prefix.
        for i in 0..8u64 {
            let n = conn
                .send_range(&file, i << 17, 1 << 17, b"", &c, &cancel)
                .await
                .unwrap();
            assert_eq!(n, 1 << 17);
            threads.push(conn.blocking_thread().expect("a sender thread"));
        }
        assert!(threads.iter().all(|t| *t == threads[0]), "{threads:?}");
        conn.shutdown().await.unwrap();
        drop(conn);
        assert_eq!(reader.await.unwrap(), data);
    }
}
