use super::*;
use crate::{ByteRange, EngineConfig};
use sluice_engine::DataPath;
use sluice_ftp::mode_e::{Descriptor, HEADER_LEN};
use std::io::Write;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::net::TcpStream;

pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect()
}

pub(crate) fn temp_file(data: &[u8]) -> Arc<std::fs::File> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    Arc::new(f)
}

pub(crate) async fn pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..n {
        a.push(TcpStream::connect(l.local_addr().unwrap()).await.unwrap());
        b.push(l.accept().await.unwrap().0);
    }
    (a, b)
}

pub(crate) fn engine(path: DataPath) -> Engine {
    Engine::new(EngineConfig {
        data_path: path,
        read_buffer_size: 128 << 10,
        ..EngineConfig::default()
    })
}

/// What a test receiver saw on one MODE E stream.
#[derive(Debug, Default)]
struct Decoded {
    blocks: Vec<(u64, Vec<u8>)>,
    last_descriptor: u8,
    eof: Option<u64>,
    trailing: usize,
}

/// An independent MODE E reader: headers by hand, no engine code.
fn decode(bytes: &[u8]) -> Decoded {
    let mut d = Decoded::default();
    let mut p = 0;
    while p + HEADER_LEN <= bytes.len() {
        let desc = bytes[p];
        let count = u64::from_be_bytes(bytes[p + 1..p + 9].try_into().unwrap()) as usize;
        let offset = u64::from_be_bytes(bytes[p + 9..p + 17].try_into().unwrap());
        p += HEADER_LEN;
        if desc & Descriptor::EOF != 0 {
            d.eof = Some(offset);
        } else if count > 0 {
            d.blocks.push((offset, bytes[p..p + count].to_vec()));
            p += count;
        }
        d.last_descriptor = desc;
        if desc & Descriptor::EOD != 0 {
            break;
        }
    }
    d.trailing = bytes.len() - p;
    d
}

