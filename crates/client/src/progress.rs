//! Progress bar (a terminal on stderr only) fed from the byte counter by
//! its own ticker thread, so the drain thread never touches the terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::stats::Stats;

/// How often the ticker reads the counter.
const TICK: Duration = Duration::from_millis(100);

/// A running progress display; dropping or [`Progress::finish`] stops it.
pub struct Progress {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts showing progress of `stats.bytes` towards `total` (bytes still
    /// to move in this run, if known), unless `quiet` or stderr is not a
    /// terminal.
    pub fn start(stats: Arc<Stats>, total: Option<u64>, base: u64, quiet: bool) -> Progress {
        Self::start_with_files(stats, total, base, None, quiet)
    }

    /// [`Progress::start`] for a tree: also shows `done/total files`.
    pub fn start_with_files(
        stats: Arc<Stats>,
        total: Option<u64>,
        base: u64,
        files: Option<(Arc<AtomicU64>, u64)>,
        quiet: bool,
    ) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if quiet || !std::io::stderr().is_terminal() {
            return Progress { stop, join: None };
        }
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        let style = if total.is_some() {
            ProgressStyle::with_template(
                "{msg}{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
        } else {
            ProgressStyle::with_template("{msg}{spinner} {bytes} {binary_bytes_per_sec}")
        };
        if let Ok(style) = style {
            bar.set_style(style);
        }
        bar.set_position(base);
        bar.reset_eta();
        let s = stop.clone();
        let join = std::thread::Builder::new()
            .name("sluice-progress".into())
            .spawn(move || {
                while !s.load(Relaxed) {
                    bar.set_position(base + stats.bytes.load(Relaxed));
                    if let Some((done, all)) = &files {
                        bar.set_message(format!("{}/{all} files ", done.load(Relaxed)));
                    }
                    std::thread::sleep(TICK);
                }
                bar.finish_and_clear();
            })
            .ok();
        Progress { stop, join }
    }

    /// Stops and clears the bar.
    pub fn finish(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.halt();
    }
}
