//! Circus sharing, the I/O side: one [`circus::Circus`] selector per file
//! being read by downloads that take blocks in any order (MODE E), the
//! blocks it holds in engine-owned buffers (one read from disk, one
//! `writev` per reader), and the queues of block references its readers
//! take from (`--sharing circus`).
//!
//! A download registers its ranges ([`Engine::share_download`]) and gets a
//! [`SharedRead`]; each of its streams takes pieces with
//! [`SharedRead::next`] (waiting while none is ready), sends them with
//! [`crate::DataConn::send_piece`] and reports them with
//! [`SharedRead::sent`]. Dropping the `SharedRead` (done, failed, reset)
//! drops its demand at once. The selector runs per batch: when a reader's
//! queue is down to half, when a read completes, when a reader comes or goes.
//!
//! Files are told apart by device, inode, size and modification time, so
//! a file replaced or grown while read gets a selector of its own.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use sluice_platform::{fadvise, fileio};
use tokio::sync::Notify;

use crate::buffers::{BufferPool, PoolBuf};
use crate::disk::IoClass;
use crate::prefetch::pagecache::{fill_cache, missing_data_bytes};
use crate::sched::budget::{Budget, Slot};
use crate::sched::circus::{Action, Circus, CircusConfig, Piece, ReaderId};
use crate::send::read_full_at;
use crate::{Cancel, CircusHold, Engine, EngineConfig, SharingMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

/// The engine's shared files.
#[derive(Debug)]
pub(crate) struct Sharing {
    cfg: CircusConfig,
    mode: SharingMode,
    files: Mutex<HashMap<FileKey, Arc<SharedFile>>>,
    /// `auto`: MODE E downloads in flight that read alone, per file (a
    /// download that starts while one runs is shared).
    alone: Mutex<HashMap<FileKey, usize>>,
    next_id: AtomicU64,
    buffers: Arc<BufferPool>,
    hold: CircusHold,
    epoch: Instant,
    /// Every file's blocks count against this (`circus_budget`).
    budget: Arc<Mutex<Budget>>,
    /// The files drawing on it, to run a batch for one the budget wakes.
    slots: Mutex<HashMap<Slot, Weak<SharedFile>>>,
}

/// A block in memory: in a buffer of ours, or (`None`) in the page cache.
type Held = Option<Arc<PoolBuf>>;

#[derive(Debug)]
struct SharedFile {
    key: FileKey,
    file: Arc<File>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    circus: Circus,
    blocks: HashMap<u64, Held>,
    readers: HashMap<ReaderId, Queue>,
    /// A read failed: every reader of the file fails with this.
    failed: Option<(io::ErrorKind, String)>,
}

#[derive(Debug)]
struct Queue {
    pieces: VecDeque<(Piece, Held)>,
    notify: Arc<Notify>,
}

impl Sharing {
    pub(crate) fn new(config: &EngineConfig) -> Option<Sharing> {
        if config.sharing == SharingMode::Off {
            return None;
        }
        let block = config.circus_block.max(4096);
        let cfg = CircusConfig {
            block_size: block,
            region_blocks: (config.circus_region / block).max(2) as usize,
            queue_len: config.circus_queue.max(1),
            queue_time: config.circus_queue_time,
            independent_share: config.circus_independent.clamp(0.0, 1.0),
            read_depth: 2,
        };
        let budget = match config.circus_budget {
            0 => auto_budget(crate::prefetch::memory::cache_room()),
            b => b,
        };
        let budget_blocks = (budget / block).max(2) as usize;
        tracing::info!(
            budget_mib = budget >> 20,
            auto = config.circus_budget == 0,
            "shared blocks' budget"
        );
        Some(Sharing {
            // Idle blocks kept for reuse stay at the old fixed budget's 64 MiB:
            // the auto budget may reach 1 GiB on a large host, and a burst of
            // shared downloads must not leave that much heap held afterwards.
            buffers: BufferPool::new(block as usize, budget_blocks.min(idle_blocks_max(block))),
            budget: Arc::new(Mutex::new(Budget::new(budget_blocks))),
            slots: Mutex::new(HashMap::new()),
            cfg,
            mode: config.sharing,
            alone: Mutex::new(HashMap::new()),
            hold: config.circus_hold,
            files: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            epoch: Instant::now(),
        })
    }

    fn files(&self) -> MutexGuard<'_, HashMap<FileKey, Arc<SharedFile>>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<Slot, Weak<SharedFile>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn budget(&self) -> MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Files with a selector now (tests).
    #[cfg(test)]
    pub(crate) fn open_files(&self) -> usize {
        self.files().len()
    }
}

impl SharedFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

mod reader;
#[cfg(test)]
mod tests;

pub use reader::{SharedPiece, SharedRead};

/// How a MODE E download reads its file ([`Engine::join_readers`]).
#[derive(Debug)]
pub enum Readers {
    /// From the file's shared selector.
    Shared(SharedRead),
    /// For itself; while this lives the file counts as being read, so a
    /// download that starts meanwhile is shared (`--sharing auto`).
    Alone(ReadingAlone),
    /// For itself (sharing off, or the file cannot be told apart).
    Unshared,
}

/// A lone reader's mark on its file (see [`Readers::Alone`]).
#[derive(Debug)]
pub struct ReadingAlone {
    engine: Engine,
    key: FileKey,
}

impl Drop for ReadingAlone {
    fn drop(&mut self) {
        if let Some(sharing) = &self.engine.inner.sharing {
            let mut alone = sharing.alone.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = alone.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    alone.remove(&self.key);
                }
            }
        }
    }
}

