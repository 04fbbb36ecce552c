//! FTP servers for tests: `sluice serve` (the server under test) and the
//! peers vsftpd and globus-gridftp-server, each in a fresh temp root with
//! the corpus files, on 127.0.0.1, killed on drop.

use super::control::Control;
use super::corpus::populate;
use super::process::{find_tool, tail, ProcessGuard};
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sluice,
    Vsftpd,
    GridFtp,
}

/// A running FTP server with its own root directory.
pub struct FtpServer {
    pub kind: Kind,
    /// The address the control listener is on (loopback, v4 or v6).
    pub host: IpAddr,
    pub port: u16,
    /// The directory served (real path).
    pub root: PathBuf,
    /// What clients put before a root-relative path: empty for servers
    /// whose `/` is the root, the real root path for globus (which runs
    /// with `-home-dir /` and `-rp ROOT`).
    prefix: String,
    log: Arc<Mutex<String>>,
    stderr_path: PathBuf,
    // Field order is drop order: kill the process before removing its dirs.
    proc: ProcessGuard,
    _dirs: Vec<TempDir>,
}

impl FtpServer {
    /// `ftp://127.0.0.1:PORT/...` for a path relative to the root.
    pub fn url(&self, rel: &str) -> String {
        format!("ftp://{}{}/{}", self.addr(), self.prefix, rel)
    }

