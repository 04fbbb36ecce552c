//! The drain thread: reads every data connection of a download as soon as
//! it is readable and hands the bytes on, so the kernel's receive queues
//! stay short even when the disk is slow (see the "Linux TCP receiver
//! bottleneck" paper: a receiver that does not drain its socket delays ACKs
//! and makes the sender back off).
//!
//! One thread, `poll(2)` over the listener (MODE E: the server connects to
//! us, up to its parallelism) and the streams. Payload is read straight
//! into the buffer that goes to the writer; only MODE E headers go through
//! a 17-byte scratch buffer into `sluice_ftp::mode_e::StreamDecoder`. The
//! only time this thread waits on anything but the network is when the
//! memory cap between it and the writer is reached (a receive stall).

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use sluice_engine::verdict::RecvTally;
use sluice_engine::DrsSocket;
use sluice_ftp::mode_e::StreamDecoder;
use sluice_platform::sockbuf::{self, Dir};
use sluice_platform::tcp;

use crate::error::{ClientError, Result};
use crate::stats::Stats;
use crate::writer::WriterInput;

/// Largest buffer handed to the writer in one block. Small enough that the
/// bytes are still in the CPU cache when the writer copies them into the
/// page cache: on the lab machine (ext4, 2 GiB from vsftpd on loopback)
/// 128 KiB ran at 820-1020 MB/s where 1 MiB ran at 230-390 MB/s, and
/// 64 KiB was no better than 128 KiB.
const CHUNK: usize = 128 << 10;

/// Most bytes read from one stream per poll round, so one fast stream
/// cannot starve the others (or the listener) of attention.
const ROUND_BYTES: usize = 8 << 20;

/// How long one `poll` waits before the thread checks cancel and idle time.
const POLL_TICK: u16 = 200;

/// Connects a socket a drain will read (an FTP data connection in
/// passive mode, an HTTP download's connection). With `drs` its receive
/// buffer is set large before the SYN, so the window scale we offer can
/// cover any buffer DRS may set later, and brought down at once
/// (`DrsSocket::after_connect`): a window grown on the big buffer cannot
/// be taken back later (the kernel never shrinks an offered window; data
/// beyond a shrunk buffer is dropped and retransmitted, measured: 127
/// retransmits in 32 MiB). TCP_NODELAY is set either way.
pub fn connect_sized(to: SocketAddr, timeout: Duration, drs: bool) -> std::io::Result<TcpStream> {
    let s = match drs.then(|| DrsSocket::new(Dir::Recv)).flatten() {
        Some(mut d) => {
            let (s, _) =
                sockbuf::connect_with_recv_buffer(to, timeout, d.before_connect(), d.limits())?;
            d.after_connect(s.as_fd());
            s
        }
        None => TcpStream::connect_timeout(&to, timeout)?,
    };
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// How data on the connections is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// MODE S: one stream, bytes in order from `base`, ends at EOF.
    Stream {
        /// File offset of the first byte (REST).
        base: u64,
    },
    /// Like `Stream`, but the body ends at file offset `end` (an HTTP
    /// body of known length): the stream is done there even if the peer
    /// keeps the connection open, and bytes past it are never read, so a
    /// server that sends more than it announced cannot write over a
    /// neighbouring range.
    Bounded {
        /// File offset of the first byte.
        base: u64,
        /// One past the last byte of the body.
        end: u64,
    },
    /// MODE E: blocks with offsets over any number of streams, ends when
    /// the EOF block's count of EODs has been seen. Block offsets count
    /// from `base` (ERET P sends offsets relative to its start).
    Extended {
        /// Added to every block offset.
        base: u64,
    },
}

/// Where the data connections come from.
pub enum Source {
    /// Already connected (passive mode, HTTP), in clear or TLS.
    Connected(crate::tls::DataSock),
    /// Accept from this listener (active mode), at most `max` connections.
    Listen {
        /// Listener whose address went out in PORT/EPRT.
        listener: TcpListener,
        /// Most connections to accept.
        max: usize,
        /// Only connections from this address are taken: anyone who can
        /// reach the listener could otherwise inject data (the FTP
        /// data-port theft vsftpd guards against on its side).
        from: IpAddr,
        /// PROT P: each accepted connection is TLS, we the TLS client
        /// (RFC 4217 section 7) checking this server name.
        tls_host: Option<String>,
    },
}

