//! SIMULATION, not a measurement: the tpf prefetch planner and disk
//! scheduler against a modelled disk, links and page cache on a virtual
//! clock (the paper's mixed-rate experiment, section 4.3).
//!
//! 180 connections at 1 Mbit/s and 300 at 200 kbit/s read 1 GiB files from
//! a serial disk of 150 seeks/s and 40 MB/s with a 256 MiB read-ahead
//! budget (= page-cache capacity) for 60 virtual seconds, in each mode:
//! `tcp` (planner), `fixed` (128 KiB and 1 MiB windows through the same
//! scheduler) and `kernel` (a Linux-like 128 KiB read-ahead model straight
//! to the disk). A second run resets 15 % of the connections and cuts the
//! congestion window of 20 % at 30 s.
//!
//! Run: `cargo run -p sluice-engine --example tpf_sim [seconds]`

use sluice_engine::{plan, sched};
#[path = "../tests/support/tpf_world.rs"]
mod tpf_world;

use std::time::Duration;

use plan::{PlanConfig, PrefetchMode};
use tpf_world::{ConnSpec, Report, World, WorldConfig};

const FAST: u64 = 125_000;
const SLOW: u64 = 25_000;
const MB: f64 = 1e6;

fn specs(events_at: Option<Duration>) -> Vec<ConnSpec> {
    let mut v = Vec::new();
    for i in 0..480usize {
        let (rate, class) = if i < 180 { (FAST, 0) } else { (SLOW, 1) };
        let mut s = ConnSpec {
            rate,
            class,
            reset_at: None,
            cut_at: None,
        };
        if let Some(t) = events_at {
            // Every 20th connection resets (15 % = 3 in 20), 4 in 20 get a cut.
            match i % 20 {
                0..=2 => s.reset_at = Some(t),
                3..=6 => s.cut_at = Some(t),
                _ => {}
            }
        }
        v.push(s);
    }
    v
}

fn run(
    label: &str,
    mode: PrefetchMode,
    window: u64,
    secs: u64,
    events_at: Option<Duration>,
) -> (String, Report) {
    let budget = 256 << 20;
    let cfg = WorldConfig {
        plan: PlanConfig {
            mode,
            budget,
            fixed_window: window,
            trigger: std::env::var("TPF_TRIGGER")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.5),
            ..PlanConfig::default()
        },
        cache: budget,
        iops: 150.0,
        disk_bw: 40e6,
        duration: Duration::from_secs(secs),
        kernel_window: window,
        ..WorldConfig::default()
    };
    (label.to_string(), World::new(cfg, specs(events_at)).run())
}

fn class_kbps(r: &Report, class: usize, secs: f64, survivors_only: bool) -> f64 {
    let v: Vec<_> = r
        .conns
        .iter()
        .filter(|c| c.class == class && (!survivors_only || c.starved != Duration::MAX))
        .collect();
    v.iter()
        .map(|c| c.delivered as f64 * 8.0 / 1000.0 / secs)
        .sum::<f64>()
        / v.len() as f64
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(60);
    let modes = [
        ("tcp", PrefetchMode::Tcp, 128 << 10),
        ("fixed-128K", PrefetchMode::Fixed, 128 << 10),
        ("fixed-1M", PrefetchMode::Fixed, 1 << 20),
        ("kernel-128K", PrefetchMode::Kernel, 128 << 10),
    ];
    println!("SIMULATION (virtual clock, modelled disk/links/cache; not a measurement)");
    println!("180 x 1 Mbit/s + 300 x 200 kbit/s, disk 150 IOPS / 40 MB/s, budget = cache = 256 MiB, {secs} s");
    println!();
    println!(
        "{:<12} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10} {:>9} {:>9}",
        "mode",
        "fast kb/s",
        "slow kb/s",
        "net MB/s",
        "disk MB",
        "reads",
        "evict MB",
        "starve s",
        "max MiB"
    );
    let f = secs as f64;
    let only = std::env::var("TPF_ONLY").ok();
    let modes: Vec<_> = modes
        .iter()
        .filter(|m| only.as_deref().is_none_or(|o| o == m.0))
        .collect();
    for &&(label, mode, w) in &modes {
        let (l, r) = run(label, mode, w, secs, None);
        let starve: f64 =
            r.conns.iter().map(|c| c.starved.as_secs_f64()).sum::<f64>() / r.conns.len() as f64;
        let net: u64 = r.conns.iter().map(|c| c.delivered).sum();
        println!(
            "{:<12} {:>10.0} {:>10.0} {:>9.2} {:>9.0} {:>8} {:>10.1} {:>9.1} {:>9.0}",
            l,
            class_kbps(&r, 0, f, false),
            class_kbps(&r, 1, f, false),
            net as f64 / MB / f,
            r.disk_bytes as f64 / MB,
            r.disk_reads,
            r.evicted_unused as f64 / MB,
            starve,
            r.max_cache_used.max(r.max_planner_used) as f64 / (1u64 << 20) as f64,
        );
    }
    println!();
    println!(
        "Same, with 15 % of connections reset and 20 % cwnd-halved at {} s:",
        secs / 2
    );
    println!(
        "{:<12} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "mode", "fast kb/s", "slow kb/s", "read-after-RST", "cancelled", "cancel MB", "delayed"
    );
    for &&(label, mode, w) in &modes {
        let (l, r) = run(label, mode, w, secs, Some(Duration::from_secs(secs / 2)));
        println!(
            "{:<12} {:>10.0} {:>10.0} {:>11.2}M {:>10} {:>10.2} {:>10}",
            l,
            class_kbps(&r, 0, f, false),
            class_kbps(&r, 1, f, false),
            r.read_after_reset as f64 / MB,
            r.counters.reads_cancelled,
            r.counters.bytes_cancelled as f64 / MB,
            r.counters.reads_delayed,
        );
    }
    println!();
    println!("fast/slow kb/s: mean delivered per connection of the class over the whole run");
    println!("(nominal 1000 / 200). evict MB: read-ahead evicted from the cache model before");
    println!("being sent. starve s: mean time per connection with an empty socket after 10 s.");
    println!("read-after-RST: disk bytes read for connections after their reset.");
}
