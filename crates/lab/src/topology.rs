//! Hosts for an experiment: loopback, or a server namespace and a client
//! namespace joined by a veth pair (optionally rate-limited with `tbf`) or by
//! `linkem` (delay, loss, rate). Sysctls are set inside the namespaces.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cmd::{run, run_quiet};
use crate::units::{parse_duration, parse_rate};

/// Server namespace name.
pub const SERVER_NS: &str = "sl-srv";
/// Client namespace name.
pub const CLIENT_NS: &str = "sl-cli";
/// Server address inside the lab namespaces.
pub const SERVER_ADDR: &str = "10.77.0.1";
/// Client address inside the lab namespaces.
pub const CLIENT_ADDR: &str = "10.77.0.2";

/// How the client reaches the server.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PathSpec {
    /// Label in tables.
    pub name: String,
    /// "loopback", "veth" or "linkem".
    #[serde(default)]
    pub mode: String,
    /// Round-trip time (linkem: half in each direction).
    #[serde(default)]
    pub rtt: Option<String>,
    /// Link rate (linkem: token bucket in both directions; veth: tbf on the server side).
    #[serde(default)]
    pub rate: Option<String>,
    /// Random loss per direction (linkem).
    #[serde(default)]
    pub loss: Option<String>,
    /// Queue limit (linkem, packets or bytes).
    #[serde(default)]
    pub limit: Option<String>,
    /// MTU of the emulated link.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Mode "linkem-classes": one client namespace per class, each joined to
    /// the server namespace by its own linkem with its own rtt/rate/loss.
    #[serde(default, rename = "class")]
    pub classes: Vec<ClassLink>,
}

/// One class of clients with its own link (mode "linkem-classes").
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClassLink {
    /// Class name (tables, workload classes).
    pub name: String,
    /// Round-trip time of this class's link.
    #[serde(default)]
    pub rtt: Option<String>,
    /// Rate of this class's link.
    #[serde(default)]
    pub rate: Option<String>,
    /// Random loss per direction.
    #[serde(default)]
    pub loss: Option<String>,
    /// Queue limit.
    #[serde(default)]
    pub limit: Option<String>,
}

/// A client namespace of one class and the server address it reaches.
#[derive(Debug, Clone)]
pub struct ClassHost {
    /// Class name.
    pub name: String,
    /// The class's namespace.
    pub ns: String,
    /// Server address as seen from this namespace.
    pub server_addr: String,
    /// Control socket of this class's linkem.
    pub ctl: PathBuf,
}

/// A built topology; dropping it removes namespaces and stops linkem.
pub struct Topology {
    /// Namespace of the server (None: root namespace, loopback).
    pub server_ns: Option<String>,
    /// Namespace of the clients.
    pub client_ns: Option<String>,
    /// Address the server listens on and clients connect to.
    pub server_addr: String,
    linkem: Option<Child>,
    /// Control socket of linkem, if any.
    pub linkem_ctl: Option<PathBuf>,
    /// Client classes (mode "linkem-classes"); `server_addr` is then 0.0.0.0.
    pub classes: Vec<ClassHost>,
    extra_linkems: Vec<Child>,
}

/// Sysctls applied inside every lab namespace (per-namespace in Linux).
pub const DEFAULT_SYSCTLS: [(&str, &str); 5] = [
    ("net.ipv4.tcp_rmem", "4096 131072 33554432"),
    ("net.ipv4.tcp_wmem", "4096 16384 4194304"),
    ("net.core.rmem_max", "4194304"),
    ("net.core.wmem_max", "4194304"),
    ("net.ipv4.tcp_no_metrics_save", "1"),
];

/// Path of the `linkem` binary: next to the running executable.
pub fn linkem_bin() -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let p = me.with_file_name("linkem");
    if !p.exists() {
        bail!(
            "linkem binary not found at {} (build it: cargo build --release -p sluice-lab)",
            p.display()
        );
    }
    Ok(p)
}

/// `ip netns exec NS` prefix (empty for the root namespace).
pub fn ns_prefix(ns: Option<&str>) -> Vec<String> {
    match ns {
        Some(n) => vec!["ip".into(), "netns".into(), "exec".into(), n.into()],
        None => vec![],
    }
}

/// A Command for `argv` run inside `ns`.
pub fn ns_command(ns: Option<&str>, argv: &[String]) -> Command {
    let mut full = ns_prefix(ns);
    full.extend_from_slice(argv);
    let mut c = Command::new(&full[0]);
    c.args(&full[1..]);
    c
}

