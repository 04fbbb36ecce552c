//! A data connection for its whole life: [`DataConn`].
//!
//! Everything about sending that belongs to a connection rather than to
//! one call lives here, so a transfer that sends in pieces (MODE S in
//! 64 MiB pieces, MODE E one block per send, HTTP one response per
//! request on a kept-alive connection) is treated as one sender:
//! - the data path, decided once when the connection is made (the `auto`
//!   path asks the socket for both addresses once, not per block);
//! - the fairness quantum ([`Turn`]): bytes pushed since the sender last
//!   gave up the event loop carry over from one send to the next, so a
//!   MODE E stream of 1 MiB blocks yields every `send_quantum` bytes as a
//!   long MODE S send does (each call used to start a fresh quantum, and
//!   a 1 MiB block never reached 4 MiB);
//! - the socket settings (`SocketSettings`: buffer, `TCP_NOTSENT_LOWAT`
//!   start mark, congestion control, pacing), applied once, with the size
//!   the peer asked for (SBUF) when there is one; the same sizes were set
//!   before the handshake on the listener or connecting socket
//!   (`Engine::size_before_syn`), where the window scale is decided. The
//!   rate-sized mark itself lives on the socket between sends
//!   (`refill.rs`);
//! - the connection's one `TCP_INFO` reader ([`Flow`]): the refill mark
//!   and the prefetch planner read it once per wake-up, and the planner's
//!   measured rate is carried in it from one send to the next (it used to
//!   live in a map keyed by address pair, looked up with getpeername and
//!   getsockname per send);
//! - the `blocking` baseline's thread, made at the first send and reused
//!   for every later one (it was a thread per send: per MODE E block).
//!
//! - dynamic right-sizing of the send buffer ([`DrsSocket`], `--drs`),
//!   sampled while a send runs by a hook kept apart from the send paths
//!   (`drs_during`; it reads `TCP_INFO` on its own schedule, since the
//!   send borrows the connection's [`Flow`]).
//!
//! Still per send: the planner's connection id (each send opens a range
//! with the hub; the rate it starts from comes from the flow). Later here:
//! pacing classes (Cue), the TLS transport.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use sluice_platform::sockbuf::Dir;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::flow::Flow;
use crate::sched::cue::CueSpec;
use crate::send::{peer_is_local, Turn};
use crate::send_blocking::SenderThread;
use crate::{Cancel, Counters, DataPath, DrsSocket, Engine, EngineError, SocketSettings};

/// One data connection (an FTP data socket or an HTTP connection) and the
/// sending state that lives as long as it. Made by [`Engine::data_conn`].
#[derive(Debug)]
pub struct DataConn {
    // First: dropped before the socket, so the connection leaves Cue's
    // scheduler (which may set the socket's pacing) before it is closed.
    link: Link,
    engine: Engine,
    stream: TcpStream,
    /// Dynamic right-sizing of the send buffer (`--drs on`), sampled
    /// while a send runs (see [`DataConn::send_range`]).
    drs: Option<DrsSocket>,
}

/// What a connection keeps from one send to the next.
#[derive(Debug)]
pub(crate) struct Link {
    /// The peer is on this host (loopback or one of our addresses): the
    /// `auto` path copies for it (see `DataPath::Auto`); only asked under
    /// `auto`.
    pub(crate) local: bool,
    /// The fairness quantum so far.
    pub(crate) turn: Turn,
    /// The one `TCP_INFO` reader of this connection (shared with the
    /// DRS sampler, `drs_during`, while a send borrows the link).
    pub(crate) flow: Arc<Flow>,
    /// The `blocking` baseline's thread, once it has sent.
    pub(crate) thread: Option<SenderThread>,
}

impl Link {
    /// A new connection's state: its peer judged once.
    pub(crate) fn new(engine: &Engine, stream: &TcpStream, spec: Option<CueSpec>) -> Link {
        Link {
            local: engine.config().data_path == DataPath::Auto && peer_is_local(stream),
            turn: Turn::with_cue(engine.config().send_quantum, engine.cue_join(stream, spec)),
            flow: Arc::new(Flow::new()),
            thread: None,
        }
    }
}

impl Engine {
    /// Takes `stream` as a data connection: applies the engine's socket
    /// settings once and decides what lasts for the connection's life.
    pub fn data_conn(&self, stream: TcpStream) -> DataConn {
        self.data_conn_in(stream, None, None)
    }

