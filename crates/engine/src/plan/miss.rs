//! `--prefetch auto`'s run-time choice, sans-I/O: the kernel's read-ahead
//! while reads cost what memory costs, the planner once they cost what a
//! disk costs.
//!
//! `cachestat` alone misjudged: the holes of a sparse file are never in the
//! page cache (tmpfs reads them as the zero page without caching anything),
//! so every chunk of a sparse file looked like a miss and `auto` chose the
//! planner where the kernel's read-ahead was right (lab cue-scaling on veth:
//! below nginx's throughput until run with `--prefetch kernel`). The caller
//! now counts only data extents as missing (`pagecache::missing_data_bytes`)
//! and this judge asks, before the planner takes a send, what the reads that
//! went to a disk thread really cost: a miss that reads at memory speed (a
//! file system that answers without a disk, a misreported page) stays with
//! the kernel.

use std::time::Duration;

/// A read this slow or slower, per byte, was waiting for a device: 1 GB/s
/// (a page-cache copy of 1 MiB takes ~0.1-0.3 ms here; the lab's throttled
/// disk 26 ms at 40 MB/s; a SATA SSD ~2 ms).
const MEMORY_NANOS_PER_BYTE: u64 = 1;
/// Plus a fixed allowance for the hop to a disk thread and back, which a
/// loaded machine stretches (2 cores shared by five builders: ~1 ms of
/// run-queue wait is common).
const HOP: Duration = Duration::from_millis(1);

/// What the sender does at a chunk `cachestat` calls a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissVerdict {
    /// Stay on the kernel's read-ahead (the chunk is mostly in memory, or
    /// reading it cost no more than memory).
    Kernel,
    /// Hand the rest of the send to the planner: reads cost a disk.
    Planner,
    /// Not known yet: read the chunk on a disk thread, report its cost
    /// ([`MissJudge::read`]), then ask again.
    Measure,
}

/// One connection's memory of what its reads cost. Only the latest read
/// counts: a file that was cached and is evicted must hand over at its
/// first slow read, and one that became cached must stop handing over.
#[derive(Debug, Clone, Default)]
pub struct MissJudge {
    disk_bound: Option<bool>,
}

impl MissJudge {
    /// A read of `bytes` that went to a disk thread took `took` from its
    /// submission to its result (the queue wait counts: it is what the
    /// sender waited).
    pub fn read(&mut self, bytes: u64, took: Duration) {
        let memory = HOP + Duration::from_nanos(bytes.saturating_mul(MEMORY_NANOS_PER_BYTE));
        self.disk_bound = Some(took > memory);
    }

    /// At a chunk of `len` bytes of which `missing` data bytes (holes not
    /// counted) are not in the page cache.
    pub fn on_miss(&self, missing: u64, len: u64) -> MissVerdict {
        // A few pages missing are evicted stragglers: one read fetches them.
        if missing <= len / 2 {
            return MissVerdict::Kernel;
        }
        match self.disk_bound {
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

    /// The virtual clock: reads are reported with the durations a device
    /// would have taken; nothing here waits.
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_range_mostly_in_memory_stays_with_the_kernel() {
        let j = MissJudge::default();
        assert_eq!(j.on_miss(0, 4 * MIB), MissVerdict::Kernel);
        assert_eq!(j.on_miss(2 * MIB, 4 * MIB), MissVerdict::Kernel);
    }

    #[test]
    fn the_first_miss_is_measured_before_anything_is_chosen() {
        let j = MissJudge::default();
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Measure);
    }

    #[test]
    fn a_throttled_disk_hands_the_send_to_the_planner() {
        let mut j = MissJudge::default();
        // 1 MiB at 40 MB/s: 26 ms.
        j.read(MIB, ms(26));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Planner);
    }

    #[test]
    fn holes_read_at_memory_speed_keep_the_kernel() {
        // A sparse file on tmpfs: `cachestat` calls its holes misses, the
        // read of one MiB of zeroes takes 150 us.
        let mut j = MissJudge::default();
        j.read(MIB, Duration::from_micros(150));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Kernel);
        // A loaded machine's run-queue wait is not a disk.
        j.read(MIB, Duration::from_micros(1800));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Kernel);
    }

    #[test]
    fn only_the_latest_read_counts() {
        let mut j = MissJudge::default();
        j.read(MIB, Duration::from_micros(200));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Kernel);
        // Evicted since: the next read waits for the disk.
        j.read(MIB, ms(30));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Planner);
        // Cached again (another reader brought it in).
        j.read(MIB, Duration::from_micros(300));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Kernel);
    }

    #[test]
    fn a_bigger_read_is_allowed_its_copy_time() {
        let mut j = MissJudge::default();
        // 8 MiB copied at ~2.5 GB/s (3.4 ms) is memory; at 40 MB/s it is not.
        j.read(8 * MIB, Duration::from_micros(3400));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Kernel);
        j.read(8 * MIB, ms(210));
        assert_eq!(j.on_miss(4 * MIB, 4 * MIB), MissVerdict::Planner);
    }
}
