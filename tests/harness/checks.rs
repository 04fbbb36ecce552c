//! Assertions shared by the suites: every size through one client, "the
//! server still serves a fresh session", and waiting for a condition.

use super::corpus::{compare_file, corpus, TestFile};
use super::process::Output;
use super::servers::FtpServer;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Downloads every corpus file with `fetch(file, dest)` and compares each
/// result with the original. All sizes are tried; the panic lists every
/// size that failed, with the client's output.
#[track_caller]
pub fn download_all_sizes(
    server: &FtpServer,
    what: &str,
    fetch: impl Fn(&TestFile, &Path) -> Output,
) {
    let dir = tempfile::Builder::new()
        .prefix("sluice-dl-")
        .tempdir()
        .expect("download dir");
    let mut failures = Vec::new();
    for f in corpus().files() {
        let dest = dir.path().join(&f.name);
        let out = fetch(f, &dest);
        if !out.success() {
            failures.push(format!(
                "{} ({} B): client failed\n{}",
                f.name,
                f.size,
                out.describe()
            ));
        } else if let Err(e) = compare_file(&dest, f) {
            failures.push(format!(
                "{} ({} B): wrong content: {e}\n{}",
                f.name,
                f.size,
                out.describe()
            ));
        }
    }
    server.assert_running();
    report(what, failures);
}

/// Uploads every corpus file with `send(file, remote_rel)` (remote_rel is
/// `up-NAME`) and compares what landed in the server's root.
#[track_caller]
pub fn upload_all_sizes(server: &FtpServer, what: &str, send: impl Fn(&TestFile, &str) -> Output) {
    let mut failures = Vec::new();
    for f in corpus().files() {
        let rel = format!("up-{}", f.name);
        let out = send(f, &rel);
        if !out.success() {
            failures.push(format!(
                "{} ({} B): client failed\n{}",
                f.name,
                f.size,
                out.describe()
            ));
        } else if let Err(e) = compare_file(&server.local(&rel), f) {
            failures.push(format!(
                "{} ({} B): wrong content on the server: {e}\n{}",
                f.name,
                f.size,
                out.describe()
            ));
        }
    }
    server.assert_running();
    report(what, failures);
}

/// Resumed transfers: for each `(size, keep)` case, `resume(file, keep)`
/// leaves the first `keep` bytes where the client will find them, runs
/// the client and returns where the whole file must now be, with the
/// run's output. Every case is tried; the panic lists each one that failed.
#[track_caller]
pub fn resume_cases(
    server: &FtpServer,
    what: &str,
    cases: &[(u64, u64)],
    resume: impl Fn(&TestFile, u64) -> (PathBuf, Output),
) {
    let mut failures = Vec::new();
    for &(size, keep) in cases {
        let f = corpus().file(size);
        let (path, out) = resume(f, keep);
        if !out.success() {
            failures.push(format!(
                "{} from {keep}: client failed\n{}",
                f.name,
                out.describe()
            ));
        } else if let Err(e) = compare_file(&path, f) {
            failures.push(format!("{} from {keep}: {e}\n{}", f.name, out.describe()));
        }
    }
    server.assert_running();
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n\n"));
}

/// Panics, with the client's output, unless it succeeded and `path` holds
/// exactly the bytes of `f`.
#[track_caller]
pub fn assert_transferred(out: &Output, path: &Path, f: &TestFile) {
    out.assert_success();
    if let Err(e) = compare_file(path, f) {
        panic!("{e}\n{}", out.describe());
    }
}

/// Panics, with the client's output, unless it exited with `code`.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(code),
        "expected exit {code}\n{}",
        out.describe()
    );
}

#[track_caller]
fn report(what: &str, failures: Vec<String>) {
    if !failures.is_empty() {
        panic!(
            "{what}: {} of {} sizes failed\n\n{}",
            failures.len(),
            corpus().files().len(),
            failures.join("\n\n==========\n\n")
        );
    }
}

/// The server process is still up and a brand-new session can log in and
/// download a file correctly.
#[track_caller]
pub fn assert_serves_fresh_session(server: &FtpServer) {
    server.assert_running();
    let mut c = server.connect();
    c.login_anonymous();
    let f = corpus().file(4095);
    let t = c.retr(&server.remote_path(&f.name));
    assert!(
        matches!(t.last().code, 226 | 250)
            && t.data.len() as u64 == f.size
            && super::corpus::sha256_bytes(&t.data) == f.sha256,
        "a fresh session after the bad input could not download {} ({} bytes received)\n{}",
        f.name,
        t.data.len(),
        c.transcript()
    );
    c.quit();
    server.assert_running();
}

/// Asserts `code` is one of `allowed`, showing the transcript if not.
#[track_caller]
pub fn assert_code(c: &super::control::Control, what: &str, got: u16, allowed: &[u16]) {
    assert!(
        allowed.contains(&got),
        "{what}: got reply {got}, expected one of {allowed:?}\ntranscript:\n{}",
        c.transcript()
    );
}

/// Polls `cond` every 20 ms until it holds, for at most `secs` seconds
/// (a bound for a wedged test, never a timing under test); panics naming
/// `what`.
#[track_caller]
pub fn wait_for(what: &str, secs: u64, cond: impl FnMut() -> bool) {
    wait_for_or(what, secs, cond, String::new);
}

/// [`wait_for`], with the server's log tail in the panic.
#[track_caller]
pub fn wait_for_server(what: &str, secs: u64, server: &FtpServer, cond: impl FnMut() -> bool) {
    wait_for_or(what, secs, cond, || server.log_tail());
}

/// [`wait_for`], with `detail()` (a server's log tail, say) in the panic.
#[track_caller]
pub fn wait_for_or(
    what: &str,
    secs: u64,
    mut cond: impl FnMut() -> bool,
    detail: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        if Instant::now() >= deadline {
            panic!("timed out waiting for {what}\n{}", detail());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
