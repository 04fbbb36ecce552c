//! Interrupted uploads and their resumption (crates/server/src/upload.rs,
//! "The resume protocol"): a server or a client killed with `kill -9` in
//! the middle of an upload, over a new name or an existing file, then every
//! resuming client. Whatever happens, the final name never holds a wrong
//! file after a success: the resume completes the new file, or it is
//! refused (non-zero exit) and the name keeps what it had.
//!
//! Also: a full disk (452 reaches `sluice put` as exit 5, and the partial
//! does not keep the disk full) and the xferlog's byte counts of failed
//! transfers.

use crate::harness::corpus::{sha256_file, write_pseudo_random};
use crate::harness::process::{is_root, ProcessGuard};
use crate::harness::servers::{kill9, sluice, ServeOptions};
use crate::harness::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

/// The new file being uploaded, and the old one it replaces.
const NEW_SIZE: u64 = 20 << 20;
const OLD_SIZE: u64 = 6 << 20;
/// The interrupted upload is killed once at least this much has arrived.
const KILL_AFTER: u64 = 3 << 20;

/// What the name held before the interrupted upload.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Prior {
    NewName,
    ExistingFile,
}

/// Who died.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Killed {
    Server,
    Client,
}

/// The resuming client.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Resumer {
    SluicePut,
    /// `sluice put -p 4 --continue`: MODE E, ESTO A k.
    SluicePutP4,
    CurlC,
    LftpPutC,
}

impl Resumer {
    /// The peer tool it needs (sluice is always there).
    fn tool(self) -> Option<&'static str> {
        match self {
            Resumer::SluicePut | Resumer::SluicePutP4 => None,
            Resumer::CurlC => Some("curl"),
            Resumer::LftpPutC => Some("lftp"),
        }
    }
}

pub(crate) struct Files {
    _dir: tempfile::TempDir,
    pub(crate) new: PathBuf,
    pub(crate) old: PathBuf,
}

pub(crate) fn files() -> Files {
    let dir = tempfile::tempdir().expect("temp dir");
    let new = dir.path().join("new.bin");
    let old = dir.path().join("old.bin");
    write_pseudo_random(&new, NEW_SIZE, 0x5eed_0001);
    write_pseudo_random(&old, OLD_SIZE, 0x5eed_0002);
    Files {
        _dir: dir,
        new,
        old,
    }
}

