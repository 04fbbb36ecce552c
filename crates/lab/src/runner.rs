//! What every experiment runner shares: the run context, data files, cache
//! preparation, real clients, the workload generator in a namespace, iperf3.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cgroup::{self, Limits};
use crate::experiment::Experiment;
use crate::load::{LoadReport, LoadSpec};
use crate::servers::{sluice_bin, ServerSpec};
use crate::topology::ns_command;
use crate::units::{parse_rate, parse_size};

/// Everything a runner needs.
pub struct Ctx {
    /// The experiment.
    pub exp: Experiment,
    /// Smaller, shorter sizes.
    pub smoke: bool,
    /// Repetitions of each configuration.
    pub repeat: u32,
    /// Results directory.
    pub out: PathBuf,
    /// Scratch directory (configs, logs, specs).
    pub work: PathBuf,
    /// The command line that started this run (for the report).
    pub command: String,
    /// Only some servers or steps ran (--servers, --step): keep the other rows of the stored results.
    pub merge: bool,
}

impl Ctx {
    /// Server cgroup limits from the experiment, with the data disk's device.
    pub fn limits(&self) -> Result<Limits> {
        let l = &self.exp.limits;
        let device = if l.read_bps.is_some() || l.read_iops.is_some() {
            Some(cgroup::device_of(&self.exp.data.dir)?)
        } else {
            None
        };
        Ok(Limits {
            memory_bytes: l.memory.as_deref().map(parse_size).transpose()?,
            device,
            read_bps: l.read_bps.as_deref().map(parse_size).transpose()?,
            read_iops: l.read_iops,
        })
    }

    /// Sysctls for lab namespaces: defaults, then the experiment's.
    pub fn sysctls(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = crate::topology::DEFAULT_SYSCTLS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, val) in &self.exp.sysctl {
            v.retain(|(kk, _)| kk != k);
            v.push((k.clone(), val.clone()));
        }
        v
    }

    /// This run's provenance (id assigned when results are written).
    pub fn run_info(&self) -> crate::report::RunInfo {
        let when = crate::cmd::run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load: String = load
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        let binary = if self.exp.servers.iter().any(|s| s.kind == "sluice") {
            match sluice_bin() {
                Some(p) => {
                    let m = crate::cmd::run(
                        "date",
                        &["-u", "-r", &p.display().to_string(), "+%Y-%m-%d %H:%M UTC"],
                    )
                    .unwrap_or_default();
                    format!("{} (built {})", p.display(), m.trim())
                }
                None => "not found (sluice rows not run)".into(),
            }
        } else {
            "-".into()
        };
        crate::report::RunInfo {
            id: String::new(),
            command: self.command.clone(),
            finished: format!("{} (load average then: {load})", when.trim()),
            binary,
        }
    }

    /// Writes the report, merged into the stored results when only some servers or steps ran.
    pub fn write_report(
        &self,
        tables: &[crate::report::Table],
        raw: &serde_json::Value,
    ) -> Result<crate::report::Stored> {
        self.write_report_with(tables, raw, &|_| {})
    }

    /// As `write_report`, with `post` run on each merged table before it is written.
    pub fn write_report_with(
        &self,
        tables: &[crate::report::Table],
        raw: &serde_json::Value,
        post: &dyn Fn(&mut crate::report::Table),
    ) -> Result<crate::report::Stored> {
        crate::report::write_merged(
            &self.out,
            &self.exp.name,
            &self.preamble(),
            tables,
            raw,
            self.run_info(),
            self.merge,
            post,
        )
    }

    /// Header of results.md: what ran, how, when.
    pub fn preamble(&self) -> String {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let info = self.run_info();
        let (when, load) = info
            .finished
            .split_once(" (load average then: ")
            .map(|(a, b)| (a.to_string(), b.trim_end_matches(')').to_string()))
            .unwrap_or_default();
        let sluice = if info.binary == "-" {
            String::new()
        } else {
            format!("  \nSluice binary: {}", info.binary)
        };
        format!(
            "{}\n\nCommand: `{}`  \nFinished: {} (load average then: {load}){sluice}  \nKernel: {}, {} CPUs. Repetitions per configuration: {}{}. \
             Cells are `median (min–max, n=runs)`; with n=2 the median shown is the upper value.",
            self.exp.description.trim(),
            self.command,
            when.trim(),
            kernel.trim(),
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            self.repeat,
            if self.smoke { " (smoke sizes)" } else { "" }
        )
    }
}

