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
    let h =
        tokio::spawn(async move { receive_mode_e(&e2, file, ch_rx, Progress::new(), c2).await });
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
