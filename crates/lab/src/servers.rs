//! Servers under test: Sluice, globus-gridftp-server, vsftpd and nginx, each
//! started in its own cgroup (entered before exec, so forked session processes
//! count) under `perf stat -e context-switches` (inherited by every thread and
//! child), optionally inside the server namespace.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cgroup::{Group, Limits, Usage};
use crate::cmd::{have, run};
use crate::topology::ns_command;

/// One server configuration in an experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Label in tables.
    pub name: String,
    /// "sluice", "gridftp", "vsftpd" or "nginx".
    pub kind: String,
    /// Extra arguments (sluice), or "sendfile=off" style switches (nginx, vsftpd).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment for the server process, "KEY=VALUE" (peers only: every
    /// Sluice setting is a flag, see `sluice serve --help`).
    #[serde(default)]
    pub env: Vec<String>,
    /// A row that may not start yet (e.g. a flag the binary under test does
    /// not have yet): its failure to start is reported in the table as
    /// "did not start (optional row)" and does not fail lab/smoke.sh.
    #[serde(default)]
    pub optional: bool,
    /// Extra arguments of this row's client when it is `sluice get`
    /// (e.g. `["--drs", "on"]` for a row that sizes buffers at both ends).
    #[serde(default)]
    pub client_args: Vec<String>,
    /// How the `streams` generator downloads from this row: "ftp" (MODE S),
    /// "http", or "mode-e:N" (MODE E over N streams). Default: "http" for
    /// nginx, "ftp" for the others. A sluice row with "http" serves HTTP
    /// on the row's port (and FTP on the port after it).
    pub client: Option<String>,
}

impl ServerSpec {
    /// URL scheme this server is driven with.
    pub fn scheme(&self) -> &'static str {
        if self.kind == "nginx" || self.client.as_deref() == Some("http") {
            "http"
        } else {
            "ftp"
        }
    }

    /// MODE E streams the generator asks for (0: MODE S or HTTP).
    pub fn mode_e_streams(&self) -> Result<u32> {
        match self.client.as_deref() {
            None | Some("ftp") | Some("http") => Ok(0),
            Some(c) => match c.strip_prefix("mode-e:").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=64).contains(&n) => Ok(n),
                _ => bail!("client = {c:?}: expected ftp, http or mode-e:N (1-64)"),
            },
        }
    }

    /// Programs this server needs.
    pub fn needs(&self) -> Vec<&'static str> {
        match self.kind.as_str() {
            "gridftp" => vec!["globus-gridftp-server"],
            "vsftpd" => vec!["vsftpd"],
            "nginx" => vec!["nginx"],
            _ => vec![],
        }
    }
}

/// Where to find the `sluice` binary: $SLUICE_BIN, else next to sluice-lab.
pub fn sluice_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return Some(PathBuf::from(p));
    }
    let p = std::env::current_exe().ok()?.with_file_name("sluice");
    p.exists().then_some(p)
}

/// A running server.
pub struct Running {
    child: Child,
    group: Group,
    perf_out: PathBuf,
    /// Port clients connect to.
    pub port: u16,
    /// Address clients connect to.
    pub addr: String,
    /// Scheme ("ftp" or "http").
    pub scheme: &'static str,
    /// MODE E streams per download (0: MODE S or HTTP).
    pub streams: u32,
    log: PathBuf,
    /// Path prefix of files in URLs: gridftp serves real paths (restricted by -rp).
    prefix: String,
    /// When perf (and with it the interval clock of `ctx_intervals`) started.
    pub started: Instant,
}

/// What a server used between start and stop.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerUsage {
    /// cgroup counters.
    pub cgroup: Usage,
    /// Context switches of every thread and child (perf stat).
    pub ctx_switches: u64,
    /// (seconds since `Running::started`, context switches in the interval
    /// ending then), one per `PERF_INTERVAL_MS` (perf stat -I).
    pub ctx_intervals: Vec<(f64, u64)>,
}

/// perf stat's counting interval: context switches over a steady window come from these.
pub const PERF_INTERVAL_MS: u32 = 500;

/// perf stat -x, -I output: (time, count) per interval (`<not counted>` is 0).
pub fn parse_perf_intervals(text: &str) -> Vec<(f64, u64)> {
    text.lines()
        .filter(|l| l.contains("context-switches"))
        .filter_map(|l| {
            let mut f = l.split(',');
            let t: f64 = f.next()?.trim().parse().ok()?;
            let n = f.next()?.trim().parse::<u64>().unwrap_or(0);
            Some((t, n))
        })
        .collect()
}

/// Context switches in intervals ending in (from_s, to_s] of run time, with
/// the run starting `offset_s` after perf did.
pub fn ctx_in_window(iv: &[(f64, u64)], offset_s: f64, from_s: f64, to_s: f64) -> u64 {
    iv.iter()
        .filter(|(t, _)| t - offset_s > from_s + 1e-9 && t - offset_s <= to_s + 1e-9)
        .map(|x| x.1)
        .sum()
}

