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
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{kill9, sluice, ServeOptions};
use crate::harness::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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
    CurlC,
    LftpPutC,
}

impl Resumer {
    /// The peer tool it needs (sluice is always there).
    fn tool(self) -> Option<&'static str> {
        match self {
            Resumer::SluicePut => None,
            Resumer::CurlC => Some("curl"),
            Resumer::LftpPutC => Some("lftp"),
        }
    }
}

struct Files {
    _dir: tempfile::TempDir,
    new: PathBuf,
    old: PathBuf,
}

fn files() -> Files {
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
fn in_progress(root: &Path, name: &str) -> u64 {
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

/// Polls `cond` until it holds, for at most `secs` seconds.
fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
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
fn server_on(root: Option<PathBuf>) -> FtpServer {
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
    } else if prior == Prior::NewName || resumer == Resumer::SluicePut {
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
    if failure.is_none() && resumer == Resumer::SluicePut {
        // It says what it did.
        let said = out.stderr.contains("resuming at") || out.stderr.contains("sending it all");
        if !said {
            return Some(format!("{what}: sluice put did not say how it resumed\n{}", out.describe()));
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
