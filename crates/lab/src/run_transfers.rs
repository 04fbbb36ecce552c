//! `transfers`: each case (file size, concurrent downloads, streams) from each
//! server over each path, repeated; throughput, server CPU and context
//! switches per GiB, socket memory, retransmissions; plus iperf3 rows.

use anyhow::Result;

use crate::report::{self, Table};
use crate::runner::{
    ensure_file, iperf, native_client, prepare_cache, run_clients, run_load, simple_load, size, Ctx,
};
use crate::servers;
use crate::sockets::Sampler;
use crate::topology::Topology;

const GIB: f64 = (1u64 << 30) as f64;
const COLS: [&str; 7] = [
    "MB/s",
    "server CPU s/GiB",
    "server ctx switches/GiB",
    "server peak send mem MiB",
    "client peak recv mem MiB",
    "retrans",
    "server sndbuf MiB",
];

/// Runs the experiment and writes its report.
pub fn run(ctx: &Ctx) -> Result<()> {
    let exp = &ctx.exp;
    let limits = ctx.limits()?;
    let device = limits.device.clone();
    let mut table = Table::new(&exp.name, "path / case", "server", &COLS);
    let mut raw = Vec::new();
    for path in &exp.paths {
        let topo = Topology::build(path, &ctx.sysctls(), &ctx.work)?;
        let sns = topo.server_ns.as_deref();
        let cns = topo.client_ns.as_deref();
        for case in &exp.cases {
            let sz = size(crate::experiment::pick(
                ctx.smoke,
                case.size.as_str(),
                case.smoke_size.as_deref(),
            ))?;
            let file = ensure_file(&exp.data.dir, sz)?;
            let fname = file
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let group = format!("{}: {}", path.name, case.name);
            for (si, server) in exp.servers.iter().enumerate() {
                if !servers::check(std::slice::from_ref(server)).is_empty() {
                    table.note(&group, &server.name, "not run: program missing");
                    continue;
                }
                let probe_url = format!("{}://x/{fname}", server.scheme());
                if case.client != "load"
                    && native_client(server, &case.client, &probe_url, case.streams).is_none()
                {
                    table.note(&group, &server.name, "n/a: no client for this many streams");
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
                    prepare_cache(exp, &file)?;
                    let port = 21000 + si as u16 * 10 + (rep % 10) as u16;
                    let srv = match servers::start(
                        server,
                        &exp.data.dir,
                        sns,
                        &topo.server_addr,
                        port,
                        &limits,
                        &ctx.work,
                    ) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("  server failed: {e:#}");
                            table.note(
                                &group,
                                &server.name,
                                &format!(
                                    "server failed to start: {}",
                                    first_line(&format!("{e:#}"))
                                ),
                            );
                            break;
                        }
                    };
                    let url = srv.url_for(&fname);
                    let mut nss = vec![topo.server_ns.clone()];
                    if topo.client_ns != topo.server_ns {
                        nss.push(topo.client_ns.clone());
                    }
                    // `ss -p` walks /proc: only worth its CPU where socket memory matters.
                    let sampler = matches!(path.mode.as_str(), "linkem" | "veth").then(|| {
                        Sampler::start(nss, srv.procs_file(), std::time::Duration::from_millis(200))
                    });
                    let t0 = std::time::Instant::now();
                    let outcome: Result<()> = if case.client == "load" {
                        run_load(cns, &simple_load(&url, case.downloads, "all"), &ctx.work)
                            .and_then(|r| match r.results.iter().find(|d| !d.complete) {
                                Some(d) => anyhow::bail!(
                                    "download incomplete: {} of {} bytes, {}",
                                    d.bytes,
                                    sz,
                                    d.error.clone().unwrap_or_default()
                                ),
                                None => Ok(()),
                            })
                    } else {
                        let argv = native_client(server, &case.client, &url, case.streams)
                            .unwrap_or_default();
                        run_clients(cns, &argv, case.downloads, &ctx.work)
                    };
                    let wall = t0.elapsed().as_secs_f64();
                    let socks = sampler.map(Sampler::finish).unwrap_or_default();
                    let usage = srv.stop(device.as_deref())?;
                    if let Err(e) = outcome {
                        eprintln!("  transfer failed: {e:#}");
                        table.note(
                            &group,
                            &server.name,
                            &format!("failed: {}", first_line(&format!("{e:#}"))),
                        );
                        continue;
                    }
                    let bytes = sz as f64 * case.downloads as f64;
                    let gib = bytes / GIB;
                    table.add(&group, &server.name, COLS[0], bytes / 1e6 / wall);
                    table.add(&group, &server.name, COLS[1], usage.cgroup.cpu_s / gib);
                    table.add(
                        &group,
                        &server.name,
                        COLS[2],
                        usage.ctx_switches as f64 / gib,
                    );
                    if path.mode == "linkem" || path.mode == "veth" {
                        table.add(
                            &group,
                            &server.name,
                            COLS[3],
                            socks.server.peak_wmem as f64 / 1048576.0,
                        );
                        table.add(
                            &group,
                            &server.name,
                            COLS[4],
                            socks.client.peak_rmem as f64 / 1048576.0,
                        );
                        table.add(&group, &server.name, COLS[5], socks.server.retrans as f64);
                        table.add(
                            &group,
                            &server.name,
                            COLS[6],
                            socks.server.peak_sndbuf as f64 / 1048576.0,
                        );
                    }
                    raw.push(serde_json::json!({
                        "path": path.name, "case": case.name, "server": server.name, "run": rep + 1,
                        "bytes": bytes, "wall_s": wall, "usage": usage, "sockets": socks,
                    }));
                }
            }
        }
        if let Some(ip) = &exp.iperf {
            let secs = *crate::experiment::pick(ctx.smoke, &ip.seconds, ip.smoke_seconds.as_ref());
            for &streams in &ip.streams {
                let group = format!("{}: iperf3 -P {streams}", path.name);
                for rep in 0..ctx.repeat {
                    eprintln!("[{}] {group} run {}/{}", exp.name, rep + 1, ctx.repeat);
                    match iperf(
                        sns,
                        cns,
                        &topo.server_addr,
                        5201 + rep as u16,
                        secs,
                        streams,
                        &ctx.work,
                    ) {
                        Ok(bps) => {
                            table.add(&group, "iperf3", COLS[0], bps / 8e6);
                            raw.push(serde_json::json!({"path": path.name, "case": group, "server": "iperf3", "run": rep + 1, "bits_per_second": bps}));
                        }
                        Err(e) => table.note(
                            &group,
                            "iperf3",
                            &format!("failed: {}", first_line(&format!("{e:#}"))),
                        ),
                    }
                }
            }
        }
        drop(topo);
    }
    // Unused metric columns (e.g. socket memory on loopback) are dropped.
    table
        .columns
        .retain(|c| table.rows.iter().any(|r| r.values.contains_key(c)));
    ctx.write_report(std::slice::from_ref(&table), &serde_json::Value::Array(raw))?;
    let groups: Vec<String> =
        table
            .rows
            .iter()
            .map(|r| r.group.clone())
            .fold(Vec::new(), |mut v, g| {
                if !v.contains(&g) {
                    v.push(g)
                }
                v
            });
    for (i, g) in groups.iter().filter(|g| !g.contains("iperf3")).enumerate() {
        report::bar_chart(
            &ctx.out.join(format!("mbps-{}.png", i + 1)),
            &format!("{g}: MB/s"),
            &table,
            g,
            COLS[0],
        )?;
        report::bar_chart(
            &ctx.out.join(format!("cpu-{}.png", i + 1)),
            &format!("{g}: server CPU s/GiB"),
            &table,
            g,
            COLS[1],
        )?;
    }
    Ok(())
}

/// First line of a message, for table notes.
pub fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    l.chars().take(120).collect::<String>().replace('|', "/")
}
