//! The job-wide side of a tree transfer: the one progress display and
//! its counters, and the summary (with `--stats`, the job's timeline and
//! every file) printed at the end.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use super::jobs::{self, Outcome};
use super::plan;
use super::sync::Notes;
use crate::error::{ClientError, Result};
use crate::progress::Progress;
use crate::stats::Stats;

/// The job-wide counters every transfer of a tree adds to, and the one
/// progress display that shows them.
pub(crate) struct JobProgress {
    pub(crate) stats: Arc<Stats>,
    pub(crate) done: Arc<AtomicU64>,
    pub(crate) progress: Progress,
}

impl JobProgress {
    /// Starts the display (a terminal on stderr and no `-q` only).
    pub(crate) fn start(bytes: Option<u64>, files: usize, quiet: bool) -> JobProgress {
        let stats = Arc::new(Stats::default());
        let done = Arc::new(AtomicU64::new(0));
        let progress = Progress::start_with_files(
            stats.clone(),
            bytes,
            0,
            Some((done.clone(), files as u64)),
            quiet,
        );
        JobProgress {
            stats,
            done,
            progress,
        }
    }
}

/// `--stats`: where the job's time went, in seconds from its start: the
/// listing's end (workers start), each worker's login, and when the
/// first, a quarter, half, three quarters and all of the files had
/// arrived.
fn timeline(t: &jobs::Timeline, t0: Instant) -> String {
    let at = |i: &Instant| format!("{:.3}", i.saturating_duration_since(t0).as_secs_f64());
    let mut ends = t.ends.clone();
    ends.sort();
    let mut logins = t.logins.clone();
    logins.sort();
    let q = |f: usize| ends.get((ends.len() * f / 4).min(ends.len().saturating_sub(1)));
    let logins: Vec<String> = logins.iter().map(at).collect();
    let marks: Vec<String> = t
        .marks
        .iter()
        .map(|(m, i)| format!("{m} {}", at(i)))
        .collect();
    format!(
        "stats: timeline {}{}workers {} logins [{}] files first {} 25% {} 50% {} 75% {} last {}",
        marks.join(" "),
        if marks.is_empty() { "" } else { " " },
        t.started.as_ref().map_or("-".into(), at),
        logins.join(" "),
        ends.first().map_or("-".into(), at),
        q(1).map_or("-".into(), at),
        q(2).map_or("-".into(), at),
        q(3).map_or("-".into(), at),
        ends.last().map_or("-".into(), at),
    )
}

/// Prints the job's summary and failures; an error if any file failed.
pub(crate) fn finish(
    verb: &str,
    out: Outcome,
    total: usize,
    notes: &Notes,
    t0: Instant,
    per_file: bool,
) -> Result<()> {
    let elapsed = t0.elapsed();
    let moved = out.done - notes.same.min(out.done);
    let mut detail = format!("{moved} of {total} files");
    if notes.uptodate + notes.same > 0 {
        detail.push_str(&format!(", {} up to date", notes.uptodate + notes.same));
    }
    if notes.deleted > 0 {
        detail.push_str(&format!(", {} deleted", notes.deleted));
    }
    if notes.skipped > 0 {
        detail.push_str(&format!(", {} skipped", notes.skipped));
    }
    if out.retries > 0 {
        detail.push_str(&format!(", {} retries", out.retries));
    }
    if !out.failed.is_empty() {
        detail.push_str(&format!(", {} failed", out.failed.len()));
    }
    if out.untried > 0 {
        detail.push_str(&format!(", {} not tried", out.untried));
    }
    eprintln!(
        "{}",
        crate::stats::summary(verb, out.bytes, elapsed, &detail)
    );
    if per_file {
        eprintln!("{}", timeline(&out.timeline, t0));
        for (rel, bytes, took, attempts) in &out.files {
            eprintln!(
                "stats: file {} bytes {bytes} seconds {:.3} attempts {attempts}",
                plan::shown(rel),
                took.as_secs_f64()
            );
        }
    }
    for f in &out.failed {
        eprintln!("sluice: failed: {}: {}", plan::shown(&f.rel), f.error);
    }
    let failed = out.failed.len() + out.untried as usize;
    match out.failed.into_iter().next() {
        None => Ok(()),
        Some(first) => Err(ClientError::Tree {
            failed,
            total,
            first: Box::new(first.error),
        }),
    }
}
