//! Directory listings for both doors, streamed: the directory is read a
//! batch at a time on an engine disk thread, each batch rendered there
//! (FTP LIST/NLST/MLSD lines, HTTP HTML/JSON) and sent before the next
//! one is read. A listing of any size then costs one batch of memory per
//! connection, and a client that stops reading stops the reading.
//!
//! Bounds, server-wide:
//! - at most [`jobs`] listing batches are read at once (fewer than the
//!   engine's disk threads), so listings queue behind each other, not in
//!   front of the opens and stats of other requests; the queue is FIFO,
//!   so listings take turns batch by batch;
//! - rendered bytes waiting for their clients count against
//!   [`BUFFER_BUDGET`]; when slow readers hold it all, further listings
//!   wait for it (other requests do not).
//!
//! Order: a directory of up to [`SORTED_UP_TO`] entries is read whole and
//! sent sorted, as before; a larger one is sent in the order the
//! directory holds it (as `ls -f`), each batch sorted within itself.

use std::sync::{Arc, OnceLock};

use sluice_engine::{Cancel, Engine, EngineError};
use sluice_platform::fs::{DirEntry, DirReader, FsError, ServedRoot};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Entries read per disk job.
pub const BATCH: usize = 1024;

/// Directories up to this many entries are read whole and sorted.
pub const SORTED_UP_TO: usize = 4096;

/// Rendered listing bytes server-wide that may wait for slow clients.
pub const BUFFER_BUDGET: usize = 64 << 20;

/// What turns entries into bytes; runs on a disk thread.
pub trait Render: Send + 'static {
    /// Appends the rendering of `entries` (the first call may add a head).
    fn batch(&mut self, entries: Vec<DirEntry>, out: &mut Vec<u8>);
    /// Appends the end; `in_order` is false when the listing came in
    /// several batches.
    fn end(&mut self, in_order: bool, out: &mut Vec<u8>);
    /// True when no more entries are wanted (a cap was reached).
    fn is_full(&self) -> bool {
        false
    }
    /// Whether the entry of this name is wanted at all; the others are
    /// not even stat'ed (a pattern over a huge directory costs its
    /// reading, not a stat per entry).
    fn wants(&self, _name: &[u8]) -> bool {
        true
    }
}

/// Why a listing stopped.
#[derive(Debug)]
pub enum ListError {
    /// Reading the directory failed.
    Fs(FsError),
    /// The disk job could not run (cancelled, engine stopping).
    Engine(EngineError),
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::Fs(e) => write!(f, "{e}"),
            ListError::Engine(e) => write!(f, "{e}"),
        }
    }
}

/// Rendered bytes of one batch, holding their share of the budget until
/// dropped (after they were written).
pub struct Piece {
    /// The bytes to send.
    pub bytes: Vec<u8>,
    _budget: Option<SemaphorePermit<'static>>,
}

/// Concurrent listing jobs: one less than the disk threads (at least
/// one), so opens and stats of other requests always find a thread.
fn jobs(engine: &Engine) -> &'static Semaphore {
    static JOBS: OnceLock<Semaphore> = OnceLock::new();
    JOBS.get_or_init(|| {
        let threads = engine.config().disk_threads;
        Semaphore::new(threads.saturating_sub(1).max(1))
    })
}

fn budget() -> &'static Semaphore {
    static BUDGET: Semaphore = Semaphore::const_new(BUFFER_BUDGET >> 10);
    &BUDGET
}

/// A listing being read and rendered; see the module docs.
pub struct Lister {
    root: Arc<ServedRoot>,
    state: Option<(DirReader, Box<dyn Render>)>,
    first: bool,
    done: bool,
}

impl Lister {
    /// Opens directory `path` beneath `root` (on a disk thread) for
    /// rendering with `render`.
    #[cfg(test)]
    pub async fn open(
        engine: &Engine,
        cancel: &Cancel,
        root: Arc<ServedRoot>,
        path: String,
        render: Box<dyn Render>,
    ) -> Result<Lister, ListError> {
        let r = Arc::clone(&root);
        let reader = engine
            .run_blocking(cancel, move || r.open_dir(&path))
            .await
            .map_err(ListError::Engine)?
            .map_err(ListError::Fs)?;
        Ok(Lister::new(root, reader, render))
    }

    /// A lister over a directory already opened.
    pub fn new(root: Arc<ServedRoot>, reader: DirReader, render: Box<dyn Render>) -> Lister {
        Lister {
            root,
            state: Some((reader, render)),
            first: true,
            done: false,
        }
    }

    /// The next rendered piece; `None` after the end was rendered.
    pub async fn next(
        &mut self,
        engine: &Engine,
        cancel: &Cancel,
    ) -> Result<Option<Piece>, ListError> {
        if self.done {
            return Ok(None);
        }
        let Some((mut reader, mut render)) = self.state.take() else {
            return Ok(None);
        };
        let first = self.first;
        self.first = false;
        let root = Arc::clone(&self.root);
        let job = jobs(engine).acquire().await.ok();
        let (reader, render, out, done) = engine
            .run_blocking(cancel, move || {
                let mut out = Vec::new();
                let r = read_and_render(&root, &mut reader, &mut *render, first, &mut out);
                (reader, render, out, r)
            })
            .await
            .map_err(ListError::Engine)?;
        drop(job);
        let done = done.map_err(ListError::Fs)?;
        self.state = Some((reader, render));
        self.done = done;
        // Held until the piece is written; a piece larger than the whole
        // budget takes all of it.
        let kib = u32::try_from((out.len() >> 10).clamp(1, BUFFER_BUDGET >> 10)).unwrap_or(1);
        let permit = budget().acquire_many(kib).await.ok();
        Ok(Some(Piece {
            bytes: out,
            _budget: permit,
        }))
    }
}

