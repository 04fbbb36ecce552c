//! `streams`: classes of long-running downloads against each server (spec
//! and arithmetic in `streams.rs`). Per run: per-class throughput in the
//! steady window, disk bytes (cgroup, sampled through the run), CPU, context
//! switches, memory; Sluice's engine counters from `--metrics`; around a
//! reset moment, what the disk read after it and how fast survivors took the
//! freed capacity; around link events, each class's throughput before and
//! during; the progress of a CPU-bound spinner beside the server; with
//! `page_trace`, page-cache adds and deletes of the clients' files for every
//! server (`pagetrace.rs`). Per-GiB costs (context switches, CPU, wake-ups)
//! are taken over the steady window only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cgroup;
use crate::experiment::pick;
use crate::load::{DownloadResult, DownloadSpec, LoadReport, LoadSpec};
use crate::pagetrace::{self, FileWatch, TraceLog, Tracer};
use crate::report::{self, Table};
use crate::run_transfers::first_line;
use crate::runner::{ensure_file, ensure_file_nth, rate, run_load, size, Ctx};
use crate::servers::{self, Running};
use crate::streams::{
    add_bins, counts_at, fair_share, mean_in, parse_prometheus, rebin, sample_at, spread_pick,
    time_to_reach, window_rate, window_sum, ServerSample, StreamClass,
};
use crate::topology::{ns_command, Topology};
use crate::units::parse_duration;

const GIB: f64 = (1u64 << 30) as f64;
/// Share of the pre-reset aggregate the survivors must reach ("new fair share").
const FAIR_FRACTION: f64 = 0.95;
/// Cores of the lab machine the spinner's fair share is computed for.
fn cores() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}
/// How often the sampler reads the number of runnable tasks.
const RUNNABLE_TICK: Duration = Duration::from_millis(100);
/// Label suffix of the clients that are reset.
const RESET: &str = " (reset)";

/// Counts loop iterations for `d` (the CPU-bound process beside the server).
pub fn spin(d: Duration) -> u64 {
    let t = Instant::now();
    let (mut n, mut x) = (0u64, 1u64);
    loop {
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
        }
        n += 100_000;
        std::hint::black_box(x);
        if t.elapsed() >= d {
            return n;
        }
    }
}

