//! The log writer behind `tracing` (stderr): per-request lines (the
//! `access` and `xferlog` targets) are gathered in memory and written in
//! batches; every other line is written at once, after whatever is
//! gathered, so the order on stderr is the order of events.
//!
//! Why: one `write(2)` per HTTP request was about one syscall in eight
//! of the small-file path. Batches are written
//! - when an event-loop thread is about to sleep (the runtimes call
//!   [`flush`] from `on_thread_park`), so an idle server's log is always
//!   current and a busy one writes once per round of ready work;
//! - when [`BATCH_BYTES`] are gathered, or the oldest gathered line is
//!   [`MAX_DELAY`] old at the next line;
//! - before any other log line, at shutdown (Ctrl-C, SIGTERM: see
//!   `main.rs`) and from the panic hook ([`install_panic_flush`]).
//!
//! A SIGKILL can lose what is gathered: at most one round of ready work.
//!
//! With `--log-file` every line goes to that file instead of stderr;
//! [`reopen`] (SIGUSR1, SIGHUP) opens the path again, so after logrotate
//! has renamed the old file the next line starts the new one.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Gathered bytes that trigger a write at once.
pub const BATCH_BYTES: usize = 32 << 10;
/// Longest a gathered line waits for a write while lines keep coming.
pub const MAX_DELAY: Duration = Duration::from_millis(500);

/// Targets whose lines are gathered.
const BATCHED_TARGETS: [&str; 2] = ["access", "xferlog"];

struct Pending {
    buf: Vec<u8>,
    since: Option<Instant>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    buf: Vec::new(),
    since: None,
});
/// Held while a batch is written, so batches reach stderr in the order
/// they were taken; appends only ever wait for `PENDING`, never for I/O.
static WRITING: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Cheap check for the park hook: anything gathered?
static DIRTY: AtomicBool = AtomicBool::new(false);
/// The log file and its path, when the log does not go to stderr.
static FILE: Mutex<Option<(PathBuf, File)>> = Mutex::new(None);

fn open_log(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Sends every later line to `path` (appending) instead of stderr.
pub fn log_to_file(path: &Path) -> io::Result<()> {
    let f = open_log(path)?;
    *FILE.lock().unwrap_or_else(|p| p.into_inner()) = Some((path.to_path_buf(), f));
    Ok(())
}

/// Opens the log file's path again (after logrotate moved the old file
/// away); `Ok(None)` when the log goes to stderr. What is gathered goes
/// to the old file first. On failure the old file stays in use.
pub fn reopen() -> io::Result<Option<PathBuf>> {
    flush();
    let _order = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let mut file = FILE.lock().unwrap_or_else(|p| p.into_inner());
    let Some((path, f)) = file.as_mut() else {
        return Ok(None);
    };
    *f = open_log(path)?;
    Ok(Some(path.clone()))
}

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes whatever is gathered to stderr (cheap when nothing is).
pub fn flush() {
    if DIRTY.load(Ordering::Acquire) {
        write_out(None);
    }
}

/// Takes the gathered batch (under `PENDING` only briefly) and writes it,
/// then `then` (a line that must follow it), under `WRITING`.
fn write_out(then: Option<&[u8]>) {
    let mut out = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    {
        let mut p = pending();
        // The emptied buffer of the last write goes back for reuse.
        std::mem::swap(&mut p.buf, &mut *out);
        p.since = None;
        DIRTY.store(false, Ordering::Release);
    }
    let mut file = FILE.lock().unwrap_or_else(|p| p.into_inner());
    let mut err;
    let dest: &mut dyn Write = match file.as_mut() {
        Some((_, f)) => f,
        None => {
            err = io::stderr().lock();
            &mut err
        }
    };
    // Nowhere to report a failing log; drop the batch.
    let _ = dest.write_all(&out);
    out.clear();
    if let Some(line) = then {
        let _ = dest.write_all(line);
    }
}

/// Flushes the gathered lines before the default panic message.
pub fn install_panic_flush() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        flush();
        previous(info);
    }));
}

/// The `MakeWriter` for `tracing_subscriber::fmt`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

/// One event's writer: gathers (batched targets) or writes through.
#[derive(Debug)]
pub struct EventWriter {
    batched: bool,
}

impl Write for EventWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write_all(bytes)?;
        Ok(bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.batched {
            let now = Instant::now();
            let full = {
                let mut p = pending();
                p.buf.extend_from_slice(bytes);
                let since = *p.since.get_or_insert(now);
                DIRTY.store(true, Ordering::Release);
                p.buf.len() >= BATCH_BYTES || now.saturating_duration_since(since) >= MAX_DELAY
            };
            if full {
                write_out(None);
            }
        } else {
            // Keep the order: what was gathered goes first.
            write_out(Some(bytes));
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter { batched: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> EventWriter {
        EventWriter {
            batched: BATCHED_TARGETS.contains(&meta.target()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches the process-wide buffer, so they cannot interleave.
    #[test]
    fn gathers_batched_lines_and_keeps_the_order() {
        let w = LogWriter;
        let mut a = EventWriter { batched: true };
        a.write_all(b"access 1\n").unwrap();
        assert!(DIRTY.load(Ordering::Acquire));
        assert_eq!(pending().buf, b"access 1\n");
        // A line of another target writes what was gathered first.
        let mut other = w.make_writer();
        other.write_all(b"").unwrap();
        assert!(pending().buf.is_empty());
        assert!(!DIRTY.load(Ordering::Acquire));
        let mut a = EventWriter { batched: true };
        a.write_all(b"access 2\n").unwrap();
        assert_eq!(pending().buf, b"access 2\n");
        flush();
        assert!(pending().buf.is_empty());
        assert!(!DIRTY.load(Ordering::Acquire));
    }
}