/// A bounded stream's range that another thread can cut short while it is
/// read (automatic streams split a range to give a new connection its
/// second half): the drain stops at `end` as it is when it gets there, and
/// publishes how far it got.
#[derive(Debug)]
pub struct Span {
    end: AtomicU64,
    next: AtomicU64,
}

impl Span {
    /// A span from `start` to `end` (one past the last byte).
    pub fn new(start: u64, end: u64) -> Span {
        Span {
            end: AtomicU64::new(end),
            next: AtomicU64::new(start),
        }
    }

    /// One past the last byte the drain will read.
    pub fn end(&self) -> u64 {
        self.end.load(Relaxed)
    }

    /// The next byte the drain reads (every byte before it has arrived).
    pub fn next(&self) -> u64 {
        self.next.load(Relaxed)
    }

    /// The drain has read up to `at` (or the caller handed that much on).
    pub fn reached(&self, at: u64) {
        self.next.fetch_max(at, Relaxed);
    }

    /// Moves the end down to `at` (never up, never below what arrived);
    /// returns the end now in force. The drain may have read a little past
    /// `at` by the time it sees it: those bytes are right (they are the
    /// response to its own request), and [`Span::next`] says where it
    /// stopped.
    pub fn cut(&self, at: u64) -> u64 {
        let at = at.max(self.next());
        self.end.fetch_min(at, Relaxed).min(at)
    }
}

/// Settings of one drain.
pub struct DrainConfig {
    /// Framing of the data.
    pub framing: Framing,
    /// Give up after this long without a byte or a connection.
    pub idle_timeout: Duration,
    /// Try to raise this thread's scheduling priority.
    pub raise_priority: bool,
    /// Right-size each connection's receive buffer (`--drs on`).
    pub drs: bool,
    /// `Framing::Bounded` only: an end that may move down while the drain
    /// runs, and where it got to.
    pub span: Option<Arc<Span>>,
}

/// What the drain saw.
#[derive(Debug, Default, Clone)]
pub struct DrainReport {
    /// Payload bytes read.
    pub bytes: u64,
    /// Data connections used.
    pub streams: u64,
    /// EODs seen (MODE E).
    pub eods: u64,
}

/// A running drain thread.
pub struct Drain {
    join: Option<JoinHandle<Result<DrainReport>>>,
    cancel: Arc<AtomicBool>,
}

impl Drain {
    /// Starts draining `source` into `out`.
    pub fn start(
        cfg: DrainConfig,
        source: Source,
        out: WriterInput,
        recycled: mpsc::Receiver<Vec<u8>>,
        stats: Arc<Stats>,
    ) -> Result<Drain> {
        let cancel = Arc::new(AtomicBool::new(false));
        let c = cancel.clone();
        let join = std::thread::Builder::new()
            .name("sluice-drain".into())
            .spawn(move || {
                if cfg.raise_priority {
                    match crate::priority::raise_current_thread() {
                        Ok(()) => stats.drain_priority.store(1, Relaxed),
                        Err(e) => crate::priority::note_refused(&e),
                    }
                }
                let mut d = DrainLoop::new(cfg, source, out, recycled, &stats, &c);
                d.run()
            })
            .map_err(|e| ClientError::local("start drain thread", e))?;
        Ok(Drain {
            join: Some(join),
            cancel,
        })
    }

    /// Whether the thread has stopped (finished or failed).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Asks the thread to stop at its next tick.
    pub fn cancel(&self) {
        self.cancel.store(true, Relaxed);
    }

    /// Waits for the thread.
    pub fn join(mut self) -> Result<DrainReport> {
        match self.join.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err(ClientError::Bug("drain thread panicked".into())),
        }
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.cancel.store(true, Relaxed);
    }
}

/// One data connection being read.
struct Stream {
    sock: crate::tls::DataSock,
    framer: Framer,
    chunk: Option<Chunk>,
    ended: bool,
    watch: Watch,
}

enum Framer {
    S { next: u64, end: Option<u64> },
    E(Box<StreamDecoder>, u64),
}

/// A buffer being filled for the writer.
struct Chunk {
    start: u64,
    buf: Vec<u8>,
    filled: usize,
}

struct DrainLoop<'a> {
    cfg: DrainConfig,
    listener: Option<(TcpListener, usize, IpAddr)>,
    /// Server name for TLS on accepted connections (PROT P).
    accept_tls: Option<String>,
    streams: Vec<Stream>,
    accepted: usize,
    out: WriterInput,
    recycled: mpsc::Receiver<Vec<u8>>,
    stats: &'a Stats,
    cancel: &'a AtomicBool,
    eof_count: Option<u64>,
    report: DrainReport,
}

