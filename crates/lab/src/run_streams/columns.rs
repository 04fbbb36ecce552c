//! The `streams` report's columns beyond the per-class rates: the page
//! trace after resets, the abort case, link events; and the throughput plots.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::load::DownloadResult;
use crate::pagetrace::{self, FileWatch, TraceLog};
use crate::report::{self, Table};
use crate::runner::Ctx;
use crate::streams::{
    add_bins, sample_at, time_to_reach, window_rate, window_sum, ServerSample, StreamClass,
};

use super::once::OnceExtra;
use super::{put, Client, Params, FAIR_FRACTION};

/// One throughput plot per workload (group) from the stored results (so
/// merged rows of earlier runs are drawn too): run 1 of every server.
pub(super) fn plot(ctx: &Ctx, stored: &report::Stored) -> Result<()> {
    let raw = stored.raw.as_array().cloned().unwrap_or_default();
    let mut groups: Vec<String> = Vec::new();
    for t in &stored.tables {
        for r in &t.rows {
            if !groups.contains(&r.group) {
                groups.push(r.group.clone());
            }
        }
    }
    for (i, g) in groups.iter().enumerate() {
        let mut series = Vec::new();
        for v in raw
            .iter()
            .filter(|v| v["group"].as_str() == Some(g) && v["run"].as_u64() == Some(1))
        {
            let name = v["server"].as_str().unwrap_or("?").to_string();
            let pts: Vec<(f64, f64)> = match v.get("mbps_1s").and_then(|x| x.as_array()) {
                Some(a) => a
                    .iter()
                    .enumerate()
                    .map(|(i, y)| ((i + 1) as f64, y.as_f64().unwrap_or(0.0)))
                    .collect(),
                // Rows stored before mbps_1s: the class timelines at their own bins.
                None => {
                    let dt = v["load"]["sample_ms"].as_f64().unwrap_or(1000.0) / 1000.0;
                    let mut all: Vec<u64> = Vec::new();
                    for b in v["load"]["timeline"]
                        .as_object()
                        .into_iter()
                        .flat_map(|o| o.values())
                    {
                        let bins: Vec<u64> = b
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|x| x.as_u64())
                            .collect();
                        add_bins(&mut all, &bins);
                    }
                    all.iter()
                        .enumerate()
                        .map(|(i, b)| ((i + 1) as f64 * dt, *b as f64 / 1e6 / dt))
                        .collect()
                }
            };
            series.push((name, pts));
        }
        report::line_chart(
            &ctx.out.join(format!("throughput-{}.png", i + 1)),
            &format!("{g} (run 1)"),
            "time (s)",
            "MB/s, all clients",
            &series,
        )?;
    }
    Ok(())
}