/// A file of exactly `size` bytes in `dir` (created once, reused).
pub fn ensure_file(dir: &Path, size: u64) -> Result<PathBuf> {
    ensure_file_named(dir, size, &format!("file-{size}.bin"))
}

/// The `index`-th of several distinct files of `size` bytes (clients that each read their own file).
pub fn ensure_file_nth(dir: &Path, size: u64, index: usize) -> Result<PathBuf> {
    ensure_file_named(dir, size, &format!("file-{size}-{index}.bin"))
}

fn ensure_file_named(dir: &Path, size: u64, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    // World-readable and traversable: nginx workers run as nobody, vsftpd as ftp.
    let mut d = dir.to_path_buf();
    loop {
        let _ = crate::cmd::run("chmod", &["a+rx", &d.display().to_string()]);
        if !d.pop() || d.as_os_str().len() <= 1 {
            break;
        }
    }
    let p = dir.join(name);
    if std::fs::metadata(&p)
        .map(|m| m.len() == size)
        .unwrap_or(false)
    {
        return Ok(p);
    }
    eprintln!("creating {} ({} KiB)", p.display(), size >> 10);
    // Distinct files must differ (no dedup anywhere below); the name seeds the data.
    let seed = name.bytes().fold(0u64, |h, b| {
        h.wrapping_mul(0x100_0000_01b3).wrapping_add(b as u64)
    });
    let tmp = p.with_extension("tmp");
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    for b in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let mut left = size;
    let mut i = 0u64;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        // Vary blocks a little so no two MiB are identical.
        block[..8].copy_from_slice(&i.to_le_bytes());
        f.write_all(&block[..n])?;
        left -= n as u64;
        i += 1;
    }
    f.flush()?;
    drop(f);
    std::fs::rename(&tmp, &p)?;
    crate::cmd::run("chmod", &["a+r", &p.display().to_string()])?;
    Ok(p)
}

/// Warm (re-read) or cold (drop caches) before a run, as the experiment says.
pub fn prepare_cache(exp: &Experiment, file: &Path) -> Result<()> {
    match exp.data.cache.as_str() {
        "warm" => cgroup::warm(file),
        "cold" => cgroup::drop_caches(),
        other => bail!("unknown cache mode {other:?} (warm, cold)"),
    }
}

/// The real client for `server`: (program argv) or None when it cannot do `streams`.
pub fn native_client(
    server: &ServerSpec,
    client: &str,
    url: &str,
    streams: u32,
) -> Option<Vec<String>> {
    let which = match client {
        "native" => match server.kind.as_str() {
            "gridftp" => "globus-url-copy",
            "sluice" => "sluice-get",
            _ => "curl",
        },
        c => c,
    };
    let s = |x: &str| x.to_string();
    match which {
        "globus-url-copy" => {
            let mut v = vec![s("globus-url-copy")];
            if streams > 1 {
                v.extend([s("-p"), streams.to_string()]);
            }
            v.extend([s(url), s("file:///dev/null")]);
            Some(v)
        }
        "curl" if streams == 1 => Some(vec![s("curl"), s("-sS"), s("-o"), s("/dev/null"), s(url)]),
        "sluice-get" => {
            let bin = sluice_bin()?;
            let mut v = vec![
                bin.display().to_string(),
                s("get"),
                s(url),
                s("/dev/null"),
                s("-p"),
                streams.to_string(),
            ];
            v.extend(server.client_args.iter().cloned());
            Some(v)
        }
        _ => None,
    }
}

