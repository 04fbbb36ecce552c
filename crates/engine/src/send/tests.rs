use super::*;
use crate::{EngineConfig, PrefetchMode};
use std::io::Write;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

pub(crate) fn temp_file(data: &[u8]) -> Arc<File> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    Arc::new(f)
}

pub(crate) async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

#[tokio::test]
async fn auto_copies_to_a_peer_on_this_host() {
    let (tx, _rx) = pair().await;
    assert!(peer_is_local(&tx));
    assert_eq!(auto_choice(true, 1), DataPath::Copy);
    assert_eq!(auto_choice(true, 1 << 30), DataPath::Copy);
    assert_eq!(auto_choice(false, 1 << 10), DataPath::Copy);
    assert_eq!(auto_choice(false, 1 << 30), DataPath::Sendfile);
    assert_eq!("auto".parse::<DataPath>().unwrap(), DataPath::Auto);
    assert_eq!(EngineConfig::default().data_path, DataPath::Auto);
}

pub(crate) fn engine(path: DataPath, inline: bool) -> Engine {
    engine_cfg(path, inline, PrefetchMode::Kernel)
}

pub(crate) fn engine_with(path: DataPath, mode: PrefetchMode) -> Engine {
    engine_cfg(path, true, mode)
}

fn engine_cfg(path: DataPath, inline: bool, prefetch: PrefetchMode) -> Engine {
    Engine::new(EngineConfig {
        prefetch,
        data_path: path,
        // Small sizes so a few MiB exercise many chunks and windows.
        chunk_size: 256 << 10,
        read_buffer_size: 128 << 10,
        sendfile_prefetch: 512 << 10,
        inline_cached_reads: inline,
        // Below one chunk: every chunk ends a turn, so yields are certain.
        send_quantum: 64 << 10,
        ..EngineConfig::default()
    })
}

async fn send_and_collect(
    e: &Engine,
    data: &[u8],
    off: u64,
    len: u64,
    prefix: &[u8],
) -> (Vec<u8>, Counters) {
    let file = temp_file(data);
    let (tx, mut rx) = pair().await;
    e.prepare_socket(&tx);
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).await.unwrap();
        got
    });
    let c = Counters::new();
    let n = e
        .send_file(&tx, &file, off, len, prefix, &c, &Cancel::new())
        .await
        .unwrap();
    assert_eq!(n, len);
    drop(tx);
    (reader.await.unwrap(), c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_path_sends_the_exact_range() {
    let data = pattern(3 << 20);
    for (path, inline) in [
        (DataPath::Copy, true),
        (DataPath::Copy, false),
        (DataPath::Sendfile, true),
        (DataPath::Splice, true),
    ] {
        let e = engine(path, inline);
        let (got, c) = send_and_collect(&e, &data, 12_345, 2_000_000, b"HDR").await;
        assert_eq!(&got[..3], b"HDR", "{path} inline={inline}");
        assert_eq!(
            &got[3..],
            &data[12_345..2_012_345],
            "{path} inline={inline}"
        );
        let s = c.snapshot();
        assert_eq!(s.bytes_sent, 2_000_003);
        assert!(s.send_calls >= 1);
        assert!(s.yields >= 1, "{path}: a sender yields after its quantum");
        assert_eq!(e.counters().bytes_sent, 2_000_003);
        if path == DataPath::Copy {
            assert_eq!(s.bytes_read_disk, 2_000_000);
        }
        if !inline {
            assert!(s.disk_reads >= 2_000_000 / (128 << 10));
        }
    }
}

#[tokio::test]
async fn zero_length_sends_only_the_prefix() {
    let e = engine(DataPath::Copy, true);
    let (got, _) = send_and_collect(&e, b"", 0, 0, b"EOD").await;
    assert_eq!(got, b"EOD");
}

#[tokio::test]
async fn a_range_past_the_end_is_a_short_file() {
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let e = engine(path, true);
        let file = temp_file(&pattern(1000));
        let (tx, _rx) = pair().await;
        let r = e
            .send_file(&tx, &file, 500, 1000, &[], &Counters::new(), &Cancel::new())
            .await;
        assert!(
            matches!(r, Err(EngineError::ShortFile { at: 1000 })),
            "{path}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_stalled_reader_times_the_sender_out() {
    // The event-loop path and the blocking thread alike.
    for path in [DataPath::Sendfile, DataPath::Blocking] {
        let e = Engine::new(EngineConfig {
            data_path: path,
            idle_timeout: Duration::from_millis(50),
            ..EngineConfig::default()
        });
        let file = temp_file(&pattern(64 << 20));
        let (tx, _rx) = pair().await;
        let r = e
            .send_file(
                &tx,
                &file,
                0,
                64 << 20,
                &[],
                &Counters::new(),
                &Cancel::new(),
            )
            .await;
        assert!(matches!(r, Err(EngineError::Idle)), "{path}: {r:?}");
    }
}

#[tokio::test]
async fn a_blocked_sender_stops_on_cancel() {
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let e = engine(path, true);
        let file = temp_file(&pattern(32 << 20));
        // The peer never reads, so the sender ends up waiting for writability.
        let (tx, _rx) = pair().await;
        let cancel = Cancel::new();
        let c2 = cancel.clone();
        let counters = Arc::new(Counters::new());
        let k = Arc::clone(&counters);
        let e2 = e.clone();
        let h =
            tokio::spawn(async move { e2.send_file(&tx, &file, 0, 32 << 20, &[], &k, &c2).await });
        while counters.snapshot().eagains == 0 {
            tokio::task::yield_now().await;
        }
        cancel.cancel();
        assert!(
            matches!(h.await.unwrap(), Err(EngineError::Cancelled)),
            "{path}"
        );
    }
}
