//! `--prefetch auto`, the I/O side of `plan::miss`: asks `cachestat` (holes
//! not counted) what a send has in memory, names files by device and inode
//! for the engine-wide [`FileJudge`], and times the reads it measures with.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::plan::{FileJudge, MissVerdict};
use crate::prefetch::pagecache::missing_data_bytes;
use crate::Engine;

/// A file as the judge knows it.
type Key = (u64, u64);

/// The most of a send's rest that is asked up front. A send's next 64 MiB
/// (a MODE S piece) is where the evidence is; a longer range costs its
/// `cachestat` walk per send and, in a finely fragmented sparse file, more
/// extents than `missing_data_bytes` walks (past its 8th the rest counts
/// as data, i.e. as missing). Later misses are the judge's.
pub(crate) const UP_FRONT_MAX: u64 = 64 << 20;

/// What reads of each file cost, for every reader of it (one per engine).
#[derive(Debug)]
pub(crate) struct ReadCosts {
    judge: Mutex<FileJudge<Key>>,
    epoch: Instant,
}

impl Default for ReadCosts {
    fn default() -> Self {
        ReadCosts {
            judge: Mutex::new(FileJudge::default()),
            epoch: Instant::now(),
        }
    }
}

impl ReadCosts {
    fn judge(&self) -> std::sync::MutexGuard<'_, FileJudge<Key>> {
        self.judge.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

fn key(file: &File) -> Option<Key> {
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// Which question [`Engine::auto_verdict`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// At the start of a send: the rest of its range (at most
    /// [`UP_FRONT_MAX`]).
    Rest,
    /// Later in a send: the next `chunk_size`.
    Chunk,
}

impl Engine {
    /// `auto`: what to do at `pos` of a send ending at `end`. An
    /// `RWF_NOWAIT` read can fail on cached pages (a read-ahead marker, a
    /// page under writeback), and handing a warm file to the planner on
    /// such a read halved a warm loopback download (bench/dlcost.py 1s:
    /// 1518 against 3141 MB/s, 656 against 20 context switches per GiB). So
    /// `cachestat` is asked (holes not counted) and the file's judge says
    /// whether its reads cost a disk; without `cachestat` nothing tells,
    /// and the kernel keeps it.
    pub(crate) fn auto_verdict(
        &self,
        file: &Arc<File>,
        pos: u64,
        end: u64,
        ahead: Ahead,
    ) -> MissVerdict {
        if !self.features().cachestat.is_supported() || pos >= end {
            return MissVerdict::Kernel;
        }
        let len = match ahead {
            Ahead::Rest => (end - pos).min(UP_FRONT_MAX),
            Ahead::Chunk => (end - pos).min(self.config().chunk_size as u64),
        };
        match missing_data_bytes(file, pos, len) {
            Some(missing) => self.verdict_for(file, missing, len, ahead),
            None => MissVerdict::Kernel,
        }
    }

    /// [`Engine::auto_verdict`] for a range of `len` bytes of which
    /// `cachestat` already counted `missing` data bytes out of memory (the
    /// sender's per-chunk residency check asks it once, not twice).
    pub(crate) fn verdict_for(
        &self,
        file: &File,
        missing: u64,
        len: u64,
        ahead: Ahead,
    ) -> MissVerdict {
        if missing <= len / 2 {
            // Mostly resident: no need to name the file.
            return MissVerdict::Kernel;
        }
        if !self.config().prefetch_miss_timing {
            return MissVerdict::Planner;
        }
        let Some(k) = key(file) else {
            return MissVerdict::Planner;
        };
        let costs = &self.inner.read_costs;
        let j = costs.judge();
        match ahead {
            Ahead::Rest => j.up_front(k, missing, len, costs.now()),
            Ahead::Chunk => j.on_miss(k, missing, len, costs.now()),
        }
    }

    /// A measuring read of `bytes` of `file` took `took`.
    pub(crate) fn read_cost(&self, file: &File, bytes: u64, took: Duration) {
        if let Some(k) = key(file) {
            let costs = &self.inner.read_costs;
            let now = costs.now();
            costs.judge().read(k, bytes, took, now);
        }
    }

    /// Whether reads of `file` were measured to wait for a device lately
    /// (`--sharing auto` asks it too).
    pub(crate) fn judged_disk_bound(&self, file: &File) -> Option<bool> {
        let k = key(file)?;
        let costs = &self.inner.read_costs;
        let now = costs.now();
        costs.judge().judged(k, now)
    }
}