fn kv(args: &[String], key: &str) -> Option<String> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// Starts `spec` serving `root` on `addr:port` in `ns`, inside a fresh cgroup with `limits`.
pub fn start(
    spec: &ServerSpec,
    root: &Path,
    ns: Option<&str>,
    addr: &str,
    port: u16,
    limits: &Limits,
    workdir: &Path,
) -> Result<Running> {
    let wd = workdir.join(format!("srv-{}", spec.name));
    fs::create_dir_all(&wd)?;
    let root_s = root.display().to_string();
    let argv: Vec<String> = match spec.kind.as_str() {
        "sluice" => {
            let bin = sluice_bin().context("sluice binary not found (set SLUICE_BIN or build sluice-server into the same target dir)")?;
            // An HTTP row listens for HTTP on the row's port.
            let (ftp, http) = if spec.scheme() == "http" {
                (port + 1, vec!["--http".into(), format!("{addr}:{port}")])
            } else {
                (port, vec![])
            };
            let mut v = vec![
                bin.display().to_string(),
                "serve".into(),
                root_s.clone(),
                "--ftp".into(),
                format!("{addr}:{ftp}"),
                // The lab runs as root, on 0.0.0.0 in some topologies
                // (inside its own network namespace).
                "--allow-root".into(),
            ];
            v.extend(http);
            v.extend(spec.args.iter().cloned());
            v
        }
        "gridftp" => {
            let empty = wd.join("empty.conf");
            fs::write(&empty, "")?;
            vec![
                "globus-gridftp-server".into(),
                "-aa".into(),
                "-anonymous-user".into(),
                "ftp".into(),
                "-rp".into(),
                root_s.clone(),
                "-home-dir".into(),
                root_s.clone(),
                "-c".into(),
                empty.display().to_string(),
                "-p".into(),
                port.to_string(),
                "-d".into(),
                "error".into(),
            ]
            .into_iter()
            .chain(if addr == "0.0.0.0" {
                vec![]
            } else {
                vec![
                    "-control-interface".into(),
                    addr.into(),
                    "-data-interface".into(),
                    addr.into(),
                ]
            })
            .collect()
        }
        "vsftpd" => {
            let conf = wd.join("vsftpd.conf");
            let sendfile = kv(&spec.args, "sendfile").unwrap_or_else(|| "YES".into());
            fs::create_dir_all("/var/run/vsftpd/empty")?;
            fs::write(
                &conf,
                format!(
                    "listen=YES\nlisten_ipv6=NO\nlisten_address={addr}\nlisten_port={port}\nbackground=NO\n\
                     anonymous_enable=YES\nno_anon_password=YES\nanon_root={root_s}\nlocal_enable=NO\nwrite_enable=NO\n\
                     seccomp_sandbox=NO\npasv_enable=YES\nuse_sendfile={sendfile}\nxferlog_enable=NO\nmax_clients=0\nmax_per_ip=0\n\
                     secure_chroot_dir=/var/run/vsftpd/empty\nftp_username=ftp\nconnect_from_port_20=NO\n"
                ),
            )?;
            vec!["vsftpd".into(), conf.display().to_string()]
        }
        "nginx" => {
            let conf = wd.join("nginx.conf");
            let sendfile = kv(&spec.args, "sendfile").unwrap_or_else(|| "on".into());
            let w = wd.display();
            fs::write(
                &conf,
                format!(
                    "daemon off;\nmaster_process on;\nworker_processes auto;\nerror_log {w}/error.log error;\npid {w}/nginx.pid;\n\
                     events {{ worker_connections 4096; }}\n\
                     http {{\n default_type application/octet-stream;\n sendfile {sendfile};\n tcp_nopush on;\n access_log off;\n\
                      client_body_temp_path {w}/cb; proxy_temp_path {w}/px; fastcgi_temp_path {w}/fc; uwsgi_temp_path {w}/uw; scgi_temp_path {w}/sc;\n\
                      server {{ listen {addr}:{port}; root {root_s}; location / {{ }} }}\n}}\n"
                ),
            )?;
            vec![
                "nginx".into(),
                "-p".into(),
                w.to_string(),
                "-c".into(),
                conf.display().to_string(),
                "-e".into(),
                format!("{w}/error.log"),
            ]
        }
        other => bail!("unknown server kind {other:?} (sluice, gridftp, vsftpd, nginx)"),
    };
    let group = Group::create(&format!("srv-{}", spec.name), limits)?;
    let perf_out = wd.join("perf.txt");
    let _ = fs::remove_file(&perf_out);
    // The cgroup is entered in the root mount namespace: `ip netns exec` remounts
    // /sys, so the cgroup files are not reachable from inside the namespace.
    let mut argv = argv;
    if !spec.env.is_empty() {
        argv = ["env".to_string()]
            .into_iter()
            .chain(spec.env.iter().cloned())
            .chain(argv)
            .collect();
    }
    if let Some(n) = ns {
        let mut v: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), n.into()];
        v.extend(argv);
        argv = v;
    }
    let inner = format!(
        "{}exec {}",
        group.enter_prefix(),
        argv.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let full: Vec<String> = vec![
        "perf".into(),
        "stat".into(),
        "-e".into(),
        "context-switches".into(),
        "-x,".into(),
        "-I".into(),
        PERF_INTERVAL_MS.to_string(),
        "-o".into(),
        perf_out.display().to_string(),
        "--".into(),
        "sh".into(),
        "-c".into(),
        inner,
    ];
    let log = wd.join("server.log");
    let lf = fs::File::create(&log)?;
    let started = Instant::now();
    let child = ns_command(None, &full)
        .stdin(Stdio::null())
        .stdout(lf.try_clone()?)
        .stderr(lf)
        .spawn()
        .context("starting perf/server")?;
    let prefix = if spec.kind == "gridftp" {
        root_s.trim_end_matches('/').to_string()
    } else {
        String::new()
    };
    let mut r = Running {
        child,
        group,
        perf_out,
        port,
        addr: addr.to_string(),
        scheme: spec.scheme(),
        streams: spec.mode_e_streams()?,
        log,
        prefix,
        started,
    };
    r.wait_listening(ns)?;
    Ok(r)
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl Running {
    fn wait_listening(&mut self, ns: Option<&str>) -> Result<()> {
        let t = Instant::now();
        loop {
            let argv: Vec<String> = ["ss", "-Hltn", "sport", "=", &format!(":{}", self.port)]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let out = ns_command(ns, &argv).output()?;
            if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                return Ok(());
            }
            if let Some(st) = self.child.try_wait()? {
                bail!(
                    "server exited ({st}) before listening: {}",
                    fs::read_to_string(&self.log).unwrap_or_default().trim()
                );
            }
            if t.elapsed() > Duration::from_secs(15) {
                bail!(
                    "server not listening on port {} after 15 s: {}",
                    self.port,
                    fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Base URL, e.g. "ftp://10.77.0.1:2121".
    pub fn base_url(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.addr, self.port)
    }

    /// URL of a file in the served directory.
    pub fn url_for(&self, fname: &str) -> String {
        format!("{}{}/{fname}", self.base_url(), self.prefix)
    }

    /// URL of a file as reached at `host` (servers bound to 0.0.0.0).
    pub fn url_for_host(&self, host: &str, fname: &str) -> String {
        format!(
            "{}://{host}:{}{}/{fname}",
            self.scheme, self.port, self.prefix
        )
    }

    /// Pids in the server's group (for `ss -p` matching).
    pub fn pids(&self) -> Vec<u32> {
        self.group.pids()
    }

    /// The cgroup file listing the server's processes.
    pub fn procs_file(&self) -> PathBuf {
        self.group.procs_file()
    }

    /// Current cgroup usage.
    pub fn usage(&self, device: Option<&str>) -> Result<Usage> {
        self.group.usage(device)
    }

    /// Stops the server and returns what it used since start.
    pub fn stop(mut self, device: Option<&str>) -> Result<ServerUsage> {
        let cg = self.group.usage(device)?;
        // The group's processes, plus perf's child in case it never entered the group.
        let mut pids = self.group.pids();
        let perf = self.child.id();
        if let Ok(ch) = fs::read_to_string(format!("/proc/{perf}/task/{perf}/children")) {
            pids.extend(ch.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        for pid in pids {
            let _ = run("kill", &["-TERM", &pid.to_string()]);
        }
        let t = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t.elapsed() > Duration::from_secs(5) {
                for pid in self.group.pids() {
                    let _ = run("kill", &["-KILL", &pid.to_string()]);
                }
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let perf = fs::read_to_string(&self.perf_out).unwrap_or_default();
        let ctx_intervals = parse_perf_intervals(&perf);
        let ctx = ctx_intervals.iter().map(|x| x.1).sum();
        Ok(ServerUsage {
            cgroup: cg,
            ctx_switches: ctx,
            ctx_intervals,
        })
    }
}

/// Checks that the programs for these servers exist.
pub fn check(specs: &[ServerSpec]) -> Vec<String> {
    let mut missing = Vec::new();
    for s in specs {
        for p in s.needs() {
            if !have(p) {
                missing.push(format!("{p} (for server {})", s.name));
            }
        }
        if s.kind == "sluice" && sluice_bin().is_none() {
            missing.push(format!("sluice binary (for server {})", s.name));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_intervals_and_windows() {
        let text = "# started on x\n\n     0.500414388,2,,context-switches,1222696,100.00,,\n     1.001084510,<not counted>,,context-switches,0,100.00,,\n     1.502861779,7,,context-switches,61973,100.00,,\n     2.003,5,,context-switches,1,100.00,,\n";
        let iv = parse_perf_intervals(text);
        assert_eq!(iv.len(), 4);
        assert_eq!(iv[1], (1.00108451, 0));
        // The run started 0.5 s after perf: run-time window (0.1, 1.01] holds
        // the intervals ending at perf times 1.0 and 1.5 (run times 0.5, 1.0).
        assert_eq!(ctx_in_window(&iv, 0.5, 0.1, 1.01), 7);
        assert_eq!(ctx_in_window(&iv, 0.0, 0.0, 10.0), 14);
        assert_eq!(ctx_in_window(&iv, 0.0, 1.6, 10.0), 5);
    }
}
