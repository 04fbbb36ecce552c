//! `--prefetch auto`'s run-time choice, sans-I/O: the kernel's read-ahead
//! while reads cost what memory costs, the planner once they cost what a
//! disk costs, decided per file and up front where the evidence is.
//!
//! `cachestat` alone misjudged: the holes of a sparse file are never in the
//! page cache (tmpfs reads them as the zero page without caching anything),
//! so every chunk of a sparse file looked like a miss and `auto` chose the
//! planner where the kernel's read-ahead was right (lab cue-scaling on veth:
//! below nginx's throughput until run with `--prefetch kernel`). The caller
//! counts only data extents as missing (`pagecache::missing_data_bytes`).
//!
//! Two questions, both answered by [`FileJudge`]:
//! - At the start of a send ([`FileJudge::up_front`]): is the rest of the
//!   range (mostly) in memory? If not, the planner takes the whole send. A
//!   send that started on the kernel's path and went to the planner only at
//!   its first miss never got there under a memory cgroup: the read that
//!   served the miss started the kernel's read-ahead, each next chunk was
//!   then just resident, no second miss came, and the cgroup evicted that
//!   read-ahead before slow senders reached it (lab tpf-mixed-rates, session
//!   12: `auto` 14-15 MB/s, the 1 Mbit/s class at 32-35 %, 1.8-1.9 disk
//!   bytes per byte sent; `--prefetch tcp` 30 MB/s, every class at 100 %).
//! - At a chunk found missing later in a send ([`FileJudge::on_miss`]): do
//!   this file's reads cost a disk? What a read of a file cost is kept per
//!   file, for every reader of it, for [`HOLD`]: the second connection of
//!   a cold file does not measure again, and one that finds a measured
//!   memory-speed file (a file system that answers without a disk, a
//!   misreported page) stays with the kernel.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A read this slow or slower, per byte, was waiting for a device: 1 GB/s
/// (a page-cache copy of 1 MiB takes ~0.1-0.3 ms here; the lab's throttled
/// disk 26 ms at 40 MB/s; a SATA SSD ~2 ms).
const MEMORY_NANOS_PER_BYTE: u64 = 1;
/// Plus a fixed allowance for the hop to a disk thread and back, which a
/// loaded machine stretches (2 cores shared by five builders: ~1 ms of
/// run-queue wait is common).
const HOP: Duration = Duration::from_millis(1);
/// How long a file's measured read cost stands for every reader of it. A
/// download of the lab's files at 1 Mbit/s lasts ~100 s and meets a miss
/// whenever the cgroup evicts what was ahead of it; one measuring read a
/// minute per file is cheap, and a file that became cached meanwhile is
/// found resident by `cachestat` before the judge is asked at all.
pub const HOLD: Duration = Duration::from_secs(60);
/// Files remembered at most (expired ones go first, then the oldest).
const MAX_FILES: usize = 4096;

/// Whether a read of `bytes` that took `took` (from its submission to its
/// result: the queue wait counts, it is what the sender waited) waited for
/// a device.
pub fn read_cost_is_disk(bytes: u64, took: Duration) -> bool {
    took > HOP + Duration::from_nanos(bytes.saturating_mul(MEMORY_NANOS_PER_BYTE))
}

/// What the sender does with a range `cachestat` was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissVerdict {
    /// Stay on the kernel's read-ahead (the range is mostly in memory, or
    /// reading this file cost no more than memory).
    Kernel,
    /// Hand the rest of the send to the planner: reads cost a disk.
    Planner,
    /// Not known yet: read the chunk on a disk thread without starting the
    /// kernel's read-ahead, report its cost ([`FileJudge::read`]), then ask
    /// again.
    Measure,
}

/// What reads of each file cost, shared by every reader of the file.
/// `K` names a file (the engine uses device and inode); `now` is any clock
/// with a fixed epoch (the engine's `Instant` since start, tests' virtual
/// time).
#[derive(Debug, Clone)]
pub struct FileJudge<K> {
    /// Per file: whether its latest measured read waited for a device, and when.
    seen: HashMap<K, (bool, Duration)>,
    hold: Duration,
}

impl<K: Hash + Eq + Copy> Default for FileJudge<K> {
    fn default() -> Self {
        FileJudge::new(HOLD)
    }
}

impl<K: Hash + Eq + Copy> FileJudge<K> {
    /// A judge whose verdicts stand for `hold`.
    pub fn new(hold: Duration) -> Self {
        FileJudge {
            seen: HashMap::new(),
            hold,
        }
    }

