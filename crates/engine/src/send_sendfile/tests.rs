//! Tests of the sendfile data path.

use super::*;
use crate::send::tests::{engine_with, pair, pattern, temp_file};
use crate::{DataPath, PrefetchMode};
use sluice_platform::fadvise;
use tokio::io::AsyncReadExt;

/// A file of `len` pattern bytes written back and dropped from the
/// page cache (the kernel drops only clean pages).
fn paged_out(len: usize) -> (Vec<u8>, Arc<File>) {
    let data = pattern(len);
    let file = temp_file(&data);
    file.sync_all().unwrap();
    fadvise::fadvise(file.as_fd(), 0, 0, fadvise::Advice::DontNeed).unwrap();
    (data, file)
}

/// A connected pair whose far end is read to its end by a task.
/// Sends all of `file` through `e` to a reader, checks the reader got
/// `data`, and returns the send's counters.
async fn send_whole(e: &Engine, file: &Arc<File>, data: &[u8]) -> Counters {
    let (tx, reader) = connected_reader().await;
    let c = Counters::new();
    e.send_file(&tx, file, 0, data.len() as u64, &[], &c, &Cancel::new())
        .await
        .unwrap();
    drop(tx);
    assert_eq!(reader.await.unwrap(), data);
    c
}

async fn connected_reader() -> (tokio::net::TcpStream, tokio::task::JoinHandle<Vec<u8>>) {
    let (tx, mut rx) = pair().await;
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).await.unwrap();
        got
    });
    (tx, reader)
}

#[test]
fn a_short_sendfile_is_a_full_socket_only_short_of_the_files_end() {
    // 400 kB of 4 MiB taken, 1 MiB into a 64 MiB file: the mark stopped it.
    assert!(full_after(400_000, 4 << 20, 1 << 20, Some(64 << 20)));
    // All taken: try again (the socket may have room left).
    assert!(!full_after(4 << 20, 4 << 20, 5 << 20, Some(64 << 20)));
    // Nothing taken is not a short call (0 is the file's end).
    assert!(!full_after(0, 4 << 20, 1 << 20, Some(64 << 20)));
    // Short at the file's end (cut under the sender): not full; the
    // next call says so at once.
    assert!(!full_after(500, 1000, 1000, Some(1000)));
    // The length unknown: do not guess.
    assert!(!full_after(400_000, 4 << 20, 1 << 20, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_mode_sends_cold_ranges_through_the_disk_threads() {
    let (data, file) = paged_out(3 << 20);
    let e = engine_with(DataPath::Sendfile, PrefetchMode::Kernel);
    assert!(e.config().sendfile_resident_check);
    let cold = e.features().cachestat.is_supported() && !e.is_resident(&file, 0, 3 << 20);
    let (tx, reader) = connected_reader().await;
    let c = Counters::new();
    e.send_file(&tx, &file, 100, (3 << 20) - 100, b"H", &c, &Cancel::new())
        .await
        .unwrap();
    drop(tx);
    let got = reader.await.unwrap();
    assert_eq!(&got[..1], b"H");
    assert_eq!(&got[1..], &data[100..]);
    if cold {
        // The first range was not cached: read on a disk thread, not by
        // a sendfile waiting for the disk on the loop.
        assert!(c.snapshot().disk_reads >= 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_not_in_memory_is_read_in_off_the_loop_then_sent_by_sendfile() {
    // 8 chunks of 256 KiB (these tests' chunk size), paged out.
    let (data, file) = paged_out(2 << 20);
    let e = engine_with(DataPath::Sendfile, PrefetchMode::Kernel);
    if !e.features().cachestat.is_supported() || e.is_resident(&file, 0, 2 << 20) {
        return; // nothing tells, or the pages stayed: nothing to see
    }
    let c = send_whole(&e, &file, &data).await;
    // Each chunk found missing is read whole on a disk thread into the
    // page cache (the kernel's read-ahead may bring later ones in),
    // then sent by `sendfile`; the copy path read 128 KiB buffers
    // (these tests' `read_buffer_size`) and held each until the
    // socket took it.
    let s = c.snapshot();
    assert!(s.disk_reads >= 1, "{s:?}");
    assert_eq!(s.bytes_read_disk, s.disk_reads * (256 << 10), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendfile_brings_cold_pages_in_off_the_loop() {
    let (data, file) = paged_out(2 << 20);
    let e = engine_with(DataPath::Sendfile, PrefetchMode::Fixed);
    let cold = e.features().cachestat.is_supported() && !e.is_resident(&file, 0, 2 << 20);
    let c = send_whole(&e, &file, &data).await;
    if cold {
        // Every window was read through a disk thread before sendfile ran.
        assert!(c.snapshot().disk_reads >= 1);
        assert_eq!(c.snapshot().bytes_read_disk, 2 << 20);
    }
}
