//! Page-cache tracing for every server alike (Sluice, nginx, vsftpd): the
//! kernel tracepoints `filemap:mm_filemap_add_to_page_cache` (a page or
//! folio enters the cache: a disk read was submitted for it) and
//! `filemap:mm_filemap_delete_from_page_cache` (it left: evicted or
//! truncated), recorded in a private tracefs instance filtered in the kernel
//! by device and inode range, read from `trace_pipe` while the run goes on.
//! Timestamps use the `mono` trace clock, which is CLOCK_MONOTONIC, the clock
//! the load generator reports its start in.
//!
//! From the events and each client's received bytes over time:
//! - reads after a reset: per file of a reset client, the page adds after its
//!   reset, grouped into runs of contiguous pages in time order (one run is
//!   one read as the disk sees it) and their bytes;
//! - read-ahead evicted unused: a page deleted at an offset its client had
//!   not received by then (TCP `bytes_received` of the client's socket at the
//!   first client sample at or after the deletion: an upper bound on what it
//!   had, so the count is a lower bound), and the end-of-run bound (deleted
//!   beyond everything the client ever received).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

const TRACEFS: &str = "/sys/kernel/tracing";
const INSTANCE: &str = "sluice-lab-pages";
const EVENTS: [&str; 2] = [
    "mm_filemap_add_to_page_cache",
    "mm_filemap_delete_from_page_cache",
];
/// Per-CPU ring buffer of the instance: at 40 MB/s of 4 KiB pages (about
/// 20 000 adds and deletes per second) this holds seconds of events if the
/// reader falls behind.
const BUFFER_KB: u32 = 16 * 1024;
/// Sleep of the reader when the pipe is empty.
const READ_IDLE: Duration = Duration::from_millis(20);
/// Page size of the tracepoints' `ofs` field (index << 12).
pub const PAGE: u64 = 4096;

/// One traced page-cache change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageEvent {
    /// CLOCK_MONOTONIC seconds.
    pub t_s: f64,
    /// Added (true) or deleted (false).
    pub add: bool,
    /// Inode number.
    pub ino: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes (4 KiB << order).
    pub len: u64,
}

/// Parses one `trace_pipe` line of the two filemap events; None for anything else.
///
/// `  sluice-123 [001] ..... 812.345678: mm_filemap_add_to_page_cache: dev 254:0 ino 10a0c8 pfn=0x1 ofs=8192 order=0`
pub fn parse_line(line: &str) -> Option<PageEvent> {
    let (head, add, rest) =
        if let Some((h, r)) = line.split_once(": mm_filemap_add_to_page_cache: ") {
            (h, true, r)
        } else {
            let (h, r) = line.split_once(": mm_filemap_delete_from_page_cache: ")?;
            (h, false, r)
        };
    let t_s: f64 = head.rsplit(char::is_whitespace).next()?.parse().ok()?;
    let mut ino = None;
    let mut offset = None;
    let mut order = 0u32;
    let mut it = rest.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == "ino" {
            ino = u64::from_str_radix(it.next()?, 16).ok();
        } else if let Some(v) = tok.strip_prefix("ofs=") {
            offset = v.parse().ok();
        } else if let Some(v) = tok.strip_prefix("order=") {
            order = v.parse().ok()?;
        }
    }
    Some(PageEvent {
        t_s,
        add,
        ino: ino?,
        offset: offset?,
        len: PAGE << order.min(20),
    })
}

/// The kernel's dev_t encoding (major << 20 | minor) of a file's device, as the tracepoints' `s_dev`.
pub fn kernel_dev(p: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let d = std::fs::metadata(p)
        .with_context(|| format!("stat {}", p.display()))?
        .dev();
    // glibc's dev_t: major in bits 8..19 and 32..43, minor in bits 0..7 and 12..31 (gnu_dev_major/minor).
    let major = ((d >> 8) & 0xfff) | ((d >> 32) & !0xfff);
    let minor = (d & 0xff) | ((d >> 12) & !0xff);
    Ok((major << 20) | minor)
}

/// Inode number of a file.
pub fn inode(p: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(p)
        .with_context(|| format!("stat {}", p.display()))?
        .ino())
}

/// What the reader collected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceLog {
    /// Events of the watched inodes, in the order read (time order per CPU).
    #[serde(skip)]
    pub events: Vec<PageEvent>,
    /// Event lines read (all inodes in the filtered range).
    pub lines: u64,
    /// Events the kernel dropped or overwrote (ring buffer full): the counts are then incomplete.
    pub lost: u64,
    /// Seconds the trace ran.
    pub secs: f64,
}