/// Bytes of the biggest file in `root` whose name starts with `.NAME.sluice-`
/// (the partial, or an older server's random temp).
pub(crate) fn in_progress(root: &Path, name: &str) -> u64 {
    let prefix = format!(".{name}.sluice-");
    fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// `curl -T NEW` at a limited rate, as a process to kill.
fn slow_curl_upload(new: &Path, url: &str) -> ProcessGuard {
    ProcessGuard::spawn(
        Command::new("curl")
            .args(["-sS", "--limit-rate", "4M", "-T"])
            .arg(new)
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start curl")
}

/// A writable server on `root` (a fresh corpus root when `None`).
pub(crate) fn server_on(root: Option<PathBuf>) -> FtpServer {
    sluice(ServeOptions {
        writable: true,
        root,
        ..Default::default()
    })
}

/// Runs the resuming client; its output.
fn resume_with(r: Resumer, server: &FtpServer, new: &Path, name: &str) -> Output {
    match r {
        Resumer::SluicePut => run(Command::new(sluice_bin())
            .args(["put", "--continue", "-q"])
            .arg(new)
            .arg(server.url(name))),
        Resumer::SluicePutP4 => run(Command::new(sluice_bin())
            .args(["put", "-p", "4", "--continue", "-q"])
            .arg(new)
            .arg(server.url(name))),
        Resumer::CurlC => run(Command::new("curl")
            .args(["-sS", "--fail", "-C", "-", "-T"])
            .arg(new)
            .arg(server.url(name))),
        Resumer::LftpPutC => run(Command::new("lftp").arg("-c").arg(format!(
            "set cmd:fail-exit yes; set net:max-retries 1; set net:timeout 30; \
             set net:reconnect-interval-base 1; open ftp://127.0.0.1:{}; put -c {} -o {name}",
            server.port,
            new.display()
        ))),
    }
}

/// One interrupted upload and one resume. Returns a failure description.
fn scenario(f: &Files, prior: Prior, killed: Killed, resumer: Resumer) -> Option<String> {
    let name = "target.bin";
    let what = format!("{prior:?}, {killed:?} killed, resumed by {resumer:?}");
    let first = server_on(None);
    let root = first.root.clone();
    let target = root.join(name);
    if prior == Prior::ExistingFile {
        fs::copy(&f.old, &target).expect("seed old file");
    }
    let curl = slow_curl_upload(&f.new, &first.url(name));
    wait_for("the interrupted upload to arrive", 60, || {
        in_progress(&root, name) >= KILL_AFTER
    });
    let restarted;
    let server = match killed {
        Killed::Server => {
            first.kill9();
            // The new server serves the same directory.
            restarted = server_on(Some(root.clone()));
            &restarted
        }
        Killed::Client => {
            kill9(&curl);
            // The server has finished with the broken upload once it logs
            // it (xferlog line, after the partial is kept).
            wait_for("the server to log the broken upload", 60, || {
                first
                    .stderr_text()
                    .lines()
                    .any(|l| l.contains(&format!("/{name} b _ i")))
            });
            // A dead client's upload is not complete: the name still
            // holds what it held (MODE S ends with the data connection's
            // FIN, which a killed client sends too).
            let held = target.exists().then(|| sha256_file(&target));
            let before = (prior == Prior::ExistingFile).then(|| sha256_file(&f.old));
            if held != before {
                return Some(format!(
                    "{what}: the killed client's upload was taken as complete ({} bytes)",
                    fs::metadata(&target).map(|m| m.len()).unwrap_or(0)
                ));
            }
            &first
        }
    };
    drop(curl);
    let out = resume_with(resumer, server, &f.new, name);
    let want_new = sha256_file(&f.new);
    let now = target.exists().then(|| sha256_file(&target));
    let before = match prior {
        Prior::NewName => None,
        Prior::ExistingFile => Some(sha256_file(&f.old)),
    };
    let failure = if out.success() {
        (now.as_ref() != Some(&want_new)).then(|| {
            format!(
                "{what}: the client succeeded but {name} is not the new file \
                 ({} bytes)\n{}",
                fs::metadata(&target).map(|m| m.len()).unwrap_or(0),
                out.describe()
            )
        })
    } else if now != before && now.as_ref() != Some(&want_new) {
        Some(format!(
            "{what}: the client failed and {name} changed to a wrong file\n{}",
            out.describe()
        ))
    } else if prior == Prior::NewName
        || matches!(resumer, Resumer::SluicePut | Resumer::SluicePutP4)
    {
        // Nothing is ambiguous here: the resume must work.
        Some(format!("{what}: the resume failed\n{}", out.describe()))
    } else if !out.stderr.contains("550") && !out.stdout.contains("550") {
        Some(format!(
            "{what}: refused, but without the server's 550 reply\n{}",
            out.describe()
        ))
    } else {
        None
    };
    if failure.is_none() && matches!(resumer, Resumer::SluicePut | Resumer::SluicePutP4) {
        // It says what it did: resumed the interrupted upload of a new
        // name after checking it; sent everything when SIZE described the
        // old file.
        let said = match prior {
            Prior::NewName => out.stderr.contains("resuming at") && out.stderr.contains("match"),
            Prior::ExistingFile => {
                out.stderr.contains("differ") && out.stderr.contains("sending it all")
            }
        };
        if !said {
            return Some(format!(
                "{what}: sluice put did not say how it resumed\n{}",
                out.describe()
            ));
        }
    }
    if failure.is_some() {
        eprintln!("{}", server.log_tail());
    }
    failure
}

fn resume_matrix(resumer: Resumer) {
    if !require_tool("curl") || !resumer.tool().is_none_or(require_tool) {
        return;
    }
    let f = files();
    let mut failures = Vec::new();
    for prior in [Prior::NewName, Prior::ExistingFile] {
        for killed in [Killed::Server, Killed::Client] {
            if let Some(e) = scenario(&f, prior, killed, resumer) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn kill9_mid_upload_then_sluice_put_continue() {
    resume_matrix(Resumer::SluicePut);
}

#[test]
fn kill9_mid_upload_then_curl_c() {
    resume_matrix(Resumer::CurlC);
}

#[test]
fn kill9_mid_upload_then_lftp_put_c() {
    resume_matrix(Resumer::LftpPutC);
}

#[test]
fn kill9_mid_upload_then_sluice_put_p4_continue() {
    resume_matrix(Resumer::SluicePutP4);
}

/// A small tmpfs, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// `None` (the test skips) unless we are root and mount works.
    fn mount(size: &str) -> Option<SmallFs> {
        if !is_root() {
            eprintln!("skipping: mounting a small tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipping: cannot mount a tmpfs");
            return None;
        }
        Some(SmallFs { dir })
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Disk full: the server says 452, `sluice put` shows that reply and exits
/// 5 (the server refused), and the failed upload's partial does not keep
/// the disk full: the next upload that fits succeeds.
#[test]
fn disk_full_gives_452_exit_5_and_frees_the_partial() {
    let Some(small) = SmallFs::mount("8m") else {
        return;
    };
    let root = small.dir.path().to_path_buf();
    let server = server_on(Some(root.clone()));
    let files = tempfile::tempdir().expect("temp dir");
    let big = files.path().join("big.bin");
    let small_file = files.path().join("small.bin");
    write_pseudo_random(&big, 16 << 20, 1);
    write_pseudo_random(&small_file, 4 << 20, 2);
    for streams in ["1", "4"] {
        let out = run(Command::new(sluice_bin())
            .args(["put", "-q", "-p", streams])
            .arg(&big)
            .arg(server.url("big.bin")));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(5),
            "{}",
            out.describe()
        );
        assert!(
            out.stderr.contains("452"),
            "no 452 shown\n{}",
            out.describe()
        );
        let left: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "-p {streams} left behind: {left:?}");
    }
    let out = run(Command::new(sluice_bin())
        .args(["put", "-q"])
        .arg(&small_file)
        .arg(server.url("small.bin")));
    out.assert_success();
    assert_eq!(
        sha256_file(&root.join("small.bin")),
        sha256_file(&small_file)
    );
}

/// The xferlog line of a failed transfer counts the bytes that moved (and
/// says `i`, incomplete): a download cut by ABOR, an upload whose client
/// was killed.
#[test]
fn xferlog_counts_bytes_of_failed_transfers() {
    use std::io::Read;
    let server = server_on(None);
    write_pseudo_random(&server.root.join("dl.bin"), 256 << 20, 3);
    let mut c = server.connect();
    c.login_anonymous();
    assert_eq!(c.cmd("TYPE I").code, 200);
    let mut data = c.open_passive();
    assert!(c.cmd("RETR dl.bin").is_preliminary(), "{}", c.transcript());
    let mut got = vec![0u8; 4 << 20];
    data.read_exact(&mut got).expect("first 4 MiB");
    drop(data);
    let _ = c.try_cmd("ABOR");
    let logged = |name: &str| -> Option<(u64, String)> {
        server.stderr_text().lines().find_map(|l| {
            let f: Vec<&str> = l.split(" xferlog: ").nth(1)?.split(' ').collect();
            (f.get(3) == Some(&name)).then(|| {
                (
                    f[2].parse().unwrap_or(0),
                    // The completion status (a `limit=` extension may follow).
                    f.get(12).unwrap_or(&"").to_string(),
                )
            })
        })
    };
    wait_for("the download's xferlog line", 60, || {
        logged("/dl.bin").is_some()
    });
    let (bytes, status) = logged("/dl.bin").unwrap();
    assert_eq!(status, "i", "{}", server.log_tail());
    assert!(
        (4 << 20..256 << 20).contains(&bytes),
        "download logged {bytes} bytes"
    );

    let f = files();
    let curl = slow_curl_upload(&f.new, &server.url("up.bin"));
    wait_for("the upload to arrive", 60, || {
        in_progress(&server.root, "up.bin") >= KILL_AFTER
    });
    kill9(&curl);
    wait_for("the upload's xferlog line", 60, || {
        logged("/up.bin").is_some()
    });
    let (bytes, status) = logged("/up.bin").unwrap();
    assert_eq!(status, "i", "{}", server.log_tail());
    assert!(
        (KILL_AFTER..NEW_SIZE).contains(&bytes),
        "upload logged {bytes} bytes"
    );
}

/// An earlier partial of a *different* file under the name: `sluice put
/// --continue` finds the server's bytes are not the start of its file
/// (CKSM of the partial with offset and length) and sends everything.
#[test]
fn sluice_put_continue_over_a_partial_of_another_file_sends_everything() {
    let f = files();
    let server = server_on(None);
    fs::copy(&f.old, server.root.join(".other.bin.sluice-partial")).expect("seed partial");
    for extra in [&[][..], &["-p", "4"][..]] {
        let out = run(Command::new(sluice_bin())
            .args(["put", "--continue", "-q"])
            .args(extra)
            .arg(&f.new)
            .arg(server.url("other.bin")));
        out.assert_success();
        assert_eq!(
            sha256_file(&server.root.join("other.bin")),
            sha256_file(&f.new),
            "{}",
            out.describe()
        );
        if extra.is_empty() {
            assert!(
                out.stderr.contains("differ") && out.stderr.contains("sending it all"),
                "{}",
                out.describe()
            );
        }
        assert!(!server.root.join(".other.bin.sluice-partial").exists());
        // The same state again for the MODE E run.
        fs::copy(&f.old, server.root.join(".other.bin.sluice-partial")).expect("seed partial");
        fs::remove_file(server.root.join("other.bin")).expect("remove");
    }
}

/// Two uploads of one name: the second waits while the first holds the
/// partial and then runs (a client retrying at once after its own timed-out
/// attempt, whose session is still committing, got `450` before); a holder
/// that does not let go still gets it `450`, after a bounded wait.
#[test]
fn a_second_upload_of_a_name_waits_for_the_first() {
    use crate::harness::control::Control;
    use std::io::Write;
    use std::net::Shutdown;
    let server = server_on(None);
    let login = || {
        let mut c = Control::connect(server.port);
        c.login_anonymous();
        c
    };
    let waiting = |server: &FtpServer, n: usize| {
        wait_for("the second upload to wait", 30, || {
            server
                .stderr_text()
                .matches("waits for another upload")
                .count()
                >= n
        })
    };
    // The first upload holds the partial with its data connection open.
    let mut first = login();
    let mut first_data = first.open_passive();
    assert_eq!(
        first.cmd("STOR same.bin").code,
        150,
        "{}",
        first.transcript()
    );
    first_data.write_all(b"first ").expect("write");
    let second = thread::spawn({
        let mut c = login();
        move || {
            let replies = c.upload("STOR", "same.bin", b"second upload");
            (replies, c.transcript())
        }
    });
    waiting(&server, 1);
    first_data.shutdown(Shutdown::Write).expect("shutdown");
    drop(first_data);
    let mut replies = Vec::new();
    first.read_final(&mut replies, "STOR");
    assert_eq!(
        replies.last().map(|r| r.code),
        Some(226),
        "{}",
        first.transcript()
    );
    let (replies, transcript) = second.join().expect("second upload");
    assert_eq!(replies.first().map(|r| r.code), Some(150), "{transcript}");
    assert_eq!(replies.last().map(|r| r.code), Some(226), "{transcript}");
    assert_eq!(
        fs::read(server.root.join("same.bin")).expect("read"),
        b"second upload"
    );

    // A holder that stays: the wait ends, with 450.
    let mut third = login();
    let _third_data = third.open_passive();
    assert_eq!(
        third.cmd("STOR same.bin").code,
        150,
        "{}",
        third.transcript()
    );
    let mut fourth = login();
    let replies = fourth.upload("STOR", "same.bin", b"fourth");
    assert_eq!(replies[0].code, 450, "{}", fourth.transcript());
    waiting(&server, 2);
}
