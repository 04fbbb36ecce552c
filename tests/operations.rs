//! Operating `sluice serve` (crates/server/src/shutdown.rs, signals.rs):
//! the stop on SIGTERM with transfers in flight, on both doors, with a
//! long and a short `--shutdown-timeout`.

use crate::harness::corpus::{sha256_file, write_pseudo_random};
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Sends `sig` (e.g. "-TERM") to the server.
fn signal(server: &FtpServer, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &server.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} failed");
}

/// True when a TCP connect to `addr` is refused (the door is closed).
fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_err()
}

fn len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A `curl` run in the background (to be watched while the server stops).
fn curl(args: &[&str]) -> ProcessGuard {
    ProcessGuard::spawn(
        Command::new("curl")
            .args(["-sS", "--fail"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start curl")
}

/// SIGTERM with a generous `--shutdown-timeout`: an idle session is told
/// 421 and closed, both listening sockets close at once (new connections
/// are refused), and slow downloads on both doors run to completion
/// (sha256 compared); then the server exits 0 on its own.
#[test]
fn sigterm_lets_running_downloads_finish_and_refuses_new_connections() {
    if !require_tool("curl") {
        return;
    }
    let server = sluice(ServeOptions {
        extra_args: vec!["--shutdown-timeout".into(), "120".into()],
        ..Default::default()
    });
    // Big enough that socket buffers cannot hold the rest when the signal
    // lands: the server is still sending then (checked in its log below).
    let f = corpus().file(BIG);
    let out = tempfile::tempdir().unwrap();
    let (ftp_out, http_out) = (out.path().join("ftp"), out.path().join("http"));
    // About 4 s each: long enough to be in flight when the signal lands.
    let ftp_dl = curl(&[
        "--limit-rate",
        "16M",
        "-o",
        ftp_out.to_str().unwrap(),
        &server.url(&f.name),
    ]);
    let http_dl = curl(&[
        "--limit-rate",
        "16M",
        "-o",
        http_out.to_str().unwrap(),
        &server.http_url(&f.name),
    ]);
    let mut idle = server.connect();
    idle.login_anonymous();
    wait_for_server("both downloads to be under way", 60, &server, || {
        len(&ftp_out) > 0 && len(&http_out) > 0
    });
    signal(&server, "-TERM");
    let http_addr = SocketAddr::new(server.host, server.http_port());
    wait_for_server("both doors to refuse new connections", 30, &server, || {
        refused(server.addr()) && refused(http_addr)
    });
    let reply = idle.read_reply().expect("the idle session's 421");
    assert_eq!(reply.code, 421, "{}", idle.transcript());
    wait_for_server("both downloads to end", 120, &server, || {
        ftp_dl.exited().is_some() && http_dl.exited().is_some()
    });
    for (what, dl, path) in [("ftp", &ftp_dl, &ftp_out), ("http", &http_dl, &http_out)] {
        assert!(
            dl.exited().unwrap().success(),
            "{what} download failed\n{}",
            server.log_tail()
        );
        compare_file(path, f).unwrap_or_else(|e| panic!("{what}: {e}\n{}", server.log_tail()));
    }
    wait_for_server("the server to exit", 60, &server, || {
        server.exited().is_some()
    });
    assert!(server.exited().unwrap().success(), "{}", server.log_tail());
    let log = server.stderr_text();
    assert!(
        log.contains("every connection finished"),
        "{}",
        server.log_tail()
    );
    assert!(!log.contains("cut by shutdown"), "{}", server.log_tail());
    // Both transfers ended (complete) after the stop began: the server
    // waited for them rather than finishing before the signal.
    let at = |pat: &str| log.lines().position(|l| l.contains(pat));
    let stop = at("signal=\"SIGTERM\"").expect("the stop is logged");
    let ftp_end = at(&format!("{} b _ o a anonymous ftp 0 * c", f.name));
    let http_end = at(&format!("GET /{} HTTP/1.1\" 200", f.name));
    assert!(
        ftp_end.is_some_and(|i| i > stop) && http_end.is_some_and(|i| i > stop),
        "a download was complete before the signal: the test proves nothing\n{log}"
    );
}

/// SIGTERM with `--shutdown-timeout 1` while two slow uploads run: the
/// server ends them after the timeout, logs each, and exits; the final
/// names do not exist, the partials hold a prefix of the source, and a
/// server restarted on the same directory completes them for `curl -C -`
/// and for `sluice put --continue` (sha256 compared).
#[test]
fn sigterm_cuts_uploads_at_the_timeout_and_they_resume() {
    if !require_tool("curl") {
        return;
    }
    let server = sluice(ServeOptions {
        writable: true,
        extra_args: vec!["--shutdown-timeout".into(), "1".into()],
        ..Default::default()
    });
    let root = server.root.clone();
    let src_dir = tempfile::tempdir().unwrap();
    let src = src_dir.path().join("src.bin");
    write_pseudo_random(&src, 4 << 20, 16);
    let names = ["by-curl.bin", "by-sluice.bin"];
    // 4 MiB at 128 KiB/s: half a minute, far longer than the timeout.
    let uploads: Vec<ProcessGuard> = names
        .iter()
        .map(|n| {
            curl(&[
                "--limit-rate",
                "128k",
                "-T",
                src.to_str().unwrap(),
                &server.url(n),
            ])
        })
        .collect();
    // And a slow HTTP download, which the cut ends too.
    let dl_dir = tempfile::tempdir().unwrap();
    let dl_out = dl_dir.path().join("f");
    let big = corpus().file(BIG);
    let dl = curl(&[
        "--limit-rate",
        "1M",
        "-o",
        dl_out.to_str().unwrap(),
        &server.http_url(&big.name),
    ]);
    let partial = |n: &str| root.join(format!(".{n}.sluice-partial"));
    wait_for_server(
        "the uploads and the download to be under way",
        60,
        &server,
        || names.iter().all(|n| len(&partial(n)) > 0) && len(&dl_out) > 0,
    );
    signal(&server, "-TERM");
    wait_for_server("the server to exit", 60, &server, || {
        server.exited().is_some()
    });
    assert!(server.exited().unwrap().success(), "{}", server.log_tail());
    wait_for_server("the uploads to fail", 60, &server, || {
        uploads.iter().all(|u| u.exited().is_some())
    });
    for u in &uploads {
        assert!(
            !u.exited().unwrap().success(),
            "a cut upload reported success"
        );
    }
    wait_for_server("the download to fail", 60, &server, || {
        dl.exited().is_some()
    });
    assert!(
        !dl.exited().unwrap().success(),
        "a cut download reported success"
    );
    let log = server.stderr_text();
    assert!(log.contains("http response cut by shutdown"), "{log}");
    let data = fs::read(&src).unwrap();
    for n in names {
        assert!(
            !root.join(n).exists(),
            "{n} exists after a cut upload\n{log}"
        );
        let kept = fs::read(partial(n)).unwrap();
        assert!(
            !kept.is_empty() && kept.len() < data.len() && data.starts_with(&kept),
            "{n}: the partial ({} bytes) is not a prefix of the source",
            kept.len()
        );
        assert!(
            log.lines()
                .any(|l| l.contains("upload cut by shutdown") && l.contains(n)),
            "no log line for the cut upload of {n}\n{log}"
        );
    }
    // Resumed against a new server on the same directory.
    let again = sluice(ServeOptions {
        writable: true,
        root: Some(root.clone()),
        ..Default::default()
    });
    run(Command::new("curl")
        .args(["-sS", "--fail", "-C", "-", "-T"])
        .arg(&src)
        .arg(again.url(names[0])))
    .assert_success();
    let out = run(Command::new(sluice_bin())
        .args(["put", "--continue"])
        .arg(&src)
        .arg(again.url(names[1])));
    out.assert_success();
    assert!(out.stderr.contains("resuming at"), "{}", out.describe());
    let want = sha256_file(&src);
    for n in names {
        assert_eq!(
            sha256_file(&root.join(n)),
            want,
            "{n}\n{}",
            again.log_tail()
        );
        assert!(!partial(n).exists(), "{n}: partial left after the resume");
    }
}

/// An argon2 hash of `pass` from `sluice hash-password`.
fn hash_password(pass: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(sluice_bin())
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sluice hash-password");
    writeln!(child.stdin.take().unwrap(), "{pass}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A config file with one user, `alice`, whose password is `pass`.
fn write_config(path: &Path, pass: &str, log_level: &str) {
    fs::write(
        path,
        format!(
            "log_level = \"{log_level}\"\n[[user]]\nname = \"alice\"\npassword_hash = \"{}\"\n",
            hash_password(pass)
        ),
    )
    .unwrap();
}

/// SIGHUP with alice's password and the log level changed in the file: a
/// download alice started before runs on to completion (sha256), the old
/// password is refused and the new one accepted afterwards, and sessions
/// log at debug level. Then a broken file and
/// SIGHUP: refused with a log line naming the problem, and the server
/// goes on with the configuration it had (the new password still works).
#[test]
fn sighup_reloads_users_without_dropping_a_transfer() {
    if !require_tool("curl") {
        return;
    }
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("sluice.toml");
    write_config(&conf, "old-secret", "info");
    let server = sluice(ServeOptions {
        extra_args: vec!["--config".into(), conf.to_str().unwrap().into()],
        ..Default::default()
    });
    let f = corpus().file(BIG);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("f");
    let url = format!("ftp://alice:old-secret@{}/{}", server.addr(), f.name);
    let dl = curl(&["--limit-rate", "16M", "-o", dest.to_str().unwrap(), &url]);
    wait_for_server("the download to be under way", 60, &server, || {
        len(&dest) > 0
    });
    // The log level changes too: sessions' debug lines appear.
    assert!(!server.stderr_text().contains("connected"));
    write_config(
        &conf,
        "new-secret",
        "info,sluice_server::ftp::session=debug",
    );
    signal(&server, "-HUP");
    server.wait_for_log("configuration reloaded", 1);
    let mut c = server.connect();
    assert_eq!(
        c.login("alice", "old-secret").code,
        530,
        "{}",
        c.transcript()
    );
    let mut c = server.connect();
    assert_eq!(
        c.login("alice", "new-secret").code,
        230,
        "{}",
        c.transcript()
    );
    server.wait_for_log("connected", 1);
    wait_for_server("the download to end", 120, &server, || {
        dl.exited().is_some()
    });
    assert!(dl.exited().unwrap().success(), "{}", server.log_tail());
    compare_file(&dest, f).unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    let log = server.stderr_text();
    let at = |pat: &str| log.lines().position(|l| l.contains(pat));
    assert!(
        at(&format!("{} b _ o r alice ftp 0 * c", f.name)) > at("configuration reloaded"),
        "the download ended before the reload: the test proves nothing\n{log}"
    );
    // A broken file is refused; the running configuration stays.
    fs::write(&conf, "[[user]]\nname = \"alice\"\npassword_hash = [\n").unwrap();
    signal(&server, "-HUP");
    server.wait_for_log("new configuration refused", 1);
    let refusal = server
        .stderr_text()
        .lines()
        .find(|l| l.contains("new configuration refused"))
        .unwrap()
        .to_string();
    assert!(refusal.contains("sluice.toml"), "{refusal}");
    server.assert_running();
    let mut c = server.connect();
    assert_eq!(
        c.login("alice", "new-secret").code,
        230,
        "{}",
        c.transcript()
    );
}

/// `--log-file`: after logrotate's rename, SIGUSR1 makes the server
/// write a fresh file at the path; the old one keeps what came before.
#[test]
fn sigusr1_reopens_the_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sluice.log");
    let server = sluice(ServeOptions {
        extra_args: vec!["--log-file".into(), log.to_str().unwrap().into()],
        ..Default::default()
    });
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_default();
    wait_for_server("the log file to fill", 60, &server, || {
        read(&log).contains("serving")
    });
    let rotated = dir.path().join("sluice.log.1");
    fs::rename(&log, &rotated).unwrap();
    signal(&server, "-USR1");
    wait_for_server("a new log file", 60, &server, || {
        read(&log).contains("log file reopened")
    });
    let mut c = server.connect();
    c.login_anonymous();
    wait_for_server("the login in the new file", 60, &server, || {
        read(&log).contains("login user=anonymous")
    });
    assert!(read(&rotated).contains("serving"));
    assert!(!read(&rotated).contains("login user=anonymous"));
}

/// A second SIGINT during the wait cuts at once: with a 120 s timeout
/// and an upload that would take half a minute, the server exits long
/// before either (no timing asserted: the upload's partial is still
/// short of the whole file and the log says why it stopped).
#[test]
fn a_second_signal_cuts_at_once() {
    if !require_tool("curl") {
        return;
    }
    let server = sluice(ServeOptions {
        writable: true,
        extra_args: vec!["--shutdown-timeout".into(), "120".into()],
        ..Default::default()
    });
    let src_dir = tempfile::tempdir().unwrap();
    let src = src_dir.path().join("src.bin");
    write_pseudo_random(&src, 4 << 20, 17);
    let up = curl(&[
        "--limit-rate",
        "128k",
        "-T",
        src.to_str().unwrap(),
        &server.url("up.bin"),
    ]);
    let partial = server.root.join(".up.bin.sluice-partial");
    wait_for_server("the upload to be under way", 60, &server, || {
        len(&partial) > 0
    });
    signal(&server, "-INT");
    server.wait_for_log("running transfers may finish", 1);
    server.assert_running();
    signal(&server, "-INT");
    wait_for_server("the server to exit", 60, &server, || {
        server.exited().is_some()
    });
    wait_for_server("the upload to fail", 60, &server, || up.exited().is_some());
    let log = server.stderr_text();
    assert!(log.contains("second stop signal"), "{log}");
    assert!(log.contains("upload cut by shutdown"), "{log}");
    assert!(!server.root.join("up.bin").exists());
    assert!(len(&partial) > 0 && len(&partial) < 4 << 20);
}
