//! Shared reads through the engine: real files, real sockets, counters.

use super::*;
use crate::counters::Counters;
use crate::send::tests::{pair, pattern, temp_file};
use tokio::io::AsyncReadExt;

/// A piece's bytes: from its buffer, or from the file when the page
/// cache holds it (`circus_hold` auto or pagecache).
fn contents(p: &SharedPiece, file: &File) -> Vec<u8> {
    match p.bytes() {
        Some(b) => b.to_vec(),
        None => {
            let mut v = vec![0u8; p.len as usize];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut v, p.offset).unwrap();
            v
        }
    }
}

fn engine(region: u64) -> Engine {
    Engine::new(EngineConfig {
        sharing: SharingMode::Circus,
        circus_block: 64 << 10,
        circus_region: region,
        // These tests read the pieces' bytes from the buffers.
        circus_hold: CircusHold::Buffers,
        ..EngineConfig::default()
    })
}

/// One download of `ranges` over `streams` tasks, each piece written
/// at its offset into a copy; returns the copy.
async fn download(
    e: Engine,
    file: Arc<File>,
    ranges: Vec<(u64, u64)>,
    streams: usize,
    size: usize,
) -> Vec<u8> {
    let read = Arc::new(e.share_download(&file, &ranges, streams).unwrap().unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let (read, f) = (Arc::clone(&read), Arc::clone(&file));
        tasks.spawn(async move {
            let (c, cancel) = (Counters::new(), Cancel::new());
            let mut got = Vec::new();
            while let Some(p) = read.next(&c, &cancel).await.unwrap() {
                got.push((p.offset, contents(&p, &f)));
                tokio::task::yield_now().await;
                read.sent(p);
            }
            got
        });
    }
    let mut out = vec![0u8; size];
    let mut seen = vec![false; size];
    while let Some(r) = tasks.join_next().await {
        for (off, bytes) in r.unwrap() {
            for (i, b) in bytes.iter().enumerate() {
                let at = off as usize + i;
                assert!(!seen[at], "byte {at} twice");
                seen[at] = true;
                out[at] = *b;
            }
        }
    }
    out
}

#[tokio::test]
async fn eight_downloads_of_one_file_read_it_about_once() {
    let e = engine(1 << 20);
    let size = (3 << 20) + 12_345;
    let data = pattern(size);
    let file = temp_file(&data);
    let mut all = tokio::task::JoinSet::new();
    for i in 0..8usize {
        let (e, file) = (e.clone(), Arc::clone(&file));
        all.spawn(download(e, file, vec![(0, size as u64)], 1 + i % 4, size));
    }
    while let Some(got) = all.join_next().await {
        assert!(got.unwrap() == data, "a copy differs");
    }
    let s = e.counters();
    assert!(s.shared_bytes_read >= size as u64, "{s:?}");
    assert!(s.shared_bytes_read < size as u64 * 3 / 2, "{s:?}");
    assert_eq!(s.shared_bytes_read, s.bytes_read_disk);
    // Everybody gone: the file's selector and blocks with them.
    assert_eq!(e.inner.sharing.as_ref().unwrap().open_files(), 0);
}

#[tokio::test]
async fn partial_ranges_come_with_their_offsets() {
    let e = engine(256 << 10);
    let size = 1 << 20;
    let data = pattern(size);
    let file = temp_file(&data);
    let ranges = vec![(100, 70_000), (200_000, 1), (500_000, 600_000)];
    let got = download(e, file, ranges.clone(), 3, size).await;
    for (o, l) in ranges {
        let end = (o + l).min(size as u64) as usize;
        assert!(got[o as usize..end] == data[o as usize..end]);
    }
}

#[tokio::test]
async fn a_download_dropped_midway_frees_its_file_and_the_rest_go_on() {
    let e = engine(512 << 10);
    let size = 2 << 20;
    let data = pattern(size);
    let file = temp_file(&data);
    let quitter = e
        .share_download(&file, &[(0, size as u64)], 2)
        .unwrap()
        .unwrap();
    let (c, cancel) = (Counters::new(), Cancel::new());
    let p = quitter.next(&c, &cancel).await.unwrap().unwrap();
    assert_eq!(
        p.bytes().unwrap(),
        &data[p.offset as usize..(p.offset + p.len) as usize]
    );
    let stayer = download(
        e.clone(),
        Arc::clone(&file),
        vec![(0, size as u64)],
        2,
        size,
    );
    drop(p);
    drop(quitter);
    assert!(stayer.await == data);
    assert_eq!(e.inner.sharing.as_ref().unwrap().open_files(), 0);
}