    /// The control address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The path to send in a command (RETR, STOR...) for a root-relative path.
    pub fn remote_path(&self, rel: &str) -> String {
        if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{}", self.prefix, rel)
        }
    }

    /// Where a root-relative path is on disk.
    pub fn local(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Panics (with the server log) if the server process has exited.
    #[track_caller]
    pub fn assert_running(&self) {
        if let Some(status) = self.proc.exited() {
            panic!(
                "{:?} server exited ({status})\n{}",
                self.kind,
                self.log_tail()
            );
        }
    }

    /// The HTTP port `sluice serve` announced (`http listening on ADDR`);
    /// waits for the line, panics with the log if it never comes.
    #[track_caller]
    pub fn http_port(&self) -> u16 {
        self.announced_port("http")
    }

    /// The port of the `DOOR listening on ADDR` line (`http`, `https`,
    /// `ftps`); waits for it, panics with the log if it never comes.
    #[track_caller]
    pub fn announced_port(&self, door: &str) -> u16 {
        assert_eq!(self.kind, Kind::Sluice, "only sluice announces its doors");
        let marker = format!("{door} listening on ");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let found = self
                .log
                .lock()
                .ok()
                .and_then(|l| l.lines().find_map(|line| port_after(line, &marker)));
            if let Some(p) = found {
                return p;
            }
            if self.proc.exited().is_some() || Instant::now() > deadline {
                panic!(
                    "sluice did not announce its {door} port\n{}",
                    self.log_tail()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://HOST:PORT/rel` on the HTTP front door.
    pub fn http_url(&self, rel: &str) -> String {
        format!(
            "http://{}/{}",
            SocketAddr::new(self.host, self.http_port()),
            rel
        )
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid
    }

    /// The server's exit status, once it has exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.proc.exited()
    }

    /// The end of what the server printed (stdout and stderr).
    pub fn log_tail(&self) -> String {
        let out = self.log.lock().map(|s| s.clone()).unwrap_or_default();
        let err = fs::read(&self.stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        format!(
            "--- {:?} server stdout ---\n{}\n--- {:?} server stderr ---\n{}",
            self.kind,
            tail(&out, 4000),
            self.kind,
            tail(&err, 8000)
        )
    }

    /// A fresh control connection, greeting read.
    pub fn connect(&self) -> Control {
        Control::connect_to(self.addr())
    }

    /// Waits (60 s at most) for the `n`th line of the server's log that
    /// contains `pat` (counting from 1).
    #[track_caller]
    pub fn wait_for_log(&self, pat: &str, n: usize) {
        super::checks::wait_for_or(
            &format!("log line #{n} {pat:?}"),
            60,
            || self.stderr_text().matches(pat).count() >= n,
            || self.log_tail(),
        );
    }

    /// Everything the server wrote to stderr (its log) so far.
    pub fn stderr_text(&self) -> String {
        fs::read(&self.stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// `kill -9` the server and wait until it is gone (the root stays,
    /// for a new server to serve it: `ServeOptions::root`).
    pub fn kill9(&self) {
        kill9(&self.proc);
    }
}

/// `kill -9` a process and wait (bounded) until it has exited.
pub fn kill9(proc: &ProcessGuard) {
    let _ = Command::new("kill")
        .args(["-9", &proc.pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while proc.exited().is_none() {
        assert!(
            Instant::now() < deadline,
            "pid {} survived kill -9",
            proc.pid
        );
        thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for FtpServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.log_tail());
        }
    }
}

/// Makes a temp root readable (and, if `writable`, writable) by the
/// unprivileged user a peer server switches to.
fn make_root(writable: bool) -> (TempDir, PathBuf) {
    let top = tempfile::Builder::new()
        .prefix("sluice-srv-")
        .tempdir()
        .expect("server temp dir");
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let root = top.path().join("root");
    fs::create_dir(&root).expect("mkdir root");
    fs::set_permissions(
        &root,
        fs::Permissions::from_mode(if writable { 0o777 } else { 0o755 }),
    )
    .expect("chmod");
    populate(&root, writable);
    let root = fs::canonicalize(&root).expect("canonical root");
    (top, root)
}

/// Options for `sluice serve`.
#[derive(Debug, Default, Clone)]
pub struct ServeOptions {
    pub writable: bool,
    /// Listen address; default 127.0.0.1:0.
    pub listen: Option<SocketAddr>,
    pub extra_args: Vec<String>,
    /// Serve this existing directory instead of a fresh corpus root (a
    /// server restarted after `kill9`, a small file system).
    pub root: Option<PathBuf>,
    /// Run under `prlimit --nofile=N:N` (soft and hard descriptor limit).
    pub nofile: Option<u64>,
}

/// Starts `sluice serve ROOT --ftp 127.0.0.1:0 [--writable]` on a fresh
/// root holding the corpus, and waits for `ftp listening on ADDR:PORT`.
pub fn sluice(opts: ServeOptions) -> FtpServer {
    let (top, root) = match &opts.root {
        Some(r) => (
            tempfile::Builder::new()
                .prefix("sluice-srv-")
                .tempdir()
                .expect("server temp dir"),
            r.clone(),
        ),
        None => make_root(opts.writable),
    };
    let stderr_path = top.path().join("sluice.stderr");
    let mut cmd = match opts.nofile {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(super::process::sluice_bin());
            c
        }
        None => Command::new(super::process::sluice_bin()),
    };
    let listen = opts
        .listen
        .unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    // Both front doors on free ports: the HTTP default (8080) would collide
    // between tests running in parallel.
    cmd.arg("serve")
        .arg(&root)
        .arg("--ftp")
        .arg(listen.to_string())
        .arg("--http")
        .arg(SocketAddr::new(listen.ip(), 0).to_string());
    if opts.writable {
        cmd.arg("--writable");
    }
    cmd.args(&opts.extra_args);
    let (proc, log, port) = spawn_and_find_port(cmd, &stderr_path, |line| {
        port_after(line, "ftp listening on ")
    });
    FtpServer {
        kind: Kind::Sluice,
        host: listen.ip(),
        port,
        root,
        prefix: String::new(),
        log,
        stderr_path,
        proc,
        _dirs: vec![top],
    }
}

/// The port of the address after `marker` in `line`
/// (`ftp listening on 127.0.0.1:PORT`, `http listening on [::1]:PORT`).
fn port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':')
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// Starts a read-only `sluice serve`.
pub fn sluice_ro() -> FtpServer {
    sluice(ServeOptions::default())
}

/// Starts a `sluice serve --writable`.
pub fn sluice_rw() -> FtpServer {
    sluice(ServeOptions {
        writable: true,
        ..Default::default()
    })
}

/// The FTP server the download/upload/bad-input suites test: `sluice serve`,
/// or vsftpd when SLUICE_ITEST_SERVER=vsftpd (used to check that the
/// harness itself is right, by running the same tests against a server
/// known to work).
pub fn under_test(writable: bool) -> FtpServer {
    match std::env::var("SLUICE_ITEST_SERVER").as_deref() {
        Ok("vsftpd") => vsftpd(writable),
        Ok("globus") | Ok("gridftp") => gridftp(writable),
        _ => sluice(ServeOptions {
            writable,
            ..Default::default()
        }),
    }
}

/// Spawns a server with stdout piped and stderr to a file; a thread keeps
/// draining stdout (a full pipe would stall the server) into a shared log
/// and reports the first port `find_port` recognises.
fn spawn_and_find_port(
    mut cmd: Command,
    stderr_path: &Path,
    find_port: impl Fn(&str) -> Option<u16> + Send + 'static,
) -> (ProcessGuard, Arc<Mutex<String>>, u16) {
    let stderr = fs::File::create(stderr_path).expect("server stderr file");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let proc = ProcessGuard::spawn(&mut cmd)
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let stdout = proc.take_stdout().expect("server stdout is piped");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let log2 = Arc::clone(&log);
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut sent = false;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if let Ok(mut l) = log2.lock() {
                l.push_str(&line);
            }
            if !sent {
                if let Some(port) = find_port(line.trim_end()) {
                    let _ = tx.send(port);
                    sent = true;
                }
            }
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(port) => return (proc, log, port),
            Err(mpsc::RecvTimeoutError::Timeout) | Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        let why = if let Some(status) = proc.exited() {
            // Give the reader a moment to collect the last lines.
            thread::sleep(Duration::from_millis(200));
            if let Ok(port) = rx.try_recv() {
                return (proc, log, port);
            }
            format!("exited ({status}) before announcing its port")
        } else if Instant::now() > deadline {
            format!(
                "did not announce its port within {}s",
                START_TIMEOUT.as_secs()
            )
        } else {
            continue;
        };
        let out = log.lock().map(|s| s.clone()).unwrap_or_default();
        let err = fs::read(stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        panic!(
            "server {:?} {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            cmd.get_program(),
            tail(&out, 4000),
            tail(&err, 8000)
        );
    }
}

/// A port that was free a moment ago, for peers that cannot bind port 0
/// and report it. The caller retries if another process takes it first.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind probe")
        .port()
}

/// Waits until `port` greets with 220 (or the process dies / time runs out).
fn wait_for_greeting(proc: &ProcessGuard, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = proc.exited() {
            return Err(format!("exited ({status})"));
        }
        if let Ok(c) = Control::try_connect(port) {
            c.quit();
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("no 220 greeting".into());
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Starts vsftpd (anonymous only, chrooted to a fresh root with the corpus;
/// anonymous uploads, overwrite and mkdir allowed when `writable`).
pub fn vsftpd(writable: bool) -> FtpServer {
    let bin = find_tool("vsftpd").expect("vsftpd is installed (check with require_tool first)");
    let (top, root) = make_root(writable);
    let stderr_path = top.path().join("vsftpd.stderr");
    // vsftpd refuses an anonymous chroot the `ftp` user can write to, so a
    // writable server is chrooted one level up and clients use `/root/...`.
    let (chroot, prefix) = if writable {
        (
            top.path().canonicalize().expect("canonical top"),
            "/root".to_string(),
        )
    } else {
        (root.clone(), String::new())
    };
    // vsftpd needs an empty directory it can chroot to before login; the
    // Debian default lives on /run and may be missing on a fresh boot.
    let empty = top.path().join("empty");
    fs::create_dir(&empty).expect("mkdir empty");
    fs::set_permissions(&empty, fs::Permissions::from_mode(0o755)).expect("chmod");
    let yn = |b: bool| if b { "YES" } else { "NO" };
    let mut last_err = String::new();
    for _attempt in 0..5 {
        let port = free_port();
        let conf = top.path().join("vsftpd.conf");
        let text = format!(
            "listen=YES\nlisten_ipv6=NO\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n\
             seccomp_sandbox=NO\nanonymous_enable=YES\nlocal_enable=NO\nanon_root={chroot}\n\
             no_anon_password=YES\nwrite_enable={w}\nanon_upload_enable={w}\nanon_mkdir_write_enable={w}\n\
             anon_other_write_enable={w}\nanon_umask=022\n\
             pasv_enable=YES\nport_enable=YES\nconnect_from_port_20=NO\nxferlog_enable=NO\n\
             dirmessage_enable=NO\nhide_ids=YES\ndelay_failed_login=0\nsecure_chroot_dir={empty}\nmax_per_ip=0\nmax_clients=0\n",
            chroot = chroot.display(),
            empty = empty.display(),
            w = yn(writable)
        );
        fs::write(&conf, text).expect("write vsftpd.conf");
        let stderr = fs::File::create(&stderr_path).expect("vsftpd stderr file");
        let mut cmd = Command::new(&bin);
        cmd.arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let proc = ProcessGuard::spawn(&mut cmd).expect("start vsftpd");
        match wait_for_greeting(&proc, port) {
            Ok(()) => {
                return FtpServer {
                    kind: Kind::Vsftpd,
                    host: Ipv4Addr::LOCALHOST.into(),
                    port,
                    root,
                    prefix,
                    log: Arc::default(),
                    stderr_path,
                    proc,
                    _dirs: vec![top],
                }
            }
            Err(e) => {
                let err = fs::read_to_string(&stderr_path).unwrap_or_default();
                last_err = format!("vsftpd on port {port}: {e}\n{err}");
            }
        }
    }
    panic!("vsftpd did not start:\n{last_err}");
}

/// Starts globus-gridftp-server, anonymous, without certificates, on
/// loopback, restricted to a fresh root with the corpus. Its home is `/`,
/// so absolute and relative paths name the same file.
pub fn gridftp(writable: bool) -> FtpServer {
    gridftp_on(Ipv4Addr::LOCALHOST.into(), writable)
}

/// `gridftp` with the control listener on `host` (127.0.0.1 or ::1).
pub fn gridftp_on(host: IpAddr, writable: bool) -> FtpServer {
    let bin = find_tool("globus-gridftp-server")
        .expect("globus-gridftp-server is installed (check with require_tool first)");
    let (top, root) = make_root(writable);
    let empty_conf = top.path().join("empty.conf");
    fs::write(&empty_conf, "").expect("write empty config");
    let stderr_path = top.path().join("gridftp.stderr");
    let mut cmd = Command::new(bin);
    cmd.args(["-aa", "-anonymous-user", "ftp", "-rp"])
        .arg(&root)
        .args(["-home-dir", "/", "-c"])
        .arg(&empty_conf)
        .arg("-control-interface")
        .arg(host.to_string())
        .args(["-p", "0", "-d", "error"]);
    // A read-only root is enforced by file permissions (0755, owned by
    // root, while sessions run as `ftp`).
    // "Server listening at localhost:PORT"
    let (proc, log, port) = spawn_and_find_port(cmd, &stderr_path, |line| {
        line.strip_prefix("Server listening at ")?
            .rsplit(':')
            .next()?
            .trim()
            .parse()
            .ok()
    });
    let prefix = root.to_string_lossy().into_owned();
    FtpServer {
        kind: Kind::GridFtp,
        host,
        port,
        root,
        prefix,
        log,
        stderr_path,
        proc,
        _dirs: vec![top],
    }
}
