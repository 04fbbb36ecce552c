//! `linkem`: joins two network namespaces through TUN devices and forwards
//! packets between them with delay, jitter, loss, a rate limit and a drop-tail
//! queue per direction.
//!
//! ```text
//! linkem run --a-ns srv --a-addr 10.77.0.1/24 --b-ns cli --b-addr 10.77.0.2/24 \
//!            --ctl /run/linkem.sock --delay 25ms --rate 100mbit
//! linkem set --ctl /run/linkem.sock [--dir ab|ba|both] --delay 50ms --loss 0.1%
//! linkem stats --ctl /run/linkem.sock
//! ```
//! Direction `ab` is packets sent from namespace A towards B.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use sluice_lab::linkem::ctl;
use sluice_lab::linkem::forward::{run_direction, Shared};
use sluice_lab::linkem::setup::{make_end, End};
use sluice_lab::linkem::LinkParams;

#[derive(Parser)]
#[command(name = "linkem", about = "User-space link emulator over TUN devices")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone, Default)]
struct LinkArgs {
    /// One-way delay per direction, e.g. 25ms
    #[arg(long)]
    delay: Option<String>,
    /// Uniform jitter (delay ± jitter)
    #[arg(long)]
    jitter: Option<String>,
    /// Let jitter reorder packets
    #[arg(long)]
    reorder: bool,
    /// Random loss, e.g. 0.1% or 0.001
    #[arg(long)]
    loss: Option<String>,
    /// Bottleneck rate, e.g. 100mbit (0 = unlimited)
    #[arg(long)]
    rate: Option<String>,
    /// Drop-tail queue: packets (bare number) or bytes (with unit)
    #[arg(long)]
    limit: Option<String>,
}

impl LinkArgs {
    fn settings(&self) -> String {
        let mut s = Vec::new();
        for (k, v) in [
            ("delay", &self.delay),
            ("jitter", &self.jitter),
            ("loss", &self.loss),
            ("rate", &self.rate),
            ("limit", &self.limit),
        ] {
            if let Some(v) = v {
                s.push(format!("{k}={v}"));
            }
        }
        if self.reorder {
            s.push("reorder=on".into());
        }
        s.join(" ")
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the link and forward until killed
    Run {
        #[arg(long)]
        a_ns: String,
        #[arg(long)]
        a_addr: String,
        #[arg(long, default_value = "lkA")]
        a_if: String,
        #[arg(long)]
        b_ns: String,
        #[arg(long)]
        b_addr: String,
        #[arg(long, default_value = "lkB")]
        b_if: String,
        /// Control socket path
        #[arg(long)]
        ctl: PathBuf,
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        #[arg(long, default_value_t = 10000)]
        txqueuelen: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        link: LinkArgs,
        /// Settings only for direction ab, e.g. "delay=30ms rate=10mbit"
        #[arg(long, default_value = "")]
        ab: String,
        /// Settings only for direction ba
        #[arg(long, default_value = "")]
        ba: String,
    },
    /// Change a running link
    Set {
        #[arg(long)]
        ctl: PathBuf,
        #[arg(long, default_value = "both")]
        dir: String,
        #[command(flatten)]
        link: LinkArgs,
    },
    /// Print the parameters of a running link (JSON)
    Show {
        #[arg(long)]
        ctl: PathBuf,
    },
    /// Print the counters of a running link (JSON)
    Stats {
        #[arg(long)]
        ctl: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Run {
            a_ns,
            a_addr,
            a_if,
            b_ns,
            b_addr,
            b_if,
            ctl: ctl_path,
            mtu,
            txqueuelen,
            seed,
            link,
            ab,
            ba,
        } => {
            let common = link.settings();
            let mut pab = LinkParams::default();
            pab.apply(&common)?;
            pab.apply(&ab)?;
            let mut pba = LinkParams::default();
            pba.apply(&common)?;
            pba.apply(&ba)?;
            // Timer slack decides how late a sleeping direction thread wakes up.
            let _ = nix::sys::prctl::set_timerslack(1000);
            let ta = make_end(
                &End {
                    netns: a_ns,
                    ifname: a_if,
                    addr: a_addr,
                },
                mtu,
                txqueuelen,
            )?;
            let tb = make_end(
                &End {
                    netns: b_ns,
                    ifname: b_if,
                    addr: b_addr,
                },
                mtu,
                txqueuelen,
            )?;
            let sab = Shared::new(pab);
            let sba = Shared::new(pba);
            let (ra, wa) = (ta.file().try_clone()?, ta.file().try_clone()?);
            let (rb, wb) = (tb.file().try_clone()?, tb.file().try_clone()?);
            let (s1, s2) = (Arc::clone(&sab), Arc::clone(&sba));
            let h1 = std::thread::Builder::new()
                .name("ab".into())
                .spawn(move || run_direction(ra, wb, mtu as usize, seed, s1))?;
            let h2 = std::thread::Builder::new()
                .name("ba".into())
                .spawn(move || run_direction(rb, wa, mtu as usize, seed.wrapping_add(1), s2))?;
            let (c1, c2) = (Arc::clone(&sab), Arc::clone(&sba));
            let p = ctl_path.clone();
            std::thread::spawn(move || ctl::serve(&p, c1, c2));
            eprintln!(
                "linkem up: ab[{}] ba[{}] ctl {}",
                sab.params.lock().map(|p| p.to_string()).unwrap_or_default(),
                sba.params.lock().map(|p| p.to_string()).unwrap_or_default(),
                ctl_path.display()
            );
            let r1 = h1
                .join()
                .map_err(|_| anyhow::anyhow!("ab thread panicked"))?;
            let r2 = h2
                .join()
                .map_err(|_| anyhow::anyhow!("ba thread panicked"))?;
            r1.context("direction ab")?;
            r2.context("direction ba")?;
            drop((ta, tb));
            Ok(())
        }
        Cmd::Set {
            ctl: path,
            dir,
            link,
        } => {
            println!(
                "{}",
                ctl::send(&path, &format!("set {dir} {}", link.settings()))?
            );
            Ok(())
        }
        Cmd::Show { ctl: path } => {
            println!("{}", ctl::send(&path, "show")?);
            Ok(())
        }
        Cmd::Stats { ctl: path } => {
            println!("{}", ctl::send(&path, "stats")?);
            Ok(())
        }
    }
}