#[tokio::test]
async fn pieces_go_out_behind_their_header_on_a_connection() {
    for hold in [CircusHold::Buffers, CircusHold::PageCache, CircusHold::Auto] {
        let e = Engine::new(EngineConfig {
            sharing: SharingMode::Circus,
            circus_block: 64 << 10,
            circus_hold: hold,
            ..EngineConfig::default()
        });
        let data = pattern(300_000);
        let file = temp_file(&data);
        let (tx, mut rx) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut conn = e.data_conn(tx);
        let read = e
            .share_download(&file, &[(0, 300_000)], 1)
            .unwrap()
            .unwrap();
        let (c, cancel) = (Counters::new(), Cancel::new());
        let mut want = Vec::new();
        while let Some(p) = read.next(&c, &cancel).await.unwrap() {
            // Auto: the temporary file was just written, so cached.
            if hold != CircusHold::Auto {
                assert_eq!(p.bytes().is_some(), hold == CircusHold::Buffers);
            }
            // Two MODE E blocks per piece, each behind its header.
            let half = p.len / 2;
            for (o, l) in [(p.offset, half), (p.offset + half, p.len - half)] {
                let head = o.to_be_bytes();
                let n = conn.send_piece(&head, &p, o, l, &c, &cancel).await.unwrap();
                assert_eq!(n, l);
                want.extend_from_slice(&head);
                want.extend_from_slice(&data[o as usize..(o + l) as usize]);
            }
            read.sent(p);
        }
        conn.shutdown().await.unwrap();
        drop(conn);
        assert!(reader.await.unwrap() == want, "{hold:?}");
        assert_eq!(c.snapshot().shared_bytes_sent, 300_000);
    }
}

#[tokio::test]
async fn in_order_downloads_get_their_bytes_in_file_order_and_share_reads() {
    let e = engine(1 << 20);
    let size = (3 << 20) + 999;
    let data = pattern(size);
    let file = temp_file(&data);
    // Shorter than a block: not worth sharing.
    assert!(matches!(
        e.join_readers_in_order(&file, &[(0, 1000)]).unwrap(),
        Readers::Unshared
    ));
    let mut all = tokio::task::JoinSet::new();
    for from in [0usize, 100_000, 0] {
        let (e, file) = (e.clone(), Arc::clone(&file));
        all.spawn(async move {
            let Readers::Shared(read) = e
                .join_readers_in_order(&file, &[(from as u64, (size - from) as u64)])
                .unwrap()
            else {
                panic!("not shared under circus")
            };
            let (c, cancel) = (Counters::new(), Cancel::new());
            let mut got = Vec::new();
            while let Some(p) = read.next(&c, &cancel).await.unwrap() {
                assert_eq!(p.offset as usize, from + got.len(), "out of order");
                got.extend_from_slice(p.bytes().unwrap());
                tokio::task::yield_now().await;
                read.sent(p);
            }
            (from, got)
        });
    }
    while let Some(r) = all.join_next().await {
        let (from, got) = r.unwrap();
        assert!(got == data[from..], "a copy from {from} differs");
    }
    let s = e.counters();
    assert!(s.shared_bytes_read < 2 * size as u64, "{s:?}");
    assert_eq!(e.inner.sharing.as_ref().unwrap().open_files(), 0);
}

/// Written back and dropped from the page cache: every page is missing.
fn cold(file: &File) {
    use sluice_platform::fadvise::{fadvise, Advice};
    file.sync_all().unwrap();
    fadvise(file.as_fd(), 0, 0, Advice::DontNeed).unwrap();
}

#[test]
fn auto_shares_an_in_order_reader_only_while_another_reads_the_file() {
    let e = Engine::new(EngineConfig {
        sharing: SharingMode::Auto,
        circus_block: 64 << 10,
        ..EngineConfig::default()
    });
    let file = temp_file(&pattern(1 << 20));
    cold(&file);
    let all = [(0u64, 1u64 << 20)];
    let first = e.join_readers_in_order(&file, &all).unwrap();
    assert!(matches!(first, Readers::Alone(_)), "{first:?}");
    // A MODE E or in-order reader meanwhile, of a file not in memory: shared.
    let second = e.join_readers_in_order(&file, &all).unwrap();
    assert!(matches!(second, Readers::Shared(_)), "{second:?}");
    let third = e.join_readers(&file, &all, 4).unwrap();
    assert!(matches!(third, Readers::Shared(_)), "{third:?}");
    drop((first, second, third));
    // Everybody gone: alone again.
    let again = e.join_readers_in_order(&file, &all).unwrap();
    assert!(matches!(again, Readers::Alone(_)), "{again:?}");
}

