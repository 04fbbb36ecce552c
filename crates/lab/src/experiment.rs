//! Experiment files (`lab/experiments/NAME.toml`): what to build, what to run,
//! how often, and the smaller `--smoke` sizes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::servers::ServerSpec;
use crate::topology::PathSpec;

/// A whole experiment file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name (must match the file name).
    pub name: String,
    /// One paragraph for `sluice-lab list` and the report.
    pub description: String,
    /// Runner: "linkem-validation", "transfers" or "many-clients".
    pub kind: String,
    /// Repetitions of every configuration (overridden by --repeat).
    #[serde(default = "three")]
    pub repeat: u32,
    /// Repetitions with --smoke.
    #[serde(default = "one")]
    pub smoke_repeat: u32,
    /// Data files and cache state.
    #[serde(default)]
    pub data: DataSpec,
    /// cgroup limits for the server.
    #[serde(default)]
    pub limits: LimitSpec,
    /// Sysctls set in every lab namespace (on top of the defaults).
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    /// Network paths to run over.
    #[serde(default, rename = "path")]
    pub paths: Vec<PathSpec>,
    /// Servers under test.
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerSpec>,
    /// Transfer cases ("transfers").
    #[serde(default, rename = "case")]
    pub cases: Vec<CaseSpec>,
    /// iperf3 baseline rows ("transfers").
    #[serde(default)]
    pub iperf: Option<IperfSpec>,
    /// Many-client workload ("many-clients").
    #[serde(default)]
    pub workload: Option<WorkloadSpec>,
    /// Link emulator validation ("linkem-validation").
    #[serde(default)]
    pub validation: Option<ValidationSpec>,
    /// Classes of long-running streams ("streams").
    #[serde(default)]
    pub streams: Option<crate::streams::StreamsSpec>,
}

fn three() -> u32 {
    3
}
fn one() -> u32 {
    1
}

/// Where the files live and whether runs start warm or cold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// Directory served by every server (created, world-readable).
    #[serde(default = "default_data_dir")]
    pub dir: PathBuf,
    /// "warm" (re-read before each run) or "cold" (drop caches before each run).
    #[serde(default = "warm")]
    pub cache: String,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/tmp/sluice-lab/data")
}
fn warm() -> String {
    "warm".into()
}

impl Default for DataSpec {
    fn default() -> Self {
        DataSpec {
            dir: default_data_dir(),
            cache: warm(),
        }
    }
}

/// Server cgroup limits.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// memory.limit_in_bytes, e.g. "256MiB".
    pub memory: Option<String>,
    /// Read bandwidth throttle on the data disk, e.g. "40MB".
    pub read_bps: Option<String>,
    /// Read IOPS throttle on the data disk.
    pub read_iops: Option<u64>,
}

/// One transfer case.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// Label.
    pub name: String,
    /// File size.
    pub size: String,
    /// File size with --smoke.
    pub smoke_size: Option<String>,
    /// Concurrent downloads.
    #[serde(default = "one")]
    pub downloads: u32,
    /// Parallel streams per download (real clients that support it).
    #[serde(default = "one")]
    pub streams: u32,
    /// "native" (the usual real client for each server) or "load" (the lab's generator).
    #[serde(default = "native")]
    pub client: String,
}

fn native() -> String {
    "native".into()
}

/// iperf3 baseline rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IperfSpec {
    /// Parallel stream counts, one row each.
    pub streams: Vec<u32>,
    /// Seconds per run.
    pub seconds: u32,
    /// Seconds per run with --smoke.
    pub smoke_seconds: Option<u32>,
}

/// The many-client workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Number of clients.
    pub clients: u32,
    /// Clients with --smoke.
    pub smoke_clients: Option<u32>,
    /// Per-client application-limited read rate.
    pub rate: String,
    /// File size (all clients fetch the same file).
    pub size: String,
    /// File size with --smoke.
    pub smoke_size: Option<String>,
    /// Clients start uniformly spread over this time.
    pub arrival_spread: String,
    /// Arrival spread with --smoke.
    pub smoke_arrival_spread: Option<String>,
    /// Run length; downloads still running are cut.
    pub duration: String,
    /// Run length with --smoke.
    pub smoke_duration: Option<String>,
    /// Fraction of clients that abort (RST) half-way through the run.
    #[serde(default)]
    pub abort_fraction: f64,
}

