//! Trees with the server killed (-9) mid-job and restarted on the same
//! port: `get -r` and `put -r` retry, resume and end with every file
//! right (sha256); `put --continue` commits a partial holding every byte.

use crate::harness::corpus::write_pseudo_random;
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{sluice, sluice_rw, ServeOptions};
use crate::harness::*;
use crate::trees::{sluice_cmd, tree_sums};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// Once `progress()` says a few files are through, freezes the client
/// (SIGSTOP, so the kill lands mid-job whatever the machine's speed),
/// kill -9s the server, restarts it on the same port and root, lets the
/// client go on, and checks it ends with success after reporting a
/// retry. Returns the new server and the client's stderr.
fn kill_and_restart_mid_job(
    first: &FtpServer,
    root: &Path,
    client: &ProcessGuard,
    err: &Path,
    progress: impl Fn() -> usize,
) -> (FtpServer, String) {
    wait_for("a few files to arrive", 60, || {
        progress() >= 3 || client.exited().is_some()
    });
    signal(client.pid, "-STOP");
    assert!(
        client.exited().is_none(),
        "the client finished before the kill"
    );
    first.kill9();
    let second = sluice(ServeOptions {
        writable: true,
        root: Some(root.to_path_buf()),
        listen: Some(first.addr()),
        ..Default::default()
    });
    signal(client.pid, "-CONT");
    wait_for("the client to end", 120, || client.exited().is_some());
    let status = client.exited().unwrap();
    let stderr = fs::read_to_string(err).unwrap_or_default();
    assert!(
        status.success(),
        "{status}\n{stderr}\n{}",
        second.log_tail()
    );
    assert!(stderr.contains("retry 1"), "no retry reported:\n{stderr}");
    (second, stderr)
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// The server is killed (-9) mid-tree and a new one started on the same
/// port: the client's workers reconnect with backoff, resume their files
/// and the job ends with every file correct and exit 0. The client is
/// frozen (SIGSTOP) around the kill, so the kill lands mid-tree whatever
/// the machine's speed.
#[test]
fn tree_download_survives_a_server_killed_and_restarted() {
    let first = sluice_rw();
    let root = first.root.clone();
    let tree = root.join("many");
    for d in 0..10 {
        for f in 0..30 {
            let p = tree.join(format!("d{d}/f {f}.bin"));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            write_pseudo_random(&p, 200_000 + f * 1000, d * 100 + f);
        }
    }
    let want = tree_sums(&tree);
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("got");
    let err = work.path().join("stderr");
    let client = ProcessGuard::spawn(
        Command::new(sluice_bin())
            .args(["get", "-r", "-q", "--files", "2", "--timeout", "10"])
            .arg(first.url("many"))
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap()),
    )
    .expect("start sluice get -r");
    let done = |d: &Path| {
        fs::read_dir(d.join("d0"))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().contains(".part"))
                    .count()
            })
            .unwrap_or(0)
    };
    let (_second, stderr) = kill_and_restart_mid_job(&first, &root, &client, &err, || done(&dest));
    assert_eq!(tree_sums(&dest), want, "{stderr}");
}

/// `put -r` with the server killed (-9) mid-tree and restarted on the
/// same port: the workers reconnect, resume or resend their files, and
/// the server ends with every file right.
#[test]
fn tree_upload_survives_a_server_killed_and_restarted() {
    let first = sluice_rw();
    let root = first.root.clone();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    for d in 0..10 {
        for f in 0..30 {
            let p = src.join(format!("d{d}/f {f}.bin"));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            write_pseudo_random(&p, 200_000 + f * 1000, 7 + d * 100 + f);
        }
    }
    let err = work.path().join("stderr");
    let client = ProcessGuard::spawn(
        Command::new(sluice_bin())
            .args(["put", "-r", "-q", "--files", "2", "--timeout", "10"])
            .arg(&src)
            .arg(first.url("up/"))
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap()),
    )
    .expect("start sluice put -r");
    let arrived = || {
        fs::read_dir(root.join("up/d0"))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    let (second, stderr) = kill_and_restart_mid_job(&first, &root, &client, &err, arrived);
    let mut got = tree_sums(&root.join("up"));
    // The server may keep its own partial-upload files; only names the
    // source has count.
    let want = tree_sums(&src);
    got.retain(|k, _| want.contains_key(k));
    let wrong: Vec<String> = want
        .keys()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| {
            let size = |p: &Path| fs::metadata(p).map(|m| m.len()).ok();
            format!(
                "{k}: server {:?} bytes, source {:?}",
                size(&root.join("up").join(k)),
                size(&src.join(k))
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{wrong:?}\n{stderr}\n{}",
        second.log_tail()
    );
}

/// An interrupted upload that had written every byte (a server killed
/// with -9 after the last write leaves exactly this: `.NAME.sluice-partial`
/// holding the whole file, no NAME); SIZE reports the partial. `put
/// --continue` (and a retried file of `put -r`) must still end the
/// transfer so the partial becomes the file (before: exit 0, "resumed at
/// 100000", and no file).
#[test]
fn put_continue_commits_a_partial_that_has_every_byte() {
    let server = sluice_rw();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("f.bin");
    write_pseudo_random(&src, 100_000, 11);
    fs::copy(&src, server.local(".f.bin.sluice-partial")).unwrap();
    assert!(!server.local("f.bin").exists());
    let o = sluice_cmd(&[
        "put",
        "-q",
        "--continue",
        src.to_str().unwrap(),
        &server.url("f.bin"),
    ]);
    o.assert_success();
    assert_eq!(
        sha256_file(&server.local("f.bin")),
        sha256_file(&src),
        "{}",
        o.describe()
    );
}
