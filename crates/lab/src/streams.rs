//! The `streams` experiment kind: classes of long-running downloads (each
//! class with its own count, application read rate and file size, each client
//! optionally on its own file), run for a fixed time, measured in a steady
//! window; optional resets at one moment, link changes (`linkem set`) at
//! given times, a CPU-bound spinner beside the server, and the Sluice engine
//! counters scraped from `--metrics` once per sample. This file holds the
//! spec and the arithmetic on the samples; `run_streams.rs` runs it.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::units::{parse_duration, parse_rate, parse_size};

/// `[streams]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamsSpec {
    /// Run length; every download still running is cut (RST) then.
    pub duration: String,
    /// Run length with --smoke.
    pub smoke_duration: Option<String>,
    /// Clients start evenly spread over this time.
    #[serde(default = "zero")]
    pub arrival_spread: String,
    /// Arrival spread with --smoke.
    pub smoke_arrival_spread: Option<String>,
    /// Start of the steady-state window (it ends with the run).
    #[serde(default = "zero")]
    pub steady_from: String,
    /// Steady window start with --smoke.
    pub smoke_steady_from: Option<String>,
    /// "per-client" (every client reads its own file) or "shared" (one file per size).
    #[serde(default = "shared")]
    pub files: String,
    /// With `files = "shared"`: how many popular files of each size the
    /// clients' requests are spread over, evenly (round robin), per step
    /// (a list is a sweep like the class counts; default 1).
    pub popular_files: Option<Vec<u32>>,
    /// Popular files per step with --smoke.
    pub smoke_popular_files: Option<Vec<u32>>,
    /// Where each download starts in its file: "zero" (the first byte) or
    /// "spread" (a seeded uniform offset, the rest of the file asked with
    /// HTTP `Range: bytes=X-`, FTP `REST X` or MODE E `REST 0-X`; at the
    /// end the client starts again from 0): the steady state of a server
    /// whose clients have been arriving for hours, in a short run.
    #[serde(default = "zero_start")]
    pub start: String,
    /// Seed of the spread start offsets (the same offsets for every server and repetition).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Sampling interval of disk bytes, CPU and engine counters (the server side).
    #[serde(default = "second")]
    pub sample: String,
    /// Sampling interval of the clients' received bytes (per class and, with
    /// resets or `page_trace`, per client); default: `sample`.
    pub client_sample: Option<String>,
    /// Window of the "new fair share" test after a reset: the survivors'
    /// aggregate over this sliding window must reach 95 % of the aggregate before.
    #[serde(default = "half_second")]
    pub fair_window: String,
    /// Trace page-cache adds and deletes of the clients' files (tracefs
    /// filemap events; needs `files = "per-client"`): disk reads after a
    /// reset and read-ahead evicted before its client received it, for every server.
    #[serde(default)]
    pub page_trace: bool,
    /// Reset (RST) this many clients, spread evenly over all classes, at `abort_at`.
    #[serde(default)]
    pub abort_count: u32,
    /// Resets with --smoke.
    pub smoke_abort_count: Option<u32>,
    /// When the resets happen (since the run start).
    pub abort_at: Option<String>,
    /// When the resets happen with --smoke.
    pub smoke_abort_at: Option<String>,
    /// Run a CPU-bound spinner beside the server and report its progress
    /// against the same spinner alone right before the run.
    #[serde(default)]
    pub spinner: bool,
    /// Start Sluice with `--metrics` and scrape its counters every sample.
    #[serde(default)]
    pub metrics: bool,
    /// Server whose steady total the others are compared with ("total vs X").
    pub baseline: Option<String>,
    /// The client classes.
    #[serde(rename = "class")]
    pub classes: Vec<StreamClass>,
    /// Link changes during the run.
    #[serde(default, rename = "event")]
    pub events: Vec<LinkEvent>,
}

fn zero() -> String {
    "0s".into()
}
fn zero_start() -> String {
    "zero".into()
}
fn default_seed() -> u64 {
    12
}
fn shared() -> String {
    "shared".into()
}
fn second() -> String {
    "1s".into()
}
fn half_second() -> String {
    "500ms".into()
}