/// The link emulator validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationSpec {
    /// Round-trip times to check with the UDP pinger.
    pub rtts: Vec<String>,
    /// Probes per RTT.
    pub ping_count: u32,
    /// Probes per RTT with --smoke.
    pub smoke_ping_count: Option<u32>,
    /// Rates to check with iperf3.
    pub rates: Vec<String>,
    /// RTT while checking rates.
    pub rate_rtt: String,
    /// Seconds per iperf3 run.
    pub iperf_seconds: u32,
    /// Seconds per iperf3 run with --smoke.
    pub smoke_iperf_seconds: Option<u32>,
    /// Rates checked with --smoke (default: all).
    pub smoke_rates: Option<Vec<String>>,
}

/// The directory holding `lab/experiments`, searched from the current directory upwards.
pub fn repo_root() -> Result<PathBuf> {
    let mut d = std::env::current_dir()?;
    loop {
        if d.join("lab/experiments").is_dir() {
            return Ok(d);
        }
        if !d.pop() {
            bail!("no lab/experiments directory here or above; run sluice-lab from the repository");
        }
    }
}

/// All experiments, sorted by name.
pub fn list(root: &Path) -> Result<Vec<Experiment>> {
    let mut v = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(root.join("lab/experiments"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.extension().is_some_and(|e| e == "toml") {
            v.push(load(&p)?);
        }
    }
    Ok(v)
}

/// Loads and checks one experiment file.
pub fn load(p: &Path) -> Result<Experiment> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let e: Experiment =
        toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if e.name != stem {
        bail!(
            "{}: name {:?} does not match the file name",
            p.display(),
            e.name
        );
    }
    match e.kind.as_str() {
        "linkem-validation" if e.validation.is_none() => {
            bail!("{}: needs a [validation] table", p.display())
        }
        "many-clients" if e.workload.is_none() => {
            bail!("{}: needs a [workload] table", p.display())
        }
        "transfers" if e.cases.is_empty() => bail!("{}: needs [[case]] entries", p.display()),
        "streams" => match &e.streams {
            None => bail!("{}: needs a [streams] table", p.display()),
            Some(s) => s
                .check()
                .with_context(|| format!("{}: [streams]", p.display()))?,
        },
        "linkem-validation" | "many-clients" | "transfers" => {}
        k => bail!("{}: unknown kind {k:?}", p.display()),
    }
    Ok(e)
}

/// Picks the smoke value when smoke is on and one is given.
pub fn pick<'a, T: ?Sized>(smoke: bool, full: &'a T, small: Option<&'a T>) -> &'a T {
    if smoke {
        small.unwrap_or(full)
    } else {
        full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_experiment_parses() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let all = list(&root).unwrap();
        let names: Vec<_> = all.iter().map(|e| e.name.as_str()).collect();
        for want in [
            "linkem-validation",
            "loopback-baseline",
            "wan-single",
            "slow-disk-many-clients",
            "tpf-mixed-rates",
            "tpf-abort",
            "tpf-congestion",
            "send-wakeups",
        ] {
            assert!(names.contains(&want), "missing {want}: {names:?}");
        }
    }

    /// Longest configured smoke run of one streams experiment (a config
    /// bound checked on the TOML files, not a measured time).
    const MAX_SMOKE_DURATION: std::time::Duration = std::time::Duration::from_secs(15);

    #[test]
    fn streams_experiments_have_smoke_sizes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for e in list(&root)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "streams")
        {
            let s = e.streams.as_ref().unwrap();
            // lab/smoke.sh runs every experiment: each smoke run stays short.
            let d =
                crate::units::parse_duration(s.smoke_duration.as_deref().unwrap_or(&s.duration))
                    .unwrap();
            assert!(
                d <= MAX_SMOKE_DURATION,
                "{}: smoke_duration {d:?} is a config value over the limit",
                e.name
            );
            for c in &s.classes {
                assert!(
                    c.smoke_clients.is_some() && c.smoke_size.is_some(),
                    "{}: class {} has no smoke size",
                    e.name,
                    c.name
                );
            }
            if s.abort_count > 0 {
                assert!(
                    s.smoke_abort_count.is_some() && s.smoke_abort_at.is_some(),
                    "{}",
                    e.name
                );
            }
            assert!(
                s.events.iter().all(|ev| ev.smoke_at.is_some()),
                "{}",
                e.name
            );
        }
    }

    #[test]
    fn streams_specs_are_checked_at_load() {
        let bad = "name = \"x\"\ndescription = \"d\"\nkind = \"streams\"\n[streams]\nduration = \"1s\"\nfiles = \"each\"\n\
                   [[streams.class]]\nname = \"a\"\nclients = [1]\nsize = \"1MiB\"\n";
        let dir = std::env::temp_dir().join(format!("sluice-lab-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.toml");
        std::fs::write(&p, bad).unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("files"), "{err}");
        std::fs::write(&p, bad.replace("each", "per-client")).unwrap();
        assert!(load(&p).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
