//! Checking what an experiment needs before touching anything.

use std::path::Path;

use anyhow::{bail, Result};

use crate::cmd::have;
use crate::experiment::Experiment;

/// Fails with a list of everything missing. `skip_missing_servers` lets servers
/// whose programs are missing be skipped (they show up as "not run").
pub fn check(exp: &Experiment, skip_missing_servers: bool) -> Result<()> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (namespaces, TUN, cgroups, drop_caches)".to_string());
    }
    let uses_ns = exp.kind == "linkem-validation"
        || exp
            .paths
            .iter()
            .any(|p| p.mode == "linkem" || p.mode == "veth");
    if uses_ns && !Path::new("/dev/net/tun").exists() {
        missing.push("/dev/net/tun".into());
    }
    if exp.kind != "linkem-validation" {
        if let Err(e) = crate::cgroup::check() {
            missing.push(format!("{e}"));
        }
    }
    let mut tools = vec!["ip", "ss", "sysctl", "sh", "chmod", "kill"];
    if exp.kind != "linkem-validation" {
        tools.push("perf");
    }
    if exp.kind == "linkem-validation" || exp.iperf.is_some() {
        tools.push("iperf3");
    }
    if exp
        .paths
        .iter()
        .any(|p| p.mode == "veth" && p.rate.is_some())
    {
        tools.push("tc");
    }
    for c in &exp.cases {
        if c.client == "native" || c.client == "curl" {
            if exp
                .servers
                .iter()
                .any(|s| s.kind != "gridftp" && s.kind != "sluice")
                || c.client == "curl"
            {
                tools.push("curl");
            }
            if exp.servers.iter().any(|s| s.kind == "gridftp") {
                tools.push("globus-url-copy");
            }
        } else if c.client == "globus-url-copy" {
            tools.push("globus-url-copy");
        }
    }
    if exp.streams.as_ref().is_some_and(|s| s.metrics) {
        // Sluice's counters are scraped with curl inside the server namespace.
        tools.push("curl");
    }
    for t in tools {
        if !have(t) && !missing.iter().any(|m| m.starts_with(t)) {
            missing.push(format!("{t} (on PATH)"));
        }
    }
    if uses_ns {
        if let Err(e) = crate::topology::linkem_bin() {
            missing.push(format!("{e}"));
        }
    }
    let servers_missing = crate::servers::check(&exp.servers);
    if !skip_missing_servers {
        missing.extend(servers_missing);
    } else {
        for m in servers_missing {
            eprintln!("warning: skipping: {m} is missing");
        }
    }
    if !missing.is_empty() {
        bail!(
            "experiment {} cannot run; missing:\n  - {}\n(peers: apt-get install globus-gridftp-server-progs globus-gass-copy-progs vsftpd nginx iperf3 curl linux-perf; \
             sluice: cargo build --release -p sluice-server -p sluice-lab, or SLUICE_BIN=...; --skip-missing runs the other servers)",
            exp.name,
            missing.join("\n  - ")
        );
    }
    Ok(())
}
