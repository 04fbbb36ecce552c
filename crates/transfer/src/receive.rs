//! Uploads: MODE S from one connection until the peer closes; MODE E from
//! connections that arrive on a channel, blocks written at their offsets.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_engine::{Cancel, Engine, FileWriter, ReadStatus, WrittenFn};
use sluice_ftp::mode_e::{BlockHeader, Descriptor, HEADER_LEN};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::limits::MAX_STREAMS;
use crate::{Progress, RangeSet, TransferError};

/// What a MODE E upload delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveSummary {
    /// Payload bytes written to the file.
    pub bytes: u64,
    /// Data connections used.
    pub streams: usize,
    /// Byte ranges written (the caller checks they cover what it expects).
    pub ranges: RangeSet,
}

/// Hook that records written ranges into `progress` and flags overflow.
fn range_hook(progress: &Arc<Progress>, overflow: &Arc<AtomicBool>) -> Arc<WrittenFn> {
    let (p, o) = (Arc::clone(progress), Arc::clone(overflow));
    Arc::new(move |off, len| {
        if !p.add_range(off, len) {
            o.store(true, Ordering::Relaxed);
        }
    })
}

/// MODE S upload: writes everything `conn` delivers into `file` from
/// `start_offset` (REST/APPE) until the peer closes; returns bytes written.
/// The caller syncs ([`Engine::sync_data`]) and renames.
pub async fn receive_stream(
    engine: &Engine,
    file: Arc<File>,
    start_offset: u64,
    conn: TcpStream,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    engine.prepare_socket(&conn);
    let overflow = Arc::new(AtomicBool::new(false));
    let mut w = FileWriter::new(engine, file, Arc::clone(progress.counters()), cancel)
        .on_written(range_hook(&progress, &overflow));
    let got = w.copy_to_eof(&conn, start_offset).await?;
    let written = w.finish().await?;
    debug_assert_eq!(got, written);
    Ok(written)
}

/// How one MODE E stream ended.
struct StreamEnd {
    bytes: u64,
    eof_count: Option<u64>,
}

/// MODE E upload: reads blocks from every connection that arrives on `conns`
/// and writes each at its offset, until the EOF block's EOD count is met.
/// Fails with 426 if the channel closes and all streams end first.
pub async fn receive_mode_e(
    engine: &Engine,
    file: Arc<File>,
    mut conns: mpsc::Receiver<TcpStream>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    let inner = Cancel::new();
    let overflow = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    let mut streams = 0usize;
    let mut eods = 0u64;
    let mut expected: Option<u64> = None;
    let mut bytes = 0u64;
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
                    streams += 1;
                    if streams > MAX_STREAMS {
                        result = Err(TransferError::Limit("too many MODE E data connections"));
                        break;
                    }
                    engine.prepare_socket(&conn);
                    let w = FileWriter::new(engine, Arc::clone(&file), Arc::clone(progress.counters()), inner.clone())
                        .on_written(range_hook(&progress, &overflow));
                    let ov = Arc::clone(&overflow);
                    tasks.spawn(async move { read_stream(conn, w, &ov).await });
                }
                None => channel_open = false,
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => match joined {
                Ok(Ok(end)) => {
                    eods += 1;
                    bytes += end.bytes;
                    if let Some(n) = end.eof_count {
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
        }
    }
    inner.cancel();
    tasks.shutdown().await;
    result?;
    Ok(ReceiveSummary {
        bytes,
        streams,
        ranges: progress.ranges(),
    })
}

/// Reads one MODE E stream to its EOD (or CLOSE), writing every block.
async fn read_stream(
    conn: TcpStream,
    mut w: FileWriter,
    overflow: &AtomicBool,
) -> Result<StreamEnd, TransferError> {
    let mut eof_count = None;
    let mut bytes = 0u64;
    loop {
        let mut hdr = [0u8; HEADER_LEN];
        if w.read_exact(&conn, &mut hdr).await? == ReadStatus::Eof {
            // The connection closed without EOD: data may be missing.
            return Err(TransferError::Connection(
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        let Some((h, _)) = BlockHeader::decode(&hdr)? else {
            return Err(TransferError::Setup("short MODE E header"));
        };
        if h.descriptor.has(Descriptor::EOF) {
            eof_count = Some(h.offset);
        } else if h.count > 0 {
            w.copy_exact(&conn, h.offset, h.count).await?;
            bytes += h.count;
        }
        if overflow.load(Ordering::Relaxed) {
            return Err(TransferError::Limit("too many disjoint MODE E ranges"));
        }
        if h.descriptor.0 & (Descriptor::EOD | Descriptor::CLOSE) != 0 {
            break;
        }
    }
    w.finish().await?;
    Ok(StreamEnd { bytes, eof_count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{engine, pairs, pattern, temp_file};
    use crate::{send, ByteRange, Mode, SendSpec};
    use sluice_engine::DataPath;
    use std::os::unix::fs::FileExt;
    use tokio::io::AsyncWriteExt;

    fn read_all(f: &File) -> Vec<u8> {
        let len = f.metadata().unwrap().len() as usize;
        let mut v = vec![0u8; len];
        f.read_exact_at(&mut v, 0).unwrap();
        v
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
        let (ch_tx, ch_rx) = mpsc::channel(8);
        let (mut tx, rx) = pairs(streams.len()).await;
        for c in rx {
            ch_tx.send(c).await.unwrap();
        }
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
        assert_eq!(
            s.ranges.iter().collect::<Vec<_>>(),
            vec![(0, data.len() as u64)]
        );
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
        assert_eq!(r.unwrap_err().reply_code(), 426);
        // An unknown descriptor bit.
        let mut bad = BlockHeader::data(0, 0).encode().to_vec();
        bad[0] = 0x01;
        let (r, _, _) = run_receive(vec![bad], true).await;
        assert!(matches!(r, Err(TransferError::Framing(_))), "{r:?}");
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
        let (ch_tx, ch_rx) = mpsc::channel(4);
        for c in rx {
            ch_tx.send(c).await.unwrap();
        }
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
    async fn mode_s_upload_at_a_restart_offset() {
        let data = pattern(2_500_000);
        let e = engine(DataPath::Copy);
        let (mut tx, mut rx) = pairs(1).await;
        let mut c = tx.pop().unwrap();
        let d2 = data.clone();
        tokio::spawn(async move { c.write_all(&d2).await.unwrap() });
        let file = Arc::new(tempfile::tempfile().unwrap());
        file.write_all_at(b"kept", 0).unwrap();
        let p = Progress::new();
        let n = receive_stream(
            &e,
            Arc::clone(&file),
            4,
            rx.pop().unwrap(),
            Arc::clone(&p),
            Cancel::new(),
        )
        .await
        .unwrap();
        assert_eq!(n, data.len() as u64);
        let back = read_all(&file);
        assert_eq!(&back[..4], b"kept");
        assert_eq!(&back[4..], &data[..]);
        assert_eq!(
            p.ranges().iter().collect::<Vec<_>>(),
            vec![(4, 4 + data.len() as u64)]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelled_uploads_stop_their_readers() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let e = engine(DataPath::Copy);
        let (_tx, rx) = pairs(2).await;
        let (ch_tx, ch_rx) = mpsc::channel(4);
        for c in rx {
            ch_tx.send(c).await.unwrap();
        }
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
}
