//! The writer thread and the memory budget between it and the drain thread.
//!
//! The drain thread hands over `(offset, bytes)` blocks; the writer feeds
//! them through [`Reassembly`] and `pwrite`s them at their offset (or
//! appends them in order to stdout). Memory between the two is bounded by a
//! [`Budget`]: the drain thread takes bytes from it before handing a block
//! over, the writer gives them back once they are written. When the budget
//! is used up the drain thread waits; each wait is a receive stall.

use std::fs::File;
use std::io::Write as _;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::error::{ClientError, Result};
use crate::reassembly::Reassembly;
use crate::stats::Stats;

/// Bytes of newly contiguous data after which the MODE E resume point is
/// written to the side file (a lost update costs at most this much re-sent).
const PREFIX_SAVE_STEP: u64 = 16 << 20;

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
        let b = budget.clone();
        let join = std::thread::Builder::new()
            .name("sluice-writer".into())
            .spawn(move || {
                let r = write_loop(cfg, rx, &b, &stats);
                // Whatever happened, never leave the drain thread waiting.
                b.close();
                r
            })
            .map_err(|e| ClientError::local("start writer thread", e))?;
        Ok(Writer {
            tx: Some(tx),
            join: Some(join),
            budget,
        })
    }

    /// A sender for the drain thread, with the budget it must take from.
    pub fn input(&self) -> WriterInput {
        WriterInput {
            tx: self.tx.clone().expect("writer input taken after finish"),
            budget: self.budget.clone(),
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
}

impl WriterInput {
    /// Hands a block to the writer, waiting on the memory cap first.
    /// Returns false if the writer has stopped (it reports why).
    pub fn send(&self, block: Block, stats: &Stats) -> bool {
        if !self.budget.acquire(block.data.len() as u64, stats) {
            return false;
        }
        self.tx.send(block).is_ok()
    }
}

fn write_loop(
    cfg: WriterConfig,
    rx: mpsc::Receiver<Block>,
    budget: &Budget,
    stats: &Stats,
) -> Result<WriterReport> {
    let mut re = match cfg.sink {
        Sink::File(_) => Reassembly::seekable(0..cfg.already, cfg.size),
        Sink::Stdout | Sink::Device(_) => Reassembly::in_order(cfg.size, cfg.mem_cap),
    };
    // The contiguous prefix known to be on disk.
    let mut safe_prefix = re.prefix();
    if let Err(e) = write_blocks(&cfg, rx, budget, stats, &mut re, &mut safe_prefix) {
        // A bad block or a failed write ends the download; record how far
        // the file is good so `--continue` does not start from scratch.
        if let Some(p) = &cfg.prefix_file {
            let _ = save_prefix(p, safe_prefix);
        }
        return Err(e);
    }
    if let Some(p) = &cfg.prefix_file {
        save_prefix(p, re.prefix())?;
    }
    let gaps = cfg.size.map(|s| re.gaps(s)).unwrap_or_default();
    Ok(WriterReport {
        gaps,
        prefix: re.prefix(),
        end: re.end(),
    })
}

fn write_blocks(
    cfg: &WriterConfig,
    rx: mpsc::Receiver<Block>,
    budget: &Budget,
    stats: &Stats,
    re: &mut Reassembly,
    safe_prefix: &mut u64,
) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut saved_prefix = re.prefix();
    for block in rx {
        let n = block.data.len() as u64;
        let placed = re.handle_block(block.offset, block.data);
        if cfg.sink.in_order() {
            // Held blocks wait in the reassembly window, bounded on its own;
            // keeping them in the budget could wedge the drain thread.
            budget.release(n, stats);
        }
        placed.map_err(|e| ClientError::Protocol(e.to_string()))?;
        while let Some(w) = re.poll_write() {
            let len = w.data.len() as u64;
            match &cfg.sink {
                Sink::File(f) => {
                    f.write_all_at(&w.data, w.offset)
                        .map_err(|e| ClientError::local("write", e))?;
                    if let Some(r) = &cfg.recycle {
                        let _ = r.try_send(w.data);
                    }
                }
                Sink::Stdout => stdout
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
        *safe_prefix = re.prefix();
        if !cfg.sink.in_order() {
            budget.release(n, stats);
        }
        stats.duplicate_bytes.store(re.duplicate_bytes(), Relaxed);
        if let Some(p) = &cfg.prefix_file {
            let prefix = re.prefix();
            if prefix >= saved_prefix + PREFIX_SAVE_STEP {
                save_prefix(p, prefix)?;
                saved_prefix = prefix;
            }
        }
    }
    if matches!(cfg.sink, Sink::Stdout) {
        stdout
            .flush()
            .map_err(|e| ClientError::local("write to stdout", e))?;
    }
    Ok(())
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
