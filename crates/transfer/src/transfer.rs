//! [`Transfer`]: one transfer of either door, the object that holds what
//! every shape of transfer shares: its [`Progress`] (bytes, ranges, the
//! engine counters), its [`Cancel`] token and its stall policy. The FTP
//! door's downloads, uploads and listings and the HTTP door's bodies
//! (one range, a whole file, multipart ranges, listing pieces) all go
//! through one, and all fail with a [`TransferError`] typed by whose
//! fault it is; each door maps that to its own answer.
//!
//! Shapes and their framing:
//! - [`Transfer::send`] / [`Transfer::send_tls`]: a [`SendSpec`] over
//!   connections the transfer owns and closes (FTP RETR/ERET: MODE S raw,
//!   MODE E blocks over 1..n streams); [`Transfer::send_keeping`] hands
//!   MODE E connections back open after their EOD.
//! - [`Transfer::send_body`]: a head and [`Part`]s over a borrowed
//!   connection that outlives the transfer (an HTTP response on a
//!   kept-alive connection: raw bytes, multipart parts are `Bytes` parts
//!   between `File` parts).
//! - [`Transfer::send_piece`]: bytes made here (a listing batch), raw or
//!   as one MODE E block.
//! - [`Transfer::receive_stream`], [`Transfer::receive_stream_tls`],
//!   [`Transfer::receive_mode_e`]: uploads.

use std::borrow::Cow;
use std::fs::File;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Cancel, Engine, IntoDataConn, Readers, TlsConn};
use sluice_ftp::mode_e::{BlockHeader, HEADER_LEN};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::send_shared::send_in_order;
use crate::{stall, Conn, Mode, Progress, ReceiveSummary, SendSpec, TransferError};

/// One piece of a body sent with [`Transfer::send_body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// Bytes made here (a multipart part's header, a listing).
    Bytes(&'a [u8]),
    /// `len` bytes of the transfer's file from `offset`.
    File {
        /// First byte.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
}

/// How [`Transfer::send_piece`] frames a piece of made-here bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// As they are (MODE S, HTTP).
    Raw,
    /// As one MODE E data block whose header carries `offset`.
    Block {
        /// The header's offset field.
        offset: u64,
    },
}

/// MODE E bytes for one write: a data block (`bytes` at `offset`) and/or
/// an ending header.
fn framed(block: Option<(&[u8], u64)>, end: Option<BlockHeader>) -> Vec<u8> {
    let len = block.map_or(0, |(b, _)| b.len() + HEADER_LEN) + end.map_or(0, |_| HEADER_LEN);
    let mut out = Vec::with_capacity(len);
    if let Some((b, offset)) = block {
        out.extend_from_slice(&BlockHeader::data(offset, b.len() as u64).encode());
        out.extend_from_slice(b);
    }
    if let Some(h) = end {
        out.extend_from_slice(&h.encode());
    }
    out
}

/// One transfer: progress, cancellation and stall policy; see the module
/// docs.
#[derive(Debug, Clone)]
pub struct Transfer {
    progress: Arc<Progress>,
    cancel: Cancel,
    stall: Option<Duration>,
}

impl Transfer {
    /// A transfer reporting into `progress`, stopped by `cancel`, without
    /// a stall bound of its own (the engine's `idle_timeout` still holds).
    pub fn new(progress: Arc<Progress>, cancel: Cancel) -> Transfer {
        Transfer {
            progress,
            cancel,
            stall: None,
        }
    }

    /// The same, failing with [`TransferError::Stalled`] (and cancelled)
    /// when the peer takes nothing for `timeout` during one send call.
    pub fn stall_after(mut self, timeout: Duration) -> Transfer {
        self.stall = Some(timeout);
        self
    }

    /// The transfer's progress (bytes, ranges, engine counters).
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// The transfer's cancellation token.
    pub fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Runs `work` under the stall policy; a cancelled token reports
    /// [`TransferError::Cancelled`] whatever the work said.
    async fn run<T>(
        &self,
        work: impl Future<Output = Result<T, TransferError>>,
    ) -> Result<T, TransferError> {
        // Pinned here and handed on by reference: the work's future holds
        // the engine's send future inline, and moving it by value into
        // each layer cost a memcpy per response (perf: ~3 % of a 64 KiB
        // HTTP request). Callers pin theirs too (`tokio::pin!`).
        tokio::pin!(work);
        let r = match self.stall {
            Some(t) => stall::watch(work.as_mut(), self.progress.counters(), t, &self.cancel).await,
            None => work.await,
        };
        match r {
            Err(TransferError::Stalled) => Err(TransferError::Stalled),
            Err(_) if self.cancel.is_cancelled() => Err(TransferError::Cancelled),
            r => r,
        }
    }

