//! The tpf planner and scheduler wired into the real senders: files moved
//! over loopback in every prefetch mode and data path, a reset connection's
//! reads cancelled, a slow reader planned smaller reads. Assertions are on
//! bytes and counters, never on timings.

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Cancel, Counters, DataPath, Engine, EngineConfig, EngineError, PrefetchMode};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

fn temp_file(data: &[u8]) -> Arc<std::fs::File> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    Arc::new(f)
}

async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

fn config(path: DataPath, prefetch: PrefetchMode) -> EngineConfig {
    EngineConfig {
        data_path: path,
        prefetch,
        read_buffer_size: 128 << 10,
        chunk_size: 256 << 10,
        sendfile_prefetch: 512 << 10,
        prefetch_h_max: 256 << 10,
        sample_interval: Duration::from_millis(20),
        ..EngineConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_and_data_path_moves_the_exact_range() {
    let data = pattern(5 << 20);
    let file = temp_file(&data);
    for path in [DataPath::Copy, DataPath::Sendfile] {
        for mode in [PrefetchMode::Tcp, PrefetchMode::Fixed, PrefetchMode::Kernel] {
            // (`auto` on a file in the cache is `kernel`: its own test below.)
            let e = Engine::new(config(path, mode));
            let (mut rx, tx) = pair().await;
            e.prepare_socket(&tx);
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                rx.read_to_end(&mut got).await.unwrap();
                got
            });
            let c = Counters::new();
            let (off, len) = (4097u64, 4_500_000u64);
            let n = e
                .send_file(&tx, &file, off, len, b"HDR", &c, &Cancel::new())
                .await
                .unwrap();
            assert_eq!(n, len);
            drop(tx);
            let got = reader.await.unwrap();
            assert_eq!(&got[..3], b"HDR", "{path} {mode}");
            assert!(
                got[3..] == data[off as usize..(off + len) as usize],
                "{path} {mode}: bytes differ"
            );
            let s = c.snapshot();
            assert_eq!(s.bytes_sent, len + 3, "{path} {mode}");
            if mode == PrefetchMode::Kernel {
                assert_eq!(s.prefetch_reads, 0, "{path}: kernel mode plans nothing");
            } else {
                // Every byte went through a planned read, once.
                assert!(s.prefetch_reads >= 1, "{path} {mode}: {s:?}");
                assert_eq!(s.bytes_read_disk, len, "{path} {mode}: {s:?}");
                assert_eq!(s.prefetch_bytes_planned, len, "{path} {mode}: {s:?}");
                assert_eq!(s.prefetch_reads_cancelled, 0, "{path} {mode}");
                assert_eq!(e.counters().prefetch_reads, s.prefetch_reads);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_file_under_the_planner_is_a_short_file() {
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let e = Engine::new(config(path, PrefetchMode::Tcp));
        let file = temp_file(&pattern(1000));
        let (_rx, tx) = pair().await;
        let r = e
            .send_file(&tx, &file, 500, 1000, &[], &Counters::new(), &Cancel::new())
            .await;
        assert!(
            matches!(r, Err(EngineError::ShortFile { at: 1000 })),
            "{path}: {r:?}"
        );
    }
}

/// Resets `s` on close (SO_LINGER 0) so the peer sees RST, not FIN.
fn reset(s: TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    nix::sys::socket::setsockopt(&s.as_fd(), nix::sys::socket::sockopt::Linger, &linger).unwrap();
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_has_its_reads_cancelled_and_gets_no_more() {
    for (path, eager) in [
        (DataPath::Copy, true),
        (DataPath::Sendfile, true),
        (DataPath::Copy, false),
    ] {
        // One disk thread and K = 1: with that thread held, one planned read
        // sits in the pool's channel and the rest wait in the scheduler.
        let e = Engine::new(EngineConfig {
            disk_threads: 1,
            prefetch_queue_depth: 1,
            prefetch_h_max: 16 << 10,
            cancel: eager,
            ..config(path, PrefetchMode::Tcp)
        });
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let e2 = e.clone();
        let blocker = tokio::spawn(async move {
            e2.run_blocking(&Cancel::new(), move || gate_rx.recv().is_ok())
                .await
        });
        let file = temp_file(&pattern(8 << 20));
        let (rx, tx) = pair().await;
        e.prepare_socket(&tx);
        let counters = Arc::new(Counters::new());
        let k = Arc::clone(&counters);
        let e3 = e.clone();
        let sender = tokio::spawn(async move {
            e3.send_file(&tx, &file, 0, 8 << 20, &[], &k, &Cancel::new())
                .await
        });
        // The planner issues its first reads when the range opens.
        while e.counters().prefetch_reads < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        reset(rx);
        let r = sender.await.unwrap();
        assert!(
            matches!(r, Err(EngineError::Connection(_))),
            "{path}: {r:?}"
        );
        let s = counters.snapshot();
        assert!(s.prefetch_reads >= 2, "{path}: {s:?}");
        // Every read was still queued or waiting for the held thread.
        assert_eq!(
            s.prefetch_reads_cancelled, s.prefetch_reads,
            "{path}: {s:?}"
        );
        assert_eq!(s.bytes_read_disk, 0, "{path}: {s:?}");
        let issued = e.counters().prefetch_reads;
        gate_tx.send(()).unwrap();
        assert!(blocker.await.unwrap().unwrap());
        // The read handed to the thread before the reset ends: skipped
        // unread with eager cancellation, read and thrown away without.
        while e.counters().prefetch_reads_skipped + e.counters().prefetch_bytes_discarded == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A later job proves the queue is drained; no read was issued for
        // the reset connection afterwards.
        e.run_blocking(&Cancel::new(), || ()).await.unwrap();
        let g = e.counters();
        assert_eq!(g.prefetch_reads, issued, "{path}: {g:?}");
        if eager {
            assert_eq!(g.prefetch_reads_skipped, 1, "{path}: {g:?}");
            assert_eq!(g.bytes_read_disk, 0, "{path}: {g:?}");
            assert_eq!(g.prefetch_bytes_discarded, 0, "{path}: {g:?}");
        } else {
            assert_eq!(g.prefetch_reads_skipped, 0, "{path}: {g:?}");
            assert_eq!(g.bytes_read_disk, 16 << 10, "{path}: {g:?}");
            assert_eq!(g.prefetch_bytes_discarded, 16 << 10, "{path}: {g:?}");
        }
    }
}

/// Reads `len` bytes in `step`-byte bites with a pause between them,
/// publishing its progress.
async fn slow_read(
    mut rx: TcpStream,
    len: usize,
    step: usize,
    pause: Duration,
    got: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; step];
    while got.load(Relaxed) < len {
        match rx.read(&mut buf).await.unwrap() {
            0 => break,
            n => got.fetch_add(n, Relaxed),
        };
        tokio::time::sleep(pause).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_read_ahead_in_proportion_to_its_rate() {
    let cfg = EngineConfig {
        // High enough that it does not cap either reader's reads.
        prefetch_h_max: 16 << 20,
        // Small socket buffers, so the reader's pace shows in the acks soon.
        send_buffer: Some(64 << 10),
        ..config(DataPath::Copy, PrefetchMode::Tcp)
    };
    let e = Engine::new(cfg);
    let mut avg = Vec::new();
    // Two application-limited readers, ten times apart: ~40 MB/s, ~4 MB/s.
    let ms = Duration::from_millis;
    for (len, step, pause) in [
        (64usize << 20, 256usize << 10, ms(6)),
        (16 << 20, 64 << 10, ms(16)),
    ] {
        let file = temp_file(&pattern(len));
        let (rx, tx) = pair().await;
        e.prepare_socket(&tx);
        let got = Arc::new(AtomicUsize::new(0));
        let reader = tokio::spawn(slow_read(rx, len, step, pause, Arc::clone(&got)));
        let e2 = e.clone();
        let sender = tokio::spawn(async move {
            let c = Counters::new();
            e2.send_file(&tx, &file, 0, len as u64, &[], &c, &Cancel::new())
                .await
                .unwrap();
            c.snapshot()
        });
        // Only reads planned in the second half count: by then the rate
        // estimate has left the start-up burst (socket buffers filling at
        // loopback speed) and the initial rate behind.
        while got.load(Relaxed) < len / 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mid = e.counters();
        let s = sender.await.unwrap();
        reader.await.unwrap();
        assert_eq!(got.load(Relaxed), len);
        assert!(s.flow_samples >= 2, "{s:?}");
        let end = e.counters();
        let reads = end.prefetch_reads - mid.prefetch_reads;
        assert!(reads >= 2, "{mid:?} {end:?}");
        avg.push((end.prefetch_bytes_planned - mid.prefetch_bytes_planned) / reads);
    }
    eprintln!("average planned read: fast {} B, slow {} B", avg[0], avg[1]);
    // TDAP sizes a read as (T - T_n) * B_n, T the same for both: a tenth of
    // the rate gets about a tenth of the read-ahead (3x leaves room for noise).
    assert!(
        avg[1] * 3 < avg[0],
        "average read: fast {} B, slow {} B",
        avg[0],
        avg[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_piece_on_a_connection_starts_from_its_measured_rate() {
    // Front doors send a stream in pieces (MODE S 64 MiB, MODE E a block per
    // call) on one DataConn; each piece must start at the rate the last one
    // measured (kept by the connection's flow), not at the planner's
    // initial guess (125 kB/s, i.e. a first read of ~60 kB).
    let e = Engine::new(EngineConfig {
        prefetch_h_max: 1 << 20,
        ..config(DataPath::Copy, PrefetchMode::Tcp)
    });
    let data = pattern(64 << 20);
    let file = temp_file(&data);
    let (mut rx, tx) = pair().await;
    let mut conn = e.data_conn(tx);
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).await.unwrap();
        got
    });
    let first = Counters::new();
    let big = 60u64 << 20;
    conn.send_range(&file, 0, big, &[], &first, &Cancel::new())
        .await
        .unwrap();
    assert!(first.snapshot().flow_samples >= 1, "{:?}", first.snapshot());
    let second = Counters::new();
    conn.send_range(&file, big, 4 << 20, &[], &second, &Cancel::new())
        .await
        .unwrap();
    drop(conn);
    assert!(reader.await.unwrap() == data);
    // Known to be fast, the piece is read in four H_max reads at once.
    let s = second.snapshot();
    assert_eq!(
        (s.prefetch_reads, s.prefetch_bytes_planned),
        (4, 4 << 20),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sends_cached_ranges_unplanned_and_plans_from_the_first_miss() {
    use sluice_platform::fadvise::{fadvise, Advice};
    let data = pattern(6 << 20);
    let file = temp_file(&data);
    for path in [DataPath::Copy, DataPath::Sendfile] {
        // This test disk's cold reads can finish at memory speed: the
        // read-cost judge is `plan::miss`'s own tests; here cachestat decides.
        let e = Engine::new(EngineConfig {
            prefetch_miss_timing: false,
            ..config(path, PrefetchMode::Auto)
        });
        if !e.features().cachestat.is_supported() && path == DataPath::Sendfile {
            continue; // without cachestat, auto plans everything (checked below)
        }
        for cold in [false, true] {
            if cold {
                // Written back and dropped: every page must come from disk.
                // No kernel read-ahead either: on this fast test disk it
                // would have the rest cached before the copy path looks
                // ahead (auto then rightly stays on the kernel's path).
                file.sync_all().unwrap();
                fadvise(file.as_fd(), 0, 0, Advice::DontNeed).unwrap();
                fadvise(file.as_fd(), 0, 0, Advice::Random).unwrap();
            } else {
                // Read once: every page is in the cache.
                let mut buf = vec![0u8; data.len()];
                std::os::unix::fs::FileExt::read_exact_at(&*file, &mut buf, 0).unwrap();
            }
            let (mut rx, tx) = pair().await;
            let mut conn = e.data_conn(tx);
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                rx.read_to_end(&mut got).await.unwrap();
                got
            });
            let c = Counters::new();
            let n = conn
                .send_range(&file, 0, data.len() as u64, b"", &c, &Cancel::new())
                .await
                .unwrap();
            assert_eq!(n, data.len() as u64);
            drop(conn);
            assert!(
                reader.await.unwrap() == data,
                "{path} cold={cold}: bytes differ"
            );
            let s = c.snapshot();
            if cold {
                assert!(
                    s.prefetch_reads >= 1,
                    "{path}: a cold file is planned: {s:?}"
                );
            } else {
                assert_eq!(s.prefetch_reads, 0, "{path}: a cached file is not: {s:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_does_not_plan_the_holes_of_a_sparse_file() {
    // A sparse file: 1 MiB of data in 8 MiB, the rest holes (the lab's
    // generated files are like this on tmpfs). `cachestat` calls holes
    // uncached; counted as misses they made `auto` plan the whole file.
    // On tmpfs when there is one: it never caches a hole (ext4 caches the
    // zeroes it reads, so there the holes look cached after one read).
    let shm = std::path::Path::new("/dev/shm");
    let mut f = if shm.is_dir() {
        tempfile::tempfile_in(shm).unwrap()
    } else {
        tempfile::tempfile().unwrap()
    };
    f.set_len(8 << 20).unwrap();
    let data = pattern(1 << 20);
    std::os::unix::fs::FileExt::write_all_at(&f, &data, 3 << 20).unwrap();
    f.flush().unwrap();
    let mut want = vec![0u8; 8 << 20];
    want[3 << 20..4 << 20].copy_from_slice(&data);
    let file = Arc::new(f);
    let holes = sluice_platform::fs::data_ranges(&file, 0, 8 << 20, 16).unwrap();
    for path in [DataPath::Copy, DataPath::Sendfile] {
        // Timing off: cachestat and the holes alone decide, so the check
        // holds on any disk.
        let e = Engine::new(EngineConfig {
            prefetch_miss_timing: false,
            ..config(path, PrefetchMode::Auto)
        });
        if !e.features().cachestat.is_supported() {
            return; // nothing tells a miss: auto plans everything
        }
        // The data extent is in the cache (just written); the holes never are.
        let (mut rx, tx) = pair().await;
        let mut conn = e.data_conn(tx);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let c = Counters::new();
        let n = conn
            .send_range(&file, 0, 8 << 20, b"", &c, &Cancel::new())
            .await
            .unwrap();
        assert_eq!(n, 8 << 20);
        drop(conn);
        assert!(reader.await.unwrap() == want, "{path}: bytes differ");
        let s = c.snapshot();
        if holes.iter().map(|r| r.end - r.start).sum::<u64>() < 2 << 20 {
            // The file system reports holes: nothing is planned.
            assert_eq!(s.prefetch_reads, 0, "{path}: holes planned: {s:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_plans_a_send_of_a_cold_range_from_its_start() {
    // With the read-cost judge on (the default): a range mostly not in the
    // page cache is the evidence, so the planner takes the whole send at
    // once, with no read of the kernel's before it (that read's read-ahead
    // kept later chunks just resident, and the planner never came: lab
    // tpf-mixed-rates, session 12). Holds on any disk: nothing is timed.
    use sluice_platform::fadvise::{fadvise, Advice};
    let data = pattern(6 << 20);
    let file = temp_file(&data);
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let e = Engine::new(config(path, PrefetchMode::Auto));
        if !e.features().cachestat.is_supported() {
            return; // nothing tells a cold range
        }
        file.sync_all().unwrap();
        fadvise(file.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        let (mut rx, tx) = pair().await;
        let mut conn = e.data_conn(tx);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let c = Counters::new();
        conn.send_range(&file, 0, data.len() as u64, b"", &c, &Cancel::new())
            .await
            .unwrap();
        drop(conn);
        assert!(reader.await.unwrap() == data, "{path}: bytes differ");
        let s = c.snapshot();
        assert_eq!(
            s.prefetch_bytes_planned,
            data.len() as u64,
            "{path}: every byte planned: {s:?}"
        );
    }
}