/// What reading a stream came to.
enum Turn {
    /// Nothing more to read now.
    Idle,
    /// This stream is done (EOF in MODE S, EOD in MODE E).
    Ended,
}

impl<'a> DrainLoop<'a> {
    fn new(
        cfg: DrainConfig,
        source: Source,
        out: WriterInput,
        recycled: mpsc::Receiver<Vec<u8>>,
        stats: &'a Stats,
        cancel: &'a AtomicBool,
    ) -> Self {
        let mut d = DrainLoop {
            cfg,
            listener: None,
            accept_tls: None,
            streams: Vec::new(),
            accepted: 0,
            out,
            recycled,
            stats,
            cancel,
            eof_count: None,
            report: DrainReport::default(),
        };
        match source {
            Source::Connected(s) => d.add_stream(s),
            Source::Listen {
                listener,
                max,
                from,
                tls_host,
            } => {
                let _ = listener.set_nonblocking(true);
                d.listener = Some((listener, max, from.to_canonical()));
                d.accept_tls = tls_host;
            }
        }
        d
    }

    fn add_stream(&mut self, sock: crate::tls::DataSock) {
        let _ = sock.tcp().set_nonblocking(true);
        let (framer, ended) = match self.cfg.framing {
            Framing::Stream { base } => (
                Framer::S {
                    next: base,
                    end: None,
                },
                false,
            ),
            // An empty body (or one that came whole with the head) is
            // done before a byte is read: do not wait for the socket.
            Framing::Bounded { base, end } => (
                Framer::S {
                    next: base,
                    end: Some(end),
                },
                base >= end || self.cfg.span.as_ref().is_some_and(|s| base >= s.end()),
            ),
            Framing::Extended { base } => (Framer::E(Box::default(), base), false),
        };
        let watch = Watch::new(&sock, self.cfg.drs, self.stats);
        self.streams.push(Stream {
            sock,
            framer,
            chunk: None,
            ended,
            watch,
        });
        self.accepted += 1;
        self.report.streams += 1;
        Stats::add(&self.stats.streams, 1);
        let open = self.streams.iter().filter(|s| !s.ended).count() as u64;
        self.stats.streams_peak.fetch_max(open, Relaxed);
    }

    fn done(&self) -> bool {
        match self.cfg.framing {
            Framing::Stream { .. } | Framing::Bounded { .. } => {
                self.accepted > 0 && self.streams.iter().all(|s| s.ended)
            }
            Framing::Extended { .. } => self.eof_count.is_some_and(|n| self.report.eods >= n),
        }
    }

    fn run(&mut self) -> Result<DrainReport> {
        // Time this thread was ready to read but had no CPU: the receive
        // stall a busy machine causes (receiver-bottleneck paper).
        let delay = sluice_platform::thread::current_thread_run_delay;
        let waited0 = delay().ok();
        let r = self.run_loop();
        if let (Some(a), Ok(b)) = (waited0, delay()) {
            Stats::add(
                &self.stats.drain_run_delay_micros,
                b.saturating_sub(a).as_micros() as u64,
            );
        }
        for st in &mut self.streams {
            st.watch.close(&st.sock, self.stats);
        }
        if r.is_err() {
            // Hand on what was read before the failure, so the `.part`
            // keeps it for `--continue`.
            for i in 0..self.streams.len() {
                let _ = self.flush(i);
            }
        }
        r
    }