/// Where a download's range is, as `--sharing auto` sees it at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Residency {
    /// At least half of its data bytes are in the page cache (holes not
    /// counted), or reads of the file were measured at memory speed.
    InMemory,
    /// Mostly not in the page cache, and not known to read at memory speed.
    NotInMemory,
    /// Nothing tells (no `cachestat`, before Linux 6.5).
    Unknown,
}

/// `circus_budget = auto`: the budget for shared blocks from `room`, the
/// memory the process may still fill at start (its memory cgroup's limit
/// less what is not page cache, else `MemAvailable`): 60 % of it, 16 MiB
/// to 1 GiB (64 MiB when nothing tells). The rest is for the sockets'
/// buffers, the page cache the reads pass through and the process.
/// In-order readers share only what stays in memory: in lab circus-steady
/// (256 MiB server, 52 readers spread over a 1 GiB file) their queues pin
/// about 60 blocks, so the 64 MiB default left nearly nothing to share
/// (virtual clock, `sched/circus_bound.rs`: the selector read 0.94 bytes
/// per byte sent with 64 MiB, 0.68 with 147; in the lab at 80 % load,
/// auto's 152 MiB read 0.75 against 0.93 with 64 MiB).
pub(crate) fn auto_budget(room: Option<u64>) -> u64 {
    match room {
        Some(r) => ((r as f64 * AUTO_BUDGET_OF_ROOM) as u64).clamp(16 << 20, 1 << 30),
        None => 64 << 20,
    }
}

/// How many idle shared blocks the pool keeps: 64 MiB of them.
fn idle_blocks_max(block: u64) -> usize {
    ((64u64 << 20) / block).max(2) as usize
}

/// Share of the memory room `circus_budget = auto` takes.
const AUTO_BUDGET_OF_ROOM: f64 = 0.6;

/// `--sharing auto`, sans-I/O: does a download share its file's reads?
/// Only when another download of the file is in flight (`busy`: a lone
/// reader in Circus costs ~15 % of its rate and ~20 % CPU per GiB on
/// loopback, bench/dlcost.py 4s) and its range is not in memory: sharing
/// saves disk reads, and a warm file costs none (bench/dlcost.py 16c, 16
/// curl of one warm file: shared 3655 MB/s against 4328 unshared, 16 %
/// slower). Where nothing tells, as before: shared when busy.
///
/// Many slow readers of a warm file read alone too. Session 14 shared
/// them (>= 32 readers of the file at <= 10 MB/s each) while the lone
/// readers' sendfile path still went by the copy path at a paged-out
/// chunk (1 MiB pinned per slow reader: the 1064 MiB state); with that
/// fixed, lab send-wakeups (1000 readers at 1 Mbit/s of one warm file,
/// 3 runs each, s14-share-r1..r3) measured shared 0.363 (0.337-0.368)
/// CPU s/GiB and 68.2 MiB against alone 0.318 (0.274-0.319) and 59.7.
pub(crate) fn auto_shares(busy: bool, range: Residency) -> bool {
    busy && range != Residency::InMemory
}