/// What the reader thread returns: the watched events and the lines read.
type Collected = Result<(Vec<PageEvent>, u64)>;

/// A running trace.
pub struct Tracer {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<Collected>>,
    started: std::time::Instant,
}

fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("writing {v:?} to {}", p.display()))
}

/// The kernel-side filter: one device, an inode range (the userspace side keeps exactly the watched set).
pub fn filter_expr(dev: u64, inos: &BTreeSet<u64>) -> String {
    match (inos.first(), inos.last()) {
        (Some(lo), Some(hi)) => format!("s_dev == {dev} && i_ino >= {lo} && i_ino <= {hi}"),
        _ => format!("s_dev == {dev}"),
    }
}

impl Tracer {
    /// Starts tracing page adds and deletes of `inos` on the device `dev` (kernel encoding).
    pub fn start(dev: u64, inos: BTreeSet<u64>) -> Result<Tracer> {
        let root = Path::new(TRACEFS);
        if !root.join("instances").is_dir() {
            // Mount it if the system has not.
            let _ = crate::cmd::run("mount", &["-t", "tracefs", "nodev", TRACEFS]);
            if !root.join("instances").is_dir() {
                bail!("tracefs not available at {TRACEFS} (mount -t tracefs nodev {TRACEFS})");
            }
        }
        // One instance per process: two tracers (a lab run and the test
        // suite) must never share or remove each other's buffer.
        let dir = root
            .join("instances")
            .join(format!("{INSTANCE}-{}", std::process::id()));
        remove_instance(&dir);
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating tracefs instance {}", dir.display()))?;
        write(&dir.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
        write(&dir.join("trace_clock"), "mono")?;
        let filter = filter_expr(dev, &inos);
        for e in EVENTS {
            let ev = dir.join("events/filemap").join(e);
            write(&ev.join("filter"), &filter)?;
            write(&ev.join("enable"), "1")?;
        }
        let mut pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.join("trace_pipe"))
            .context("opening trace_pipe")?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let reader = std::thread::spawn(move || -> Collected {
            let mut buf = vec![0u8; 1 << 20];
            let mut partial = String::new();
            let mut events = Vec::new();
            let mut lines = 0u64;
            let mut draining = 0;
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => std::thread::sleep(READ_IDLE),
                    Ok(n) => {
                        partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                        let keep = partial.rfind('\n').map(|i| i + 1).unwrap_or(0);
                        for l in partial[..keep].lines() {
                            if let Some(e) = parse_line(l) {
                                lines += 1;
                                if inos.contains(&e.ino) {
                                    events.push(e);
                                }
                            }
                        }
                        partial.drain(..keep);
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if st.load(Ordering::Relaxed) {
                            // Events are off: two empty reads in a row mean the buffer is drained.
                            draining += 1;
                            if draining >= 2 {
                                return Ok((events, lines));
                            }
                        }
                        std::thread::sleep(READ_IDLE);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("reading trace_pipe"),
                }
            }
        });
        Ok(Tracer {
            dir,
            stop,
            reader: Some(reader),
            started: std::time::Instant::now(),
        })
    }

    /// Stops tracing, drains the buffer and removes the instance.
    pub fn finish(mut self) -> Result<TraceLog> {
        for e in EVENTS {
            let _ = write(&self.dir.join("events/filemap").join(e).join("enable"), "0");
        }
        let secs = self.started.elapsed().as_secs_f64();
        let lost = lost_events(&self.dir);
        self.stop.store(true, Ordering::Relaxed);
        let (mut events, lines) = match self.reader.take().map(|h| h.join()) {
            Some(Ok(r)) => r?,
            _ => bail!("trace reader panicked"),
        };
        events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        Ok(TraceLog {
            events,
            lines,
            lost,
            secs,
        })
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.reader.take() {
            for e in EVENTS {
                let _ = write(&self.dir.join("events/filemap").join(e).join("enable"), "0");
            }
            let _ = h.join();
        }
        remove_instance(&self.dir);
    }
}

fn remove_instance(dir: &Path) {
    if dir.is_dir() {
        for e in EVENTS {
            let _ = std::fs::write(dir.join("events/filemap").join(e).join("enable"), "0");
        }
        let _ = std::fs::remove_dir(dir);
    }
}