fn spin_child(secs: f64) -> Result<std::process::Child> {
    let me = std::env::current_exe()?;
    Ok(std::process::Command::new(me)
        .args(["_spin", &secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

fn spin_result(c: std::process::Child, secs: f64) -> f64 {
    c.wait_with_output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|n| n / secs)
        .unwrap_or(f64::NAN)
}

/// Engine counters scraped from Sluice's metrics listener inside `ns`.
fn scrape(ns: Option<&str>, port: u16) -> BTreeMap<String, u64> {
    let argv: Vec<String> = [
        "curl",
        "-s",
        "-m",
        "2",
        &format!("http://127.0.0.1:{port}/metrics"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ns_command(ns, &argv)
        .stderr(Stdio::null())
        .output()
        .map(|o| parse_prometheus(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default()
}

/// Adds a value, creating the column on first use (columns differ per experiment).
fn put(t: &mut Table, group: &str, server: &str, col: &str, v: f64) {
    if !t.columns.iter().any(|c| c == col) {
        t.columns.push(col.to_string());
    }
    t.add(group, server, col, v);
}

struct Client {
    class: usize,
    fname: String,
    file: PathBuf,
    start_s: f64,
    reset: bool,
}

struct Params {
    dur: f64,
    steady: f64,
    /// Server sampling interval.
    dt: f64,
    /// Client bins (class timelines, per-client series).
    cdt: f64,
    /// Bins in the fair-share window.
    fair_bins: usize,
    abort_at: Option<f64>,
    events: Vec<(f64, Option<String>, String)>,
    page_trace: bool,
}

/// Runs the experiment and writes its report.
pub fn run(ctx: &Ctx) -> Result<()> {
    let exp = &ctx.exp;
    let sp = exp.streams.clone().context("no [streams]")?;
    let smoke = ctx.smoke;
    let secs = |full: &str, small: Option<&String>| -> Result<f64> {
        Ok(parse_duration(pick(smoke, full, small.map(String::as_str)))?.as_secs_f64())
    };
    let spread = secs(&sp.arrival_spread, sp.smoke_arrival_spread.as_ref())?;
    let abort_n = *pick(smoke, &sp.abort_count, sp.smoke_abort_count.as_ref()) as usize;
    let p = Params {
        dur: secs(&sp.duration, sp.smoke_duration.as_ref())?,
        steady: secs(&sp.steady_from, sp.smoke_steady_from.as_ref())?,
        dt: parse_duration(&sp.sample)?.as_secs_f64(),
        cdt: parse_duration(sp.client_sample.as_deref().unwrap_or(&sp.sample))?.as_secs_f64(),
        fair_bins: 1,
        page_trace: sp.page_trace,
        abort_at: match &sp.abort_at {
            Some(a) if abort_n > 0 => Some(secs(a, sp.smoke_abort_at.as_ref())?),
            _ => None,
        },
        events: sp
            .events
            .iter()
            .map(|e| {
                Ok((
                    secs(&e.at, e.smoke_at.as_ref())?,
                    e.link.clone(),
                    e.set.clone(),
                ))
            })
            .collect::<Result<_>>()?,
    };
    let mut p = p;
    p.fair_bins =
        ((parse_duration(&sp.fair_window)?.as_secs_f64() / p.cdt).round() as usize).max(1);
    let limits = ctx.limits()?;
    let device = limits.device.clone();
    let mut table = Table::new(&exp.name, "workload", "server", &[]);
    let mut raw = Vec::new();
    std::fs::create_dir_all(&ctx.out)?;
    for path in &exp.paths {
        let classes: Vec<&StreamClass> = sp
            .classes
            .iter()
            .filter(|c| c.path.as_deref().is_none_or(|p| p == path.name))
            .collect();
        if classes.is_empty() {
            continue;
        }
        let lists: Vec<Vec<u32>> = classes
            .iter()
            .map(|c| pick(smoke, &c.clients, c.smoke_clients.as_ref()).clone())
            .collect();
        let popular: Vec<u32> = pick(
            smoke,
            &sp.popular_files.clone().unwrap_or_else(|| vec![1]),
            sp.smoke_popular_files.as_ref(),
        )
        .clone();
        let steps = lists
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1)
            .max(popular.len());
        let topo = Topology::build(path, &ctx.sysctls(), &ctx.work)?;
        for step in 0..steps {
            let counts = counts_at(&lists, step);
            let mut next_file: BTreeMap<u64, usize> = BTreeMap::new();
            let n_popular = counts_at(std::slice::from_ref(&popular), step)[0].max(1) as usize;
            let mut files: Vec<PathBuf> = Vec::new();
            let mut clients: Vec<Client> = Vec::new();
            for (ci, c) in classes.iter().enumerate() {
                let sz = size(pick(smoke, c.size.as_str(), c.smoke_size.as_deref()))?;
                for j in 0..counts[ci] {
                    let f = if sp.files == "per-client" {
                        let k = next_file.entry(sz).or_insert(0);
                        *k += 1;
                        ensure_file_nth(&exp.data.dir, sz, *k - 1)?
                    } else if n_popular > 1 {
                        // Requests spread evenly over the popular files.
                        let k = next_file.entry(sz).or_insert(0);
                        *k += 1;
                        ensure_file_nth(&exp.data.dir, sz, (*k - 1) % n_popular)?
                    } else {
                        ensure_file(&exp.data.dir, sz)?
                    };
                    let fname = f
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if !files.contains(&f) {
                        files.push(f.clone());
                    }
                    // Every class arrives spread over the whole arrival time, interleaved.
                    clients.push(Client {
                        class: ci,
                        fname,
                        file: f,
                        start_s: spread * j as f64 / counts[ci].max(1) as f64,
                        reset: false,
                    });
                }
            }
            if p.abort_at.is_some() {
                for i in spread_pick(clients.len(), abort_n) {
                    clients[i].reset = true;
                }
            }
            let desc: Vec<String> = classes
                .iter()
                .zip(&counts)
                .map(|(c, n)| {
                    format!(
                        "{n} x {} {}",
                        if c.rate == "0" {
                            "unlimited"
                        } else {
                            c.rate.as_str()
                        },
                        c.name
                    )
                })
                .collect();
            let files_note = if sp.files == "shared" && n_popular > 1 {
                format!(", {n_popular} files")
            } else {
                String::new()
            };
            let group = format!(
                "{}: {}{files_note}, {:.0} s",
                path.name,
                desc.join(" + "),
                p.dur
            );
            for (si, server) in exp.servers.iter().enumerate() {
                if !servers::check(std::slice::from_ref(server)).is_empty() {
                    table.note(&group, &server.name, "not run: program missing");
                    continue;
                }
                for rep in 0..ctx.repeat {
                    eprintln!(
                        "[{}] {group} / {} run {}/{}",
                        exp.name,
                        server.name,
                        rep + 1,
                        ctx.repeat
                    );
                    match exp.data.cache.as_str() {
                        "cold" => cgroup::drop_caches()?,
                        _ => {
                            for f in &files {
                                cgroup::warm(f)?;
                            }
                        }
                    }
                    let baseline = if sp.spinner {
                        Some(spin_result(spin_child(1.5)?, 1.5))
                    } else {
                        None
                    };
                    let port = 23000 + step as u16 * 100 + si as u16 * 10 + (rep % 10) as u16;
                    let mport = port + 1000;
                    let mut spec = server.clone();
                    let metrics = sp.metrics && spec.kind == "sluice";
                    if metrics {
                        spec.args
                            .extend(["--metrics".to_string(), format!("127.0.0.1:{mport}")]);
                    }
                    let srv = match servers::start(
                        &spec,
                        &exp.data.dir,
                        topo.server_ns.as_deref(),
                        &topo.server_addr,
                        port,
                        &limits,
                        &ctx.work,
                    ) {
                        Ok(s) => s,
                        Err(e) => {
                            let why = first_line(&format!("{e:#}"));
                            let why = why.chars().take(300).collect::<String>();
                            if server.optional {
                                table.note(
                                    &group,
                                    &server.name,
                                    &format!("did not start (optional row): {why}"),
                                );
                            } else {
                                table.note(
                                    &group,
                                    &server.name,
                                    &format!("server failed to start: {why}"),
                                );
                            }
                            break;
                        }
                    };
                    let out = run_once(
                        ctx,
                        &topo,
                        &srv,
                        &classes,
                        &clients,
                        &p,
                        metrics.then_some(mport),
                        sp.spinner,
                        device.as_deref(),
                    );
                    let usage = srv.stop(device.as_deref())?;
                    let (r, samples, spun, event_log, once) = match out {
                        Ok(x) => x,
                        Err(e) => {
                            table.note(
                                &group,
                                &server.name,
                                &format!("failed: {}", first_line(&format!("{e:#}"))),
                            );
                            continue;
                        }
                    };
                    let errors: Vec<&String> =
                        r.results.iter().filter_map(|d| d.error.as_ref()).collect();
                    if let Some(e) = errors.first() {
                        table.note(
                            &group,
                            &server.name,
                            &format!("{} downloads failed, e.g. {}", errors.len(), first_line(e)),
                        );
                    }
                    let sent: u64 = r.results.iter().map(|d| d.bytes).sum();
                    let g = group.as_str();
                    let s = server.name.as_str();
                    let t = &mut table;
                    // Steady window: per class and in total (survivors only when some are reset).
                    let mut all = Vec::new();
                    let mut survivors = Vec::new();
                    for (label, bins) in &r.timeline {
                        add_bins(&mut all, bins);
                        if !label.ends_with(RESET) {
                            add_bins(&mut survivors, bins);
                        }
                    }
                    put(
                        t,
                        g,
                        s,
                        "total MB/s (steady)",
                        window_rate(&all, p.cdt, p.steady, p.dur),
                    );
                    put(
                        t,
                        g,
                        s,
                        "total MB/s (whole run)",
                        sent as f64 / 1e6 / r.wall_s.max(1e-9),
                    );
                    // Offered load: every client's application rate (the
                    // circus-* experiments' x axis), and the share delivered.
                    let offered: f64 = clients
                        .iter()
                        .map(|x| match classes[x.class].rate.as_str() {
                            "0" => Ok(f64::NAN),
                            r => rate(r).map(|b| b as f64),
                        })
                        .sum::<Result<f64>>()?;
                    if offered.is_finite() {
                        put(t, g, s, "offered Mbit/s", offered / 1e6);
                        put(
                            t,
                            g,
                            s,
                            "% of offered (steady)",
                            window_rate(&all, p.cdt, p.steady, p.dur) * 8e8 / offered,
                        );
                    }
                    for (ci, c) in classes.iter().enumerate() {
                        let n = clients.iter().filter(|x| x.class == ci && !x.reset).count();
                        let bins = r.timeline.get(&c.name).cloned().unwrap_or_default();
                        let per =
                            window_rate(&bins, p.cdt, p.steady, p.dur) * 8.0 / n.max(1) as f64;
                        put(
                            t,
                            g,
                            s,
                            &format!("{} Mbit/s per client (steady)", c.name),
                            per,
                        );
                        if c.rate != "0" {
                            put(
                                t,
                                g,
                                s,
                                &format!("{} % of rate", c.name),
                                per * 1e6 / rate(&c.rate)? as f64 * 100.0,
                            );
                        }
                    }
                    put(
                        t,
                        g,
                        s,
                        "disk MB read",
                        usage.cgroup.disk_read_bytes as f64 / 1e6,
                    );
                    put(
                        t,
                        g,
                        s,
                        "disk read / sent",
                        usage.cgroup.disk_read_bytes as f64 / sent.max(1) as f64,
                    );
                    // Per-GiB costs over the steady window only (ramp-up and the tail excluded).
                    let (steady_bytes, _) = window_sum(&all, p.cdt, p.steady, p.dur);
                    let steady_gib = (steady_bytes as f64 / GIB).max(1e-9);
                    let delta = |f: &dyn Fn(&ServerSample) -> f64| match (
                        sample_at(&samples, p.steady),
                        sample_at(&samples, p.dur),
                    ) {
                        (Some(a), Some(b)) if b.t_s > a.t_s => f(b) - f(a),
                        _ => f64::NAN,
                    };
                    put(
                        t,
                        g,
                        s,
                        "server CPU s/GiB (steady)",
                        delta(&|x| x.cpu_s) / steady_gib,
                    );
                    let ctx_steady = servers::ctx_in_window(
                        &usage.ctx_intervals,
                        once.perf_offset_s,
                        p.steady,
                        p.dur,
                    );
                    put(
                        t,
                        g,
                        s,
                        "server ctx switches/GiB (steady)",
                        ctx_steady as f64 / steady_gib,
                    );
                    put(
                        t,
                        g,
                        s,
                        "server mem max MiB",
                        usage.cgroup.mem_max_bytes as f64 / 1048576.0,
                    );
                    let last = samples.last().cloned().unwrap_or_default();
                    let ctr = |k: &str| {
                        last.counters
                            .get(k)
                            .copied()
                            .map(|v| v as f64)
                            .unwrap_or(f64::NAN)
                    };
                    if metrics {
                        put(
                            t,
                            g,
                            s,
                            "evicted unused MB (sluice)",
                            ctr("evicted_unused") / 1e6,
                        );
                        let w = delta(&|x| {
                            x.counters
                                .get("wakeups")
                                .copied()
                                .map(|v| v as f64)
                                .unwrap_or(f64::NAN)
                        });
                        put(t, g, s, "wakeups/GiB (sluice, steady)", w / steady_gib);
                    }
                    if let Some(tr) = &once.trace {
                        trace_columns(t, g, s, tr, &clients, &r.results, &once, &p);
                    }
                    if let (Some(b), Some(spun)) = (baseline, spun) {
                        let n = mean_in(&once.runnable, p.steady, p.dur);
                        let fair = fair_share(cores(), n);
                        put(t, g, s, "spinner Miter/s alone", b / 1e6);
                        put(t, g, s, "spinner % of alone", spun / b * 100.0);
                        put(t, g, s, "runnable tasks (steady mean)", n);
                        put(t, g, s, "spinner fair share % of alone", fair * 100.0);
                        put(t, g, s, "spinner % of fair share", spun / b / fair * 100.0);
                    }
                    if let Some(at) = p.abort_at {
                        abort_columns(t, g, s, &p, at, &all, &survivors, &samples, metrics);
                    }
                    if let Some(&(at, _, _)) = p.events.first() {
                        let until = p.events.get(1).map(|e| e.0).unwrap_or(p.dur);
                        let before = (at - (until - at).max(5.0)).max(p.steady.min(at));
                        let (all_before, all_during) = (
                            window_rate(&all, p.cdt, before, at),
                            window_rate(&all, p.cdt, at, until),
                        );
                        for c in &classes {
                            let bins = r.timeline.get(&c.name).cloned().unwrap_or_default();
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
                            let (x, y) = (sample_at(&samples, a), sample_at(&samples, b));
                            match (x, y) {
                                (Some(x), Some(y)) if y.t_s > x.t_s => {
                                    (y.disk_read_bytes - x.disk_read_bytes) as f64
                                        / 1e6
                                        / (y.t_s - x.t_s)
                                }
                                _ => f64::NAN,
                            }
                        };
                        put(t, g, s, "disk MB/s before event", disk(before, at));
                        put(t, g, s, "disk MB/s during event", disk(at, until));
                        if metrics {
                            let d = |k: &str| match (
                                sample_at(&samples, at),
                                sample_at(&samples, until),
                            ) {
                                (Some(x), Some(y)) => y
                                    .counters
                                    .get(k)
                                    .copied()
                                    .unwrap_or(0)
                                    .saturating_sub(x.counters.get(k).copied().unwrap_or(0))
                                    as f64,
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
                    // Plots use 1 s bins whatever the client sampling.
                    let k = ((1.0 / p.cdt).round() as usize).max(1);
                    let mbps_1s: Vec<f64> = rebin(&all, k)
                        .iter()
                        .map(|b| *b as f64 / 1e6 / (k as f64 * p.cdt))
                        .collect();
                    let mut r = r;
                    for d in &mut r.results {
                        d.series = Vec::new(); // per-client series stay out of results.json (size)
                    }
                    raw.push(serde_json::json!({
                        "group": group, "server": server.name, "run": rep + 1, "usage": usage, "samples": samples,
                        "spinner_alone_per_s": baseline, "spinner_per_s": spun, "events": event_log, "load": r,
                        "mbps_1s": mbps_1s, "trace": once.trace, "runnable": once.runnable, "perf_offset_s": once.perf_offset_s,
                    }));
                }
            }
        }
        drop(topo);
    }
    table
        .columns
        .retain(|c| table.rows.iter().any(|r| r.values.contains_key(c)));
    // "total vs X" after merging: X's row may come from another run.
    let post = |table: &mut Table| {
        let Some(base) = &sp.baseline else { return };
        let col = format!("total vs {base} (medians)");
        for r in &mut table.rows {
            r.values.remove(&col);
        }
        let groups: Vec<String> = table
            .rows
            .iter()
            .map(|r| r.group.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for g in groups {
            let Some(b) = table.median_of(&g, base, "total MB/s (steady)") else {
                continue;
            };
            let rows: Vec<String> = table
                .rows
                .iter()
                .filter(|r| r.group == g)
                .map(|r| r.config.clone())
                .collect();
            for s in rows {
                if let Some(v) = table.median_of(&g, &s, "total MB/s (steady)") {
                    put(table, &g, &s, &col, v / b);
                }
            }
        }
    };
    let stored = ctx.write_report_with(
        std::slice::from_ref(&table),
        &serde_json::Value::Array(raw),
        &post,
    )?;
    plot(ctx, &stored)
}

/// One throughput plot per workload (group) from the stored results (so
/// merged rows of earlier runs are drawn too): run 1 of every server.
fn plot(ctx: &Ctx, stored: &report::Stored) -> Result<()> {
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
fn trace_columns(
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
fn abort_columns(
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

/// What a run measured beside the load report and server samples.
struct OnceExtra {
    /// CLOCK_MONOTONIC seconds of the generators' start (bin 0).
    t0_mono_s: f64,
    /// Seconds between perf's start and the run's start (for perf's intervals).
    perf_offset_s: f64,
    /// (run seconds, runnable tasks other than the sampler) every RUNNABLE_TICK.
    runnable: Vec<(f64, f64)>,
    /// The page trace, if on.
    trace: Option<TraceLog>,
    /// Inode of each client's file (with the trace).
    inos: Vec<Option<u64>>,
}

type Once = (
    LoadReport,
    Vec<ServerSample>,
    Option<f64>,
    Vec<String>,
    OnceExtra,
);

/// Runnable tasks now (/proc/loadavg's 4th field, "running/total"), less the reader itself.
fn runnable_now() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let r: f64 = s
        .split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    Some((r - 1.0).max(0.0))
}

/// One run against a started server: generators (one per client namespace),
/// the server sampler, link events and the spinner, all started together.
#[allow(clippy::too_many_arguments)]
fn run_once(
    ctx: &Ctx,
    topo: &Topology,
    srv: &Running,
    classes: &[&StreamClass],
    clients: &[Client],
    p: &Params,
    mport: Option<u16>,
    spinner: bool,
    device: Option<&str>,
) -> Result<Once> {
    // (namespace, spec) per client namespace.
    let mut specs: Vec<(Option<String>, LoadSpec)> = Vec::new();
    let series = p.page_trace || p.abort_at.is_some();
    for (id, c) in clients.iter().enumerate() {
        let cl = classes[c.class];
        let (ns, url) = if topo.classes.is_empty() {
            (topo.client_ns.clone(), srv.url_for(&c.fname))
        } else {
            let h = topo
                .classes
                .iter()
                .find(|h| h.name == cl.name)
                .unwrap_or(&topo.classes[c.class % topo.classes.len()]);
            (
                Some(h.ns.clone()),
                srv.url_for_host(&h.server_addr, &c.fname),
            )
        };
        let bps = if cl.rate == "0" {
            None
        } else {
            Some(rate(&cl.rate)?)
        };
        let d = DownloadSpec {
            url,
            class: if c.reset {
                format!("{}{RESET}", cl.name)
            } else {
                cl.name.clone()
            },
            start_s: c.start_s,
            rate_bps: bps,
            abort_after_s: if c.reset {
                p.abort_at.map(|a| (a - c.start_s).max(0.0))
            } else {
                None
            },
            rcvbuf: None,
            id: id as u32,
            streams: srv.streams,
        };
        match specs.iter_mut().find(|(n, _)| *n == ns) {
            Some((_, s)) => s.downloads.push(d),
            None => specs.push((
                ns,
                LoadSpec {
                    downloads: vec![d],
                    sample_ms: (p.cdt * 1000.0).round() as u64,
                    deadline_s: Some(p.dur),
                    client_series: series,
                },
            )),
        }
    }
    let sns = topo.server_ns.as_deref();
    let mut inos = Vec::new();
    let tracer = if p.page_trace {
        inos = clients
            .iter()
            .map(|c| pagetrace::inode(&c.file).ok())
            .collect();
        let set: std::collections::BTreeSet<u64> = inos.iter().flatten().copied().collect();
        let dev = pagetrace::kernel_dev(&clients.first().context("no clients")?.file)?;
        Some(Tracer::start(dev, set)?)
    } else {
        None
    };
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let perf_offset_s = t0.duration_since(srv.started).as_secs_f64();
    let spin = if spinner {
        Some(spin_child(p.dur)?)
    } else {
        None
    };
    let (outs, samples, log) = std::thread::scope(|sc| {
        let gens: Vec<_> = specs
            .iter()
            .map(|(ns, s)| sc.spawn(move || run_load(ns.as_deref(), s, &ctx.work)))
            .collect();
        let sampler = sc.spawn(|| {
            let mut v = Vec::new();
            let mut run = Vec::new();
            let mut next = t0;
            let mut next_run = t0;
            loop {
                let fin = done.load(Ordering::Relaxed);
                let u = srv.usage(device).ok();
                let counters = mport.map(|m| scrape(sns, m)).unwrap_or_default();
                v.push(ServerSample {
                    t_s: t0.elapsed().as_secs_f64(),
                    disk_read_bytes: u.as_ref().map(|u| u.disk_read_bytes).unwrap_or(0),
                    counters,
                    cpu_s: u.as_ref().map(|u| u.cpu_s).unwrap_or(f64::NAN),
                });
                if fin {
                    return (v, run);
                }
                // Also here: a slow scrape (a busy server) can leave no time for the loop below.
                if let Some(n) = runnable_now() {
                    run.push((t0.elapsed().as_secs_f64(), n));
                }
                next += Duration::from_secs_f64(p.dt);
                while Instant::now() < next && !done.load(Ordering::Relaxed) {
                    if Instant::now() >= next_run {
                        next_run += RUNNABLE_TICK;
                        if let Some(n) = runnable_now() {
                            run.push((t0.elapsed().as_secs_f64(), n));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        let events = sc.spawn(|| {
            let mut log = Vec::new();
            for (at, link, set) in &p.events {
                let when = t0 + Duration::from_secs_f64(*at);
                while Instant::now() < when && !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let ctl = match link {
                    Some(l) => topo
                        .classes
                        .iter()
                        .find(|h| &h.name == l)
                        .map(|h| h.ctl.clone()),
                    None => topo.linkem_ctl.clone(),
                };
                let res = match ctl {
                    Some(c) => crate::linkem::ctl::send(&c, &format!("set both {set}"))
                        .map_err(|e| format!("{e:#}")),
                    None => Err(format!("no linkem {link:?} in this topology")),
                };
                log.push(format!(
                    "{:.2} s: {} {set}: {}",
                    t0.elapsed().as_secs_f64(),
                    link.as_deref().unwrap_or("link"),
                    res.unwrap_or_else(|e| e)
                ));
            }
            log
        });
        let outs: Vec<Result<LoadReport>> = gens
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked")))
            })
            .collect();
        done.store(true, Ordering::Relaxed);
        (
            outs,
            sampler.join().unwrap_or_default(),
            events.join().unwrap_or_default(),
        )
    });
    let spun = spin.map(|c| spin_result(c, p.dur));
    let (mut samples, runnable) = samples;
    // One more sample once the server has seen every reset: Sluice adds a
    // transfer's counts to the engine totals when the transfer ends.
    std::thread::sleep(Duration::from_millis(1000));
    let u = srv.usage(device).ok();
    samples.push(ServerSample {
        t_s: t0.elapsed().as_secs_f64(),
        disk_read_bytes: u.as_ref().map(|u| u.disk_read_bytes).unwrap_or(0),
        counters: mport.map(|m| scrape(sns, m)).unwrap_or_default(),
        cpu_s: u.as_ref().map(|u| u.cpu_s).unwrap_or(f64::NAN),
    });
    let trace = match tracer {
        Some(tr) => {
            let log = tr.finish()?;
            eprintln!(
                "  page trace: {} events in {:.0} s ({:.0}/s), {} of watched files, {} lost",
                log.lines,
                log.secs,
                log.lines as f64 / log.secs.max(1e-9),
                log.events.len(),
                log.lost
            );
            Some(log)
        }
        None => None,
    };
    let mut merged: Option<LoadReport> = None;
    let mut t0_mono_s = f64::INFINITY;
    for o in outs {
        let r = o?;
        t0_mono_s = t0_mono_s.min(r.t0_mono_s);
        merged = Some(match merged {
            None => r,
            Some(mut a) => {
                for (k, v) in r.timeline {
                    add_bins(a.timeline.entry(k).or_default(), &v);
                }
                a.results.extend(r.results);
                a.wall_s = a.wall_s.max(r.wall_s);
                a
            }
        });
    }
    Ok((
        merged.context("no clients")?,
        samples,
        spun,
        log,
        OnceExtra {
            t0_mono_s,
            perf_offset_s,
            runnable,
            trace,
            inos,
        },
    ))
}
