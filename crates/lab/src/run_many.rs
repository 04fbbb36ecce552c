//! `many-clients`: many application-rate-limited clients fetching the same
//! file from a server whose disk and page cache are constrained by cgroups:
//! aggregate throughput, disk bytes read per byte sent, download times.

use anyhow::{Context, Result};

use crate::experiment::pick;
use crate::load::{DownloadSpec, LoadSpec};
use crate::report::{self, median, Table};
use crate::run_transfers::first_line;
use crate::runner::{ensure_file, prepare_cache, rate, run_load, size, Ctx};
use crate::servers;
use crate::topology::Topology;
use crate::units::parse_duration;

const COLS: [&str; 9] = [
    "aggregate MB/s",
    "disk read / sent",
    "disk MB read",
    "per-client Mbit/s (median)",
    "completed",
    "download time s (median, projected if cut)",
    "server CPU s/GiB",
    "server ctx switches/GiB",
    "server mem max MiB",
];

/// Runs the experiment and writes its report.
pub fn run(ctx: &Ctx) -> Result<()> {
    let exp = &ctx.exp;
    let w = exp.workload.clone().context("no [workload]")?;
    let clients = *pick(ctx.smoke, &w.clients, w.smoke_clients.as_ref());
    let sz = size(pick(ctx.smoke, w.size.as_str(), w.smoke_size.as_deref()))?;
    let spread = parse_duration(pick(
        ctx.smoke,
        w.arrival_spread.as_str(),
        w.smoke_arrival_spread.as_deref(),
    ))?
    .as_secs_f64();
    let duration = parse_duration(pick(
        ctx.smoke,
        w.duration.as_str(),
        w.smoke_duration.as_deref(),
    ))?
    .as_secs_f64();
    let bps = rate(&w.rate)?;
    let limits = ctx.limits()?;
    let device = limits.device.clone();
    let path = exp.paths.first().cloned().unwrap_or_default();
    let topo = Topology::build(&path, &ctx.sysctls(), &ctx.work)?;
    let file = ensure_file(&exp.data.dir, sz)?;
    let fname = file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let group = format!(
        "{clients} x {} @ {}, {} MiB file, {:.0} s",
        if bps > 0 {
            w.rate.as_str()
        } else {
            "unlimited"
        },
        path.name,
        sz >> 20,
        duration
    );
    let mut table = Table::new(&exp.name, "workload", "server", &COLS);
    let mut raw = Vec::new();
    let mut timelines = Vec::new();
    for (si, server) in exp.servers.iter().enumerate() {
        if !servers::check(std::slice::from_ref(server)).is_empty() {
            table.note(&group, &server.name, "not run: program missing");
            continue;
        }
        for rep in 0..ctx.repeat {
            eprintln!(
                "[{}] {} run {}/{}",
                exp.name,
                server.name,
                rep + 1,
                ctx.repeat
            );
            prepare_cache(exp, &file)?;
            let port = 22000 + si as u16 * 10 + (rep % 10) as u16;
            let srv = match servers::start(
                server,
                &exp.data.dir,
                topo.server_ns.as_deref(),
                &topo.server_addr,
                port,
                &limits,
                &ctx.work,
            ) {
                Ok(s) => s,
                Err(e) => {
                    table.note(
                        &group,
                        &server.name,
                        &format!("server failed to start: {}", first_line(&format!("{e:#}"))),
                    );
                    break;
                }
            };
            // (class name, namespace, URL): one per client class, or the single client namespace.
            let hosts: Vec<(String, Option<String>, String)> = if topo.classes.is_empty() {
                vec![(
                    "clients".into(),
                    topo.client_ns.clone(),
                    srv.url_for(&fname),
                )]
            } else {
                topo.classes
                    .iter()
                    .map(|c| {
                        (
                            c.name.clone(),
                            Some(c.ns.clone()),
                            srv.url_for_host(&c.server_addr, &fname),
                        )
                    })
                    .collect()
            };
            let n_abort = (clients as f64 * w.abort_fraction).round() as u32;
            let mut specs: Vec<LoadSpec> = hosts
                .iter()
                .map(|_| LoadSpec {
                    downloads: Vec::new(),
                    sample_ms: 1000,
                    deadline_s: Some(duration),
                    client_series: false,
                })
                .collect();
            for i in 0..clients {
                let h = i as usize % hosts.len();
                // Aborting clients are the last ones of each class's share.
                let aborting = i >= clients - n_abort;
                specs[h].downloads.push(DownloadSpec {
                    url: hosts[h].2.clone(),
                    class: if aborting {
                        format!("{} (aborting)", hosts[h].0)
                    } else {
                        hosts[h].0.clone()
                    },
                    start_s: spread * i as f64 / clients.max(1) as f64,
                    rate_bps: (bps > 0).then_some(bps),
                    abort_after_s: aborting.then_some(duration / 2.0),
                    rcvbuf: None,
                    id: i,
                    streams: 0,
                    offset: 0,
                    wrap: false,
                });
            }
            let outs: Vec<Result<crate::load::LoadReport>> = std::thread::scope(|sc| {
                let hs: Vec<_> = hosts
                    .iter()
                    .zip(&specs)
                    .map(|(h, sp)| sc.spawn(|| run_load(h.1.as_deref(), sp, &ctx.work)))
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked")))
                    })
                    .collect()
            });
            let rep_out: Result<crate::load::LoadReport> = outs
                .into_iter()
                .try_fold(None::<crate::load::LoadReport>, |acc, r| {
                    let r = r?;
                    Ok(Some(match acc {
                        None => r,
                        Some(mut a) => {
                            a.results.extend(r.results);
                            a.timeline.extend(r.timeline);
                            a.wall_s = a.wall_s.max(r.wall_s);
                            a
                        }
                    }))
                })
                .and_then(|o| o.context("no clients"));
            let usage = srv.stop(device.as_deref())?;
            let r = match rep_out {
                Ok(r) => r,
                Err(e) => {
                    table.note(
                        &group,
                        &server.name,
                        &format!("failed: {}", first_line(&format!("{e:#}"))),
                    );
                    continue;
                }
            };
            let sent: u64 = r.results.iter().map(|d| d.bytes).sum();
            let errors: Vec<&String> = r.results.iter().filter_map(|d| d.error.as_ref()).collect();
            if let Some(e) = errors.first() {
                table.note(
                    &group,
                    &server.name,
                    &format!("{} downloads failed, e.g. {}", errors.len(), first_line(e)),
                );
            }
            let survivors: Vec<_> = r.results.iter().filter(|d| !d.aborted).collect();
            let per_client: Vec<f64> = survivors.iter().map(|d| d.mbytes_per_s() * 8.0).collect();
            let times: Vec<f64> = survivors.iter().map(|d| projected_time(d, sz)).collect();
            let gib = sent as f64 / (1u64 << 30) as f64;
            table.add(&group, &server.name, COLS[0], sent as f64 / 1e6 / r.wall_s);
            table.add(
                &group,
                &server.name,
                COLS[1],
                usage.cgroup.disk_read_bytes as f64 / sent.max(1) as f64,
            );
            table.add(
                &group,
                &server.name,
                COLS[2],
                usage.cgroup.disk_read_bytes as f64 / 1e6,
            );
            table.add(&group, &server.name, COLS[3], median(&per_client));
            table.add(
                &group,
                &server.name,
                COLS[4],
                survivors.iter().filter(|d| d.complete).count() as f64,
            );
            table.add(&group, &server.name, COLS[5], median(&times));
            table.add(
                &group,
                &server.name,
                COLS[6],
                usage.cgroup.cpu_s / gib.max(1e-9),
            );
            table.add(
                &group,
                &server.name,
                COLS[7],
                usage.ctx_switches as f64 / gib.max(1e-9),
            );
            table.add(
                &group,
                &server.name,
                COLS[8],
                usage.cgroup.mem_max_bytes as f64 / 1048576.0,
            );
            if hosts.len() > 1 {
                for (name, _, _) in &hosts {
                    let cls: Vec<_> = survivors.iter().filter(|d| &d.class == name).collect();
                    let g = format!("{group} / class {name}");
                    let pc: Vec<f64> = cls.iter().map(|d| d.mbytes_per_s() * 8.0).collect();
                    let tt: Vec<f64> = cls.iter().map(|d| projected_time(d, sz)).collect();
                    let sent_c: u64 = cls.iter().map(|d| d.bytes).sum();
                    table.add(&g, &server.name, COLS[0], sent_c as f64 / 1e6 / r.wall_s);
                    table.add(&g, &server.name, COLS[3], median(&pc));
                    table.add(
                        &g,
                        &server.name,
                        COLS[4],
                        cls.iter().filter(|d| d.complete).count() as f64,
                    );
                    table.add(&g, &server.name, COLS[5], median(&tt));
                }
            }
            if rep == 0 {
                let total: Vec<(f64, f64)> =
                    (0..r.timeline.values().map(|v| v.len()).max().unwrap_or(0))
                        .map(|i| {
                            let b: u64 = r
                                .timeline
                                .values()
                                .map(|v| v.get(i).copied().unwrap_or(0))
                                .sum();
                            (
                                (i + 1) as f64 * r.sample_ms as f64 / 1e3,
                                b as f64 / 1e6 / (r.sample_ms as f64 / 1e3),
                            )
                        })
                        .collect();
                timelines.push((server.name.clone(), total));
            }
            raw.push(serde_json::json!({"server": server.name, "run": rep + 1, "usage": usage, "load": r}));
        }
    }
    drop(topo);
    ctx.write_report(std::slice::from_ref(&table), &serde_json::Value::Array(raw))?;
    report::line_chart(
        &ctx.out.join("throughput.png"),
        &format!("{}: aggregate throughput (run 1)", exp.name),
        "time (s)",
        "MB/s",
        &timelines,
    )?;
    report::bar_chart(
        &ctx.out.join("disk-per-sent.png"),
        "disk bytes read per byte sent",
        &table,
        &group,
        COLS[1],
    )?;
    Ok(())
}

/// Download time: measured when complete, else projected from the rate so far
/// (NaN for a download that received nothing, which the tables leave out).
fn projected_time(d: &crate::load::DownloadResult, size: u64) -> f64 {
    if d.complete {
        d.end_s - d.start_s
    } else if d.bytes == 0 {
        f64::NAN
    } else {
        size as f64 / 1e6 / d.mbytes_per_s()
    }
}