fn file_key(file: &File) -> io::Result<FileKey> {
    let m = file.metadata()?;
    Ok(FileKey {
        dev: m.dev(),
        ino: m.ino(),
        size: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

impl Engine {
    /// Whether downloads that take blocks in any order share reads.
    pub fn sharing(&self) -> bool {
        self.inner.sharing.is_some()
    }

    /// How a MODE E download of `ranges` of `file` over `streams`
    /// connections reads: shared (`circus`, or `auto` when another MODE E
    /// download of the file is in flight), alone, or unshared (`off`).
    pub fn join_readers(
        &self,
        file: &Arc<File>,
        ranges: &[(u64, u64)],
        streams: usize,
    ) -> io::Result<Readers> {
        self.join(file, ranges, Some(streams))
    }

    /// The same for a download that must get `ranges` (increasing, not
    /// overlapping) in file order over one connection (HTTP body, MODE
    /// S): its pieces come in file order. A download shorter than one
    /// block is never shared (nothing to share; it keeps small answers
    /// cheap).
    pub fn join_readers_in_order(
        &self,
        file: &Arc<File>,
        ranges: &[(u64, u64)],
    ) -> io::Result<Readers> {
        let ordered = ranges
            .windows(2)
            .all(|w| w[0].0.saturating_add(w[0].1) <= w[1].0);
        let total: u64 = ranges.iter().map(|r| r.1).sum();
        match &self.inner.sharing {
            Some(s) if ordered && total >= s.cfg.block_size => self.join(file, ranges, None),
            _ => Ok(Readers::Unshared),
        }
    }

    /// `streams`: `None` for an in-order reader.
    fn join(
        &self,
        file: &Arc<File>,
        ranges: &[(u64, u64)],
        streams: Option<usize>,
    ) -> io::Result<Readers> {
        let Some(sharing) = &self.inner.sharing else {
            return Ok(Readers::Unshared);
        };
        let key = file_key(file)?;
        if sharing.mode == SharingMode::Auto {
            // Asked before the locks: `cachestat` of the whole range and
            // the file's judge (a mutex of its own).
            let cold = self.sharing_evidence(file, ranges);
            // Lock order: `alone`, then `files` (share_download takes
            // `files` alone; a reader leaving takes `files` alone).
            let mut alone = sharing.alone.lock().unwrap_or_else(|p| p.into_inner());
            let busy =
                alone.get(&key).is_some_and(|n| *n > 0) || sharing.files().contains_key(&key);
            if !auto_shares(busy, cold) {
                *alone.entry(key).or_insert(0) += 1;
                return Ok(Readers::Alone(ReadingAlone {
                    engine: self.clone(),
                    key,
                }));
            }
        }
        Ok(Readers::Shared(
            self.register_shared(sharing, key, file, ranges, streams),
        ))
    }

    /// What `--sharing auto` knows of a download's `ranges` of `file`
    /// before it starts (see [`auto_shares`]).
    fn sharing_evidence(&self, file: &File, ranges: &[(u64, u64)]) -> Residency {
        if !self.features().cachestat.is_supported() {
            return Residency::Unknown;
        }
        let (mut missing, mut total) = (0u64, 0u64);
        for &(off, len) in ranges {
            match missing_data_bytes(file, off, len) {
                Some(m) => missing += m,
                None => return Residency::Unknown,
            }
            total += len;
        }
        if missing.saturating_mul(2) <= total {
            return Residency::InMemory;
        }
        match self.judged_disk_bound(file) {
            // Reads of it were measured at memory speed (a file system
            // that answers without a disk): nothing to save.
            Some(false) => Residency::InMemory,
            _ => Residency::NotInMemory,
        }
    }

    /// Registers a download of `ranges` (`(offset, len)`) of `file` over
    /// `streams` connections with the file's shared selector. `None` when
    /// sharing is off.
    pub fn share_download(
        &self,
        file: &Arc<File>,
        ranges: &[(u64, u64)],
        streams: usize,
    ) -> io::Result<Option<SharedRead>> {
        let Some(sharing) = &self.inner.sharing else {
            return Ok(None);
        };
        let key = file_key(file)?;
        Ok(Some(self.register_shared(
            sharing,
            key,
            file,
            ranges,
            Some(streams),
        )))
    }

    /// Registers a download with the selector of the file `key` names.
    fn register_shared(
        &self,
        sharing: &Sharing,
        key: FileKey,
        file: &Arc<File>,
        ranges: &[(u64, u64)],
        streams: Option<usize>,
    ) -> SharedRead {
        let id = ReaderId(sharing.next_id.fetch_add(1, Relaxed));
        let notify = Arc::new(Notify::new());
        let mut files = sharing.files();
        let shared = Arc::clone(files.entry(key).or_insert_with(|| {
            // The selector reads whole blocks where it decides; the
            // kernel's read-ahead behind each `pread` guessed a sequential
            // reader and, in a 256 MiB cgroup, was evicted unread (lab
            // circus-files, 16 files: 1.8-2.1 disk bytes per byte sent
            // shared, against 1.07 with sharing off).
            let _ = fadvise::fadvise(file.as_fd(), 0, 0, fadvise::Advice::Random);
            let circus = Circus::in_budget(sharing.cfg, key.size, Arc::clone(&sharing.budget));
            let slot = circus.slot();
            let f = Arc::new(SharedFile {
                key,
                file: Arc::clone(file),
                state: Mutex::new(State {
                    circus,
                    blocks: HashMap::new(),
                    readers: HashMap::new(),
                    failed: None,
                }),
            });
            sharing.slots().insert(slot, Arc::downgrade(&f));
            f
        }));
        {
            let mut st = shared.lock();
            match streams {
                Some(n) => st.circus.register(id, ranges, n, 0),
                None => st.circus.register_in_order(id, ranges, 0),
            }
            st.readers.insert(
                id,
                Queue {
                    pieces: VecDeque::new(),
                    notify: Arc::clone(&notify),
                },
            );
            self.batch(&shared, &mut st);
        }
        drop(files);
        SharedRead {
            engine: self.clone(),
            shared,
            id,
            notify,
        }
    }

    /// Runs the selector once and carries out what it decided.
    fn batch(&self, shared: &Arc<SharedFile>, st: &mut State) {
        for a in st.circus.poll() {
            match a {
                Action::Read { block, offset, len } => {
                    if !self.read_block(shared, block, offset, len) {
                        // No runtime to read on (a drop at shutdown):
                        // forgotten, read again by a later batch.
                        st.circus.read_failed(block);
                    }
                }
                Action::Queue { reader, piece } => {
                    let Some(buf) = st.blocks.get(&piece.block).cloned() else {
                        continue;
                    };
                    if let Some(q) = st.readers.get_mut(&reader) {
                        q.pieces.push_back((piece, buf));
                        q.notify.notify_waiters();
                    }
                }
                Action::Drop { block } => {
                    st.blocks.remove(&block);
                }
            }
        }
        self.wake_budget_waiters(shared);
    }

    /// Files the budget refused a block and that may find room now run a
    /// batch (on a task of their own: this file's lock is held here, and
    /// two files' locks are never taken together).
    fn wake_budget_waiters(&self, shared: &Arc<SharedFile>) {
        let Some(sharing) = &self.inner.sharing else {
            return;
        };
        let woken = sharing.budget().wake();
        if woken.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let files: Vec<Arc<SharedFile>> = {
            let slots = sharing.slots();
            woken
                .iter()
                .filter_map(|s| slots.get(s).and_then(Weak::upgrade))
                .filter(|f| !Arc::ptr_eq(f, shared))
                .collect()
        };
        for f in files {
            let engine = self.clone();
            rt.spawn(async move {
                let mut st = f.lock();
                engine.batch(&f, &mut st);
            });
        }
    }

    /// Reads one block on a disk thread; the selector hears of it when
    /// done. False when there is no runtime to wait on.
    fn read_block(&self, shared: &Arc<SharedFile>, block: u64, offset: u64, len: u64) -> bool {
        let engine = self.clone();
        let shared = Arc::clone(shared);
        let (Some(sharing), Ok(rt)) = (&self.inner.sharing, tokio::runtime::Handle::try_current())
        else {
            return false;
        };
        let mut buf = sharing.buffers.take();
        let pool = Arc::clone(&sharing.buffers);
        let hold = sharing.hold;
        rt.spawn(async move {
            let f = Arc::clone(&shared.file);
            let want = len as usize;
            // The page-cache holder reads through a buffer too (the pages
            // must be resident before a `sendfile` on the event loop) and
            // lets the buffer go.
            // A block already in the page cache, where it will be held
            // (`auto`, `pagecache`), is not read at all: `cachestat` says
            // it is resident without copying a byte. Reading it with
            // `RWF_NOWAIT` copied 1 MiB into a buffer that was then let go:
            // 64 % of the event loop's CPU in circus-load at 40 % (the
            // kernel's read-ahead had brought most blocks in; profile
            // s13-cost-profile-a).
            // One `cachestat` answers both questions below.
            let missing = engine
                .features()
                .cachestat
                .is_supported()
                .then(|| missing_data_bytes(&f, offset, len))
                .flatten();
            let resident = hold != CircusHold::Buffers && missing == Some(0);
            // A block in the page cache is read here on the loop
            // (`RWF_NOWAIT` never waits for the disk), a cold one on a
            // disk thread; one `cachestat` says is cold is not tried with
            // `RWF_NOWAIT` (which starts the kernel's read-ahead, and the
            // memory cgroup's reclaim, on the loop: `Engine::start_read`).
            let cached = resident
                || engine.config().inline_cached_reads
                    && missing.is_none_or(|m| m == 0)
                    && matches!(
                        fileio::pread_nowait(f.as_fd(), &mut buf[..want], offset),
                        Ok(n) if n == want
                    );
            let r = if cached {
                Ok((buf, Ok(want)))
            } else {
                engine
                    .inner
                    .disk
                    .run(IoClass::Transfer, &Cancel::new(), move || {
                        // Held in the page cache, the buffer is let go
                        // unread: bring the block in without a copy.
                        let r = if hold == CircusHold::PageCache {
                            fill_cache(&f, &pool, offset, len).map(|n| n as usize)
                        } else {
                            read_full_at(&f, &mut buf[..want], offset)
                        };
                        (buf, r)
                    })
                    .await
            };
            let mut st = shared.lock();
            let failure = match r {
                Ok((buf, Ok(n))) if n == want => {
                    engine.inner.counters.add_disk_read(n as u64);
                    engine.inner.counters.add_shared_read(n as u64);
                    let keep = match hold {
                        CircusHold::Buffers => true,
                        CircusHold::PageCache => false,
                        // Found in the page cache: it stays there.
                        CircusHold::Auto => !cached,
                    };
                    st.blocks.insert(block, keep.then(|| Arc::new(buf)));
                    st.circus.read_done(block);
                    None
                }
                Ok((_, Ok(n))) => Some((
                    io::ErrorKind::UnexpectedEof,
                    format!("file ended at offset {}", offset + n as u64),
                )),
                Ok((_, Err(e))) => Some((e.kind(), e.to_string())),
                Err(e) => Some((io::ErrorKind::Other, e.to_string())),
            };
            if let Some(f) = failure {
                st.circus.read_failed(block);
                st.failed.get_or_insert(f);
                for q in st.readers.values() {
                    q.notify.notify_waiters();
                }
                return;
            }
            engine.batch(&shared, &mut st);
        });
        true
    }
}