    /// [`Engine::data_conn`] with the buffer size the peer asked for
    /// (GridFTP `SBUF`; the same size should have been given to
    /// [`Engine::size_before_syn`] for the socket or its listener) and the
    /// connection's Cue class and user (`--cue`; `None` is the default
    /// class with the engine's per-transfer cap).
    pub fn data_conn_in(
        &self,
        stream: TcpStream,
        asked: Option<usize>,
        spec: Option<CueSpec>,
    ) -> DataConn {
        let set = self.prepare_socket_sized(&stream, asked);
        let link = Link::new(self, &stream, spec);
        if let Some(m) = set.notsent_lowat {
            link.flow.mark_was_set(m);
        }
        let drs = self.drs_for(&set, asked.is_some()).map(|d| {
            d.with_mark_cap(link.flow.mark_cap.clone())
                .with_mark_now(link.flow.mark_now.clone())
        });
        DataConn {
            engine: self.clone(),
            link,
            stream,
            drs,
        }
    }

    /// The send side's right-sizing of a new data connection, when on.
    /// A buffer the configuration or the peer fixed (`--send-buffer N`,
    /// SBUF; read back after `prepare_socket`) is its floor; the default
    /// `send_buffer_max` is one while the path is short: measured cheaper
    /// per GiB on fast local paths, and DRS is there for the paths that
    /// need more (or less: `drs::FIXED_FLOOR_BDPS`). `--send-buffer auto`
    /// leaves it autotuning's floor alone.
    /// `set`: what `prepare_socket` left on the socket (its buffer was
    /// read back there; a buffer the engine set stays as set, so DRS need
    /// not read it again before it sets one itself).
    fn drs_for(&self, set: &SocketSettings, asked: bool) -> Option<DrsSocket> {
        let cfg = self.config();
        if !cfg.drs {
            return None;
        }
        let now = || set.send_buffer as u64;
        // Asked for (SBUF, `--send-buffer N`): a floor everywhere;
        // `send_buffer_max`'s: while the path is short.
        let (floor, short) = if asked || cfg.send_buffer.is_some() {
            (now(), 0)
        } else if cfg.send_buffer_max {
            (0, now())
        } else {
            (0, 0)
        };
        DrsSocket::new(Dir::Send).map(|d| {
            let d = d.with_floor(floor).with_short_path_floor(short);
            if set.send_buffer_set {
                d.with_buffer_known(set.send_buffer as u64)
            } else {
                d
            }
        })
    }
}

/// A data connection as a sender takes it: a [`DataConn`] made (and
/// sized) by its owner, or a bare socket that gets the engine's defaults.
pub trait IntoDataConn {
    /// The connection as a [`DataConn`] of `engine`.
    fn into_data_conn(self, engine: &Engine) -> DataConn;
}

impl IntoDataConn for DataConn {
    fn into_data_conn(self, _: &Engine) -> DataConn {
        self
    }
}

impl IntoDataConn for TcpStream {
    fn into_data_conn(self, engine: &Engine) -> DataConn {
        engine.data_conn(self)
    }
}

impl DataConn {
    /// Sends `prefix` (e.g. a MODE E header or HTTP head; may be empty)
    /// and then `len` bytes of `file` from `offset`; returns the file
    /// bytes sent (`len` on success).
    // The arguments are all distinct roles; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub async fn send_range(
        &mut self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        // Pinned here, once: handing the future on by value would copy it
        // (it holds the whole send path's state) on every response.
        let flow = Arc::clone(&self.link.flow);
        let send = std::pin::pin!(self.engine.send_range_on(
            &self.stream,
            &mut self.link,
            file,
            offset,
            len,
            prefix,
            counters,
            cancel,
        ));
        match self.drs.as_mut() {
            None => send.await,
            Some(drs) => drs_during(drs, &self.stream, &flow, send).await,
        }
    }

    /// Sends `prefix` (a MODE E header) and `len` bytes of a shared
    /// block's piece from file offset `offset` (within the piece; the
    /// whole piece is `piece.offset, piece.len`) in full (`--sharing
    /// circus`, `sharing.rs`); returns the file bytes sent.
    pub async fn send_piece(
        &mut self,
        prefix: &[u8],
        piece: &crate::SharedPiece,
        offset: u64,
        len: u64,
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let flow = Arc::clone(&self.link.flow);
        let send = std::pin::pin!(self.engine.send_piece_on(
            &self.stream,
            &mut self.link,
            prefix,
            (piece, offset, len),
            counters,
            cancel,
        ));
        match self.drs.as_mut() {
            None => send.await,
            Some(drs) => drs_during(drs, &self.stream, &flow, send).await,
        }
    }

    /// Sends `bytes` in full (framing with no payload: MODE E EOD/EOF).
    pub async fn send_bytes(
        &mut self,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        self.engine
            .send_bytes(&self.stream, bytes, counters, cancel)
            .await
    }

    /// Half-closes the sending side once queued data is out (MODE S end
    /// of data, HTTP close).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.stream.shutdown().await
    }

    /// The engine this connection sends for (its shared readers).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The socket, for reading (HTTP requests, MODE E uploads).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The socket, mutably (tokio's read helpers take `&mut`).
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The socket back (a MODE E connection kept for the next transfer).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// The `blocking` baseline's thread, if it has sent (tests).
    #[cfg(test)]
    pub(crate) fn blocking_thread(&self) -> Option<std::thread::ThreadId> {
        self.link.thread.as_ref().map(SenderThread::id)
    }

    /// The send buffer's right-sizing, when `--drs on`.
    pub fn drs(&self) -> Option<&DrsSocket> {
        self.drs.as_ref()
    }

    /// Whether the peer is on this host (decided when the connection was
    /// made; only asked under the `auto` data path).
    pub fn local_peer(&self) -> bool {
        self.link.local
    }
}