fn make_ns(name: &str, sysctls: &[(String, String)]) -> Result<()> {
    run_quiet("ip", &["netns", "del", name]);
    // `ip netns exec` bind-mounts /etc/netns/NAME/* over /etc: a hosts file that
    // names the lab addresses lets servers that reverse-resolve their own address
    // (globus-gridftp-server) start without DNS.
    let etc = Path::new("/etc/netns").join(name);
    std::fs::create_dir_all(&etc)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    std::fs::write(
        etc.join("hosts"),
        format!("127.0.0.1 localhost {}\n::1 localhost ip6-localhost\n{SERVER_ADDR} {SERVER_NS}\n{CLIENT_ADDR} {CLIENT_NS}\n", host.trim()),
    )?;
    run("ip", &["netns", "add", name])?;
    run("ip", &["-n", name, "link", "set", "lo", "up"])?;
    for (k, v) in sysctls {
        run(
            "ip",
            &[
                "netns",
                "exec",
                name,
                "sysctl",
                "-q",
                "-w",
                &format!("{k}={v}"),
            ],
        )
        .with_context(|| format!("sysctl {k} in {name}"))?;
    }
    Ok(())
}

impl Topology {
    /// Builds the topology for `path` with `sysctls` (DEFAULT_SYSCTLS merged with the experiment's).
    pub fn build(
        path: &PathSpec,
        sysctls: &[(String, String)],
        workdir: &std::path::Path,
    ) -> Result<Topology> {
        match path.mode.as_str() {
            "" | "loopback" => Ok(Topology {
                server_ns: None,
                client_ns: None,
                server_addr: "127.0.0.1".into(),
                linkem: None,
                linkem_ctl: None,
                classes: Vec::new(),
                extra_linkems: Vec::new(),
            }),
            "veth" => {
                make_ns(SERVER_NS, sysctls)?;
                make_ns(CLIENT_NS, sysctls)?;
                run(
                    "ip",
                    &[
                        "link", "add", "slv-s", "netns", SERVER_NS, "type", "veth", "peer", "name",
                        "slv-c", "netns", CLIENT_NS,
                    ],
                )?;
                run(
                    "ip",
                    &[
                        "-n",
                        SERVER_NS,
                        "addr",
                        "add",
                        &format!("{SERVER_ADDR}/24"),
                        "dev",
                        "slv-s",
                    ],
                )?;
                run(
                    "ip",
                    &[
                        "-n",
                        CLIENT_NS,
                        "addr",
                        "add",
                        &format!("{CLIENT_ADDR}/24"),
                        "dev",
                        "slv-c",
                    ],
                )?;
                run("ip", &["-n", SERVER_NS, "link", "set", "slv-s", "up"])?;
                run("ip", &["-n", CLIENT_NS, "link", "set", "slv-c", "up"])?;
                if let Some(r) = &path.rate {
                    let bps = parse_rate(r)?;
                    // Burst of at least 10 ms at rate (and one 64 KiB GSO frame).
                    let burst = ((bps / 8) / 100).max(65536 * 2);
                    run(
                        "ip",
                        &[
                            "netns",
                            "exec",
                            SERVER_NS,
                            "tc",
                            "qdisc",
                            "add",
                            "dev",
                            "slv-s",
                            "root",
                            "tbf",
                            "rate",
                            &format!("{bps}bit"),
                            "burst",
                            &burst.to_string(),
                            "latency",
                            "50ms",
                        ],
                    )?;
                }
                Ok(Topology {
                    server_ns: Some(SERVER_NS.into()),
                    client_ns: Some(CLIENT_NS.into()),
                    server_addr: SERVER_ADDR.into(),
                    linkem: None,
                    linkem_ctl: None,
                    classes: Vec::new(),
                    extra_linkems: Vec::new(),
                })
            }
            "linkem" => {
                make_ns(SERVER_NS, sysctls)?;
                make_ns(CLIENT_NS, sysctls)?;
                let ctl = workdir.join("linkem.sock");
                let mut topo = Topology {
                    server_ns: Some(SERVER_NS.into()),
                    client_ns: Some(CLIENT_NS.into()),
                    server_addr: SERVER_ADDR.into(),
                    linkem: None,
                    linkem_ctl: Some(ctl.clone()),
                    classes: Vec::new(),
                    extra_linkems: Vec::new(),
                };
                let a = format!("{SERVER_ADDR}/24");
                let b = format!("{CLIENT_ADDR}/24");
                topo.linkem = Some(spawn_linkem(
                    path,
                    (SERVER_NS, &a, "lkA"),
                    (CLIENT_NS, &b, "lkB"),
                    &ctl,
                    workdir,
                )?);
                Ok(topo)
            }
            "linkem-classes" => {
                if path.classes.is_empty() {
                    bail!(
                        "path {}: mode linkem-classes needs [[path.class]] entries",
                        path.name
                    );
                }
                make_ns(SERVER_NS, sysctls)?;
                let mut topo = Topology {
                    server_ns: Some(SERVER_NS.into()),
                    client_ns: None,
                    server_addr: "0.0.0.0".into(),
                    linkem: None,
                    linkem_ctl: None,
                    classes: Vec::new(),
                    extra_linkems: Vec::new(),
                };
                for (i, c) in path.classes.iter().enumerate() {
                    let ns = format!("sl-c{i}");
                    make_ns(&ns, sysctls)?;
                    // Recorded before linkem starts so Drop removes the namespace on failure.
                    let ctl = workdir.join(format!("linkem-{i}.sock"));
                    topo.classes.push(ClassHost {
                        name: c.name.clone(),
                        ns: ns.clone(),
                        server_addr: format!("10.77.{}.1", i + 1),
                        ctl: ctl.clone(),
                    });
                    let link = PathSpec {
                        rtt: c.rtt.clone(),
                        rate: c.rate.clone(),
                        loss: c.loss.clone(),
                        limit: c.limit.clone(),
                        mtu: path.mtu,
                        ..Default::default()
                    };
                    let child = spawn_linkem(
                        &link,
                        (
                            SERVER_NS,
                            &format!("10.77.{}.1/24", i + 1),
                            &format!("lkS{i}"),
                        ),
                        (&ns, &format!("10.77.{}.2/24", i + 1), &format!("lkC{i}")),
                        &ctl,
                        workdir,
                    )?;
                    topo.extra_linkems.push(child);
                }
                Ok(topo)
            }
            other => bail!("unknown path mode {other:?} (loopback, veth, linkem, linkem-classes)"),
        }
    }