async fn mode_e_roundtrip(
    path: DataPath,
    data: &[u8],
    ranges: Vec<ByteRange>,
    streams: usize,
) -> Vec<Decoded> {
    let e = engine(path);
    let (tx, rx) = pairs(streams).await;
    let readers: Vec<_> = rx
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut v = Vec::new();
                s.read_to_end(&mut v).await.unwrap();
                decode(&v)
            })
        })
        .collect();
    let spec = SendSpec {
        file: temp_file(data),
        ranges: ranges.clone(),
        mode: Mode::Extended {
            block_size: 64 << 10,
        },
    };
    let progress = Progress::new();
    let n = send(&e, spec, tx, Arc::clone(&progress), Cancel::new())
        .await
        .unwrap();
    let want: u64 = ranges.iter().map(|r| r.len).sum();
    assert_eq!((n, progress.bytes()), (want, want));
    let mut out = Vec::new();
    for r in readers {
        out.push(r.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_e_over_four_streams_reassembles_to_the_file() {
    let data = pattern((5 << 20) + 4321);
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let streams =
            mode_e_roundtrip(path, &data, vec![ByteRange::new(0, data.len() as u64)], 4).await;
        let mut out = vec![0u8; data.len()];
        let mut covered = 0;
        let mut eofs = Vec::new();
        for s in &streams {
            // Every stream ends with EOD|CLOSE and nothing after it.
            assert_eq!(s.last_descriptor & 0x0C, 0x0C, "{path}");
            assert_eq!(s.trailing, 0);
            eofs.extend(s.eof);
            for (off, b) in &s.blocks {
                assert!(b.len() as u64 <= 64 << 10);
                out[*off as usize..*off as usize + b.len()].copy_from_slice(b);
                covered += b.len();
            }
        }
        assert_eq!(eofs, vec![4], "one EOF carrying the EOD count");
        assert_eq!(covered, data.len());
        assert_eq!(out, data, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faster_stream_carries_more_blocks() {
    let data = pattern(32 << 20);
    let e = engine(DataPath::Copy);
    let (tx, mut rx) = pairs(2).await;
    let (mut slow, mut fast) = (rx.remove(1), rx.remove(0));
    // The fast reader drains at once; the slow one reads nothing until the
    // fast stream has ended, so it can only hold what fits in its socket buffers.
    let fast_reader = tokio::spawn(async move {
        let mut v = Vec::new();
        fast.read_to_end(&mut v).await.unwrap();
        decode(&v)
    });
    let spec = SendSpec {
        file: temp_file(&data),
        ranges: vec![ByteRange::new(0, data.len() as u64)],
        mode: Mode::Extended {
            block_size: 64 << 10,
        },
    };
    let sender = tokio::spawn({
        let e = e.clone();
        async move { send(&e, spec, tx, Progress::new(), Cancel::new()).await }
    });
    let fast = fast_reader.await.unwrap();
    let mut v = Vec::new();
    slow.read_to_end(&mut v).await.unwrap();
    let slow = decode(&v);
    assert_eq!(sender.await.unwrap().unwrap(), data.len() as u64);
    let bytes = |d: &Decoded| d.blocks.iter().map(|b| b.1.len()).sum::<usize>();
    assert_eq!(bytes(&fast) + bytes(&slow), data.len());
    assert!(
        bytes(&fast) > data.len() / 2,
        "fast stream carried {} of {}",
        bytes(&fast),
        data.len()
    );
}

#[tokio::test]
async fn mode_e_partial_ranges_and_an_empty_file() {
    let data = pattern(300_000);
    let ranges = vec![
        ByteRange::new(1000, 150_000),
        ByteRange::new(200_000, 100_000),
    ];
    let streams = mode_e_roundtrip(DataPath::Copy, &data, ranges.clone(), 2).await;
    let mut got: Vec<(u64, Vec<u8>)> = streams.into_iter().flat_map(|s| s.blocks).collect();
    got.sort();
    let joined: Vec<u8> = got.iter().flat_map(|(_, b)| b.clone()).collect();
    let expect: Vec<u8> = ranges
        .iter()
        .flat_map(|r| data[r.offset as usize..r.end() as usize].to_vec())
        .collect();
    assert_eq!(joined, expect);
    assert_eq!(got.first().map(|b| b.0), Some(1000));

    let empty = mode_e_roundtrip(DataPath::Sendfile, b"", vec![ByteRange::new(0, 0)], 3).await;
    assert!(empty
        .iter()
        .all(|s| s.blocks.is_empty() && s.last_descriptor & 0x08 != 0));
    assert_eq!(
        empty.iter().filter_map(|s| s.eof).collect::<Vec<_>>(),
        vec![3]
    );
}

/// Kept connections: two files back to back on one connection, each
/// ending with EOD|EOF (count 1) and no CLOSE, the connection handed
/// back open after each; the receiver reads both from one stream.
#[tokio::test]
async fn kept_streams_end_without_close_and_carry_the_next_file() {
    let e = engine(DataPath::Copy);
    let (mut tx, mut rx) = pairs(1).await;
    let mut r = rx.pop().unwrap();
    let (a, b) = (pattern(150_000), pattern(70_000));
    let mut conn = tx.pop().unwrap();
    for data in [&a, &b] {
        let spec = SendSpec {
            file: temp_file(data),
            ranges: vec![ByteRange::new(0, data.len() as u64)],
            mode: Mode::Extended {
                block_size: 64 << 10,
            },
        };
        let dc = e.data_conn_in(conn, None, None);
        let (n, mut kept) = send_keeping(&e, spec, 0, vec![dc], Progress::new(), Cancel::new())
            .await
            .unwrap();
        assert_eq!((n, kept.len()), (data.len() as u64, 1));
        conn = kept.pop().unwrap();
    }
    drop(conn);
    let mut v = Vec::new();
    r.read_to_end(&mut v).await.unwrap();
    // Both files, one after the other, each ending EOD|EOF (0x48).
    let first = decode(&v);
    assert_eq!(first.last_descriptor, 0x48);
    assert_eq!(first.eof, Some(1));
    let one: Vec<u8> = first.blocks.iter().flat_map(|b| b.1.clone()).collect();
    assert_eq!(one, a);
    let second = decode(&v[v.len() - first.trailing..]);
    let two: Vec<u8> = second.blocks.iter().flat_map(|b| b.1.clone()).collect();
    assert_eq!(
        (two, second.last_descriptor, second.trailing),
        (b.clone(), 0x48, 0)
    );
}

#[tokio::test]
async fn relative_headers_number_the_region_from_zero() {
    let data = pattern(400_000);
    let e = engine(DataPath::Copy);
    let (tx, mut rx) = pairs(1).await;
    let mut r = rx.pop().unwrap();
    let reader = tokio::spawn(async move {
        let mut v = Vec::new();
        r.read_to_end(&mut v).await.unwrap();
        decode(&v)
    });
    let spec = SendSpec {
        file: temp_file(&data),
        ranges: vec![ByteRange::new(100_000, 150_000)],
        mode: Mode::Extended {
            block_size: 64 << 10,
        },
    };
    send_relative(
        &e,
        spec.clone(),
        100_000,
        tx,
        Progress::new(),
        Cancel::new(),
    )
    .await
    .unwrap();
    let d = reader.await.unwrap();
    assert_eq!(d.blocks.first().map(|b| b.0), Some(0));
    let joined: Vec<u8> = d.blocks.iter().flat_map(|b| b.1.clone()).collect();
    assert_eq!(joined, &data[100_000..250_000]);
    let (tx, _rx) = pairs(1).await;
    let r = send_relative(&e, spec, 100_001, tx, Progress::new(), Cancel::new()).await;
    assert!(matches!(r, Err(TransferError::Setup(_))));
}

#[tokio::test]
async fn mode_s_sends_the_range_then_closes() {
    let data = pattern(1_000_000);
    for len in [0u64, 999_000] {
        let (mut tx, mut rx) = pairs(1).await;
        let mut r = rx.pop().unwrap();
        let reader = tokio::spawn(async move {
            let mut v = Vec::new();
            r.read_to_end(&mut v).await.unwrap();
            v
        });
        let spec = SendSpec {
            file: temp_file(&data),
            ranges: vec![ByteRange::new(1000, len)],
            mode: Mode::Stream,
        };
        let n = send(
            &engine(DataPath::Sendfile),
            spec,
            vec![tx.pop().unwrap()],
            Progress::new(),
            Cancel::new(),
        )
        .await
        .unwrap();
        assert_eq!(n, len);
        assert_eq!(reader.await.unwrap(), &data[1000..1000 + len as usize]);
    }
}

#[tokio::test]
async fn bad_setups_are_local_errors() {
    let e = engine(DataPath::Copy);
    let f = temp_file(b"x");
    let spec = SendSpec {
        file: Arc::clone(&f),
        ranges: vec![],
        mode: Mode::Stream,
    };
    let r = send(
        &e,
        spec,
        Vec::<TcpStream>::new(),
        Progress::new(),
        Cancel::new(),
    )
    .await;
    // Ours (the FTP door answers 451).
    assert_eq!(r.unwrap_err().fault(), crate::Fault::Local);
    let spec = SendSpec {
        file: f,
        ranges: vec![],
        mode: Mode::Extended { block_size: 1 },
    };
    let (tx, _rx) = pairs(1).await;
    assert!(matches!(
        send(&e, spec, tx, Progress::new(), Cancel::new()).await,
        Err(TransferError::Setup(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_transfer_stops_every_stream_task() {
    let metrics = tokio::runtime::Handle::current().metrics();
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let e = engine(path);
        // Nobody reads: the streams fill their socket buffers and wait.
        let (tx, _rx) = pairs(4).await;
        let spec =
            SendSpec::from_offset(temp_file(&pattern(64 << 20)), 0, Mode::extended()).unwrap();
        let progress = Progress::new();
        let cancel = Cancel::new();
        let (p2, c2, e2) = (Arc::clone(&progress), cancel.clone(), e.clone());
        let h = tokio::spawn(async move { send(&e2, spec, tx, p2, c2).await });
        // Each stream has found its socket full (a wake-up is counted only
        // once a waiting sender resumes, which nobody reading means never).
        while progress.counters().snapshot().eagains < 4 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(
            metrics.num_alive_tasks() >= 5,
            "sender and its stream tasks run"
        );
        cancel.cancel();
        let r = h.await.unwrap();
        // The FTP door answers 426.
        assert_eq!(r.unwrap_err().fault(), crate::Fault::Cancelled);
        // A finished task leaves the runtime's list just after its output is
        // handed over; give it a moment, but a stuck task never leaves.
        for _ in 0..1000 {
            if metrics.num_alive_tasks() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(
            metrics.num_alive_tasks(),
            0,
            "{path}: a task outlived the cancel"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_stream_fails_the_transfer_and_stops_the_rest() {
    let e = engine(DataPath::Copy);
    let (tx, mut rx) = pairs(3).await;
    // One receiver goes away with data unread: the kernel answers with RST.
    let gone = rx.remove(0);
    let spec = SendSpec::from_offset(temp_file(&pattern(32 << 20)), 0, Mode::extended()).unwrap();
    let h = tokio::spawn({
        let e = e.clone();
        async move { send(&e, spec, tx, Progress::new(), Cancel::new()).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    drop(gone);
    let err = h.await.unwrap().unwrap_err();
    // The peer's fault (the FTP door answers 426).
    assert_eq!(err.fault(), crate::Fault::PeerGone, "{err}");
    assert!(matches!(err, TransferError::Connection(_)), "{err:?}");
}
