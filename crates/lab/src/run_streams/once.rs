//! One `streams` run against a started server: the generators, the
//! server sampler, link events and the CPU-bound spinner beside it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::load::{DownloadSpec, LoadReport, LoadSpec};
use crate::pagetrace::{self, TraceLog, Tracer};
use crate::runner::{rate, run_load, Ctx};
use crate::servers::Running;
use crate::streams::{add_bins, parse_prometheus, ServerSample, StreamClass};
use crate::topology::{ns_command, Topology};

use super::{Client, Params, RESET, RUNNABLE_TICK};

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

pub(super) fn spin_child(secs: f64) -> Result<std::process::Child> {
    let me = std::env::current_exe()?;
    Ok(std::process::Command::new(me)
        .args(["_spin", &secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

pub(super) fn spin_result(c: std::process::Child, secs: f64) -> f64 {
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
pub(super) fn scrape(ns: Option<&str>, port: u16) -> BTreeMap<String, u64> {
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

/// What a run measured beside the load report and server samples.
pub(super) struct OnceExtra {
    /// CLOCK_MONOTONIC seconds of the generators' start (bin 0).
    pub(super) t0_mono_s: f64,
    /// Seconds between perf's start and the run's start (for perf's intervals).
    pub(super) perf_offset_s: f64,
    /// (run seconds, runnable tasks other than the sampler) every RUNNABLE_TICK.
    pub(super) runnable: Vec<(f64, f64)>,
    /// The page trace, if on.
    pub(super) trace: Option<TraceLog>,
    /// Inode of each client's file (with the trace).
    pub(super) inos: Vec<Option<u64>>,
}

pub(super) type Once = (
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
pub(super) fn run_once(
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
            offset: c.offset,
            wrap: c.wrap,
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