/// One disk job: the first reads up to [`SORTED_UP_TO`] entries (all of
/// a small directory, sorted and ended); later ones read a [`BATCH`].
/// Returns whether the listing is complete.
fn read_and_render(
    root: &ServedRoot,
    reader: &mut DirReader,
    render: &mut dyn Render,
    first: bool,
    out: &mut Vec<u8>,
) -> Result<bool, FsError> {
    if first {
        let mut all: Vec<DirEntry> = Vec::new();
        let mut seen = 0;
        loop {
            let (b, n) = reader.next_batch_matching(root, BATCH, &|n| render.wants(n))?;
            seen += n;
            if n == 0 {
                all.sort_by(|a, b| a.name.cmp(&b.name));
                render.batch(all, out);
                render.end(true, out);
                return Ok(true);
            }
            all.extend(b);
            // Counted in names read, not kept: a pattern over a huge
            // directory streams like a listing of it.
            if seen > SORTED_UP_TO {
                render.batch(all, out);
                if render.is_full() {
                    render.end(false, out);
                    return Ok(true);
                }
                return Ok(false);
            }
        }
    }
    let (b, n) = reader.next_batch_matching(root, BATCH, &|n| render.wants(n))?;
    if n == 0 {
        render.end(false, out);
        return Ok(true);
    }
    render.batch(b, out);
    if render.is_full() {
        render.end(false, out);
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders names, one per line.
    struct Names {
        count: usize,
        cap: usize,
        prefix: Option<&'static [u8]>,
    }

    impl Render for Names {
        fn batch(&mut self, entries: Vec<DirEntry>, out: &mut Vec<u8>) {
            for e in entries {
                if self.count == self.cap {
                    return;
                }
                self.count += 1;
                out.extend_from_slice(&e.name);
                out.push(b'\n');
            }
        }
        fn end(&mut self, in_order: bool, out: &mut Vec<u8>) {
            out.extend_from_slice(if in_order { b"end sorted\n" } else { b"end\n" });
        }
        fn is_full(&self) -> bool {
            self.count >= self.cap
        }
        fn wants(&self, name: &[u8]) -> bool {
            self.prefix.is_none_or(|p| name.starts_with(p))
        }
    }

    async fn list_all(dir: &std::path::Path, cap: usize) -> (Vec<String>, String, usize) {
        list_matching(dir, cap, None).await
    }

    async fn list_matching(
        dir: &std::path::Path,
        cap: usize,
        prefix: Option<&'static [u8]>,
    ) -> (Vec<String>, String, usize) {
        let engine = Engine::new(sluice_engine::EngineConfig::default());
        let root = Arc::new(ServedRoot::open(dir).unwrap());
        let mut l = Lister::open(
            &engine,
            &Cancel::new(),
            root,
            String::new(),
            Box::new(Names {
                count: 0,
                cap,
                prefix,
            }),
        )
        .await
        .unwrap();
        let (mut text, mut biggest) = (String::new(), 0);
        while let Some(p) = l.next(&engine, &Cancel::new()).await.unwrap() {
            biggest = biggest.max(p.bytes.len());
            text.push_str(std::str::from_utf8(&p.bytes).unwrap());
        }
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let end = lines.pop().unwrap();
        (lines, end, biggest)
    }

    #[tokio::test]
    async fn a_small_directory_is_one_sorted_piece() {
        let d = tempfile::tempdir().unwrap();
        for n in ["b", "a", "c"] {
            std::fs::write(d.path().join(n), b"").unwrap();
        }
        let (names, end, _) = list_all(d.path(), usize::MAX).await;
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(end, "end sorted");
    }

    /// A directory of 20,000 entries comes in pieces no bigger than the
    /// first one (SORTED_UP_TO entries), every name exactly once.
    #[tokio::test]
    async fn a_big_directory_streams_in_bounded_pieces() {
        let d = tempfile::tempdir().unwrap();
        let n = 20_000;
        for i in 0..n {
            std::fs::write(d.path().join(format!("f{i:05}")), b"").unwrap();
        }
        let (mut names, end, biggest) = list_all(d.path(), usize::MAX).await;
        assert_eq!(end, "end");
        names.sort();
        let want: Vec<String> = (0..n).map(|i| format!("f{i:05}")).collect();
        assert_eq!(names, want);
        // 7 bytes a line: the first piece holds SORTED_UP_TO + 1 lines at
        // most and no piece more.
        assert!(biggest <= (SORTED_UP_TO + BATCH) * 7, "{biggest}");
        let (names, end, _) = list_all(d.path(), 5000).await;
        assert_eq!((names.len(), end.as_str()), (5000, "end"));
        // Filtered (a wildcard NLST): the wanted names only, and the
        // directory still read in batches (unsorted), not whole.
        let (mut names, end, _) = list_matching(d.path(), usize::MAX, Some(b"f1")).await;
        assert_eq!(end, "end");
        names.sort();
        let want: Vec<String> = (10_000..n).map(|i| format!("f{i:05}")).collect();
        assert_eq!(names, want);
        let (names, end, _) = list_matching(d.path(), usize::MAX, Some(b"none")).await;
        assert_eq!((names.len(), end.as_str()), (0, "end"));
    }
}