#[test]
fn auto_lets_readers_of_a_file_in_memory_read_for_themselves() {
    let e = Engine::new(EngineConfig {
        sharing: SharingMode::Auto,
        circus_block: 64 << 10,
        ..EngineConfig::default()
    });
    if !e.features().cachestat.is_supported() {
        return; // nothing tells what is in memory: shared when busy, as before
    }
    // Just written: every page is in the page cache.
    let file = temp_file(&pattern(1 << 20));
    let all = [(0u64, 1u64 << 20)];
    let first = e.join_readers_in_order(&file, &all).unwrap();
    let second = e.join_readers_in_order(&file, &all).unwrap();
    assert!(matches!(second, Readers::Alone(_)), "{second:?}");
    let third = e.join_readers(&file, &all, 4).unwrap();
    assert!(matches!(third, Readers::Alone(_)), "{third:?}");
    drop((second, third));
    // Evicted meanwhile: the next reader of the busy file shares.
    cold(&file);
    let fourth = e.join_readers(&file, &all, 4).unwrap();
    assert!(matches!(fourth, Readers::Shared(_)), "{fourth:?}");
    drop((first, fourth));
}

#[test]
fn auto_shares_only_a_busy_file_not_in_memory() {
    use Residency::*;
    assert!(auto_shares(true, NotInMemory));
    assert!(
        !auto_shares(true, InMemory),
        "a warm file saves no disk read"
    );
    assert!(
        !auto_shares(false, NotInMemory),
        "a lone reader has nobody to share with"
    );
    assert!(!auto_shares(false, InMemory));
    // Without cachestat: as before, shared while another reads.
    assert!(auto_shares(true, Unknown));
    assert!(!auto_shares(false, Unknown));
}

#[test]
fn off_means_no_sharing() {
    let e = Engine::new(EngineConfig {
        sharing: SharingMode::Off,
        ..EngineConfig::default()
    });
    let file = temp_file(b"abc");
    assert!(!e.sharing());
    assert!(e.share_download(&file, &[(0, 3)], 1).unwrap().is_none());
}

/// Six files, two downloads each, all at once, on an engine-wide budget of
/// eight blocks (each file's region alone would allow sixteen): every copy
/// is intact, the budget's count never passed eight, and with everybody
/// gone nothing is held. Files refused memory are woken by others' drops
/// (nothing of their own would wake them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_on_one_small_budget_all_complete_within_it() {
    let e = Engine::new(EngineConfig {
        sharing: SharingMode::Circus,
        circus_block: 64 << 10,
        circus_region: 1 << 20,
        circus_budget: 512 << 10,
        ..EngineConfig::default()
    });
    let size = (1 << 20) + 777;
    let mut all = tokio::task::JoinSet::new();
    let mut want = Vec::new();
    for f in 0..6usize {
        let data: Vec<u8> = pattern(size)
            .iter()
            .map(|b| b.wrapping_add(f as u8))
            .collect();
        let file = temp_file(&data);
        for streams in [1usize, 3] {
            let (e, file) = (e.clone(), Arc::clone(&file));
            all.spawn(async move {
                (
                    f,
                    download(e, file, vec![(0, size as u64)], streams, size).await,
                )
            });
        }
        want.push(data);
    }
    while let Some(r) = all.join_next().await {
        let (f, got) = r.unwrap();
        assert!(got == want[f], "file {f}: a copy differs");
    }
    let sharing = e.inner.sharing.as_ref().unwrap();
    let b = sharing.budget();
    assert!(b.peak() <= 8, "peak {} blocks", b.peak());
    assert_eq!(b.total(), 0);
    drop(b);
    assert_eq!(sharing.open_files(), 0);
}

#[test]
fn the_auto_budget_is_most_of_the_room_within_bounds() {
    use super::auto_budget;
    // lab circus-steady: a 256 MiB cgroup with ~10 MiB used at start.
    assert_eq!(auto_budget(Some(246 << 20)) >> 20, 147);
    assert_eq!(auto_budget(Some(8 << 20)), 16 << 20);
    assert_eq!(auto_budget(Some(64 << 30)), 1 << 30);
    assert_eq!(auto_budget(None), 64 << 20);
}