    fn run_loop(&mut self) -> Result<DrainReport> {
        let mut last_progress = Instant::now();
        while !self.done() {
            self.check_eods_possible()?;
            if self.cancel.load(Relaxed) {
                return Err(ClientError::net(
                    "data transfer",
                    std::io::Error::new(ErrorKind::Interrupted, "cancelled"),
                ));
            }
            let (listen_ready, ready) = self.wait()?;
            let mut progressed = false;
            if listen_ready {
                progressed |= self.accept_all()?;
            }
            for i in ready {
                self.note_queue(i);
                let before = self.report.bytes;
                match self.service(i)? {
                    Turn::Idle => {}
                    Turn::Ended => {
                        self.streams[i].ended = true;
                        let st = &mut self.streams[i];
                        st.watch.close(&st.sock, self.stats);
                        self.flush(i)?;
                        progressed = true;
                    }
                }
                progressed |= self.report.bytes != before;
            }
            let now = Instant::now();
            for st in self.streams.iter_mut().filter(|s| !s.ended) {
                st.watch.tick(&st.sock, now, self.stats);
            }
            if progressed {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > self.cfg.idle_timeout {
                return Err(ClientError::net(
                    "data transfer",
                    std::io::Error::new(ErrorKind::TimedOut, "no data within the timeout"),
                ));
            }
        }
        for i in 0..self.streams.len() {
            self.flush(i)?;
        }
        Ok(self.report.clone())
    }

    /// What waited in stream `i`'s receive queue when the drain got to
    /// it: the most ever, and wakes that found half the buffer or more
    /// unread (the window was closing for lack of reading).
    fn note_queue(&self, i: usize) {
        let st = &self.streams[i];
        if let Ok(q) = tcp::inq(st.sock.as_fd()) {
            let q = u64::from(q);
            self.stats.unread_peak.fetch_max(q, Relaxed);
            if st.watch.rcvbuf > 0 && q * 2 >= st.watch.rcvbuf {
                Stats::add(&self.stats.unread_full_wakes, 1);
            }
        }
    }

    /// MODE E: fails when the EOF block asks for more EODs than can still
    /// come (every stream we may accept has ended), instead of waiting for
    /// the idle timeout on connections that will never be made.
    fn check_eods_possible(&self) -> Result<()> {
        let Some(want) = self.eof_count else {
            return Ok(());
        };
        let max = match &self.listener {
            Some((_, max, _)) => *max as u64,
            None => self.accepted as u64,
        };
        let open = self.streams.iter().filter(|s| !s.ended).count() as u64;
        let can_come = open + max.saturating_sub(self.accepted as u64);
        if self.report.eods + can_come < want {
            return Err(ClientError::Protocol(format!(
                "MODE E EOF block announces {want} data connections, but at most {} can end \
                 (we accept {max}, {} ended)",
                self.report.eods + can_come,
                self.report.eods
            )));
        }
        Ok(())
    }

    /// Polls the listener and live streams; returns what is readable.
    fn wait(&self) -> Result<(bool, Vec<usize>)> {
        let accepting = self
            .listener
            .as_ref()
            .filter(|(_, max, _)| self.accepted < *max)
            .map(|(l, _, _)| l);
        let live: Vec<usize> = (0..self.streams.len())
            .filter(|&i| !self.streams[i].ended)
            .collect();
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(live.len() + 1);
        if let Some(l) = accepting {
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
        }
        for &i in &live {
            fds.push(PollFd::new(self.streams[i].sock.as_fd(), PollFlags::POLLIN));
        }
        // TLS streams holding decrypted bytes are ready whatever the
        // socket says: poll only for the others, without waiting.
        let buffered: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| self.streams[i].sock.has_buffered())
            .collect();
        let tick = if buffered.is_empty() {
            PollTimeout::from(POLL_TICK)
        } else {
            PollTimeout::ZERO
        };
        match nix::poll::poll(&mut fds, tick) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok((false, Vec::new())),
            Err(e) => return Err(ClientError::net("poll data connections", e.into())),
        }
        let hit = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
        let mut it = fds.iter();
        let listen_ready = accepting.is_some() && it.next().is_some_and(hit);
        let ready = live
            .into_iter()
            .zip(it)
            .filter(|(i, fd)| hit(fd) || buffered.contains(i))
            .map(|(i, _)| i)
            .collect();
        Ok((listen_ready, ready))
    }

    fn accept_all(&mut self) -> Result<bool> {
        let mut any = false;
        while let Some((l, max, from)) = &self.listener {
            if self.accepted >= *max {
                break;
            }
            match l.accept() {
                Ok((_, peer)) if peer.ip().to_canonical() != *from => {
                    tracing::warn!("refused a data connection from {peer} (not the server)");
                    Stats::add(&self.stats.foreign_connections, 1);
                }
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    let sock = match &self.accept_tls {
                        Some(host) => crate::tls::DataSock::tls(s, host, None)?,
                        None => s.into(),
                    };
                    self.add_stream(sock);
                    any = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ClientError::net("accept data connection", e)),
            }
        }
        Ok(any)
    }
}

/// Reading one stream: framing, payload into the writer's chunks.
mod read;
mod watch;
use watch::Watch;
#[cfg(test)]
mod tests;
