//! Running external programs from tests: clients with a time limit, servers
//! as guarded children, and the `require_tool` skip rule.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// How long any one client run may take before it is killed. Generous on
/// purpose: a hung client is a failure we want to see, not a slow one.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Most bytes of a child's output quoted in a failure message.
const QUOTE_MAX: usize = 6000;

/// The `sluice` binary under test: the one cargo built for this test run,
/// or `$SLUICE_BIN` if set (to run the suite against a release build or
/// an installed binary).
pub fn sluice_bin() -> String {
    std::env::var("SLUICE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string())
}

/// The ftplib helper script (tests/python/ftp_transfer.py).
pub fn python_script() -> String {
    format!(
        "{}/../../tests/python/ftp_transfer.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// True when env SLUICE_REQUIRE_PEERS=1: a missing peer tool is then a
/// failure instead of a skip (CI sets it, so nothing is skipped silently).
pub fn peers_required() -> bool {
    std::env::var("SLUICE_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Where `name` would be found on PATH (or `name` itself if it has a slash).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    // Daemons live in sbin, which a non-login PATH may lack.
    dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Peer servers that only work when started as root (they switch to the
/// `ftp` user for anonymous sessions and chroot).
const NEEDS_ROOT: [&str; 2] = ["vsftpd", "globus-gridftp-server"];

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether a peer tool is installed (and, for peer servers, usable: we are
/// root). When it is not, prints why the test is skipped and returns false,
/// unless SLUICE_REQUIRE_PEERS=1 (then panics).
/// Use as `if !require_tool("lftp") { return; }`.
#[must_use]
pub fn require_tool(name: &str) -> bool {
    let missing = if find_tool(name).is_none() {
        format!("`{name}` is not installed (install it with .ci/deps)")
    } else if NEEDS_ROOT.contains(&name) && !is_root() {
        format!("`{name}` runs anonymous sessions only when started as root")
    } else {
        return true;
    };
    if peers_required() {
        panic!("required peer: {missing} (SLUICE_REQUIRE_PEERS=1)");
    }
    eprintln!("SKIP: {missing}; SLUICE_REQUIRE_PEERS=1 makes this a failure");
    false
}

/// Debian's own Python (`/usr/bin/python3`), when it can import `module`:
/// the peer libraries installed by .ci/deps with apt (aioftp, gfal2) live
/// there, whatever `python3` comes first on PATH (pyenv, a venv). Skips or,
/// under SLUICE_REQUIRE_PEERS=1, fails like [`require_tool`].
#[must_use]
pub fn require_debian_python_with(module: &str) -> Option<&'static str> {
    const PY: &str = "/usr/bin/python3";
    let ok = std::process::Command::new(PY)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(PY);
    }
    let missing = format!("{PY} cannot import `{module}` (install it with .ci/deps)");
    if peers_required() {
        panic!("required peer: {missing} (SLUICE_REQUIRE_PEERS=1)");
    }
    eprintln!("SKIP: {missing}; SLUICE_REQUIRE_PEERS=1 makes this a failure");
    None
}

/// What a finished (or killed) client run produced.
#[derive(Debug)]
pub struct Output {
    pub cmdline: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub elapsed: Duration,
    pub stdout: String,
    /// The same stdout, unaltered (`stdout` is lossily decoded as UTF-8),
    /// for clients that write file data to stdout.
    pub stdout_bytes: Vec<u8>,
    pub stderr: String,
    /// Set by a caller that found something wrong in the client's own log
    /// even though it exited 0 (e.g. aria2c giving up waiting for 226).
    pub problem: Option<String>,
}

impl Output {
    pub fn success(&self) -> bool {
        !self.timed_out && self.problem.is_none() && self.status.is_some_and(|s| s.success())
    }

    /// A human-readable account of the run for failure messages.
    pub fn describe(&self) -> String {
        let status = if self.timed_out {
            format!("killed after {}s timeout", CLIENT_TIMEOUT.as_secs())
        } else {
            format!("{:?}", self.status)
        };
        let problem = self
            .problem
            .as_ref()
            .map(|p| format!("\nproblem: {p}"))
            .unwrap_or_default();
        format!(
            "command: {}\nstatus: {} after {:.1}s{problem}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline,
            status,
            self.elapsed.as_secs_f64(),
            tail(&self.stdout, QUOTE_MAX),
            tail(&self.stderr, QUOTE_MAX)
        )
    }

    /// Panics with the command, status, stdout and stderr unless it succeeded.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "client failed\n{}", self.describe());
        self
    }
}

/// The last `max` bytes of `s` (on a char boundary), marked when cut.
pub fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {} bytes cut ...]\n{}", start, &s[start..])
}

fn describe_command(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| {
        let a = a.to_string_lossy();
        if a.contains(' ') || a.is_empty() {
            format!("'{a}'")
        } else {
            a.into_owned()
        }
    }));
    parts.join(" ")
}

/// Runs `cmd` to completion with stdin closed, killing its whole process
/// group if it runs longer than `timeout`. Output goes to temp files, not
/// pipes, so a chatty child can never block on a full pipe.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let cmdline = describe_command(cmd);
    let mut out = tempfile::tempfile().expect("temp file for stdout");
    let mut err = tempfile::tempfile().expect("temp file for stderr");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup stdout file"))
        .stderr(err.try_clone().expect("dup stderr file"))
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!("cannot start `{cmdline}`: {e}"),
    };
    let started = Instant::now();
    let deadline = started + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                kill_group(&mut child);
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("waiting for `{cmdline}`: {e}"),
        }
    };
    let elapsed = started.elapsed();
    if std::env::var_os("SLUICE_ITEST_TRACE").is_some() {
        eprintln!("[{:.2}s] {cmdline}", elapsed.as_secs_f64());
    }
    let stdout_bytes = read_all(&mut out);
    let stdout = String::from_utf8_lossy(&stdout_bytes).into_owned();
    let stderr = String::from_utf8_lossy(&read_all(&mut err)).into_owned();
    Output {
        cmdline,
        status,
        timed_out,
        elapsed,
        problem: None,
        stdout,
        stdout_bytes,
        stderr,
    }
}

/// `run_with_timeout` with the standard client timeout.
pub fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, CLIENT_TIMEOUT)
}

fn read_all(f: &mut File) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(0));
    let _ = f.read_to_end(&mut buf);
    buf
}

/// Kills the child's process group (it was started as its own group
/// leader), so forked session processes of a peer server die with it.
fn kill_group(child: &mut Child) {
    let pgid = child.id();
    let _ = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
}

/// A long-running child (a server under test or a peer) that is killed,
/// with its process group, when the guard is dropped.
pub struct ProcessGuard {
    child: Mutex<Child>,
    pub pid: u32,
}

impl ProcessGuard {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<ProcessGuard> {
        let child = cmd.process_group(0).spawn()?;
        Ok(ProcessGuard {
            pid: child.id(),
            child: Mutex::new(child),
        })
    }

    /// The child's stdout, if it was piped and not yet taken.
    pub fn take_stdout(&self) -> Option<std::process::ChildStdout> {
        self.child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stdout
            .take()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        child.try_wait().ok().flatten()
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        // Even if the leader already exited, forked session processes may
        // still hold the group: kill it regardless.
        kill_group(child);
        let _ = child.wait();
    }
}
