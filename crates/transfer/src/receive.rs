//! MODE E uploads: blocks from connections that arrive on a channel,
//! each written at its offset (MODE S: `receive_stream.rs`).

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;

use sluice_engine::{Cancel, Engine, FileWriter, ReadStatus, TlsConn, WrittenFn};
use sluice_ftp::limits::MAX_OFFSET;
use sluice_ftp::markers::RangeSet;
use sluice_ftp::mode_e::{Descriptor, Event, ModeEError, StreamDecoder, HEADER_LEN};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::limits::MAX_STREAMS;
use crate::{Progress, TransferError};

/// What a MODE E upload delivered.
#[derive(Debug)]
pub struct ReceiveSummary {
    /// Payload bytes written to the file.
    pub bytes: u64,
    /// Data connections that carried this transfer (one that closed or
    /// sent a lone CLOSE before its first block is not counted).
    pub streams: usize,
    /// File byte ranges written (the caller checks they cover what it expects).
    pub ranges: RangeSet,
    /// Connections that ended with EOD but without CLOSE: the sender keeps
    /// them open and may send the next transfer's blocks on them
    /// (GridFTP data channel caching, `globus-url-copy -fast`).
    pub kept: Vec<TcpStream>,
}

/// Hook that records written ranges into `progress` and flags overflow.
pub(crate) fn range_hook(progress: &Arc<Progress>, overflow: &Arc<AtomicBool>) -> Arc<WrittenFn> {
    let (p, o) = (Arc::clone(progress), Arc::clone(overflow));
    Arc::new(move |off, len| {
        if !p.add_range(off, len) {
            o.store(true, Ordering::Relaxed);
        }
    })
}

/// PROT P: the server side of the TLS handshake, run on each data
/// connection of a MODE E upload as it arrives (in the stream's own task,
/// so the handshakes of parallel streams overlap).
pub type Protect = Arc<
    dyn Fn(TcpStream) -> Pin<Box<dyn Future<Output = std::io::Result<TlsConn>> + Send>>
        + Send
        + Sync,
>;

/// One MODE E data connection: clear, or TLS under PROT P.
enum Wire {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

impl Wire {
    async fn read_exact(
        &mut self,
        w: &mut FileWriter,
        buf: &mut [u8],
    ) -> Result<ReadStatus, TransferError> {
        Ok(match self {
            Wire::Plain(c) => w.read_exact(c, buf).await?,
            Wire::Tls(c) => w.read_exact_tls(c, buf).await?,
        })
    }

    async fn copy_exact(
        &mut self,
        w: &mut FileWriter,
        at: u64,
        len: u64,
    ) -> Result<(), TransferError> {
        match self {
            Wire::Plain(c) => w.copy_exact(c, at, len).await?,
            Wire::Tls(c) => w.copy_exact_tls(c, at, len).await?,
        }
        Ok(())
    }

