//! `linkem-validation`: configured against measured RTT (UDP pinger) and TCP
//! goodput (iperf3) through linkem between two namespaces.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::experiment::pick;
use crate::probe::PingReport;
use crate::report::{self, median, Table};
use crate::runner::{iperf, Ctx};
use crate::topology::{ns_command, PathSpec, Topology, CLIENT_NS, SERVER_ADDR, SERVER_NS};
use crate::units::{parse_duration, parse_rate};

/// Payload share of a full-size packet: TCP with timestamps carries MTU - 52 bytes.
pub fn tcp_payload_share(mtu: u32) -> f64 {
    (mtu as f64 - 52.0) / mtu as f64
}

/// Runs the validation and writes its report.
pub fn run(ctx: &Ctx) -> Result<()> {
    let v = ctx.exp.validation.clone().context("no [validation]")?;
    let path = ctx.exp.paths.first().cloned().unwrap_or(PathSpec {
        name: "linkem".into(),
        mode: "linkem".into(),
        ..Default::default()
    });
    let mtu = path.mtu.unwrap_or(1500);
    let topo = Topology::build(
        &PathSpec {
            mode: "linkem".into(),
            ..path.clone()
        },
        &ctx.sysctls(),
        &ctx.work,
    )?;
    let me = std::env::current_exe()?.display().to_string();
    let echo_argv = vec![me.clone(), "_echo".into(), format!("{SERVER_ADDR}:7007")];
    let mut echo = ns_command(Some(SERVER_NS), &echo_argv)
        .stdin(Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(300));
    let mut rtt_t = Table::new(
        "RTT through linkem (UDP probe, 64-byte payload)",
        "configured RTT",
        "run (notes: within max(1 ms, 3 %)?)",
        &["median ms", "min ms", "max ms", "error ms"],
    );
    let count = *pick(ctx.smoke, &v.ping_count, v.smoke_ping_count.as_ref());
    let mut raw = Vec::new();
    let mut pts = Vec::new();
    for rtt in &v.rtts {
        let want = parse_duration(rtt)?.as_secs_f64() * 1e3;
        topo.linkem_set(&format!(
            "delay={}us rate=0 loss=0 jitter=0",
            (want * 500.0).round()
        ))?;
        for rep in 0..ctx.repeat {
            let argv = vec![
                me.clone(),
                "_ping".into(),
                format!("{SERVER_ADDR}:7007"),
                count.to_string(),
                "20".into(),
            ];
            let out = ns_command(Some(CLIENT_NS), &argv)
                .stdin(Stdio::null())
                .output()?;
            let rep_: PingReport = serde_json::from_slice(&out.stdout).with_context(|| {
                format!("ping output: {}", String::from_utf8_lossy(&out.stderr))
            })?;
            let med = median(&rep_.rtt_ms);
            let (lo, _, hi) = report::mmm(&rep_.rtt_ms);
            let err = med - want;
            let g = rtt.to_string();
            let r = format!("{}", rep + 1);
            rtt_t.add(&g, &r, "median ms", med);
            rtt_t.add(&g, &r, "min ms", lo);
            rtt_t.add(&g, &r, "max ms", hi);
            rtt_t.add(&g, &r, "error ms", err);
            rtt_t.note(
                &g,
                &r,
                if err.abs() <= (want * 0.03).max(1.0) {
                    "yes"
                } else {
                    "NO"
                },
            );
            pts.push((want, med));
            raw.push(serde_json::json!({"rtt_configured_ms": want, "rtt_ms": rep_.rtt_ms, "sent": rep_.sent}));
        }
    }
    let _ = echo.kill();
    let _ = echo.wait();
    let mut rate_t = Table::new(
        &format!(
            "TCP goodput through linkem (iperf3, 1 stream, RTT {}, MTU {mtu})",
            v.rate_rtt
        ),
        "configured rate",
        "run (notes: within 5 % of configured?)",
        &[
            "Mbit/s",
            "of configured %",
            "of TCP payload ceiling %",
            "linkem CPU %",
        ],
    );
    let secs = *pick(ctx.smoke, &v.iperf_seconds, v.smoke_iperf_seconds.as_ref());
    let rates = if ctx.smoke {
        v.smoke_rates.clone().unwrap_or(v.rates.clone())
    } else {
        v.rates.clone()
    };
    let rtt = parse_duration(&v.rate_rtt)?;
    let mut rpts = Vec::new();
    for r in &rates {
        let bps = parse_rate(r)?;
        // Queue: one BDP at least, so a single TCP flow can fill the link.
        let bdp = (bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
        let limit = bdp.max(1000 * 1500) * 2;
        topo.linkem_set(&format!(
            "delay={}us rate={bps} limit={limit}B loss=0",
            rtt.as_micros() / 2
        ))?;
        for rep in 0..ctx.repeat {
            let cpu0 = topo.linkem_pid().and_then(cpu_seconds);
            let t0 = std::time::Instant::now();
            let got = iperf(
                Some(SERVER_NS),
                Some(CLIENT_NS),
                SERVER_ADDR,
                5201,
                secs,
                1,
                &ctx.work,
            )?;
            if let (Some(a), Some(b)) = (cpu0, topo.linkem_pid().and_then(cpu_seconds)) {
                rate_t.add(
                    &r.clone(),
                    &format!("{}", rep + 1),
                    "linkem CPU %",
                    (b - a) / t0.elapsed().as_secs_f64() * 100.0,
                );
            }
            let g = r.clone();
            let rr = format!("{}", rep + 1);
            rate_t.add(&g, &rr, "Mbit/s", got / 1e6);
            rate_t.add(&g, &rr, "of configured %", got / bps as f64 * 100.0);
            rate_t.add(
                &g,
                &rr,
                "of TCP payload ceiling %",
                got / (bps as f64 * tcp_payload_share(mtu)) * 100.0,
            );
            rate_t.note(
                &g,
                &rr,
                if got >= bps as f64 * 0.95 {
                    "yes"
                } else {
                    "no"
                },
            );
            rpts.push((bps as f64 / 1e6, got / 1e6));
            raw.push(serde_json::json!({"rate_configured_bps": bps, "goodput_bps": got, "seconds": secs}));
        }
    }
    if let Some(ctl) = &topo.linkem_ctl {
        raw.push(serde_json::json!({"linkem_stats": crate::linkem::ctl::send(ctl, "stats").ok()}));
    }
    drop(topo);
    let tables = vec![rtt_t, rate_t];
    ctx.write_report(&tables, &serde_json::Value::Array(raw))?;
    let ideal_r: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.0)).collect();
    report::line_chart(
        &ctx.out.join("rtt.png"),
        "linkem: measured vs configured RTT",
        "configured RTT (ms)",
        "measured RTT (ms)",
        &[
            ("measured (median)".into(), pts.clone()),
            ("ideal".into(), ideal_r),
        ],
    )?;
    let ideal: Vec<(f64, f64)> = rpts.iter().map(|p| (p.0, p.0)).collect();
    report::line_chart(
        &ctx.out.join("goodput.png"),
        "linkem: iperf3 goodput vs configured rate",
        "configured rate (Mbit/s)",
        "goodput (Mbit/s)",
        &[("measured".into(), rpts), ("configured".into(), ideal)],
    )?;
    Ok(())
}

/// utime + stime of a process (all its threads), in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
