//! The writer thread and the memory budget between it and the drain thread.
//!
//! The drain thread hands over `(offset, bytes)` blocks; the writer feeds
//! them through [`Reassembly`] and `pwrite`s them at their offset (or
//! appends them in order to stdout). Memory between the two is bounded by a
//! [`Budget`]: the drain thread takes bytes from it before handing a block
//! over, the writer gives them back once they are written. When the budget
//! is used up the drain thread waits; each wait is a receive stall.
//!
//! A block for a positional sink (a file, /dev/null) that finds the
//! writer idle is placed by the drain thread itself ([`WriterInput::send`]):
//! with the CPU contended (ten busy loops on the client's core) a block
//! handed over moves only once both threads have been scheduled, and
//! Sluice's single stream ran at 0.75x curl's one thread. A write that
//! takes long (the page cache full of dirty pages, a slow disk) turns
//! this off for [`INLINE_PAUSE`], so a slow disk still never holds the
//! reading for long.

use std::fs::File;
use std::io::Write as _;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{ClientError, Result};
use crate::reassembly::Reassembly;
use crate::stats::Stats;

/// Bytes of newly contiguous data after which the MODE E resume point is
/// written to the side file (a lost update costs at most this much re-sent).
const PREFIX_SAVE_STEP: u64 = 16 << 20;

/// An inline write slower than this hands the next blocks back to the
/// writer thread (a page-cache write of a block takes tens of
/// microseconds; milliseconds mean the disk is making writers wait).
const INLINE_SLOW: Duration = Duration::from_millis(2);

/// How long blocks go to the writer thread after a slow inline write.
pub const INLINE_PAUSE: Duration = Duration::from_secs(1);

/// Buffers the writer may hand back to a drain thread for reuse.
pub const RECYCLE_SLOTS: usize = 64;

/// One block handed from the drain thread to the writer.
#[derive(Debug)]
pub struct Block {
    /// File offset of the first byte.
    pub offset: u64,
    /// The bytes.
    pub data: Vec<u8>,
}

/// Bytes in flight between drain and writer, bounded by a cap.
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    state: Mutex<BudgetState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    used: u64,
    closed: bool,
}

impl Budget {
    /// A budget of `cap` bytes.
    pub fn new(cap: u64) -> Self {
        Budget {
            cap,
            state: Mutex::new(BudgetState::default()),
            freed: Condvar::new(),
        }
    }