/// DRS hook: runs `send` and, while it runs, samples the socket whenever
/// the estimator wants a sample (about once a round trip while the buffer
/// changes, a few per second once steady) and the send is woken anyway.
/// No timer of its own: a buffer that limits the sender frees room as ACKs
/// come, which wakes the send (and so samples it) about once per refill; a
/// sender that is not woken is limited by something else (the receiver,
/// the disk), where a sample would change nothing. A timer per connection
/// cost 2.5 wake-ups a second each for 1000 slow clients (lab
/// send-wakeups: ~20,000 context switches per GiB, 4x nginx's).
/// The reading is the connection's `Flow`'s: a wake-up where both DRS and
/// the refill's rate want one (each wake-up of a slow reader) reads
/// `TCP_INFO` once.
async fn drs_during<F: std::future::Future>(
    drs: &mut DrsSocket,
    conn: &TcpStream,
    flow: &Flow,
    mut send: std::pin::Pin<&mut F>,
) -> F::Output {
    std::future::poll_fn(|cx| {
        let now = Instant::now();
        if drs.due(now) {
            drs.sample_with(conn.as_fd(), now, flow.info(conn).map(|(_, i)| i));
        }
        send.as_mut().poll(cx)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{pair, pattern, temp_file};
    use crate::EngineConfig;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_quantum_carries_over_from_one_block_to_the_next() {
        // MODE E-sized sends (256 KiB blocks) with a 1 MiB quantum: each
        // call alone never reaches it, the connection does every 4 blocks.
        let e = Engine::new(EngineConfig {
            data_path: DataPath::Copy,
            send_quantum: 1 << 20,
            ..EngineConfig::default()
        });
        let data = pattern(4 << 20);
        let file = temp_file(&data);
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut conn = e.data_conn(tx);
        let c = Counters::new();
        let cancel = Cancel::new();
        for i in 0..16u64 {
            let n = conn
                .send_range(&file, i << 18, 1 << 18, b"", &c, &cancel)
                .await
                .unwrap();
            assert_eq!(n, 1 << 18);
        }
        conn.shutdown().await.unwrap();
        drop(conn);
        assert_eq!(reader.await.unwrap(), data);
        let s = c.snapshot();
        // 4 MiB in 1 MiB quanta: a yield every quantum that did not end
        // in a wait for room (a wait ends a turn too).
        assert!(s.yields >= 1, "yields {} eagains {}", s.yields, s.eagains);
        assert!(
            s.yields + s.eagains >= 3,
            "yields {} eagains {}",
            s.yields,
            s.eagains
        );

        // The same blocks through the stateless call never yield.
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        e.prepare_socket(&tx);
        let c = Counters::new();
        for i in 0..16u64 {
            e.send_file(&tx, &file, i << 18, 1 << 18, b"", &c, &cancel)
                .await
                .unwrap();
        }
        drop(tx);
        reader.await.unwrap();
        assert_eq!(c.snapshot().yields, 0);
    }

    #[tokio::test]
    async fn drs_samples_the_socket_while_it_sends_and_the_data_is_intact() {
        let e = Engine::new(EngineConfig {
            drs: true,
            ..EngineConfig::default()
        });
        let data = pattern(8 << 20);
        let file = temp_file(&data);
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut conn = e.data_conn(tx);
        let (c, cancel) = (Counters::new(), Cancel::new());
        for i in 0..8u64 {
            conn.send_range(&file, i << 20, 1 << 20, b"", &c, &cancel)
                .await
                .unwrap();
        }
        assert!(conn.drs().unwrap().samples() >= 1);
        conn.shutdown().await.unwrap();
        drop(conn);
        assert_eq!(reader.await.unwrap(), data);
        let off = Engine::new(EngineConfig::default());
        let (tx, _rx) = pair().await;
        assert_eq!(
            off.data_conn(tx).drs().is_some(),
            EngineConfig::default().drs
        );
    }

    #[tokio::test]
    async fn the_peer_is_judged_once_and_only_under_auto() {
        let auto = Engine::new(EngineConfig::default());
        let (tx, _rx) = pair().await;
        assert!(auto.data_conn(tx).local_peer(), "loopback is local");
        let copy = Engine::new(EngineConfig {
            data_path: DataPath::Sendfile,
            ..EngineConfig::default()
        });
        let (tx, _rx) = pair().await;
        assert!(!copy.data_conn(tx).local_peer(), "not asked outside auto");
    }
}