/// `[[streams.class]]`: clients of one kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamClass {
    /// Class name (tables; with mode linkem-classes also the path class whose namespace it uses).
    pub name: String,
    /// Client count per step: one value, or one per step (a sweep; classes
    /// with a single value keep it in every step).
    pub clients: Vec<u32>,
    /// Client counts with --smoke.
    pub smoke_clients: Option<Vec<u32>>,
    /// Application read rate per client ("0": as fast as possible).
    #[serde(default = "zero_rate")]
    pub rate: String,
    /// File size.
    pub size: String,
    /// File size with --smoke.
    pub smoke_size: Option<String>,
    /// Only on this `[[path]]` (by name); default: every path.
    pub path: Option<String>,
}

fn zero_rate() -> String {
    "0".into()
}

/// `[[streams.event]]`: a `linkem set` at a moment of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEvent {
    /// When (since the run start).
    pub at: String,
    /// When with --smoke.
    pub smoke_at: Option<String>,
    /// The path class whose linkem changes (mode linkem-classes); none: the single linkem.
    pub link: Option<String>,
    /// Settings as `linkem set` takes them, e.g. "loss=2%".
    pub set: String,
}

impl StreamsSpec {
    /// Checks values that would otherwise fail only mid-run.
    pub fn check(&self) -> Result<()> {
        for d in [
            Some(&self.duration),
            self.smoke_duration.as_ref(),
            Some(&self.arrival_spread),
            Some(&self.steady_from),
            Some(&self.sample),
            self.client_sample.as_ref(),
            Some(&self.fair_window),
        ]
        .into_iter()
        .flatten()
        .chain(self.abort_at.iter())
        {
            parse_duration(d)?;
        }
        if !matches!(self.files.as_str(), "shared" | "per-client") {
            bail!("files = {:?}: expected shared or per-client", self.files);
        }
        if !matches!(self.start.as_str(), "zero" | "spread") {
            bail!("start = {:?}: expected zero or spread", self.start);
        }
        if self.page_trace && self.files != "per-client" {
            bail!(
                "page_trace needs files = \"per-client\" (a traced file must belong to one client)"
            );
        }
        if self.abort_count > 0 && self.abort_at.is_none() {
            bail!("abort_count needs abort_at");
        }
        if self.classes.is_empty() {
            bail!("needs [[streams.class]] entries");
        }
        for c in &self.classes {
            if c.clients.is_empty() {
                bail!("class {}: clients is empty", c.name);
            }
            if c.rate != "0" {
                parse_rate(&c.rate)?;
            }
            parse_size(&c.size)?;
        }
        for e in &self.events {
            parse_duration(&e.at)?;
        }
        Ok(())
    }
}

/// Client count of each class in step `step` (a class with fewer values keeps its last).
pub fn counts_at(lists: &[Vec<u32>], step: usize) -> Vec<u32> {
    lists
        .iter()
        .map(|l| l.get(step).or(l.last()).copied().unwrap_or(0))
        .collect()
}

/// Alignment of spread start offsets (a page: resumes land on page boundaries).
pub const START_ALIGN: u64 = 4096;

/// Start offset of each client (one per entry of `sizes`, its file's size)
/// with `start = "spread"`: uniform over [0, size), page-aligned, drawn from
/// `seed` in client order, so every server and repetition gets the same ones.
pub fn start_offsets(sizes: &[u64], seed: u64) -> Vec<u64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    sizes
        .iter()
        .map(|&sz| {
            let pages = sz / START_ALIGN;
            if pages == 0 {
                0
            } else {
                rng.gen_range(0..pages) * START_ALIGN
            }
        })
        .collect()
}

/// Indices (0..total) of the `n` clients to reset, spread evenly.
pub fn spread_pick(total: usize, n: usize) -> Vec<usize> {
    let n = n.min(total);
    (0..n).map(|k| k * total / n.max(1)).collect()
}

/// Bytes in the timeline bins that lie within [from_s, to_s) (bin i covers
/// [i*dt, (i+1)*dt) seconds since the start), divided by the covered time: MB/s.
pub fn window_rate(bins: &[u64], dt_s: f64, from_s: f64, to_s: f64) -> f64 {
    let (bytes, secs) = window_sum(bins, dt_s, from_s, to_s);
    if secs <= 0.0 {
        f64::NAN
    } else {
        bytes as f64 / 1e6 / secs
    }
}