    /// Process id of the (single) linkem.
    pub fn linkem_pid(&self) -> Option<u32> {
        self.linkem.as_ref().map(Child::id)
    }

    /// Changes the running linkem (`set both ...`).
    pub fn linkem_set(&self, settings: &str) -> Result<()> {
        let ctl = self
            .linkem_ctl
            .as_ref()
            .context("no linkem in this topology")?;
        crate::linkem::ctl::send(ctl, &format!("set both {settings}"))?;
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Some(mut c) = self.linkem.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for mut c in self.extra_linkems.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let class_ns: Vec<Option<String>> =
            self.classes.iter().map(|c| Some(c.ns.clone())).collect();
        for ns in [&self.server_ns, &self.client_ns]
            .into_iter()
            .chain(class_ns.iter())
            .flatten()
        {
            run_quiet("ip", &["netns", "del", ns]);
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
    }
}

/// Starts a linkem joining `a` and `b` (namespace, address/prefix, interface)
/// with `link`'s rtt/rate/loss/limit/mtu, and waits for its control socket.
fn spawn_linkem(
    link: &PathSpec,
    a: (&str, &str, &str),
    b: (&str, &str, &str),
    ctl: &std::path::Path,
    workdir: &std::path::Path,
) -> Result<Child> {
    let _ = std::fs::remove_file(ctl);
    let mut args: Vec<String> = vec!["run".into()];
    for (k, v) in [
        ("--a-ns", a.0),
        ("--a-addr", a.1),
        ("--a-if", a.2),
        ("--b-ns", b.0),
        ("--b-addr", b.1),
        ("--b-if", b.2),
    ] {
        args.push(k.into());
        args.push(v.into());
    }
    args.push("--ctl".into());
    args.push(ctl.display().to_string());
    args.push(format!("--mtu={}", link.mtu.unwrap_or(1500)));
    if let Some(rtt) = &link.rtt {
        args.push(format!(
            "--delay={}us",
            (parse_duration(rtt)? / 2).as_micros()
        ));
    }
    for (flag, v) in [
        ("--rate", &link.rate),
        ("--loss", &link.loss),
        ("--limit", &link.limit),
    ] {
        if let Some(v) = v {
            args.push(format!("{flag}={v}"));
        }
    }
    // Real-time priority keeps the emulator's timing when builds or the
    // servers under test load both cores (it sleeps in ppoll, so it cannot
    // starve them; the kernel's RT throttle caps it anyway).
    let bin = linkem_bin()?.display().to_string();
    let mut argv = if crate::cmd::have("chrt") && std::env::var_os("SLUICE_LAB_NO_RT").is_none() {
        vec!["chrt".to_string(), "-f".into(), "20".into(), bin]
    } else {
        vec![bin]
    };
    argv.extend(args);
    let logname = format!(
        "{}.log",
        ctl.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "linkem".into())
    );
    let log = std::fs::File::create(workdir.join(&logname))?;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let t = Instant::now();
    while !ctl.exists() {
        if let Some(st) = child.try_wait()? {
            bail!(
                "linkem exited ({st}): see {}",
                workdir.join(&logname).display()
            );
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            bail!("linkem did not come up");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child)
}
