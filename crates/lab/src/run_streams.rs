//! `streams`: classes of long-running downloads against each server (spec
//! and arithmetic in `streams.rs`). Per run: per-class throughput in the
//! steady window, disk bytes (cgroup, sampled through the run), CPU, context
//! switches, memory; Sluice's engine counters from `--metrics`; around a
//! reset moment, what the disk read after it and how fast survivors took the
//! freed capacity; around link events, each class's throughput before and
//! during; the progress of a CPU-bound spinner beside the server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cgroup;
use crate::experiment::pick;
use crate::load::{DownloadSpec, LoadReport, LoadSpec};
use crate::report::{self, Table};
use crate::run_transfers::first_line;
use crate::runner::{ensure_file, ensure_file_nth, rate, run_load, size, Ctx};
use crate::servers::{self, Running};
use crate::streams::{add_bins, counts_at, parse_prometheus, sample_at, spread_pick, time_to_reach, window_rate, window_sum, ServerSample, StreamClass};
use crate::topology::{ns_command, Topology};
use crate::units::parse_duration;

const GIB: f64 = (1u64 << 30) as f64;
/// Label suffix of the clients that are reset.
const RESET: &str = " (reset)";

/// Counts loop iterations for `d` (the CPU-bound process beside the server).
pub fn spin(d: Duration) -> u64 {
    let t = Instant::now();
    let (mut n, mut x) = (0u64, 1u64);
    loop {
        for _ in 0..100_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
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
    Ok(std::process::Command::new(me).args(["_spin", &secs.to_string()]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?)
}

fn spin_result(c: std::process::Child, secs: f64) -> f64 {
    c.wait_with_output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok()).map(|n| n / secs).unwrap_or(f64::NAN)
}

/// Engine counters scraped from Sluice's metrics listener inside `ns`.
fn scrape(ns: Option<&str>, port: u16) -> BTreeMap<String, u64> {
    let argv: Vec<String> = ["curl", "-s", "-m", "2", &format!("http://127.0.0.1:{port}/metrics")].iter().map(|s| s.to_string()).collect();
    ns_command(ns, &argv).stderr(Stdio::null()).output().map(|o| parse_prometheus(&String::from_utf8_lossy(&o.stdout))).unwrap_or_default()
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
    start_s: f64,
    reset: bool,
}

struct Params {
    dur: f64,
    steady: f64,
    dt: f64,
    abort_at: Option<f64>,
    events: Vec<(f64, Option<String>, String)>,
}

/// Runs the experiment and writes its report.
pub fn run(ctx: &Ctx) -> Result<()> {
    let exp = &ctx.exp;
    let sp = exp.streams.clone().context("no [streams]")?;
    let smoke = ctx.smoke;
    let secs = |full: &str, small: Option<&String>| -> Result<f64> { Ok(parse_duration(pick(smoke, full, small.map(String::as_str)))?.as_secs_f64()) };
    let spread = secs(&sp.arrival_spread, sp.smoke_arrival_spread.as_ref())?;
    let abort_n = *pick(smoke, &sp.abort_count, sp.smoke_abort_count.as_ref()) as usize;
    let p = Params {
        dur: secs(&sp.duration, sp.smoke_duration.as_ref())?,
        steady: secs(&sp.steady_from, sp.smoke_steady_from.as_ref())?,
        dt: parse_duration(&sp.sample)?.as_secs_f64(),
        abort_at: match &sp.abort_at {
            Some(a) if abort_n > 0 => Some(secs(a, sp.smoke_abort_at.as_ref())?),
            _ => None,
        },
        events: sp.events.iter().map(|e| Ok((secs(&e.at, e.smoke_at.as_ref())?, e.link.clone(), e.set.clone()))).collect::<Result<_>>()?,
    };
    let limits = ctx.limits()?;
    let device = limits.device.clone();
    let mut table = Table::new(&exp.name, "workload", "server", &[]);
    let mut raw = Vec::new();
    let mut plots = 0;
    std::fs::create_dir_all(&ctx.out)?;
    for path in &exp.paths {
        let classes: Vec<&StreamClass> = sp.classes.iter().filter(|c| c.path.as_deref().is_none_or(|p| p == path.name)).collect();
        if classes.is_empty() {
            continue;
        }
        let lists: Vec<Vec<u32>> = classes.iter().map(|c| pick(smoke, &c.clients, c.smoke_clients.as_ref()).clone()).collect();
        let steps = lists.iter().map(Vec::len).max().unwrap_or(1);
        let topo = Topology::build(path, &ctx.sysctls(), &ctx.work)?;
        for step in 0..steps {
            let counts = counts_at(&lists, step);
            let mut next_file: BTreeMap<u64, usize> = BTreeMap::new();
            let mut files: Vec<PathBuf> = Vec::new();
            let mut clients: Vec<Client> = Vec::new();
            for (ci, c) in classes.iter().enumerate() {
                let sz = size(pick(smoke, c.size.as_str(), c.smoke_size.as_deref()))?;
                for j in 0..counts[ci] {
                    let f = if sp.files == "per-client" {
                        let k = next_file.entry(sz).or_insert(0);
                        *k += 1;
                        ensure_file_nth(&exp.data.dir, sz, *k - 1)?
                    } else {
                        ensure_file(&exp.data.dir, sz)?
                    };
                    let fname = f.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
                    if !files.contains(&f) {
                        files.push(f);
                    }
                    // Every class arrives spread over the whole arrival time, interleaved.
                    clients.push(Client { class: ci, fname, start_s: spread * j as f64 / counts[ci].max(1) as f64, reset: false });
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
                .map(|(c, n)| format!("{n} x {} {}", if c.rate == "0" { "unlimited" } else { c.rate.as_str() }, c.name))
                .collect();
            let group = format!("{}: {}, {:.0} s", path.name, desc.join(" + "), p.dur);
            let mut series = Vec::new();
            for (si, server) in exp.servers.iter().enumerate() {
                if !servers::check(std::slice::from_ref(server)).is_empty() {
                    table.note(&group, &server.name, "not run: program missing");
                    continue;
                }
                for rep in 0..ctx.repeat {
                    eprintln!("[{}] {group} / {} run {}/{}", exp.name, server.name, rep + 1, ctx.repeat);
                    match exp.data.cache.as_str() {
                        "cold" => cgroup::drop_caches()?,
                        _ => {
                            for f in &files {
                                cgroup::warm(f)?;
                            }
                        }
                    }
                    let baseline = if sp.spinner { Some(spin_result(spin_child(1.5)?, 1.5)) } else { None };
                    let port = 23000 + step as u16 * 100 + si as u16 * 10 + (rep % 10) as u16;
                    let mport = port + 1000;
                    let mut spec = server.clone();
                    let metrics = sp.metrics && spec.kind == "sluice";
                    if metrics {
                        spec.args.extend(["--metrics".to_string(), format!("127.0.0.1:{mport}")]);
                    }
                    let srv = match servers::start(&spec, &exp.data.dir, topo.server_ns.as_deref(), &topo.server_addr, port, &limits, &ctx.work) {
                        Ok(s) => s,
                        Err(e) => {
                            table.note(&group, &server.name, &format!("server failed to start: {}", first_line(&format!("{e:#}"))));
                            break;
                        }
                    };
                    let out = run_once(ctx, &topo, &srv, &classes, &clients, &p, metrics.then_some(mport), sp.spinner, device.as_deref());
                    let usage = srv.stop(device.as_deref())?;
                    let (r, samples, spun, event_log) = match out {
                        Ok(x) => x,
                        Err(e) => {
                            table.note(&group, &server.name, &format!("failed: {}", first_line(&format!("{e:#}"))));
                            continue;
                        }
                    };
                    let errors: Vec<&String> = r.results.iter().filter_map(|d| d.error.as_ref()).collect();
                    if let Some(e) = errors.first() {
                        table.note(&group, &server.name, &format!("{} downloads failed, e.g. {}", errors.len(), first_line(e)));
                    }
                    let sent: u64 = r.results.iter().map(|d| d.bytes).sum();
                    let gib = sent as f64 / GIB;
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
                    put(t, g, s, "total MB/s (steady)", window_rate(&all, p.dt, p.steady, p.dur));
                    put(t, g, s, "total MB/s (whole run)", sent as f64 / 1e6 / r.wall_s.max(1e-9));
                    for (ci, c) in classes.iter().enumerate() {
                        let n = clients.iter().filter(|x| x.class == ci && !x.reset).count();
                        let bins = r.timeline.get(&c.name).cloned().unwrap_or_default();
                        let per = window_rate(&bins, p.dt, p.steady, p.dur) * 8.0 / n.max(1) as f64;
                        put(t, g, s, &format!("{} Mbit/s per client (steady)", c.name), per);
                        if c.rate != "0" {
                            put(t, g, s, &format!("{} % of rate", c.name), per * 1e6 / rate(&c.rate)? as f64 * 100.0);
                        }
                    }
                    put(t, g, s, "disk MB read", usage.cgroup.disk_read_bytes as f64 / 1e6);
                    put(t, g, s, "disk read / sent", usage.cgroup.disk_read_bytes as f64 / sent.max(1) as f64);
                    put(t, g, s, "server CPU s/GiB", usage.cgroup.cpu_s / gib.max(1e-9));
                    put(t, g, s, "server ctx switches/GiB", usage.ctx_switches as f64 / gib.max(1e-9));
                    put(t, g, s, "server mem max MiB", usage.cgroup.mem_max_bytes as f64 / 1048576.0);
                    let last = samples.last().cloned().unwrap_or_default();
                    let ctr = |k: &str| last.counters.get(k).copied().map(|v| v as f64).unwrap_or(f64::NAN);
                    if metrics {
                        put(t, g, s, "evicted unused MB (sluice)", ctr("evicted_unused") / 1e6);
                        put(t, g, s, "wakeups/GiB (sluice)", ctr("wakeups") / gib.max(1e-9));
                    }
                    if let (Some(b), Some(spun)) = (baseline, spun) {
                        put(t, g, s, "spinner Miter/s alone", b / 1e6);
                        put(t, g, s, "spinner % of alone", spun / b * 100.0);
                    }
                    if let Some(at) = p.abort_at {
                        abort_columns(t, g, s, &p, at, &all, &survivors, &samples, metrics);
                    }
                    if let Some(&(at, _, _)) = p.events.first() {
                        let until = p.events.get(1).map(|e| e.0).unwrap_or(p.dur);
                        let before = (at - (until - at).max(5.0)).max(p.steady.min(at));
                        let (all_before, all_during) = (window_rate(&all, p.dt, before, at), window_rate(&all, p.dt, at, until));
                        for c in &classes {
                            let bins = r.timeline.get(&c.name).cloned().unwrap_or_default();
                            let (b, d) = (window_rate(&bins, p.dt, before, at), window_rate(&bins, p.dt, at, until));
                            put(t, g, s, &format!("{} MB/s before event", c.name), b);
                            put(t, g, s, &format!("{} MB/s during event", c.name), d);
                            // Disk-bound clients: a class's share of what was sent is its share of disk time.
                            put(t, g, s, &format!("{} % of total before", c.name), b / all_before * 100.0);
                            put(t, g, s, &format!("{} % of total during", c.name), d / all_during * 100.0);
                        }
                        let disk = |a: f64, b: f64| {
                            let (x, y) = (sample_at(&samples, a), sample_at(&samples, b));
                            match (x, y) {
                                (Some(x), Some(y)) if y.t_s > x.t_s => (y.disk_read_bytes - x.disk_read_bytes) as f64 / 1e6 / (y.t_s - x.t_s),
                                _ => f64::NAN,
                            }
                        };
                        put(t, g, s, "disk MB/s before event", disk(before, at));
                        put(t, g, s, "disk MB/s during event", disk(at, until));
                        if metrics {
                            let d = |k: &str| match (sample_at(&samples, at), sample_at(&samples, until)) {
                                (Some(x), Some(y)) => y.counters.get(k).copied().unwrap_or(0).saturating_sub(x.counters.get(k).copied().unwrap_or(0)) as f64,
                                _ => f64::NAN,
                            };
                            put(t, g, s, "reads delayed during event (sluice)", d("prefetch_reads_delayed"));
                        }
                    }
                    if rep == 0 {
                        series.push((server.name.clone(), all.iter().enumerate().map(|(i, b)| ((i + 1) as f64 * p.dt, *b as f64 / 1e6 / p.dt)).collect::<Vec<_>>()));
                    }
                    raw.push(serde_json::json!({
                        "group": group, "server": server.name, "run": rep + 1, "usage": usage, "samples": samples,
                        "spinner_alone_per_s": baseline, "spinner_per_s": spun, "events": event_log, "load": r,
                    }));
                }
            }
            plots += 1;
            report::line_chart(&ctx.out.join(format!("throughput-{plots}.png")), &format!("{group} (run 1)"), "time (s)", "MB/s, all clients", &series)?;
        }
        drop(topo);
    }
    if let Some(base) = &sp.baseline {
        let groups: Vec<String> = table.rows.iter().map(|r| r.group.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        for g in groups {
            let Some(b) = table.median_of(&g, base, "total MB/s (steady)") else { continue };
            let rows: Vec<String> = table.rows.iter().filter(|r| r.group == g).map(|r| r.config.clone()).collect();
            for s in rows {
                if let Some(v) = table.median_of(&g, &s, "total MB/s (steady)") {
                    put(&mut table, &g, &s, &format!("total vs {base} (medians)"), v / b);
                }
            }
        }
    }
    table.columns.retain(|c| table.rows.iter().any(|r| r.values.contains_key(c)));
    report::write(&ctx.out, &exp.name, &ctx.preamble(), std::slice::from_ref(&table), &serde_json::Value::Array(raw))?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn abort_columns(t: &mut Table, g: &str, s: &str, p: &Params, at: f64, all: &[u64], survivors: &[u64], samples: &[ServerSample], metrics: bool) {
    let before_from = (at - 10.0).max(p.steady.min(at - p.dt));
    let capacity = window_rate(all, p.dt, before_from, at);
    put(t, g, s, "all MB/s before reset", capacity);
    put(t, g, s, "survivors MB/s before reset", window_rate(survivors, p.dt, before_from, at));
    put(t, g, s, "survivors MB/s after reset", window_rate(survivors, p.dt, at, p.dur));
    put(t, g, s, "s to new fair share", time_to_reach(survivors, p.dt, at, 0.95 * capacity));
    let (Some(x), Some(y)) = (sample_at(samples, at), samples.last()) else { return };
    let disk_after = y.disk_read_bytes.saturating_sub(x.disk_read_bytes) as f64;
    let (need, _) = window_sum(survivors, p.dt, at, p.dur);
    put(t, g, s, "disk MB after reset", disk_after / 1e6);
    put(t, g, s, "disk after reset / survivors' bytes", disk_after / need.max(1) as f64);
    if metrics {
        let d = |k: &str| y.counters.get(k).copied().unwrap_or(0).saturating_sub(x.counters.get(k).copied().unwrap_or(0)) as f64;
        put(t, g, s, "reads cancelled (sluice)", d("prefetch_reads_cancelled"));
        put(t, g, s, "MB cancelled (sluice)", d("prefetch_bytes_cancelled") / 1e6);
        put(t, g, s, "reads skipped (sluice)", d("prefetch_reads_skipped"));
        put(t, g, s, "MB read then discarded (sluice)", d("prefetch_bytes_discarded") / 1e6);
    }
}

type Once = (LoadReport, Vec<ServerSample>, Option<f64>, Vec<String>);

/// One run against a started server: generators (one per client namespace),
/// the server sampler, link events and the spinner, all started together.
#[allow(clippy::too_many_arguments)]
fn run_once(ctx: &Ctx, topo: &Topology, srv: &Running, classes: &[&StreamClass], clients: &[Client], p: &Params, mport: Option<u16>, spinner: bool, device: Option<&str>) -> Result<Once> {
    // (namespace, spec) per client namespace.
    let mut specs: Vec<(Option<String>, LoadSpec)> = Vec::new();
    for c in clients {
        let cl = classes[c.class];
        let (ns, url) = if topo.classes.is_empty() {
            (topo.client_ns.clone(), srv.url_for(&c.fname))
        } else {
            let h = topo.classes.iter().find(|h| h.name == cl.name).unwrap_or(&topo.classes[c.class % topo.classes.len()]);
            (Some(h.ns.clone()), srv.url_for_host(&h.server_addr, &c.fname))
        };
        let bps = if cl.rate == "0" { None } else { Some(rate(&cl.rate)?) };
        let d = DownloadSpec {
            url,
            class: if c.reset { format!("{}{RESET}", cl.name) } else { cl.name.clone() },
            start_s: c.start_s,
            rate_bps: bps,
            abort_after_s: if c.reset { p.abort_at.map(|a| (a - c.start_s).max(0.0)) } else { None },
            rcvbuf: None,
        };
        match specs.iter_mut().find(|(n, _)| *n == ns) {
            Some((_, s)) => s.downloads.push(d),
            None => specs.push((ns, LoadSpec { downloads: vec![d], sample_ms: (p.dt * 1000.0) as u64, deadline_s: Some(p.dur) })),
        }
    }
    let sns = topo.server_ns.as_deref();
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let spin = if spinner { Some(spin_child(p.dur)?) } else { None };
    let (outs, samples, log) = std::thread::scope(|sc| {
        let gens: Vec<_> = specs.iter().map(|(ns, s)| sc.spawn(move || run_load(ns.as_deref(), s, &ctx.work))).collect();
        let sampler = sc.spawn(|| {
            let mut v = Vec::new();
            let mut next = t0;
            loop {
                let fin = done.load(Ordering::Relaxed);
                let disk = srv.usage(device).map(|u| u.disk_read_bytes).unwrap_or(0);
                let counters = mport.map(|m| scrape(sns, m)).unwrap_or_default();
                v.push(ServerSample { t_s: t0.elapsed().as_secs_f64(), disk_read_bytes: disk, counters });
                if fin {
                    return v;
                }
                next += Duration::from_secs_f64(p.dt);
                while Instant::now() < next && !done.load(Ordering::Relaxed) {
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
                    Some(l) => topo.classes.iter().find(|h| &h.name == l).map(|h| h.ctl.clone()),
                    None => topo.linkem_ctl.clone(),
                };
                let res = match ctl {
                    Some(c) => crate::linkem::ctl::send(&c, &format!("set both {set}")).map_err(|e| format!("{e:#}")),
                    None => Err(format!("no linkem {link:?} in this topology")),
                };
                log.push(format!("{:.2} s: {} {set}: {}", t0.elapsed().as_secs_f64(), link.as_deref().unwrap_or("link"), res.unwrap_or_else(|e| e)));
            }
            log
        });
        let outs: Vec<Result<LoadReport>> = gens.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked")))).collect();
        done.store(true, Ordering::Relaxed);
        (outs, sampler.join().unwrap_or_default(), events.join().unwrap_or_default())
    });
    let spun = spin.map(|c| spin_result(c, p.dur));
    // One more sample once the server has seen every reset: Sluice adds a
    // transfer's counts to the engine totals when the transfer ends.
    let mut samples = samples;
    std::thread::sleep(Duration::from_millis(1000));
    let disk = srv.usage(device).map(|u| u.disk_read_bytes).unwrap_or(0);
    samples.push(ServerSample { t_s: t0.elapsed().as_secs_f64(), disk_read_bytes: disk, counters: mport.map(|m| scrape(sns, m)).unwrap_or_default() });
    let mut merged: Option<LoadReport> = None;
    for o in outs {
        let r = o?;
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
    Ok((merged.context("no clients")?, samples, spun, log))
}