    /// The connection after its EOD, when the sender may send the next
    /// transfer on it (clear only: a TLS session is not handed on, the
    /// stream ends with close_notify).
    async fn after_eod(self, close: bool) -> Option<TcpStream> {
        match self {
            Wire::Plain(c) => (!close).then_some(c),
            Wire::Tls(mut c) => {
                let _ = c.shutdown().await;
                None
            }
        }
    }
}

/// How one MODE E stream ended.
enum StreamEnd {
    /// It carried part of the transfer and ended with EOD (or CLOSE).
    Eod {
        bytes: u64,
        eof_count: Option<u64>,
        /// The connection, when the sender keeps it (EOD without CLOSE).
        kept: Option<TcpStream>,
    },
    /// It closed, or sent a lone CLOSE, before any block: a cached
    /// connection the sender gave up on. Not part of this transfer.
    Unused,
}

/// MODE E upload: reads blocks from every connection that arrives on `conns`
/// and writes each at its offset, until the EOF block's EOD count is met.
/// Fails with 426 if the channel closes and all streams end first.
pub async fn receive_mode_e(
    engine: &Engine,
    file: Arc<File>,
    conns: mpsc::Receiver<TcpStream>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    receive_mode_e_relative(engine, file, 0, conns, progress, cancel).await
}

/// Like [`receive_mode_e`], but a block with header offset `o` lands at
/// file offset `base + o`: ESTO A k and APPE number their blocks from the
/// start of the written region (GFD.20). Progress ranges are file offsets.
pub async fn receive_mode_e_relative(
    engine: &Engine,
    file: Arc<File>,
    base: u64,
    conns: mpsc::Receiver<TcpStream>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    receive_mode_e_protected(engine, file, base, conns, None, progress, cancel).await
}

/// [`receive_mode_e_relative`] where, with `protect`, every connection
/// first completes a TLS handshake (PROT P) and carries its blocks inside
/// TLS. A failed handshake fails the transfer like a reset connection.
pub async fn receive_mode_e_protected(
    engine: &Engine,
    file: Arc<File>,
    base: u64,
    mut conns: mpsc::Receiver<TcpStream>,
    protect: Option<Protect>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    let inner = Cancel::new();
    let idle = engine.config().idle_timeout;
    let overflow = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    let mut accepted = 0usize;
    let mut streams = 0usize;
    let mut eods = 0u64;
    let mut expected: Option<u64> = None;
    let mut bytes = 0u64;
    let mut kept = Vec::new();
    let mut channel_open = true;
    let mut result: Result<(), TransferError> = Ok(());
    loop {
        if expected.is_some_and(|n| eods >= n) {
            break;
        }
        if !channel_open && tasks.is_empty() {
            result = Err(TransferError::Incomplete {
                eods,
                expected: expected.unwrap_or(0),
            });
            break;
        }
        tokio::select! {
            c = conns.recv(), if channel_open => match c {
                Some(conn) => {
                    accepted += 1;
                    if accepted > MAX_STREAMS {
                        result = Err(TransferError::Limit("too many MODE E data connections"));
                        break;
                    }
                    let w = FileWriter::new(engine, Arc::clone(&file), Arc::clone(progress.counters()), inner.clone())
                        .on_written(range_hook(&progress, &overflow));
                    let ov = Arc::clone(&overflow);
                    let protect = protect.clone();
                    tasks.spawn(async move {
                        let wire = match protect {
                            None => Wire::Plain(conn),
                            Some(handshake) => Wire::Tls(Box::new(
                                handshake(conn).await.map_err(TransferError::Connection)?,
                            )),
                        };
                        read_stream(wire, w, base, &ov).await
                    });
                }
                None => channel_open = false,
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => match joined {
                Ok(Ok(StreamEnd::Unused)) => {}
                Ok(Ok(StreamEnd::Eod { bytes: n, eof_count, kept: k })) => {
                    streams += 1;
                    eods += 1;
                    bytes += n;
                    kept.extend(k);
                    if let Some(n) = eof_count {
                        // More EODs than we would ever accept streams for: wait no longer.
                        if n > MAX_STREAMS as u64 {
                            result = Err(TransferError::Limit("MODE E EOF announces too many streams"));
                            break;
                        }
                        expected = Some(n);
                    }
                }
                Ok(Err(e)) => {
                    result = Err(e);
                    break;
                }
                Err(_) => {
                    result = Err(TransferError::Setup("receiver task failed"));
                    break;
                }
            },
            _ = cancel.cancelled() => {
                result = Err(TransferError::Cancelled);
                break;
            }
            // Every stream has ended and the EODs fall short: wait for
            // another connection only as long as a stream may sit idle
            // (kept connections the sender closed unused, or a sender that
            // announced more streams than it opens, must not hang the session).
            _ = tokio::time::sleep(idle), if tasks.is_empty() && channel_open => {
                result = Err(TransferError::Incomplete {
                    eods,
                    expected: expected.unwrap_or(0),
                });
                break;
            }
        }
    }
    inner.cancel();
    tasks.shutdown().await;
    result?;
    Ok(ReceiveSummary {
        bytes,
        streams,
        ranges: progress.ranges(),
        kept,
    })
}

/// Reads one MODE E stream to its EOD (or CLOSE), writing every block at
/// `base` + its header offset.
///
/// Framing is the ftp crate's sans-I/O [`StreamDecoder`] (the one the
/// client and the fuzz target use): headers are read 17 bytes at a time
/// and fed to it; payload is read by the [`FileWriter`] straight from the
/// socket into its buffers where the decoder's `pending_payload` says,
/// then reported back with `consume_payload`, so no byte is copied twice.
async fn read_stream(
    mut conn: Wire,
    mut w: FileWriter,
    base: u64,
    overflow: &AtomicBool,
) -> Result<StreamEnd, TransferError> {
    let mut dec = StreamDecoder::new();
    let mut eof_count = None;
    let mut close = false;
    let mut first = true;
    while !dec.is_ended() {
        if let Some(p) = dec.pending_payload() {
            let at = base
                .checked_add(p.offset)
                .filter(|o| o.checked_add(p.remaining).is_some_and(|e| e <= MAX_OFFSET))
                .ok_or(ModeEError::OffsetOverflow)?;
            conn.copy_exact(&mut w, at, p.remaining).await?;
            dec.consume_payload(p.remaining)
                .ok_or(TransferError::Setup("MODE E payload out of step"))?;
            if overflow.load(Ordering::Relaxed) {
                return Err(TransferError::Limit("too many disjoint MODE E ranges"));
            }
            continue;
        }
        let mut hdr = [0u8; HEADER_LEN];
        if conn.read_exact(&mut w, &mut hdr).await? == ReadStatus::Eof {
            if first {
                return Ok(StreamEnd::Unused);
            }
            // The connection closed without EOD: data may be missing.
            return Err(TransferError::Connection(
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        if first && hdr[0] == Descriptor::CLOSE && hdr[1..9] == [0u8; 8] {
            // Globus closes a cached connection with a lone CLOSE header.
            return Ok(StreamEnd::Unused);
        }
        first = false;
        let mut input: &[u8] = &hdr;
        loop {
            let (used, event) = dec.handle_input(input)?;
            input = &input[used..];
            match event {
                Some(Event::Eof { eod_count }) => eof_count = Some(eod_count),
                Some(Event::Close) => close = true,
                Some(Event::Eod) | Some(Event::Data { .. }) => {}
                None if input.is_empty() => break,
                None => {}
            }
        }
    }
    w.finish().await?;
    Ok(StreamEnd::Eod {
        bytes: dec.payload_bytes(),
        eof_count,
        kept: conn.after_eod(close).await,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::send::tests::{engine, pairs, pattern, temp_file};
    use crate::{send, ByteRange, Mode, SendSpec};
    use sluice_engine::DataPath;
    use sluice_ftp::mode_e::BlockHeader;
    use std::os::unix::fs::FileExt;
    use tokio::io::AsyncWriteExt;

    pub(crate) fn read_all(f: &File) -> Vec<u8> {
        let len = f.metadata().unwrap().len() as usize;
        let mut v = vec![0u8; len];
        f.read_exact_at(&mut v, 0).unwrap();
        v
    }

    /// A connection channel (as the server's acceptor feeds the receiver)
    /// already holding `conns`.
    async fn queued(conns: Vec<TcpStream>) -> (mpsc::Sender<TcpStream>, mpsc::Receiver<TcpStream>) {
        let (tx, rx) = mpsc::channel(MAX_STREAMS);
        for c in conns {
            tx.send(c).await.unwrap();
        }
        (tx, rx)
    }

    /// Frames `blocks` (offset, len of `data`) for one stream, ending with `end`.
    fn frame(data: &[u8], blocks: &[(u64, u64)], end: BlockHeader) -> Vec<u8> {
        let mut v = Vec::new();
        for &(o, l) in blocks {
            v.extend_from_slice(&BlockHeader::data(o, l).encode());
            v.extend_from_slice(&data[o as usize..(o + l) as usize]);
        }
        v.extend_from_slice(&end.encode());
        v
    }

    async fn run_receive(
        streams: Vec<Vec<u8>>,
        close_channel: bool,
    ) -> (
        Result<ReceiveSummary, TransferError>,
        Arc<File>,
        Arc<Progress>,
    ) {
        let e = engine(DataPath::Copy);
        let file = Arc::new(tempfile::tempfile().unwrap());
        let (mut tx, rx) = pairs(streams.len()).await;
        let (ch_tx, ch_rx) = queued(rx).await;
        if close_channel {
            drop(ch_tx);
        } else {
            // Keep the channel open past the end, as the server's acceptor does.
            std::mem::forget(ch_tx);
        }
        for (bytes, mut c) in streams.into_iter().zip(tx.drain(..)) {
            tokio::spawn(async move {
                // Odd-sized writes split headers across segments.
                for piece in bytes.chunks(7919) {
                    if c.write_all(piece).await.is_err() {
                        return;
                    }
                }
            });
        }
        let progress = Progress::new();
        let r = receive_mode_e(
            &e,
            Arc::clone(&file),
            ch_rx,
            Arc::clone(&progress),
            Cancel::new(),
        )
        .await;
        (r, file, progress)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mode_e_blocks_in_shuffled_order_rebuild_the_file() {
        let data = pattern(3_000_001);
        let mut blocks: Vec<(u64, u64)> = (0..data.len() as u64)
            .step_by(50_000)
            .map(|o| (o, 50_000.min(data.len() as u64 - o)))
            .collect();
        // Deterministic shuffle.
        let mut x = 7u64;
        for i in (1..blocks.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            blocks.swap(i, (x >> 33) as usize % (i + 1));
        }
        let third = blocks.len() / 3;
        let streams = vec![
            frame(&data, &blocks[..third], BlockHeader::end(None, true)),
            // EOF may come on any stream, before the others are done.
            frame(
                &data,
                &blocks[third..2 * third],
                BlockHeader::end(Some(3), true),
            ),
            frame(&data, &blocks[2 * third..], BlockHeader::eod()),
        ];
        let (r, file, progress) = run_receive(streams, false).await;
        let s = r.unwrap();
        assert_eq!((s.bytes, s.streams), (data.len() as u64, 3));
        assert_eq!(s.ranges.to_string(), format!("0-{}", data.len()));
        assert_eq!(s.kept.len(), 1, "the stream that ended without CLOSE");
        assert_eq!(progress.bytes(), data.len() as u64);
        assert_eq!(read_all(&file), data);
    }

    #[tokio::test]
    async fn missing_eods_are_incomplete_and_bad_headers_are_framing_errors() {
        let data = pattern(1000);
        // EOF says 3 streams, only 2 arrive and the acceptor gives up.
        let streams = vec![
            frame(&data, &[(0, 500)], BlockHeader::end(Some(3), true)),
            frame(&data, &[(500, 500)], BlockHeader::eod()),
        ];
        let (r, _, _) = run_receive(streams, true).await;
        assert!(
            matches!(
                r,
                Err(TransferError::Incomplete {
                    eods: 2,
                    expected: 3
                })
            ),
            "{r:?}"
        );
        // A connection that closes without EOD.
        let mut cut = frame(&data, &[(0, 1000)], BlockHeader::eod());
        cut.truncate(cut.len() - HEADER_LEN);
        let (r, _, _) = run_receive(vec![cut], true).await;
        // The peer's fault (the FTP door answers 426).
        assert_eq!(r.unwrap_err().fault(), crate::Fault::PeerGone);
        // An unknown descriptor bit.
        let mut bad = BlockHeader::data(0, 0).encode().to_vec();
        bad[0] = 0x01;
        let (r, _, _) = run_receive(vec![bad], true).await;
        assert!(matches!(r, Err(TransferError::Framing(_))), "{r:?}");
    }

    #[tokio::test]
    async fn waiting_for_more_connections_is_bounded_by_the_idle_timeout() {
        // A kept connection the sender closes unused, and nobody else
        // connects: the receiver gives up instead of waiting forever.
        let e = Engine::new(crate::EngineConfig {
            idle_timeout: std::time::Duration::from_millis(200),
            ..crate::EngineConfig::default()
        });
        let (tx, rx) = pairs(1).await;
        let (_ch_tx, ch_rx) = queued(rx).await;
        drop(tx);
        let r = receive_mode_e(
            &e,
            Arc::new(tempfile::tempfile().unwrap()),
            ch_rx,
            Progress::new(),
            Cancel::new(),
        )
        .await;
        assert!(
            matches!(
                r,
                Err(TransferError::Incomplete {
                    eods: 0,
                    expected: 0
                })
            ),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn an_empty_mode_e_upload_completes() {
        let (r, file, _) = run_receive(
            vec![BlockHeader::end(Some(1), true).encode().to_vec()],
            false,
        )
        .await;
        assert_eq!(r.unwrap().bytes, 0);
        assert_eq!(file.metadata().unwrap().len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn our_sender_feeds_our_receiver_over_four_streams() {
        let data = pattern((4 << 20) + 17);
        let e = engine(DataPath::Sendfile);
        let (tx, rx) = pairs(4).await;
        let (_ch_tx, ch_rx) = queued(rx).await;
        let spec = SendSpec {
            file: temp_file(&data),
            ranges: vec![ByteRange::new(0, data.len() as u64)],
            mode: Mode::extended(),
        };
        let e2 = e.clone();
        let sender =
            tokio::spawn(async move { send(&e2, spec, tx, Progress::new(), Cancel::new()).await });
        let out = Arc::new(tempfile::tempfile().unwrap());
        let s = receive_mode_e(&e, Arc::clone(&out), ch_rx, Progress::new(), Cancel::new())
            .await
            .unwrap();
        assert_eq!(sender.await.unwrap().unwrap(), data.len() as u64);
        assert_eq!(s.bytes, data.len() as u64);
        e.sync_data(&out).await.unwrap();
        assert_eq!(read_all(&out), data);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelled_uploads_stop_their_readers() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let e = engine(DataPath::Copy);
        let (_tx, rx) = pairs(2).await;
        let (ch_tx, ch_rx) = queued(rx).await;
        let cancel = Cancel::new();
        let (c2, e2) = (cancel.clone(), e.clone());
        let file = Arc::new(tempfile::tempfile().unwrap());
        let h = tokio::spawn(
            async move { receive_mode_e(&e2, file, ch_rx, Progress::new(), c2).await },
        );
        while metrics.num_alive_tasks() < 3 {
            tokio::task::yield_now().await;
        }
        cancel.cancel();
        assert!(matches!(h.await.unwrap(), Err(TransferError::Cancelled)));
        for _ in 0..1000 {
            if metrics.num_alive_tasks() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(metrics.num_alive_tasks(), 0);
        drop(ch_tx);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relative_blocks_land_after_the_base() {
        // ESTO A k / APPE: our sender numbers the region from 0, the
        // receiver adds k back.
        let data = pattern(3_000_000);
        let base = 1_234_567u64;
        let e = engine(DataPath::Copy);
        let (tx, rx) = pairs(3).await;
        let (_ch_tx, ch_rx) = queued(rx).await;
        let spec = SendSpec {
            file: temp_file(&data),
            ranges: vec![ByteRange::new(base, data.len() as u64 - base)],
            mode: Mode::Extended {
                block_size: 64 << 10,
            },
        };
        let e2 = e.clone();
        let sender = tokio::spawn(async move {
            crate::send_relative(&e2, spec, base, tx, Progress::new(), Cancel::new()).await
        });
        let out = Arc::new(tempfile::tempfile().unwrap());
        out.write_all_at(&data[..base as usize], 0).unwrap();
        let s = receive_mode_e_relative(
            &e,
            Arc::clone(&out),
            base,
            ch_rx,
            Progress::new(),
            Cancel::new(),
        )
        .await
        .unwrap();
        sender.await.unwrap().unwrap();
        assert_eq!(s.bytes, data.len() as u64 - base);
        assert_eq!(s.ranges.to_string(), format!("{base}-{}", data.len()));
        assert_eq!(read_all(&out), data);
        // A header offset that overflows once the base is added is refused.
        let (mut tx, rx) = pairs(1).await;
        let (ch_tx, ch_rx) = queued(rx).await;
        drop(ch_tx);
        let mut c = tx.pop().unwrap();
        let mut bad = BlockHeader::data(i64::MAX as u64 - 10, 10)
            .encode()
            .to_vec();
        bad.extend_from_slice(&[0u8; 10]);
        tokio::spawn(async move { c.write_all(&bad).await });
        let r = receive_mode_e_relative(
            &e,
            Arc::new(tempfile::tempfile().unwrap()),
            1,
            ch_rx,
            Progress::new(),
            Cancel::new(),
        )
        .await;
        assert!(matches!(r, Err(TransferError::Framing(_))), "{r:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_kept_by_the_sender_serve_the_next_upload() {
        // globus-url-copy -fast: EOD without CLOSE, the same connections
        // carry the next file; one of them is then given up with a lone
        // CLOSE header, another simply closed.
        let e = engine(DataPath::Copy);
        let (mut tx, rx) = pairs(4).await;
        let (_ch_tx, ch_rx) = queued(rx).await;
        let first = pattern(500_000);
        let ends = [
            BlockHeader::end(Some(4), false),
            BlockHeader::end(None, false),
            BlockHeader::end(None, false),
            BlockHeader::end(None, true),
        ];
        for (i, (c, end)) in tx.iter_mut().zip(ends).enumerate() {
            let o = i as u64 * 125_000;
            c.write_all(&frame(&first, &[(o, 125_000)], end))
                .await
                .unwrap();
        }
        let out = Arc::new(tempfile::tempfile().unwrap());
        let s = receive_mode_e(&e, Arc::clone(&out), ch_rx, Progress::new(), Cancel::new())
            .await
            .unwrap();
        assert_eq!((s.bytes, s.streams, s.kept.len()), (500_000, 4, 3));
        assert_eq!(read_all(&out), first);

        // Second file: two kept connections carry it, the third sends a
        // lone CLOSE, and the fourth (closed by us) is gone.
        let second = pattern(300_000);
        let mut closing = BlockHeader::end(None, true);
        closing.descriptor = Descriptor(Descriptor::CLOSE);
        tx[0]
            .write_all(&frame(
                &second,
                &[(0, 100_000)],
                BlockHeader::end(Some(2), false),
            ))
            .await
            .unwrap();
        tx[1]
            .write_all(&frame(
                &second,
                &[(100_000, 200_000)],
                BlockHeader::end(None, true),
            ))
            .await
            .unwrap();
        tx[2].write_all(&closing.encode()).await.unwrap();
        let (ch_tx, ch_rx) = queued(s.kept).await;
        drop(ch_tx);
        let out2 = Arc::new(tempfile::tempfile().unwrap());
        let s2 = receive_mode_e(&e, Arc::clone(&out2), ch_rx, Progress::new(), Cancel::new())
            .await
            .unwrap();
        assert_eq!((s2.bytes, s2.streams, s2.kept.len()), (300_000, 2, 1));
        assert_eq!(read_all(&out2), second);

        // A kept connection the sender closes before sending anything does
        // not count as a stream (nor as a failure).
        let (ch_tx, ch_rx) = queued(s2.kept).await;
        let (mut fresh_tx, fresh_rx) = pairs(1).await;
        ch_tx
            .send(fresh_rx.into_iter().next().unwrap())
            .await
            .unwrap();
        drop(ch_tx);
        drop(tx);
        let mut f = fresh_tx.pop().unwrap();
        f.write_all(&frame(&first, &[(0, 10)], BlockHeader::end(Some(1), true)))
            .await
            .unwrap();
        let s3 = receive_mode_e(
            &e,
            Arc::new(tempfile::tempfile().unwrap()),
            ch_rx,
            Progress::new(),
            Cancel::new(),
        )
        .await
        .unwrap();
        assert_eq!((s3.bytes, s3.streams), (10, 1));
    }
}
