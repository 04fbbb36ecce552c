//! The page-cache tracer end to end: writing a new file adds its pages to
//! the page cache and removing it deletes them; the tracer, filtered to that
//! file's device and inode, must see both, and nothing of other files. Needs
//! root and tracefs (the lab machine and CI have both); elsewhere the test
//! says so and returns. It does not drop caches (other work on the machine
//! keeps its cache).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use sluice_lab::pagetrace::{self, FileWatch, Tracer, PAGE};

#[test]
fn sees_the_adds_and_deletes_of_one_file() {
    if !nix::unistd::geteuid().is_root() || !std::path::Path::new("/sys/kernel/tracing").exists() {
        eprintln!("skipped: needs root and tracefs");
        return;
    }
    let dir = std::path::PathBuf::from(format!(
        "/var/tmp/sluice-lab-pagetrace-test-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("watched.bin");
    let other = dir.join("other.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    let ino = pagetrace::inode(&path).unwrap();
    let dev = pagetrace::kernel_dev(&path).unwrap();
    let tracer = Tracer::start(dev, [ino].into_iter().collect::<BTreeSet<_>>()).unwrap();
    let size = 256 * PAGE;
    f.write_all(&vec![1u8; size as usize]).unwrap();
    f.sync_all().unwrap();
    std::fs::write(&other, vec![2u8; 64 * PAGE as usize]).unwrap();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&other).unwrap();
    // The tracer drains what the kernel buffered before it returns.
    let log = tracer.finish().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        log.events.iter().all(|e| e.ino == ino),
        "only the watched inode is kept"
    );
    let watch = FileWatch {
        reset_at: Some(0.0),
        received: vec![],
        final_received: size,
    };
    let stats = pagetrace::analyze_all(
        &log.events,
        &[(ino, watch)].into_iter().collect::<BTreeMap<_, _>>(),
    );
    let s = &stats[&ino];
    assert_eq!(
        s.added, size,
        "every written page entered the cache once: {s:?}, lost {}",
        log.lost
    );
    assert_eq!(s.deleted, size, "and left it on unlink: {s:?}");
    // Written in order, so one run after a reset at t=0 of the monotonic clock.
    assert_eq!(s.bytes_after_reset, size);
    assert!(s.reads_after_reset >= 1);
    // Everything was "received" (final_received = size): nothing counts as evicted unused.
    assert_eq!(s.evicted_never_received, 0);
}
