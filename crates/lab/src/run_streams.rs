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
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cgroup;
use crate::experiment::pick;
use crate::report::Table;
use crate::run_transfers::first_line;
use crate::runner::{ensure_file, ensure_file_nth, rate, size, Ctx};
use crate::servers::{self};
use crate::streams::{
    add_bins, counts_at, fair_share, mean_in, rebin, sample_at, spread_pick, start_offsets,
    window_rate, window_sum, ServerSample, StreamClass,
};
use crate::topology::Topology;
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

mod columns;
mod once;

use columns::{abort_columns, event_columns, plot, trace_columns};
pub use once::spin;
use once::{run_once, spin_child, spin_result};

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
    /// First byte asked for (`start = "spread"`), else 0.
    offset: u64,
    /// Spread start: a client that arrived long ago, followed by a new one
    /// from byte 0 when it ends.
    wrap: bool,
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
                        offset: sz,
                        wrap: false,
                    });
                }
            }
            // Spread starts: each client resumes at a seeded uniform offset of its file.
            let spread_starts = sp.start == "spread";
            let sizes: Vec<u64> = clients.iter().map(|c| c.offset).collect();
            let offsets = if spread_starts {
                start_offsets(&sizes, sp.seed)
            } else {
                vec![0; sizes.len()]
            };
            for (c, o) in clients.iter_mut().zip(offsets) {
                c.offset = o;
                c.wrap = spread_starts;
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
            let starts_note = if spread_starts { ", starts spread" } else { "" };
            let group = format!(
                "{}: {}{files_note}{starts_note}, {:.0} s",
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
                        event_columns(
                            t,
                            g,
                            s,
                            &p,
                            at,
                            &all,
                            &classes,
                            &r.timeline,
                            &samples,
                            metrics,
                        );
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