    /// A read of `bytes` of file `key` that went to a disk thread took
    /// `took`. Only the latest read counts: a file that was cached and is
    /// evicted must hand over at its first slow read, and one that became
    /// cached must stop handing over.
    pub fn read(&mut self, key: K, bytes: u64, took: Duration, now: Duration) {
        if self.seen.len() >= MAX_FILES && !self.seen.contains_key(&key) {
            let hold = self.hold;
            self.seen
                .retain(|_, (_, at)| now.saturating_sub(*at) < hold);
            if self.seen.len() >= MAX_FILES {
                if let Some(oldest) = self
                    .seen
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(k, _)| *k)
                {
                    self.seen.remove(&oldest);
                }
            }
        }
        self.seen.insert(key, (read_cost_is_disk(bytes, took), now));
    }

    /// Whether reads of `key` were measured to wait for a device (`None`:
    /// not measured within the hold time).
    pub fn judged(&self, key: K, now: Duration) -> Option<bool> {
        self.seen
            .get(&key)
            .filter(|(_, at)| now.saturating_sub(*at) < self.hold)
            .map(|(disk, _)| *disk)
    }

    /// At the start of a send: `missing` of the `len` data bytes left to
    /// send (holes not counted) are not in the page cache. Mostly missing
    /// is the evidence: the planner takes the whole send, unless this
    /// file's reads were measured at memory speed.
    pub fn up_front(&self, key: K, missing: u64, len: u64, now: Duration) -> MissVerdict {
        if missing <= len / 2 {
            return MissVerdict::Kernel;
        }
        match self.judged(key, now) {
            Some(false) => MissVerdict::Kernel,
            _ => MissVerdict::Planner,
        }
    }

    /// Later in a send, at a chunk of `len` bytes of which `missing` data
    /// bytes are not in the page cache.
    pub fn on_miss(&self, key: K, missing: u64, len: u64, now: Duration) -> MissVerdict {
        // A few pages missing are evicted stragglers: one read fetches them.
        if missing <= len / 2 {
            return MissVerdict::Kernel;
        }
        match self.judged(key, now) {
            None => MissVerdict::Measure,
            Some(true) => MissVerdict::Planner,
            Some(false) => MissVerdict::Kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const A: u32 = 1;
    const B: u32 = 2;

    /// The virtual clock: reads are reported with the durations a device
    /// would have taken, at virtual instants; nothing here waits.
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_range_mostly_in_memory_stays_with_the_kernel() {
        let j = FileJudge::<u32>::default();
        assert_eq!(j.on_miss(A, 0, 4 * MIB, s(0)), MissVerdict::Kernel);
        assert_eq!(j.on_miss(A, 2 * MIB, 4 * MIB, s(0)), MissVerdict::Kernel);
        assert_eq!(j.up_front(A, 0, 64 * MIB, s(0)), MissVerdict::Kernel);
        assert_eq!(j.up_front(A, 32 * MIB, 64 * MIB, s(0)), MissVerdict::Kernel);
    }

    #[test]
    fn a_send_whose_rest_is_not_in_memory_is_planned_from_its_start() {
        // No read measured yet: the evidence is the whole range.
        let j = FileJudge::<u32>::default();
        assert_eq!(
            j.up_front(A, 60 * MIB, 64 * MIB, s(0)),
            MissVerdict::Planner
        );
    }

    #[test]
    fn a_file_measured_at_memory_speed_stays_with_the_kernel_up_front() {
        let mut j = FileJudge::<u32>::default();
        j.read(A, MIB, Duration::from_micros(150), s(0));
        assert_eq!(j.up_front(A, 64 * MIB, 64 * MIB, s(1)), MissVerdict::Kernel);
        // Another file is not judged by it.
        assert_eq!(
            j.up_front(B, 64 * MIB, 64 * MIB, s(1)),
            MissVerdict::Planner
        );
    }

    #[test]
    fn the_first_miss_of_a_file_is_measured_before_anything_is_chosen() {
        let j = FileJudge::<u32>::default();
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(0)), MissVerdict::Measure);
    }

    #[test]
    fn a_throttled_disk_hands_every_reader_of_the_file_to_the_planner() {
        let mut j = FileJudge::<u32>::default();
        // 1 MiB at 40 MB/s: 26 ms, measured by one connection.
        j.read(A, MIB, ms(26), s(0));
        // A second connection of the same file does not measure again.
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(5)), MissVerdict::Planner);
        assert_eq!(j.judged(A, s(5)), Some(true));
        // Another file is measured on its own.
        assert_eq!(j.on_miss(B, 4 * MIB, 4 * MIB, s(5)), MissVerdict::Measure);
    }

    #[test]
    fn a_verdict_stands_for_the_hold_time_then_is_measured_again() {
        let mut j = FileJudge::<u32>::new(s(60));
        j.read(A, MIB, ms(26), s(10));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(69)), MissVerdict::Planner);
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(70)), MissVerdict::Measure);
        assert_eq!(j.judged(A, s(70)), None);
    }

    #[test]
    fn holes_read_at_memory_speed_keep_the_kernel() {
        // A sparse file on tmpfs: `cachestat` calls its holes misses, the
        // read of one MiB of zeroes takes 150 us.
        let mut j = FileJudge::<u32>::default();
        j.read(A, MIB, Duration::from_micros(150), s(0));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(0)), MissVerdict::Kernel);
        // A loaded machine's run-queue wait is not a disk.
        j.read(A, MIB, Duration::from_micros(1800), s(0));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(0)), MissVerdict::Kernel);
    }

    #[test]
    fn only_the_latest_read_counts() {
        let mut j = FileJudge::<u32>::default();
        j.read(A, MIB, Duration::from_micros(200), s(0));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(0)), MissVerdict::Kernel);
        // Evicted since: the next read waits for the disk.
        j.read(A, MIB, ms(30), s(1));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(1)), MissVerdict::Planner);
        // Cached again (another reader brought it in).
        j.read(A, MIB, Duration::from_micros(300), s(2));
        assert_eq!(j.on_miss(A, 4 * MIB, 4 * MIB, s(2)), MissVerdict::Kernel);
    }

    #[test]
    fn a_bigger_read_is_allowed_its_copy_time() {
        // 8 MiB copied at ~2.5 GB/s (3.4 ms) is memory; at 40 MB/s it is not.
        assert!(!read_cost_is_disk(8 * MIB, Duration::from_micros(3400)));
        assert!(read_cost_is_disk(8 * MIB, ms(210)));
    }

    #[test]
    fn the_memory_of_files_is_bounded() {
        let mut j = FileJudge::<u32>::new(s(60));
        for k in 0..(MAX_FILES as u32 + 10) {
            j.read(k, MIB, ms(26), s(0));
        }
        assert!(j.seen.len() <= MAX_FILES);
        // The newest is remembered.
        assert_eq!(j.judged(MAX_FILES as u32 + 9, s(1)), Some(true));
    }
}
