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

use sluice_platform::fileio;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::buffers::{BufferPool, PoolBuf};
use crate::conn::Link;
use crate::counters::Counters;
use crate::disk::IoClass;
use crate::sched::budget::{Budget, Slot};
use crate::sched::circus::{Action, Circus, CircusConfig, Piece, ReaderId};
use crate::send::{read_full_at, write_all};
use crate::wake::counted;
use crate::{Cancel, CircusHold, Engine, EngineConfig, EngineError, SharingMode};

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
        let budget_blocks = (config.circus_budget / block).max(2) as usize;
        Some(Sharing {
            buffers: BufferPool::new(block as usize, budget_blocks),
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

/// One download's part in a shared file; dropping it drops its demand.
#[derive(Debug)]
pub struct SharedRead {
    engine: Engine,
    shared: Arc<SharedFile>,
    id: ReaderId,
    notify: Arc<Notify>,
}

/// Part of a shared block for one reader: `len` bytes at file `offset`.
#[derive(Debug)]
pub struct SharedPiece {
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    piece: Piece,
    buf: Held,
    /// Where the piece starts in `buf`.
    at: usize,
    /// The file, for a piece held in the page cache.
    file: Arc<File>,
}

impl SharedPiece {
    /// The piece's bytes, when it is held in an engine buffer (`None`:
    /// in the page cache).
    pub fn bytes(&self) -> Option<&[u8]> {
        let b = self.buf.as_ref()?;
        Some(&b[self.at..self.at + self.len as usize])
    }

    /// `len` bytes from file offset `offset`, clipped to the piece (as
    /// a file range, and its bytes when held in a buffer).
    fn part(&self, offset: u64, len: u64) -> (u64, u64, Option<&[u8]>) {
        let from = offset.clamp(self.offset, self.offset + self.len) - self.offset;
        let to = offset
            .saturating_add(len)
            .clamp(self.offset, self.offset + self.len)
            - self.offset;
        let bytes = self.bytes().map(|b| &b[from as usize..to as usize]);
        (self.offset + from, to - from, bytes)
    }
}

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
            // Lock order: `alone`, then `files` (share_download takes
            // `files` alone; a reader leaving takes `files` alone).
            let mut alone = sharing.alone.lock().unwrap_or_else(|p| p.into_inner());
            let busy =
                alone.get(&key).is_some_and(|n| *n > 0) || sharing.files().contains_key(&key);
            if !busy {
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
        let keep = sharing.hold == CircusHold::Buffers;
        rt.spawn(async move {
            let f = Arc::clone(&shared.file);
            let want = len as usize;
            // The page-cache holder reads through a buffer too (the pages
            // must be resident before a `sendfile` on the event loop) and
            // lets the buffer go.
            // A block in the page cache is read here on the loop
            // (`RWF_NOWAIT` never waits for the disk), a cold one on a
            // disk thread.
            let cached = engine.config().inline_cached_reads
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
                        let r = read_full_at(&f, &mut buf[..want], offset);
                        (buf, r)
                    })
                    .await
            };
            let mut st = shared.lock();
            let failure = match r {
                Ok((buf, Ok(n))) if n == want => {
                    engine.inner.counters.add_disk_read(n as u64);
                    engine.inner.counters.add_shared_read(n as u64);
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

    /// Sends `prefix` and `len` bytes of a shared piece from file offset
    /// `offset` in full on a connection ([`crate::DataConn::send_piece`]):
    /// `writev` from its buffer, or `sendfile` from the page cache.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_piece_on(
        &self,
        conn: &TcpStream,
        link: &mut Link,
        prefix: &[u8],
        (piece, offset, len): (&SharedPiece, u64, u64),
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let t = self.tally(counters);
        let Link { turn, flow, .. } = link;
        let (offset, len, bytes) = piece.part(offset, len);
        let n = match bytes {
            None => {
                let f = self.send_sendfile(
                    conn,
                    &piece.file,
                    offset,
                    len,
                    prefix,
                    counters,
                    cancel,
                    turn,
                    flow,
                );
                counted(f, t).await?
            }
            Some(bytes) => {
                let mut refill = self.refill(flow);
                let send = async {
                    let waited =
                        write_all(conn, [prefix, bytes], t, cancel, self.config().idle_timeout)
                            .await?;
                    let n = (prefix.len() + bytes.len()) as u64;
                    if let Some(r) = refill.as_mut() {
                        r.wrote(conn, n, waited);
                    }
                    if waited {
                        turn.waited();
                    }
                    turn.pushed(n, t).await;
                    Ok::<u64, EngineError>(bytes.len() as u64)
                };
                counted(send, t).await?
            }
        };
        self.inner.counters.add_shared_sent(n);
        counters.add_shared_sent(n);
        Ok(n)
    }
}

impl SharedRead {
    /// The next piece for one of this download's streams; `None` once
    /// every piece has been handed out. Waits while none is ready.
    /// Waiting counts as wake-ups in `counters` (and the engine's).
    pub async fn next(
        &self,
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<Option<SharedPiece>, EngineError> {
        counted(self.wait_next(cancel), self.engine.tally(counters)).await
    }

    async fn wait_next(&self, cancel: &Cancel) -> Result<Option<SharedPiece>, EngineError> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            {
                let mut st = self.shared.lock();
                if let Some((kind, msg)) = &st.failed {
                    return Err(EngineError::Disk(io::Error::new(*kind, msg.clone())));
                }
                let q = st.readers.get_mut(&self.id).ok_or(EngineError::Cancelled)?;
                let popped = q.pieces.pop_front();
                if let Some((piece, buf)) = popped {
                    let bs = st.circus.config().block_size;
                    return Ok(Some(SharedPiece {
                        file: Arc::clone(&self.shared.file),
                        offset: piece.offset,
                        len: piece.len,
                        at: (piece.offset - piece.block * bs) as usize,
                        piece,
                        buf,
                    }));
                }
                if st.circus.handed_all(self.id) {
                    return Ok(None);
                }
                notified.as_mut().enable();
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return Err(EngineError::Cancelled),
            }
        }
    }

    /// `piece` is out: its block is no longer held for this download.
    pub fn sent(&self, piece: SharedPiece) {
        let Some(sharing) = &self.engine.inner.sharing else {
            return;
        };
        let now = sharing.epoch.elapsed();
        let mut st = self.shared.lock();
        st.circus.sent(self.id, piece.piece, now);
        drop(piece);
        // A batch when this reader's queue is down to half (or another
        // stream of it may be waiting), not per piece.
        let low = st
            .readers
            .get(&self.id)
            .is_some_and(|q| q.pieces.len() * 2 <= st.circus.queue_cap(self.id));
        if low {
            self.engine.batch(&self.shared, &mut st);
        }
    }
}

impl Drop for SharedRead {
    fn drop(&mut self) {
        let Some(sharing) = &self.engine.inner.sharing else {
            return;
        };
        let empty = {
            let mut st = self.shared.lock();
            st.circus.gone(self.id);
            st.readers.remove(&self.id);
            self.engine.batch(&self.shared, &mut st);
            st.circus.readers() == 0
        };
        if empty {
            let mut files = sharing.files();
            // Checked again under both locks: a reader may have come.
            if self.shared.lock().circus.readers() == 0 {
                if let Some(f) = files.get(&self.shared.key) {
                    if Arc::ptr_eq(f, &self.shared) {
                        files.remove(&self.shared.key);
                        let slot = self.shared.lock().circus.slot();
                        sharing.slots().remove(&slot);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{pair, pattern, temp_file};
    use tokio::io::AsyncReadExt;

    fn engine(region: u64) -> Engine {
        Engine::new(EngineConfig {
            sharing: SharingMode::Circus,
            circus_block: 64 << 10,
            circus_region: region,
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
            let read = Arc::clone(&read);
            tasks.spawn(async move {
                let (c, cancel) = (Counters::new(), Cancel::new());
                let mut got = Vec::new();
                while let Some(p) = read.next(&c, &cancel).await.unwrap() {
                    got.push((p.offset, p.bytes().unwrap().to_vec()));
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
        for hold in [CircusHold::Buffers, CircusHold::PageCache] {
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
                assert_eq!(p.bytes().is_some(), hold == CircusHold::Buffers);
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

    #[test]
    fn auto_shares_an_in_order_reader_only_while_another_reads_the_file() {
        let e = Engine::new(EngineConfig {
            sharing: SharingMode::Auto,
            circus_block: 64 << 10,
            ..EngineConfig::default()
        });
        let file = temp_file(&pattern(1 << 20));
        let all = [(0u64, 1u64 << 20)];
        let first = e.join_readers_in_order(&file, &all).unwrap();
        assert!(matches!(first, Readers::Alone(_)), "{first:?}");
        // A MODE E or in-order reader meanwhile: shared.
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
    fn off_means_no_sharing() {
        let e = Engine::new(EngineConfig {
            sharing: SharingMode::Off,
            ..EngineConfig::default()
        });
        let file = temp_file(b"abc");
        assert!(!e.sharing());
        assert!(e.share_download(&file, &[(0, 3)], 1).unwrap().is_none());
    }
}
