//! Helpers for the peer tests: start vsftpd or globus-gridftp-server on
//! loopback in a temp dir, run the client binary, compare sha256.
#![allow(dead_code)]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The file sizes every transfer test covers.
pub const SIZES: [u64; 5] = [0, 1, 4095, (1 << 20) + 7, 64 << 20];

/// The client binary under test.
pub fn client() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice-client"));
    c.stdin(Stdio::null());
    c
}

/// Runs the client with `args`; returns its output.
pub fn run(args: &[&str]) -> Output {
    let out = client().args(args).output().expect("run sluice-client");
    eprintln!(
        "$ sluice {}\n  exit {:?}\n  stderr: {}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    out
}

/// Runs and requires exit 0.
pub fn ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(out.status.success(), "sluice {} failed", args.join(" "));
    out
}

/// Whether a missing peer must fail the test instead of skipping it.
fn require_peers() -> bool {
    std::env::var("SLUICE_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Skips (returns None, printing why) or panics, per SLUICE_REQUIRE_PEERS.
pub fn skip<T>(why: &str) -> Option<T> {
    if require_peers() {
        panic!("peer unavailable and SLUICE_REQUIRE_PEERS=1: {why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

fn find_binary(name: &str) -> Option<PathBuf> {
    for dir in [
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(port: u16, child: &mut Child) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len as usize);
    v
}

/// sha256 of a file, hex.
pub fn sha256_file(p: &Path) -> String {
    let data = std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    hex::encode(Sha256::digest(&data))
}

/// A peer server and the directory it serves.
pub struct Peer {
    child: Child,
    /// Served directory (files to download go here).
    pub root: PathBuf,
    /// Subdirectory the anonymous user may write to.
    pub upload: PathBuf,
    /// Control port on 127.0.0.1 (and ::1 if the peer listens there).
    pub port: u16,
    /// How URL paths map to `root`: vsftpd chroots (""), Globus takes
    /// absolute server paths (the root's own path).
    pub url_prefix: String,
    _tmp: tempfile::TempDir,
}

impl Peer {
    /// `ftp://127.0.0.1:PORT/<path relative to root>`.
    pub fn url(&self, rel: &str) -> String {
        format!("ftp://127.0.0.1:{}{}/{rel}", self.port, self.url_prefix)
    }

    /// Same over IPv6.
    pub fn url6(&self, rel: &str) -> String {
        format!("ftp://[::1]:{}{}/{rel}", self.port, self.url_prefix)
    }

    /// Writes a test file of `len` bytes under the root.
    pub fn put_file(&self, rel: &str, len: u64, seed: u64) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(&pattern(len, seed))
            .unwrap();
        p
    }

    /// A scratch directory for the client side.
    pub fn scratch(&self) -> PathBuf {
        let p = self._tmp.path().join("client");
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ftp_user_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("ftp:"))?;
    let f: Vec<&str> = line.split(':').collect();
    Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
}

fn chown(p: &Path, uid: u32, gid: u32) -> bool {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).is_ok()
}

fn make_dirs() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let Some((uid, gid)) = ftp_user_ids() else {
        return skip("no `ftp` user in /etc/passwd (anonymous peers need it)");
    };
    let tmp = tempfile::Builder::new()
        .prefix("sluice-client-peer")
        .tempdir()
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("root");
    let upload = root.join("up");
    std::fs::create_dir_all(&upload).unwrap();
    // The anonymous root must not be writable by the ftp user (vsftpd
    // refuses to run otherwise); the upload directory must be.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    if !chown(&upload, uid, gid) {
        return skip("cannot chown the upload dir to `ftp` (tests need root)");
    }
    Some((tmp, root, upload))
}

/// vsftpd, anonymous, uploads into `up/`, on 127.0.0.1.
pub fn vsftpd() -> Option<Peer> {
    let Some(bin) = find_binary("vsftpd") else {
        return skip("vsftpd not installed");
    };
    let (tmp, root, upload) = make_dirs()?;
    let port = free_port();
    let secure = ["/var/run/vsftpd/empty", "/usr/share/empty", "/var/empty"]
        .into_iter()
        .find(|p| Path::new(p).is_dir())
        .map(str::to_string)
        .unwrap_or_else(|| {
            let p = tmp.path().join("empty");
            std::fs::create_dir_all(&p).unwrap();
            p.display().to_string()
        });
    let conf = tmp.path().join("vsftpd.conf");
    std::fs::write(
        &conf,
        format!(
            "listen=YES\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n\
             seccomp_sandbox=NO\nanonymous_enable=YES\nlocal_enable=NO\nanon_root={}\n\
             write_enable=YES\nanon_upload_enable=YES\nanon_other_write_enable=YES\n\
             anon_umask=022\npasv_enable=YES\nxferlog_enable=NO\nsecure_chroot_dir={secure}\n",
            root.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    if !wait_listening(port, &mut child) {
        let _ = child.kill();
        return skip("vsftpd did not start listening");
    }
    Some(Peer {
        child,
        root,
        upload,
        port,
        url_prefix: String::new(),
        _tmp: tmp,
    })
}

/// globus-gridftp-server, anonymous, paths restricted to the root.
pub fn globus() -> Option<Peer> {
    let Some(bin) = find_binary("globus-gridftp-server") else {
        return skip("globus-gridftp-server not installed");
    };
    let (tmp, root, upload) = make_dirs()?;
    let port = free_port();
    let empty = tmp.path().join("empty.conf");
    std::fs::write(&empty, "").unwrap();
    let mut child = Command::new(bin)
        .args(["-aa", "-anonymous-user", "ftp", "-rp"])
        .arg(&root)
        .arg("-home-dir")
        .arg(&root)
        .arg("-c")
        .arg(&empty)
        .args(["-p", &port.to_string(), "-d", "ERROR"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    if !wait_listening(port, &mut child) {
        let _ = child.kill();
        return skip("globus-gridftp-server did not start listening");
    }
    let url_prefix = root.display().to_string();
    Some(Peer {
        child,
        root,
        upload,
        port,
        url_prefix,
        _tmp: tmp,
    })
}