/// (bytes, seconds covered) of whole bins inside [from_s, to_s).
pub fn window_sum(bins: &[u64], dt_s: f64, from_s: f64, to_s: f64) -> (u64, f64) {
    let mut bytes = 0;
    let mut n = 0;
    for (i, b) in bins.iter().enumerate() {
        let (lo, hi) = (i as f64 * dt_s, (i + 1) as f64 * dt_s);
        if lo >= from_s - 1e-9 && hi <= to_s + 1e-9 {
            bytes += b;
            n += 1;
        }
    }
    (bytes, n as f64 * dt_s)
}

/// Seconds from `at_s` to the end of the first window of `window` bins
/// (sliding by one bin, starting at or after `at_s`) whose average rate
/// reaches `target` MB/s; NaN when none does. The smallest value is one
/// window (plus the part of the bin `at_s` falls in).
pub fn time_to_reach(bins: &[u64], dt_s: f64, at_s: f64, target: f64, window: usize) -> f64 {
    let w = window.max(1);
    for i in 0..bins.len().saturating_sub(w - 1) {
        let lo = i as f64 * dt_s;
        if lo < at_s - 1e-9 {
            continue;
        }
        let r = bins[i..i + w].iter().sum::<u64>() as f64 / 1e6 / (w as f64 * dt_s);
        if r >= target {
            return lo + w as f64 * dt_s - at_s;
        }
    }
    f64::NAN
}

/// Sums groups of `k` bins (coarser bins for plots).
pub fn rebin(bins: &[u64], k: usize) -> Vec<u64> {
    bins.chunks(k.max(1)).map(|c| c.iter().sum()).collect()
}

