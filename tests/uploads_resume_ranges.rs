//! MODE E uploads cut by `kill -9` of the server and resumed by ranges:
//! `REST <ranges>` + STOR as globus-url-copy -rst sends it (with the
//! ranges the server acknowledged in its 111 markers), scripted and with
//! globus-url-copy itself. The MODE S resume matrix is `uploads_resume.rs`.

use crate::harness::control::mode_e;
use crate::harness::corpus::sha256_file;
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use crate::uploads_resume::{files, in_progress, server_on};
use std::fs;
use std::process::{Command, Stdio};

/// A MODE E upload (blocks out of order, a hole) cut by `kill -9` of the
/// server; after the restart, SIZE counts only up to the hole, and `REST
/// <ranges>` + STOR (what globus-url-copy -rst sends, with the ranges the
/// server acknowledged in 111 markers: here, the 1 MiB chunks found
/// written) completes the kept partial. Ranges for a name with only a
/// complete file are refused: they cannot be in it.
#[test]
fn mode_e_restart_ranges_after_server_kill() {
    use std::io::Write;
    let first = server_on(None);
    let root = first.root.clone();
    let mib = 1usize << 20;
    let chunks = 24;
    let content = crate::harness::corpus::pseudo_random_bytes(chunks * mib, 77);
    let chunk = |i: usize| &content[i * mib..(i + 1) * mib];
    let mut c = first.connect();
    c.login_anonymous();
    assert_eq!(c.cmd("TYPE I").code, 200);
    assert_eq!(c.cmd("MODE E").code, 200);
    let mut data = c.open_passive();
    assert!(c.cmd("STOR t.bin").is_preliminary(), "{}", c.transcript());
    // Chunks 8..12 never come: a hole.
    for i in (0..8).chain(12..chunks) {
        data.write_all(&mode_e::header(0, mib as u64, (i * mib) as u64))
            .unwrap();
        data.write_all(chunk(i)).unwrap();
    }
    wait_for("blocks past the hole on disk", 60, || {
        in_progress(&root, "t.bin") >= (20 * mib) as u64
    });
    first.kill9();
    drop(data);
    let partial = fs::read(root.join(".t.bin.sluice-partial")).expect("the partial is kept");
    let have: Vec<usize> = (0..chunks)
        .filter(|&i| partial.get(i * mib..(i + 1) * mib) == Some(chunk(i)))
        .collect();
    let server = server_on(Some(root.clone()));
    let mut c = server.connect();
    c.login_anonymous();
    assert_eq!(c.cmd("TYPE I").code, 200);
    let size = c.cmd("SIZE t.bin");
    let size: u64 = size.text().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        size <= (8 * mib) as u64,
        "SIZE counts past the hole: {size}"
    );
    assert_eq!(c.cmd("MODE E").code, 200);
    let ranges: Vec<String> = have
        .iter()
        .map(|i| format!("{}-{}", i * mib, (i + 1) * mib))
        .collect();
    if !ranges.is_empty() {
        assert_eq!(c.cmd(&format!("REST {}", ranges.join(","))).code, 350);
    }
    let mut rest = Vec::new();
    for i in (0..chunks).filter(|i| !have.contains(i)) {
        rest.extend_from_slice(&mode_e::header(0, mib as u64, (i * mib) as u64));
        rest.extend_from_slice(chunk(i));
    }
    rest.extend_from_slice(&mode_e::header(mode_e::EOF | mode_e::EOD, 0, 1));
    let mut data = c.open_passive();
    let first_reply = c.cmd("STOR t.bin");
    assert!(first_reply.is_preliminary(), "{}", c.transcript());
    data.write_all(&rest).unwrap();
    drop(data);
    let mut replies = vec![first_reply];
    c.read_final(&mut replies, "STOR");
    assert_eq!(
        replies.last().map(|r| r.code),
        Some(226),
        "{}",
        c.transcript()
    );
    assert!(
        fs::read(root.join("t.bin")).unwrap() == content,
        "wrong file after the restart"
    );
    // A complete file is not an interrupted upload.
    assert_eq!(c.cmd("REST 0-1048576").code, 350);
    let _data = c.open_passive();
    let r = c.cmd("STOR t.bin");
    assert_eq!(r.code, 554, "{}", c.transcript());
}

/// `globus-url-copy -rst` with the server killed under it: the installed
/// version does not restart after a lost connection (it exits 1); nothing
/// may appear under the final name, and a second run completes the file.
#[test]
fn globus_url_copy_rst_with_server_killed() {
    if !require_tool("globus-url-copy") {
        return;
    }
    let f = files();
    let first = server_on(None);
    let root = first.root.clone();
    let target = root.join("g.bin");
    fs::copy(&f.old, &target).expect("seed old file");
    let url = |port: u16| format!("ftp://127.0.0.1:{port}/g.bin");
    let guc = ProcessGuard::spawn(
        Command::new("globus-url-copy")
            .args(["-rst", "-rst-retries", "3", "-rst-interval", "1", "-p", "4"])
            .arg(format!("file://{}", f.new.display()))
            .arg(url(first.port))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start globus-url-copy");
    // Freeze the client once data arrives, kill the server, bring a new
    // one up on the same port, let the client go on.
    wait_for("the upload to start", 60, || {
        in_progress(&root, "g.bin") > 0 || guc.exited().is_some()
    });
    let _ = Command::new("kill")
        .args(["-STOP", &guc.pid.to_string()])
        .status();
    first.kill9();
    let server = sluice(ServeOptions {
        writable: true,
        root: Some(root.clone()),
        listen: Some(first.addr()),
        ..Default::default()
    });
    let _ = Command::new("kill")
        .args(["-CONT", &guc.pid.to_string()])
        .status();
    wait_for("globus-url-copy to end", 120, || guc.exited().is_some());
    let status = guc.exited().expect("exited");
    let now = sha256_file(&target);
    if status.success() {
        assert_eq!(
            now,
            sha256_file(&f.new),
            "globus-url-copy -rst succeeded with a wrong file"
        );
    } else {
        assert_eq!(now, sha256_file(&f.old), "a failed upload changed the file");
    }
    let out = run(Command::new("globus-url-copy")
        .args(["-p", "4"])
        .arg(format!("file://{}", f.new.display()))
        .arg(server.url("g.bin")));
    out.assert_success();
    assert_eq!(
        sha256_file(&target),
        sha256_file(&f.new),
        "{}",
        out.describe()
    );
}