/// Sum of "overrun" and "dropped events" over the instance's CPUs.
fn lost_events(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir.join("per_cpu"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let s = std::fs::read_to_string(e.path().join("stats")).unwrap_or_default();
        n += parse_lost(&s);
    }
    n
}

/// "overrun: N" + "dropped events: N" of one per_cpu stats file.
pub fn parse_lost(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "overrun" | "dropped events")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// One watched file: its client's reset time and received bytes over time.
#[derive(Debug, Clone, Default)]
pub struct FileWatch {
    /// CLOCK_MONOTONIC seconds of the client's reset, if it was reset.
    pub reset_at: Option<f64>,
    /// (CLOCK_MONOTONIC seconds, bytes received by then), increasing in time.
    pub received: Vec<(f64, u64)>,
    /// Bytes received by the end of the run.
    pub final_received: u64,
}

impl FileWatch {
    /// Received bytes at the first sample at or after `t` (the final count after the last).
    pub fn received_by(&self, t: f64) -> u64 {
        let i = self.received.partition_point(|(ts, _)| *ts < t);
        self.received
            .get(i)
            .map(|x| x.1)
            .unwrap_or(self.final_received)
    }
}

/// Per-file results of the trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FileStats {
    /// Bytes added to the page cache over the trace.
    pub added: u64,
    /// Bytes deleted from it.
    pub deleted: u64,
    /// Runs of contiguous page adds after the client's reset (reads).
    pub reads_after_reset: u64,
    /// Bytes added after the client's reset.
    pub bytes_after_reset: u64,
    /// Bytes deleted beyond what the client had received by then.
    pub evicted_unreceived: u64,
    /// Bytes deleted beyond what the client received by the end of the run.
    pub evicted_never_received: u64,
    /// Bytes added at offsets that had already been added in this trace:
    /// read from disk twice (evicted in between), whatever the server does
    /// with the data once read.
    pub read_twice: u64,
}

/// Bytes of [off, off+len) at or beyond `recv`.
fn beyond(off: u64, len: u64, recv: u64) -> u64 {
    (off + len).saturating_sub(off.max(recv))
}

/// Analyzes one file's events (in time order).
pub fn analyze(events: &[PageEvent], w: &FileWatch) -> FileStats {
    let mut s = FileStats::default();
    let mut run_end: Option<u64> = None;
    let mut seen = std::collections::HashSet::new();
    for e in events {
        if e.add {
            s.added += e.len;
            for page in e.offset / PAGE..(e.offset + e.len).div_ceil(PAGE) {
                if !seen.insert(page) {
                    s.read_twice += PAGE;
                }
            }
            if w.reset_at.is_some_and(|r| e.t_s >= r) {
                if run_end != Some(e.offset) {
                    s.reads_after_reset += 1;
                }
                run_end = Some(e.offset + e.len);
                s.bytes_after_reset += e.len;
            }
        } else {
            s.deleted += e.len;
            s.evicted_unreceived += beyond(e.offset, e.len, w.received_by(e.t_s));
            s.evicted_never_received += beyond(e.offset, e.len, w.final_received);
        }
    }
    s
}