/// Page-trace columns: reads and bytes into the cache after the resets for
/// the reset clients' files, and read-ahead evicted before its client had it.
#[allow(clippy::too_many_arguments)]
pub(super) fn trace_columns(
    t: &mut Table,
    g: &str,
    s: &str,
    tr: &TraceLog,
    clients: &[Client],
    results: &[DownloadResult],
    once: &OnceExtra,
    p: &Params,
) {
    let t0 = once.t0_mono_s;
    let mut watches: BTreeMap<u64, FileWatch> = BTreeMap::new();
    let mut reset_inos = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (Some(ino), Some(r)) = (
            once.inos.get(i).copied().flatten(),
            results.iter().find(|r| r.id as usize == i),
        ) else {
            continue;
        };
        let received: Vec<(f64, u64)> = r
            .series
            .iter()
            .enumerate()
            .map(|(k, v)| (t0 + (k + 1) as f64 * p.cdt, *v))
            .collect();
        let final_received = r.series.last().copied().unwrap_or(0).max(r.bytes);
        let reset_at = (c.reset && r.aborted).then_some(t0 + r.end_s);
        if reset_at.is_some() {
            reset_inos.push(ino);
        }
        watches.insert(
            ino,
            FileWatch {
                reset_at,
                received,
                final_received,
            },
        );
    }
    let stats = pagetrace::analyze_all(&tr.events, &watches);
    let sum = |f: &dyn Fn(&pagetrace::FileStats) -> u64| stats.values().map(f).sum::<u64>() as f64;
    put(
        t,
        g,
        s,
        "trace: MB into page cache",
        sum(&|x| x.added) / 1e6,
    );
    put(
        t,
        g,
        s,
        "trace: MB evicted before received",
        sum(&|x| x.evicted_unreceived) / 1e6,
    );
    put(
        t,
        g,
        s,
        "trace: MB evicted never received",
        sum(&|x| x.evicted_never_received) / 1e6,
    );
    put(
        t,
        g,
        s,
        "trace: MB read twice",
        sum(&|x| x.read_twice) / 1e6,
    );
    if !reset_inos.is_empty() {
        let n = reset_inos.len() as f64;
        let reads: u64 = reset_inos
            .iter()
            .filter_map(|i| stats.get(i))
            .map(|x| x.reads_after_reset)
            .sum();
        let bytes: u64 = reset_inos
            .iter()
            .filter_map(|i| stats.get(i))
            .map(|x| x.bytes_after_reset)
            .sum();
        let with_reads = reset_inos
            .iter()
            .filter_map(|i| stats.get(i))
            .filter(|x| x.reads_after_reset > 0)
            .count();
        put(
            t,
            g,
            s,
            "trace: reads per reset conn after reset",
            reads as f64 / n,
        );
        put(
            t,
            g,
            s,
            "trace: KB read per reset conn after reset",
            bytes as f64 / 1e3 / n,
        );
        put(
            t,
            g,
            s,
            "trace: reset conns with reads after",
            with_reads as f64,
        );
    }
    put(
        t,
        g,
        s,
        "trace: events/s",
        tr.lines as f64 / tr.secs.max(1e-9),
    );
    if tr.lost > 0 {
        t.note(
            g,
            s,
            &format!("trace lost {} events (counts incomplete)", tr.lost),
        );
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn abort_columns(
    t: &mut Table,
    g: &str,
    s: &str,
    p: &Params,
    at: f64,
    all: &[u64],
    survivors: &[u64],
    samples: &[ServerSample],
    metrics: bool,
) {
    let before_from = (at - 10.0).max(p.steady.min(at - p.cdt));
    let capacity = window_rate(all, p.cdt, before_from, at);
    put(t, g, s, "all MB/s before reset", capacity);
    put(
        t,
        g,
        s,
        "survivors MB/s before reset",
        window_rate(survivors, p.cdt, before_from, at),
    );
    put(
        t,
        g,
        s,
        "survivors MB/s after reset",
        window_rate(survivors, p.cdt, at, p.dur),
    );
    // Nothing flowed before the reset (a stalled server): no share to regain, no number.
    if capacity > 0.0 {
        put(
            t,
            g,
            s,
            "s to new fair share",
            time_to_reach(survivors, p.cdt, at, FAIR_FRACTION * capacity, p.fair_bins),
        );
    }
    let (Some(x), Some(y)) = (sample_at(samples, at), samples.last()) else {
        return;
    };
    let disk_after = y.disk_read_bytes.saturating_sub(x.disk_read_bytes) as f64;
    let (need, _) = window_sum(survivors, p.cdt, at, p.dur);
    put(t, g, s, "disk MB after reset", disk_after / 1e6);
    put(
        t,
        g,
        s,
        "disk after reset / survivors' bytes",
        disk_after / need.max(1) as f64,
    );
    if metrics {
        let d = |k: &str| {
            y.counters
                .get(k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(x.counters.get(k).copied().unwrap_or(0)) as f64
        };
        put(
            t,
            g,
            s,
            "reads cancelled (sluice)",
            d("prefetch_reads_cancelled"),
        );
        put(
            t,
            g,
            s,
            "MB cancelled (sluice)",
            d("prefetch_bytes_cancelled") / 1e6,
        );
        put(
            t,
            g,
            s,
            "reads skipped (sluice)",
            d("prefetch_reads_skipped"),
        );
        put(
            t,
            g,
            s,
            "MB read then discarded (sluice)",
            d("prefetch_bytes_discarded") / 1e6,
        );
    }
}

/// Around a link event: each class's throughput and share of the total
/// before and during it, the disk's rate, and (Sluice) reads delayed.
#[allow(clippy::too_many_arguments)]
pub(super) fn event_columns(
    t: &mut Table,
    g: &str,
    s: &str,
    p: &Params,
    at: f64,
    all: &[u64],
    classes: &[&StreamClass],
    timeline: &BTreeMap<String, Vec<u64>>,
    samples: &[ServerSample],
    metrics: bool,
) {
    let until = p.events.get(1).map(|e| e.0).unwrap_or(p.dur);
    let before = (at - (until - at).max(5.0)).max(p.steady.min(at));
    let (all_before, all_during) = (
        window_rate(all, p.cdt, before, at),
        window_rate(all, p.cdt, at, until),
    );
    for c in classes {
        let bins = timeline.get(&c.name).cloned().unwrap_or_default();
        let (b, d) = (
            window_rate(&bins, p.cdt, before, at),
            window_rate(&bins, p.cdt, at, until),
        );
        put(t, g, s, &format!("{} MB/s before event", c.name), b);
        put(t, g, s, &format!("{} MB/s during event", c.name), d);
        // Disk-bound clients: a class's share of what was sent is its share of disk time.
        put(
            t,
            g,
            s,
            &format!("{} % of total before", c.name),
            b / all_before * 100.0,
        );
        put(
            t,
            g,
            s,
            &format!("{} % of total during", c.name),
            d / all_during * 100.0,
        );
    }
    let disk = |a: f64, b: f64| {
        let (x, y) = (sample_at(samples, a), sample_at(samples, b));
        match (x, y) {
            (Some(x), Some(y)) if y.t_s > x.t_s => {
                (y.disk_read_bytes - x.disk_read_bytes) as f64 / 1e6 / (y.t_s - x.t_s)
            }
            _ => f64::NAN,
        }
    };
    put(t, g, s, "disk MB/s before event", disk(before, at));
    put(t, g, s, "disk MB/s during event", disk(at, until));
    if metrics {
        let d = |k: &str| match (sample_at(samples, at), sample_at(samples, until)) {
            (Some(x), Some(y)) => {
                y.counters
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(x.counters.get(k).copied().unwrap_or(0)) as f64
            }
            _ => f64::NAN,
        };
        put(
            t,
            g,
            s,
            "reads delayed during event (sluice)",
            d("prefetch_reads_delayed"),
        );
    }
}