    /// Sends `head` and then `parts` over `conn` (which stays open);
    /// returns the body bytes sent (`head` not counted). Made-here bytes
    /// go out as the prefix of the next file range, so each reaches the
    /// kernel in the same call as the file bytes that follow it.
    pub async fn send_body<'a>(
        &self,
        conn: &mut Conn,
        file: Option<&Arc<File>>,
        head: &[u8],
        parts: impl IntoIterator<Item = Part<'a>>,
    ) -> Result<u64, TransferError> {
        let parts: Vec<Part<'a>> = parts.into_iter().collect();
        // In-order sharing (clear connections): while another reader of the
        // file is about, its selector hands this body its file parts' blocks.
        let readers = match (&*conn, file) {
            (Conn::Plain(dc), Some(f)) => {
                let ranges: Vec<(u64, u64)> = parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::File { offset, len } => Some((*offset, *len)),
                        Part::Bytes(_) => None,
                    })
                    .collect();
                let engine = dc.engine().clone();
                engine
                    .join_readers_in_order(f, &ranges)
                    .unwrap_or(Readers::Unshared)
            }
            _ => Readers::Unshared,
        };
        let work = async {
            let (counters, cancel) = (self.progress.counters(), &self.cancel);
            let shared = match &readers {
                Readers::Shared(read) => Some(read),
                _ => None,
            };
            // Borrowed while it is only the head: the common answer (head
            // and one file range) copies nothing.
            let mut pending: Cow<'_, [u8]> = Cow::Borrowed(head);
            let mut body = 0u64;
            for part in parts {
                match part {
                    Part::Bytes(b) => {
                        pending.to_mut().extend_from_slice(b);
                        body += b.len() as u64;
                    }
                    Part::File { offset, len } => {
                        let f = file.ok_or(TransferError::Setup("file part without a file"))?;
                        let n = match (shared, &mut *conn) {
                            (Some(read), Conn::Plain(dc)) => {
                                send_in_order(dc, read, &pending, len, counters, cancel, |n| {
                                    self.progress.add_bytes(n)
                                })
                                .await?
                            }
                            _ => {
                                let n = conn
                                    .send_range(f, offset, len, &pending, counters, cancel)
                                    .await?;
                                self.progress.add_bytes(n);
                                n
                            }
                        };
                        body += n;
                        pending = Cow::Owned(Vec::new());
                    }
                }
            }
            if !pending.is_empty() {
                conn.send_bytes(&pending, counters, cancel).await?;
            }
            Ok(body)
        };
        tokio::pin!(work);
        self.run(work).await
    }

    /// Sends made-here bytes (a listing batch) over `conn`, framed as
    /// `framing` says: a MODE E header and its bytes in one write (each
    /// write is a segment on a TCP_NODELAY socket, and a new connection's
    /// initial window counts segments, not bytes).
    pub async fn send_piece(
        &self,
        conn: &mut Conn,
        bytes: &[u8],
        framing: Framing,
    ) -> Result<(), TransferError> {
        let work = async {
            let (counters, cancel) = (self.progress.counters(), &self.cancel);
            match framing {
                Framing::Block { offset } => {
                    let block = framed(Some((bytes, offset)), None);
                    conn.send_bytes(&block, counters, cancel).await?;
                }
                Framing::Raw => conn.send_bytes(bytes, counters, cancel).await?,
            }
            self.progress.add_bytes(bytes.len() as u64);
            Ok(())
        };
        tokio::pin!(work);
        self.run(work).await
    }

    /// Ends a MODE E stream of made-here blocks: the `last` block (bytes
    /// and offset) if any and the EOD (with EOF = `eof` streams on the
    /// first) in one write, then closes the sending side.
    pub async fn end_blocks(
        &self,
        conn: &mut Conn,
        last: Option<(&[u8], u64)>,
        eof: Option<u64>,
    ) -> Result<(), TransferError> {
        self.end_blocks_open_or_closed(conn, last, eof, true)
            .await?;
        let _ = conn.shutdown().await;
        Ok(())
    }

    /// Ends a MODE E stream of made-here blocks with the `last` block and
    /// EOD (and EOF = `eof` streams on the first), in one write, but
    /// without CLOSE, and leaves it open for the session's next transfer
    /// on the same data channel. (A listing's data, EOD and the next
    /// listing were five or more segments for a few KiB: eleven small
    /// listings pipelined on a new connection met its initial window of
    /// ten segments and waited a round trip, traced on linkem.)
    pub async fn end_blocks_open(
        &self,
        conn: &mut Conn,
        last: Option<(&[u8], u64)>,
        eof: Option<u64>,
    ) -> Result<(), TransferError> {
        self.end_blocks_open_or_closed(conn, last, eof, false).await
    }

    async fn end_blocks_open_or_closed(
        &self,
        conn: &mut Conn,
        last: Option<(&[u8], u64)>,
        eof: Option<u64>,
        close: bool,
    ) -> Result<(), TransferError> {
        let work = async {
            let bytes = framed(last, Some(BlockHeader::end(eof, close)));
            conn.send_bytes(&bytes, self.progress.counters(), &self.cancel)
                .await?;
            if let Some((b, _)) = last {
                self.progress.add_bytes(b.len() as u64);
            }
            Ok(())
        };
        tokio::pin!(work);
        self.run(work).await
    }

    /// A download over clear connections the transfer owns and closes
    /// (MODE S: exactly one); MODE E headers carry `offset - base`.
    pub async fn send<C: IntoDataConn>(
        &self,
        engine: &Engine,
        spec: SendSpec,
        base: u64,
        conns: Vec<C>,
    ) -> Result<u64, TransferError> {
        let work = crate::send::send_relative(
            engine,
            spec,
            base,
            conns,
            Arc::clone(&self.progress),
            self.cancel.clone(),
        );
        tokio::pin!(work);
        self.run(work).await
    }

    /// A MODE E download whose clear connections stay open after their
    /// EOD (no CLOSE) and come back for the next transfer on the same data
    /// channel (`send::send_keeping`); MODE S closes as [`Transfer::send`].
    pub async fn send_keeping(
        &self,
        engine: &Engine,
        spec: SendSpec,
        base: u64,
        conns: Vec<sluice_engine::DataConn>,
    ) -> Result<(u64, Vec<TcpStream>), TransferError> {
        let work = crate::send::send_keeping(
            engine,
            spec,
            base,
            conns,
            Arc::clone(&self.progress),
            self.cancel.clone(),
        );
        tokio::pin!(work);
        self.run(work).await
    }

    /// The same over TLS connections.
    pub async fn send_tls(
        &self,
        spec: SendSpec,
        base: u64,
        mut conns: Vec<TlsConn>,
    ) -> Result<u64, TransferError> {
        let (progress, cancel) = (Arc::clone(&self.progress), self.cancel.clone());
        match spec.mode {
            Mode::Stream => {
                let (Some(mut conn), true) = (conns.pop(), conns.is_empty()) else {
                    return Err(TransferError::Setup(
                        "MODE S needs exactly one data connection",
                    ));
                };
                self.run(crate::tls::send_stream_tls(
                    spec, &mut conn, progress, cancel,
                ))
                .await
            }
            Mode::Extended { .. } => {
                self.run(crate::tls::send_extended_tls(
                    spec, base, conns, progress, cancel,
                ))
                .await
            }
        }
    }

    /// A MODE S upload into `file` from `start` until the peer closes.
    pub async fn receive_stream(
        &self,
        engine: &Engine,
        file: Arc<File>,
        start: u64,
        conn: TcpStream,
    ) -> Result<u64, TransferError> {
        let work = crate::receive_stream(
            engine,
            file,
            start,
            conn,
            Arc::clone(&self.progress),
            self.cancel.clone(),
        );
        tokio::pin!(work);
        self.run(work).await
    }

    /// A MODE S upload over TLS.
    pub async fn receive_stream_tls(
        &self,
        engine: &Engine,
        file: Arc<File>,
        start: u64,
        conn: &mut TlsConn,
    ) -> Result<u64, TransferError> {
        let work = crate::receive_stream_tls(
            engine,
            file,
            start,
            conn,
            Arc::clone(&self.progress),
            self.cancel.clone(),
        );
        tokio::pin!(work);
        self.run(work).await
    }

    /// A MODE E upload over the connections arriving on `conns`; block
    /// offsets are relative to `base`. With `protect` (PROT P) each
    /// connection completes a TLS handshake first.
    pub async fn receive_mode_e(
        &self,
        engine: &Engine,
        file: Arc<File>,
        base: u64,
        conns: mpsc::Receiver<TcpStream>,
        protect: Option<crate::Protect>,
    ) -> Result<ReceiveSummary, TransferError> {
        let work = crate::receive_mode_e_protected(
            engine,
            file,
            base,
            conns,
            protect,
            Arc::clone(&self.progress),
            self.cancel.clone(),
        );
        tokio::pin!(work);
        self.run(work).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::{DataPath, EngineConfig};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    async fn pair(engine: &Engine) -> (Conn, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(a), l.accept());
        (engine.data_conn(s.unwrap().0).into(), c.unwrap())
    }

    fn file(data: &[u8]) -> Arc<File> {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, data).unwrap();
        Arc::new(f)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_is_its_head_then_its_parts_on_both_data_paths() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for path in [DataPath::Copy, DataPath::Sendfile] {
            let engine = Engine::new(EngineConfig {
                data_path: path,
                ..EngineConfig::default()
            });
            let (mut conn, mut peer) = pair(&engine).await;
            let f = file(&data);
            let t = Transfer::new(Progress::new(), Cancel::new());
            let parts = [
                Part::Bytes(b"--a\r\n"),
                Part::File { offset: 5, len: 10 },
                Part::Bytes(b"--b\r\n"),
                Part::File {
                    offset: 100,
                    len: 150_000,
                },
                Part::Bytes(b"--end"),
            ];
            let n = t
                .send_body(&mut conn, Some(&f), b"HEAD", parts)
                .await
                .unwrap();
            assert_eq!(n, 5 + 10 + 5 + 150_000 + 5, "{path}");
            assert_eq!(t.progress().bytes(), 150_010, "{path}: file bytes");
            // The connection stays open for the next answer.
            t.send_body(&mut conn, None, b"NEXT", []).await.unwrap();
            drop(conn);
            let mut got = Vec::new();
            peer.read_to_end(&mut got).await.unwrap();
            let mut want = b"HEAD--a\r\n".to_vec();
            want.extend_from_slice(&data[5..15]);
            want.extend_from_slice(b"--b\r\n");
            want.extend_from_slice(&data[100..150_100]);
            want.extend_from_slice(b"--endNEXT");
            assert!(got == want, "{path}: body differs");
            assert_eq!(
                t.progress().counters().snapshot().bytes_sent,
                want.len() as u64,
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn a_file_part_without_a_file_is_ours() {
        let engine = Engine::new(EngineConfig::default());
        let (mut conn, _peer) = pair(&engine).await;
        let t = Transfer::new(Progress::new(), Cancel::new());
        let e = t
            .send_body(&mut conn, None, b"", [Part::File { offset: 0, len: 1 }])
            .await
            .unwrap_err();
        assert_eq!(e.fault(), crate::Fault::Local);
    }

    /// A peer that reads nothing: the body stops after the stall timeout
    /// with the peer's fault, and the transfer is cancelled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_that_takes_nothing_stalls_the_body() {
        let engine = Engine::new(EngineConfig::default());
        let (mut conn, _peer) = pair(&engine).await;
        let f = file(&vec![7u8; 32 << 20]);
        let t =
            Transfer::new(Progress::new(), Cancel::new()).stall_after(Duration::from_millis(300));
        let e = t
            .send_body(
                &mut conn,
                Some(&f),
                b"",
                [Part::File {
                    offset: 0,
                    len: 32 << 20,
                }],
            )
            .await
            .unwrap_err();
        assert!(matches!(e, TransferError::Stalled), "{e:?}");
        assert_eq!(e.fault(), crate::Fault::PeerGone);
        assert!(t.cancel().is_cancelled());
    }

    #[tokio::test]
    async fn pieces_are_framed_raw_or_as_mode_e_blocks() {
        let engine = Engine::new(EngineConfig::default());
        let (mut conn, mut peer) = pair(&engine).await;
        let t = Transfer::new(Progress::new(), Cancel::new());
        t.send_piece(&mut conn, b"raw", Framing::Raw).await.unwrap();
        t.send_piece(&mut conn, b"blk", Framing::Block { offset: 3 })
            .await
            .unwrap();
        t.end_blocks(&mut conn, Some((b"last", 6)), Some(1))
            .await
            .unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        let mut want = b"raw".to_vec();
        want.extend_from_slice(&BlockHeader::data(3, 3).encode());
        want.extend_from_slice(b"blk");
        want.extend_from_slice(&BlockHeader::data(6, 4).encode());
        want.extend_from_slice(b"last");
        want.extend_from_slice(&BlockHeader::end(Some(1), true).encode());
        assert_eq!(got, want);
        assert_eq!(t.progress().bytes(), 10);
    }

    #[tokio::test]
    async fn a_cancelled_transfer_says_so() {
        let engine = Engine::new(EngineConfig::default());
        let (mut conn, _peer) = pair(&engine).await;
        let t = Transfer::new(Progress::new(), Cancel::new());
        t.cancel().cancel();
        let e = t
            .send_piece(&mut conn, &vec![0u8; 64 << 20], Framing::Raw)
            .await
            .unwrap_err();
        assert_eq!(e.fault(), crate::Fault::Cancelled);
    }
}