    /// Takes `n` bytes, waiting while the cap would be passed. A block
    /// larger than the cap is let through when nothing else is held, so a
    /// big block cannot wedge the transfer. Returns false if the writer has
    /// gone (the caller should stop). Counts a stall if it had to wait.
    pub fn acquire(&self, n: u64, stats: &Stats) -> bool {
        let mut st = lock(&self.state);
        if st.used > 0 && st.used + n > self.cap && !st.closed {
            let t0 = Instant::now();
            Stats::add(&stats.receive_stalls, 1);
            while st.used > 0 && st.used + n > self.cap && !st.closed {
                st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            Stats::add(&stats.stall_micros, t0.elapsed().as_micros() as u64);
        }
        if st.closed {
            return false;
        }
        st.used += n;
        stats.mem_acquired(n);
        true
    }

    /// Gives back `n` bytes.
    pub fn release(&self, n: u64, stats: &Stats) {
        let mut st = lock(&self.state);
        st.used = st.used.saturating_sub(n);
        stats.mem_released(n);
        self.freed.notify_all();
    }

    /// Wakes and refuses every waiter: the writer stopped.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.freed.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means another thread panicked; the counters inside
    // are still meaningful, so carry on rather than panic twice.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the writer puts the bytes.
pub enum Sink {
    /// A seekable file, written with `pwrite` at each block's offset.
    File(File),
    /// Standard output, written in order.
    Stdout,
    /// A FIFO or terminal named as DEST, written in order.
    Device(File),
}

impl Sink {
    /// Written front to back rather than at each block's offset.
    fn in_order(&self) -> bool {
        !matches!(self, Sink::File(_))
    }
}

/// What the writer knew when it finished.
#[derive(Debug)]
pub struct WriterReport {
    /// Ranges still missing in `0..size` (if a size was given).
    pub gaps: Vec<Range<u64>>,
    /// Contiguous bytes from offset 0.
    pub prefix: u64,
    /// One past the highest byte written.
    pub end: u64,
}

/// Handle on a running writer thread.
pub struct Writer {
    tx: Option<mpsc::Sender<Block>>,
    join: Option<JoinHandle<Result<WriterReport>>>,
    budget: Arc<Budget>,
    shared: Arc<Shared>,
}

/// What the writer thread and the drain threads share: the placing of
/// blocks (one at a time), how many blocks wait in the channel, and
/// whether the drain may place blocks itself.
struct Shared {
    placer: Mutex<Placer>,
    /// Blocks sent to the writer thread and not yet placed.
    queued: AtomicUsize,
    /// Drains may place blocks themselves (a positional sink).
    inline: bool,
    /// ... but not before this many microseconds after `t0` (a slow write).
    inline_after: AtomicU64,
    t0: Instant,
}

/// The writer's state: blocks in, bytes out at their offsets.
struct Placer {
    sink: Sink,
    prefix_file: Option<PathBuf>,
    recycle: Option<mpsc::SyncSender<Vec<u8>>>,
    re: Reassembly,
    /// The contiguous prefix known to be on disk.
    safe_prefix: u64,
    /// The prefix last written to the side file.
    saved_prefix: u64,
    /// An inline placement failed: the writer thread reports it.
    failed: Option<ClientError>,
}

/// Settings of one writer.
pub struct WriterConfig {
    /// Destination.
    pub sink: Sink,
    /// Bytes already present from an earlier run (`0..n`).
    pub already: u64,
    /// File size announced by the server, if any.
    pub size: Option<u64>,
    /// Memory cap shared with the drain thread.
    pub mem_cap: u64,
    /// Side file where the contiguous prefix is recorded (MODE E resume).
    pub prefix_file: Option<PathBuf>,
    /// Written buffers go back to the drain thread here (no fresh pages
    /// to fault in and zero for every block).
    pub recycle: Option<mpsc::SyncSender<Vec<u8>>>,
}

impl Writer {
    /// Starts the writer thread.
    pub fn start(cfg: WriterConfig, stats: Arc<Stats>) -> Result<Writer> {
        let budget = Arc::new(Budget::new(cfg.mem_cap));
        let (tx, rx) = mpsc::channel::<Block>();
        let re = match cfg.sink {
            Sink::File(_) => Reassembly::seekable(0..cfg.already, cfg.size),
            Sink::Stdout | Sink::Device(_) => Reassembly::in_order(cfg.size, cfg.mem_cap),
        };
        let prefix = re.prefix();
        let shared = Arc::new(Shared {
            inline: !cfg.sink.in_order(),
            placer: Mutex::new(Placer {
                sink: cfg.sink,
                prefix_file: cfg.prefix_file,
                recycle: cfg.recycle,
                re,
                safe_prefix: prefix,
                saved_prefix: prefix,
                failed: None,
            }),
            queued: AtomicUsize::new(0),
            inline_after: AtomicU64::new(0),
            t0: Instant::now(),
        });
        let (b, sh) = (budget.clone(), shared.clone());
        let size = cfg.size;
        let join = std::thread::Builder::new()
            .name("sluice-writer".into())
            .spawn(move || {
                let r = write_loop(&sh, size, rx, &b, &stats);
                // Whatever happened, never leave the drain thread waiting.
                b.close();
                r
            })
            .map_err(|e| ClientError::local("start writer thread", e))?;
        Ok(Writer {
            tx: Some(tx),
            join: Some(join),
            budget,
            shared,
        })
    }

    /// A sender for the drain thread, with the budget it must take from.
    pub fn input(&self) -> WriterInput {
        WriterInput {
            tx: self.tx.clone().expect("writer input taken after finish"),
            budget: self.budget.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Closes the input and waits for every block to be written.
    pub fn finish(mut self) -> Result<WriterReport> {
        self.tx.take();
        match self.join.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ClientError::Bug("writer thread panicked".into())),
            None => Err(ClientError::Bug("writer finished twice".into())),
        }
    }
}

/// The drain thread's end of the writer.
#[derive(Clone)]
pub struct WriterInput {
    tx: mpsc::Sender<Block>,
    budget: Arc<Budget>,
    shared: Arc<Shared>,
}

impl WriterInput {
    /// Hands a block to the writer, waiting on the memory cap first, or
    /// places it here when the writer is idle (see the module's text).
    /// Returns false if the writer has stopped (it reports why).
    pub fn send(&self, block: Block, stats: &Stats) -> bool {
        let block = match self.place_here(block, stats) {
            Ok(placed) => return placed,
            Err(block) => block,
        };
        if !self.budget.acquire(block.data.len() as u64, stats) {
            return false;
        }
        self.shared.queued.fetch_add(1, Relaxed);
        if self.tx.send(block).is_err() {
            self.shared.queued.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// Places `block` on this thread if the sink is positional, nothing
    /// waits for the writer thread (so no block is overtaken) and no
    /// recent inline write was slow; gives it back otherwise.
    fn place_here(&self, block: Block, stats: &Stats) -> std::result::Result<bool, Block> {
        let sh = &*self.shared;
        if !sh.inline || sh.queued.load(Relaxed) != 0 {
            return Err(block);
        }
        let now = sh.t0.elapsed().as_micros() as u64;
        if now < sh.inline_after.load(Relaxed) {
            return Err(block);
        }
        // The writer thread placing a block holds the lock: hand over.
        let Ok(mut p) = sh.placer.try_lock() else {
            return Err(block);
        };
        if sh.queued.load(Relaxed) != 0 {
            return Err(block);
        }
        if p.failed.is_some() {
            return Ok(false);
        }
        let t0 = Instant::now();
        let r = p.place(block, None, stats);
        let took = t0.elapsed();
        Stats::add(&stats.blocks_inline, 1);
        if took > INLINE_SLOW {
            // The reading waited for the disk: a writer wait (the
            // verdict's disk share), and the writer thread takes over.
            Stats::add(&stats.stall_micros, took.as_micros() as u64);
            let until = sh.t0.elapsed() + INLINE_PAUSE;
            sh.inline_after.store(until.as_micros() as u64, Relaxed);
        }
        match r {
            Ok(()) => Ok(true),
            Err(e) => {
                p.failed = Some(e);
                self.budget.close();
                Ok(false)
            }
        }
    }
}

fn write_loop(
    sh: &Shared,
    size: Option<u64>,
    rx: mpsc::Receiver<Block>,
    budget: &Budget,
    stats: &Stats,
) -> Result<WriterReport> {
    let mut stdout_used = false;
    for block in rx {
        let mut p = lock(&sh.placer);
        stdout_used |= matches!(p.sink, Sink::Stdout);
        let r = if p.failed.is_some() {
            Ok(())
        } else {
            p.place(block, Some(budget), stats)
        };
        sh.queued.fetch_sub(1, Relaxed);
        if let Err(e) = r {
            p.failed = Some(e);
        }
        if p.failed.is_some() {
            break;
        }
    }
    let mut p = lock(&sh.placer);
    if let Some(e) = p.failed.take() {
        // A bad block or a failed write ends the download; record how far
        // the file is good so `--continue` does not start from scratch.
        if let Some(f) = &p.prefix_file {
            let _ = save_prefix(f, p.safe_prefix);
        }
        return Err(e);
    }
    if stdout_used {
        std::io::stdout()
            .flush()
            .map_err(|e| ClientError::local("write to stdout", e))?;
    }
    if let Some(f) = &p.prefix_file {
        save_prefix(f, p.re.prefix())?;
    }
    let re = &mut p.re;
    let gaps = size.map(|s| re.gaps(s)).unwrap_or_default();
    Ok(WriterReport {
        gaps,
        prefix: re.prefix(),
        end: re.end(),
    })
}

impl Placer {
    /// Feeds one block through the reassembly and writes what it frees.
    /// `budget`: the block's bytes were taken from it (handed over, not
    /// placed inline) and go back once written.
    fn place(&mut self, block: Block, budget: Option<&Budget>, stats: &Stats) -> Result<()> {
        let n = block.data.len() as u64;
        let placed = self.re.handle_block(block.offset, block.data);
        if self.sink.in_order() {
            // Held blocks wait in the reassembly window, bounded on its own;
            // keeping them in the budget could wedge the drain thread.
            if let Some(b) = budget {
                b.release(n, stats);
            }
        }
        placed.map_err(|e| ClientError::Protocol(e.to_string()))?;
        while let Some(w) = self.re.poll_write() {
            let len = w.data.len() as u64;
            match &self.sink {
                Sink::File(f) => {
                    f.write_all_at(&w.data, w.offset)
                        .map_err(|e| ClientError::local("write", e))?;
                    if let Some(r) = &self.recycle {
                        let _ = r.try_send(w.data);
                    }
                }
                Sink::Stdout => std::io::stdout()
                    .lock()
                    .write_all(&w.data)
                    .map_err(|e| ClientError::local("write to stdout", e))?,
                Sink::Device(f) => {
                    let mut f: &File = f;
                    f.write_all(&w.data)
                        .map_err(|e| ClientError::local("write", e))?;
                }
            }
            Stats::add(&stats.bytes_written, len);
        }
        self.safe_prefix = self.re.prefix();
        if !self.sink.in_order() {
            if let Some(b) = budget {
                b.release(n, stats);
            }
        }
        stats
            .duplicate_bytes
            .store(self.re.duplicate_bytes(), Relaxed);
        if let Some(p) = &self.prefix_file {
            let prefix = self.re.prefix();
            if prefix >= self.saved_prefix + PREFIX_SAVE_STEP {
                save_prefix(p, prefix)?;
                self.saved_prefix = prefix;
            }
        }
        Ok(())
    }
}

/// Records the resume point of a MODE E download (whose `.part` file may
/// have holes, so its length says nothing).
pub fn save_prefix(path: &std::path::Path, prefix: u64) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{prefix}\n"))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| ClientError::local(format!("write {}", path.display()), e))
}

/// Reads a resume point written by [`save_prefix`].
pub fn load_prefix(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Opens a download's `.part` for writing, keeping exactly the first `keep`
/// bytes: whatever lies past the resume point (a MODE E part may have holes
/// and junk after its contiguous prefix, an HTTP part a stale tail) is cut.
pub fn open_part(part: &std::path::Path, keep: u64) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(keep == 0)
        .open(part)
        .map_err(|e| ClientError::local(format!("create {}", part.display()), e))?;
    f.set_len(keep)
        .map_err(|e| ClientError::local(format!("truncate {}", part.display()), e))?;
    Ok(f)
}

/// Opens a device or FIFO named as DEST as it is: no truncation, no
/// `.part` renamed over it. A device that takes positional writes (the
/// null device, a block device) is written at each block's offset like a
/// file, so parallel streams need no in-order window; a FIFO or terminal
/// is written in order.
pub fn device_sink(p: &std::path::Path) -> Result<Sink> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .map_err(|e| ClientError::local(format!("open {}", p.display()), e))?;
    // A zero-length pwrite writes nothing; it fails (ESPIPE) where
    // positions mean nothing.
    Ok(match f.write_at(&[], 0) {
        Ok(_) => Sink::File(f),
        Err(_) => Sink::Device(f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer into `f` for a `size`-byte file, 1 MiB of memory.
    fn file_writer(
        f: File,
        size: u64,
        prefix_file: Option<std::path::PathBuf>,
    ) -> (Writer, Arc<Stats>) {
        let stats = Arc::new(Stats::default());
        let cfg = WriterConfig {
            sink: Sink::File(f),
            already: 0,
            size: Some(size),
            mem_cap: 1 << 20,
            prefix_file,
            recycle: None,
        };
        (Writer::start(cfg, stats.clone()).unwrap(), stats)
    }

    #[test]
    fn null_device_takes_positions_and_a_fifo_does_not() {
        let null = std::path::Path::new("/dev/null");
        if null.exists() {
            assert!(matches!(device_sink(null).unwrap(), Sink::File(_)));
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here
        }
        // Opening a FIFO for writing waits for a reader.
        let f2 = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read(f2).unwrap());
        let sink = device_sink(&fifo).unwrap();
        assert!(matches!(sink, Sink::Device(_)));
        drop(sink);
        assert!(reader.join().unwrap().is_empty());
    }

    #[test]
    fn budget_lets_an_oversized_block_through_when_empty() {
        let s = Stats::default();
        let b = Budget::new(10);
        assert!(b.acquire(100, &s));
        b.release(100, &s);
        assert_eq!(s.receive_stalls.load(Relaxed), 0);
    }

    #[test]
    fn budget_waits_then_counts_a_stall() {
        let s = Arc::new(Stats::default());
        let b = Arc::new(Budget::new(10));
        assert!(b.acquire(8, &s));
        let (b2, s2) = (b.clone(), s.clone());
        let t = std::thread::spawn(move || b2.acquire(8, &s2));
        // Release only once the other thread is (about to be) waiting; the
        // result does not depend on the timing, only the stall count might,
        // so wait until the stall is recorded.
        while s.receive_stalls.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        b.release(8, &s);
        assert!(t.join().unwrap());
        assert_eq!(s.receive_stalls.load(Relaxed), 1);
    }

    #[test]
    fn closed_budget_refuses() {
        let s = Stats::default();
        let b = Budget::new(10);
        assert!(b.acquire(10, &s));
        b.close();
        assert!(!b.acquire(5, &s));
    }

    #[test]
    fn writer_pwrites_out_of_order_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = File::create(&path).unwrap();
        let (w, stats) = file_writer(f, 6, None);
        let input = w.input();
        assert!(input.send(
            Block {
                offset: 3,
                data: b"def".to_vec()
            },
            &stats
        ));
        assert!(input.send(
            Block {
                offset: 0,
                data: b"abc".to_vec()
            },
            &stats
        ));
        drop(input);
        let rep = w.finish().unwrap();
        assert!(rep.gaps.is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        assert_eq!(stats.mem_in_use.load(Relaxed), 0);
    }

    #[test]
    fn an_idle_writer_lets_the_drain_place_blocks_and_a_busy_one_takes_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (w, stats) = file_writer(File::create(&path).unwrap(), 9, None);
        let input = w.input();
        // Nothing queued, nobody placing: placed here, at once.
        let b = |offset: u64, d: &[u8]| Block {
            offset,
            data: d.to_vec(),
        };
        assert!(input.send(b(6, b"ghi"), &stats));
        assert_eq!(stats.blocks_inline.load(Relaxed), 1);
        assert_eq!(stats.bytes_written.load(Relaxed), 3);
        // The writer thread busy with a block (its lock held): handed over,
        // and so is the next one, which must not overtake it.
        let held = w.shared.placer.lock().unwrap();
        assert!(input.send(b(3, b"def"), &stats));
        assert!(input.send(b(0, b"abc"), &stats));
        assert_eq!(stats.blocks_inline.load(Relaxed), 1);
        drop(held);
        drop(input);
        let rep = w.finish().unwrap();
        assert!(rep.gaps.is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdefghi");
        assert_eq!(stats.mem_in_use.load(Relaxed), 0);
    }

    #[test]
    fn an_in_order_sink_is_never_written_by_the_drain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here
        }
        let p2 = path.clone();
        let reader = std::thread::spawn(move || std::fs::read(p2).unwrap());
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let stats = Arc::new(Stats::default());
        let w = Writer::start(
            WriterConfig {
                sink: Sink::Device(f),
                already: 0,
                size: Some(3),
                mem_cap: 1 << 20,
                prefix_file: None,
                recycle: None,
            },
            stats.clone(),
        )
        .unwrap();
        let input = w.input();
        assert!(input.send(
            Block {
                offset: 0,
                data: b"abc".to_vec()
            },
            &stats
        ));
        drop(input);
        w.finish().unwrap();
        assert_eq!(reader.join().unwrap(), b"abc");
        assert_eq!(stats.blocks_inline.load(Relaxed), 0);
    }

    #[test]
    fn writer_reports_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        let (w, stats) = file_writer(f, 10, None);
        assert!(w.input().send(
            Block {
                offset: 0,
                data: vec![1; 4]
            },
            &stats
        ));
        let rep = w.finish().unwrap();
        assert_eq!(rep.gaps, vec![4..10]);
        assert_eq!(rep.prefix, 4);
    }

    #[test]
    fn bad_block_still_records_the_good_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        let side = dir.path().join("f.part.resume");
        let (w, stats) = file_writer(f, 10, Some(side.clone()));
        let input = w.input();
        assert!(input.send(
            Block {
                offset: 0,
                data: vec![1; 6]
            },
            &stats
        ));
        // Past the announced size: the writer stops with an error.
        let _ = input.send(
            Block {
                offset: 8,
                data: vec![2; 4],
            },
            &stats,
        );
        drop(input);
        assert!(matches!(w.finish(), Err(ClientError::Protocol(_))));
        assert_eq!(load_prefix(&side), Some(6));
    }

    #[test]
    fn prefix_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.part.resume");
        save_prefix(&p, 12345).unwrap();
        assert_eq!(load_prefix(&p), Some(12345));
        assert_eq!(load_prefix(&dir.path().join("none")), None);
    }

    #[test]
    fn open_part_keeps_only_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.part");
        std::fs::write(&p, b"0123456789").unwrap();
        drop(open_part(&p, 4).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"0123");
        drop(open_part(&p, 0).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"");
    }
}