/// Runs `n` copies of `argv` at once in `ns`; fails if any fails.
pub fn run_clients(ns: Option<&str>, argv: &[String], n: u32, work: &Path) -> Result<()> {
    let mut kids: Vec<(Child, PathBuf)> = Vec::new();
    for i in 0..n {
        let log = work.join(format!("client-{i}.log"));
        let f = std::fs::File::create(&log)?;
        let c = ns_command(ns, argv)
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        kids.push((c, log));
    }
    let mut err = None;
    for (mut c, log) in kids {
        let st = c.wait()?;
        if !st.success() && err.is_none() {
            err = Some(format!(
                "{} exited {st}: {}",
                argv[0],
                std::fs::read_to_string(&log).unwrap_or_default().trim()
            ));
        }
    }
    match err {
        Some(e) => bail!(e),
        None => Ok(()),
    }
}

/// Runs the workload generator in `ns` and returns its report.
pub fn run_load(ns: Option<&str>, spec: &LoadSpec, work: &Path) -> Result<LoadReport> {
    // One file per namespace: classes run their generators at the same time.
    let path = work.join(format!("load-spec-{}.json", ns.unwrap_or("root")));
    std::fs::write(&path, serde_json::to_string(spec)?)?;
    let me = std::env::current_exe()?.display().to_string();
    let argv = vec![me, "_load".into(), path.display().to_string()];
    let out = ns_command(ns, &argv)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("workload generator failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("parsing workload report")
}

/// A spec of `n` downloads of `url` starting together at full speed.
pub fn simple_load(url: &str, n: u32, class: &str) -> LoadSpec {
    LoadSpec {
        downloads: (0..n)
            .map(|_| crate::load::DownloadSpec {
                url: url.into(),
                class: class.into(),
                start_s: 0.0,
                rate_bps: None,
                abort_after_s: None,
                rcvbuf: None,
                id: 0,
                streams: 0,
                offset: 0,
                wrap: false,
            })
            .collect(),
        sample_ms: 200,
        deadline_s: None,
        client_series: false,
    }
}

/// iperf3 from the client namespace to a one-shot server in the server namespace.
/// Returns received goodput in bit/s.
pub fn iperf(
    server_ns: Option<&str>,
    client_ns: Option<&str>,
    addr: &str,
    port: u16,
    secs: u32,
    streams: u32,
    work: &Path,
) -> Result<f64> {
    let s = |x: &str| x.to_string();
    let sargv = vec![s("iperf3"), s("-s"), s("-1"), s("-p"), port.to_string()];
    let log = std::fs::File::create(work.join("iperf3-server.log"))?;
    let mut srv = ns_command(server_ns, &sargv)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let t = Instant::now();
    loop {
        let argv: Vec<String> = ["ss", "-Hltn", "sport", "=", &format!(":{port}")]
            .iter()
            .map(|x| x.to_string())
            .collect();
        let o = ns_command(server_ns, &argv).output()?;
        if !o.stdout.is_empty() {
            break;
        }
        if t.elapsed() > Duration::from_secs(5) {
            let _ = srv.kill();
            bail!("iperf3 server did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cargv = vec![
        s("iperf3"),
        s("-c"),
        s(addr),
        s("-p"),
        port.to_string(),
        s("-t"),
        secs.to_string(),
        s("-P"),
        streams.to_string(),
        s("-J"),
    ];
    let out = ns_command(client_ns, &cargv)
        .stdin(Stdio::null())
        .output()?;
    let _ = srv.wait();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing iperf3 -J output")?;
    if let Some(e) = v.get("error") {
        bail!("iperf3: {e}");
    }
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 output without end.sum_received")
}

/// Parses a size string.
pub fn size(s: &str) -> Result<u64> {
    parse_size(s)
}

/// Parses a rate string.
pub fn rate(s: &str) -> Result<u64> {
    parse_rate(s)
}
