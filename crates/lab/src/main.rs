//! `sluice-lab`: lists and runs the experiments in lab/experiments/.
//!
//! ```text
//! sluice-lab list
//! sluice-lab run NAME [--smoke] [--repeat N] [--out DIR] [--skip-missing] [--servers a,b]
//! ```
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use sluice_lab::{
    experiment, load, prereq, probe, run_many, run_transfers, run_validation, runner::Ctx,
};

#[derive(Parser)]
#[command(
    name = "sluice-lab",
    about = "Reproducible experiments: Sluice against peers on emulated links and a slow disk"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the experiments
    List,
    /// Run one experiment; results go to lab/results/NAME/ (smoke: lab/results/NAME/smoke/)
    Run {
        name: String,
        /// Small sizes, one repetition: minutes, for CI
        #[arg(long)]
        smoke: bool,
        /// Repetitions per configuration (default: the experiment's, 3)
        #[arg(long)]
        repeat: Option<u32>,
        /// Results directory
        #[arg(long)]
        out: Option<PathBuf>,
        /// Skip servers whose programs are missing instead of failing
        #[arg(long)]
        skip_missing: bool,
        /// Only these servers (comma-separated names)
        #[arg(long)]
        servers: Option<String>,
        /// Only this step (0-based) of a `streams` sweep of client counts
        #[arg(long)]
        step: Option<usize>,
    },
    /// (internal) run a workload spec and print the JSON report
    #[command(name = "_load", hide = true)]
    Load { spec: PathBuf },
    /// (internal) CPU-bound spinner: counts loop iterations for SECS seconds, prints the count
    #[command(name = "_spin", hide = true)]
    Spin { secs: f64 },
    /// (internal) UDP echo server
    #[command(name = "_echo", hide = true)]
    Echo { bind: String },
    /// (internal) UDP pinger: TO COUNT INTERVAL_MS
    #[command(name = "_ping", hide = true)]
    Ping {
        to: String,
        count: u32,
        interval_ms: u64,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::List => {
            let root = experiment::repo_root()?;
            for e in experiment::list(&root)? {
                let first = e.description.split(". ").next().unwrap_or("").trim();
                println!("{:<26} {:<18} {}", e.name, e.kind, first);
            }
            Ok(())
        }
        Cmd::Run {
            name,
            smoke,
            repeat,
            out,
            skip_missing,
            servers,
            step,
        } => {
            let root = experiment::repo_root()?;
            let mut exp =
                experiment::load(&root.join("lab/experiments").join(format!("{name}.toml")))
                    .with_context(|| format!("no experiment {name:?}; see `sluice-lab list`"))?;
            if let Some(only) = &servers {
                let want: Vec<&str> = only.split(',').map(str::trim).collect();
                exp.servers.retain(|s| want.contains(&s.name.as_str()));
                if exp.servers.is_empty() && exp.kind != "linkem-validation" {
                    bail!("--servers {only}: no such servers in {name}");
                }
            }
            if let (Some(n), Some(st)) = (step, exp.streams.as_mut()) {
                for c in &mut st.classes {
                    for l in [Some(&mut c.clients), c.smoke_clients.as_mut()]
                        .into_iter()
                        .flatten()
                    {
                        *l = sluice_lab::streams::counts_at(std::slice::from_ref(l), n);
                    }
                }
                // The popular-files sweep steps with the counts.
                for l in [st.popular_files.as_mut(), st.smoke_popular_files.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    *l = sluice_lab::streams::counts_at(std::slice::from_ref(l), n);
                }
            }
            if skip_missing {
                let (keep, _): (Vec<_>, Vec<_>) =
                    exp.servers.clone().into_iter().partition(|s| {
                        sluice_lab::servers::check(std::slice::from_ref(s)).is_empty()
                    });
                prereq::check(&exp, true)?;
                exp.servers = keep;
            } else {
                prereq::check(&exp, false)?;
            }
            let repeat = repeat
                .unwrap_or(if smoke { exp.smoke_repeat } else { exp.repeat })
                .max(1);
            let out = out.unwrap_or_else(|| {
                let d = root.join("lab/results").join(&name);
                if smoke {
                    d.join("smoke")
                } else {
                    d
                }
            });
            let work = PathBuf::from("/var/tmp/sluice-lab/work").join(&name);
            std::fs::create_dir_all(&work)?;
            let command = std::env::args()
                .map(|a| {
                    if a.contains('/') {
                        a.rsplit('/').next().unwrap_or(&a).to_string()
                    } else {
                        a
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            let merge = servers.is_some() || step.is_some();
            let ctx = Ctx {
                exp,
                smoke,
                repeat,
                out: out.clone(),
                work,
                command,
                merge,
            };
            match ctx.exp.kind.as_str() {
                "linkem-validation" => run_validation::run(&ctx)?,
                "transfers" => run_transfers::run(&ctx)?,
                "many-clients" => run_many::run(&ctx)?,
                "streams" => sluice_lab::run_streams::run(&ctx)?,
                k => bail!("unknown kind {k}"),
            }
            println!(
                "{}",
                std::fs::read_to_string(out.join("results.md")).unwrap_or_default()
            );
            eprintln!("results in {}", out.display());
            Ok(())
        }
        Cmd::Load { spec } => {
            let spec: load::LoadSpec = serde_json::from_slice(&std::fs::read(&spec)?)?;
            let rep = load::run(&spec)?;
            println!("{}", serde_json::to_string(&rep)?);
            Ok(())
        }
        Cmd::Spin { secs } => {
            println!(
                "{}",
                sluice_lab::run_streams::spin(Duration::from_secs_f64(secs))
            );
            Ok(())
        }
        Cmd::Echo { bind } => probe::echo(&bind),
        Cmd::Ping {
            to,
            count,
            interval_ms,
        } => {
            let r = probe::ping(&to, count, Duration::from_millis(interval_ms), 64)?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
    }
}