/// Splits events by inode (keeping time order) and analyzes each watched file.
pub fn analyze_all(
    events: &[PageEvent],
    watches: &BTreeMap<u64, FileWatch>,
) -> BTreeMap<u64, FileStats> {
    let mut by: BTreeMap<u64, Vec<PageEvent>> = BTreeMap::new();
    for e in events {
        if watches.contains_key(&e.ino) {
            by.entry(e.ino).or_default().push(*e);
        }
    }
    watches
        .iter()
        .map(|(ino, w)| {
            (
                *ino,
                analyze(by.get(ino).map(Vec::as_slice).unwrap_or(&[]), w),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: f64, add: bool, page: u64, order: u32) -> PageEvent {
        PageEvent {
            t_s: t,
            add,
            ino: 7,
            offset: page * PAGE,
            len: PAGE << order,
        }
    }

    #[test]
    fn parses_trace_pipe_lines() {
        let a = "     sluice-srv 12-345   [001] ..... 812.345678: mm_filemap_add_to_page_cache: dev 254:0 ino 10a0c8 pfn=0x12ab ofs=8192 order=2";
        assert_eq!(
            parse_line(a),
            Some(PageEvent {
                t_s: 812.345678,
                add: true,
                ino: 0x10a0c8,
                offset: 8192,
                len: 16384
            })
        );
        let d = "kswapd0-80 [000] d..2. 9.5: mm_filemap_delete_from_page_cache: dev 254:0 ino ff pfn=0x1 ofs=0 order=0";
        assert_eq!(
            parse_line(d),
            Some(PageEvent {
                t_s: 9.5,
                add: false,
                ino: 255,
                offset: 0,
                len: 4096
            })
        );
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(
            parse_line("x 1.0: mm_filemap_add_to_page_cache: dev 254:0 pfn=0x1 ofs=0 order=0"),
            None
        );
    }

    #[test]
    fn counts_lost_events() {
        assert_eq!(parse_lost("entries: 5\noverrun: 3\ncommit overrun: 9\nbytes: 1\ndropped events: 2\nread events: 4\n"), 5);
    }

    #[test]
    fn kernel_filter_uses_the_inode_range() {
        let inos: BTreeSet<u64> = [30, 10, 20].into_iter().collect();
        assert_eq!(
            filter_expr(266338304, &inos),
            "s_dev == 266338304 && i_ino >= 10 && i_ino <= 30"
        );
        assert_eq!(filter_expr(5, &BTreeSet::new()), "s_dev == 5");
    }

    #[test]
    fn reads_after_reset_are_contiguous_runs_in_time_order() {
        let w = FileWatch {
            reset_at: Some(10.0),
            received: vec![],
            final_received: 0,
        };
        let events = [
            ev(9.0, true, 0, 0),  // before the reset: not counted
            ev(10.5, true, 1, 0), // run 1: pages 1..2
            ev(10.6, true, 2, 1), // continues: pages 2..4
            ev(11.0, true, 8, 0), // run 2 (a gap)
            ev(11.1, true, 4, 0), // run 3 (back, not contiguous with page 9)
        ];
        let s = analyze(&events, &w);
        assert_eq!(s.reads_after_reset, 3);
        assert_eq!(s.bytes_after_reset, 5 * PAGE);
        assert_eq!(s.added, 6 * PAGE);
        // Pages 0, 1, 2, 3, 8 once; page 4 once: nothing twice.
        assert_eq!(s.read_twice, 0);
        let again = [
            ev(1.0, true, 0, 2),
            ev(2.0, false, 0, 2),
            ev(3.0, true, 2, 1),
        ];
        assert_eq!(analyze(&again, &w).read_twice, 2 * PAGE);
        // Never reset: nothing counted after a reset.
        let s = analyze(&events, &FileWatch::default());
        assert_eq!((s.reads_after_reset, s.bytes_after_reset), (0, 0));
    }

    #[test]
    fn evictions_compare_with_what_the_client_had_received() {
        // Received 8 KiB by t=1, 40 KiB by t=2, 64 KiB at the end.
        let w = FileWatch {
            reset_at: None,
            received: vec![(1.0, 2 * PAGE), (2.0, 10 * PAGE)],
            final_received: 16 * PAGE,
        };
        assert_eq!(w.received_by(0.5), 2 * PAGE);
        assert_eq!(w.received_by(1.0), 2 * PAGE);
        assert_eq!(w.received_by(1.5), 10 * PAGE);
        assert_eq!(w.received_by(9.0), 16 * PAGE);
        let events = [
            ev(0.9, false, 1, 0),  // page 1 at t<=1: received (2 pages by t=1): used
            ev(0.9, false, 4, 1),  // pages 4..6, received 2: unused, and below the final 16
            ev(1.5, false, 9, 1),  // pages 9..11 with 10 received by t=2: one page unused
            ev(3.0, false, 20, 0), // beyond the end: unused by both measures
        ];
        let s = analyze(&events, &w);
        assert_eq!(s.deleted, 6 * PAGE);
        assert_eq!(s.evicted_unreceived, 4 * PAGE);
        assert_eq!(s.evicted_never_received, PAGE);
    }

    #[test]
    fn analysis_is_per_inode() {
        let mut other = ev(1.0, true, 0, 0);
        other.ino = 8;
        let events = [ev(1.0, true, 0, 0), other, ev(2.0, true, 1, 0)];
        let watches: BTreeMap<u64, FileWatch> = [(
            7,
            FileWatch {
                reset_at: Some(0.0),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect();
        let r = analyze_all(&events, &watches);
        assert_eq!(r.len(), 1);
        assert_eq!(r[&7].reads_after_reset, 1);
        assert_eq!(r[&7].bytes_after_reset, 2 * PAGE);
    }
}