/// Mean of the values whose times lie in [from_s, to_s]; NaN when none do.
pub fn mean_in(points: &[(f64, f64)], from_s: f64, to_s: f64) -> f64 {
    let v: Vec<f64> = points
        .iter()
        .filter(|(t, _)| *t >= from_s - 1e-9 && *t <= to_s + 1e-9)
        .map(|x| x.1)
        .collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// A CPU-bound task's fair share of one core with `runnable` tasks (itself
/// included) on `cores` cores: min(1, cores / runnable).
pub fn fair_share(cores: f64, runnable: f64) -> f64 {
    if runnable <= 0.0 || !runnable.is_finite() {
        f64::NAN
    } else {
        (cores / runnable).min(1.0)
    }
}

/// Adds bins element-wise.
pub fn add_bins(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// `sluice_engine_NAME_total VALUE` lines of a Prometheus text page.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            let k = k.strip_prefix("sluice_engine_")?.strip_suffix("_total")?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// One sample of server-side state taken during a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerSample {
    /// Seconds since the run start.
    pub t_s: f64,
    /// Disk bytes read by the server's cgroup so far.
    pub disk_read_bytes: u64,
    /// Engine counters (Sluice with metrics), empty otherwise.
    pub counters: BTreeMap<String, u64>,
    /// Server CPU seconds so far (cpuacct).
    #[serde(default)]
    pub cpu_s: f64,
}

/// Value of `f` in the last sample at or before `t_s` (the first sample when none is).
pub fn sample_at(samples: &[ServerSample], t_s: f64) -> Option<&ServerSample> {
    samples
        .iter()
        .take_while(|s| s.t_s <= t_s + 1e-9)
        .last()
        .or(samples.first())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_count_whole_bins_only() {
        let bins = [1_000_000, 2_000_000, 3_000_000, 4_000_000];
        assert_eq!(window_sum(&bins, 1.0, 1.0, 3.0), (5_000_000, 2.0));
        assert!((window_rate(&bins, 1.0, 1.0, 3.0) - 2.5).abs() < 1e-9);
        // A window starting mid-bin skips that bin.
        assert_eq!(window_sum(&bins, 1.0, 0.5, 4.0), (9_000_000, 3.0));
        assert!(window_rate(&bins, 1.0, 5.0, 9.0).is_nan());
    }

    #[test]
    fn time_to_reach_uses_sliding_windows() {
        let bins = [
            4_000_000, 4_000_000, 1_000_000, 3_000_000, 5_000_000, 5_000_000,
        ];
        // From t=2, two-bin windows: (1+3)/2 = 2, (3+5)/2 = 4 -> reached at the end of bin 4 (t=5).
        assert_eq!(time_to_reach(&bins, 1.0, 2.0, 4.0, 2), 3.0);
        assert!(time_to_reach(&bins, 1.0, 2.0, 6.0, 2).is_nan());
        // 100 ms bins, 500 ms window (5 bins), reset at 1.0 s: MB/s per window of 5 x 0.1 s.
        let mut fine = vec![400_000u64; 10]; // 4 MB/s before
        fine.extend([
            0, 100_000, 400_000, 400_000, 400_000, 400_000, 400_000, 400_000,
        ]);
        // Windows from bin 10: 1.3/0.5=2.6, 1.7/.5=3.4, 2.0/0.5=4.0 (bins 12..16) -> end at 1.7 s.
        let t = time_to_reach(&fine, 0.1, 1.0, 3.9, 5);
        assert!((t - 0.7).abs() < 1e-9, "{t}");
        // A window of one bin is the plain first bin reaching the target.
        assert!((time_to_reach(&fine, 0.1, 1.0, 3.9, 1) - 0.3).abs() < 1e-9);
    }

    #[test]
    fn rebins_means_and_fair_shares() {
        assert_eq!(rebin(&[1, 2, 3, 4, 5], 2), vec![3, 7, 5]);
        assert!((mean_in(&[(0.0, 9.0), (1.0, 2.0), (2.0, 4.0)], 1.0, 2.0) - 3.0).abs() < 1e-9);
        assert!(mean_in(&[], 0.0, 1.0).is_nan());
        assert_eq!(fair_share(2.0, 1.0), 1.0);
        assert_eq!(fair_share(2.0, 8.0), 0.25);
        assert!(fair_share(2.0, 0.0).is_nan());
    }

    #[test]
    fn picks_and_steps() {
        assert_eq!(spread_pick(10, 3), vec![0, 3, 6]);
        assert_eq!(spread_pick(2, 5), vec![0, 1]);
        assert_eq!(
            counts_at(&[vec![180], vec![100, 200, 300]], 2),
            vec![180, 300]
        );
        let mut a = vec![1, 2];
        add_bins(&mut a, &[1, 1, 1]);
        assert_eq!(a, vec![2, 3, 1]);
    }

    #[test]
    fn spread_offsets_are_seeded_aligned_and_uniform() {
        let sizes = vec![1u64 << 30; 2000];
        let a = start_offsets(&sizes, 12);
        // The same seed gives the same offsets (every server and repetition).
        assert_eq!(a, start_offsets(&sizes, 12));
        assert_ne!(a, start_offsets(&sizes, 13));
        assert!(a.iter().all(|&o| o < 1 << 30 && o % START_ALIGN == 0));
        // Uniform: each quarter of the file holds about a quarter of the starts.
        for q in 0..4u64 {
            let n = a.iter().filter(|&&o| o >> 28 == q).count();
            assert!((400..600).contains(&n), "quarter {q}: {n}");
        }
        // A prefix of the clients keeps its offsets when more clients come.
        assert_eq!(start_offsets(&sizes[..10], 12), a[..10]);
        // Files under a page start at 0.
        assert_eq!(start_offsets(&[100, 0], 1), vec![0, 0]);
    }

    #[test]
    fn parses_engine_counters() {
        let m = parse_prometheus("# HELP x\n# TYPE x counter\nsluice_engine_wakeups_total 42\nother 1\nsluice_engine_evicted_unused_total 0\n");
        assert_eq!(m.get("wakeups"), Some(&42));
        assert_eq!(m.get("evicted_unused"), Some(&0));
        assert_eq!(m.len(), 2);
        let s = [
            ServerSample {
                t_s: 0.0,
                ..Default::default()
            },
            ServerSample {
                t_s: 1.0,
                disk_read_bytes: 5,
                ..Default::default()
            },
        ];
        assert_eq!(sample_at(&s, 1.5).map(|s| s.disk_read_bytes), Some(5));
        assert_eq!(sample_at(&s, -1.0).map(|s| s.t_s), Some(0.0));
    }
}
