//! Circus sharing from outside: many MODE E clients of one file at once
//! (`--sharing circus`) each get the whole file intact, and
//! the server reads the file from disk about once for all of them (the
//! engine's `bytes_read_disk`, from `/metrics`; each reader read it for
//! itself before).
//!
//! In-order clients (HTTP bodies: curl, wget, aria2c; MODE S: curl
//! over ftp://) share blocks too (mechanism 2): each takes the file's
//! blocks in order from the same selector as the MODE E clients.
//!
//! `--sharing auto` (the default) shares a download only while another
//! download of the same file is in flight and the file is not in the page
//! cache: a lone reader, or a reader of a warm file, reads for itself.
//!
//! Each data socket is paced (`--max-pacing-rate`) so the downloads last
//! seconds and overlap although the clients start one after another; the
//! assertions are on bytes and counters, never on time.

use crate::data_path::{counter, wait_for_metrics};
use crate::downloads::run_all_and_compare;
use crate::harness::corpus::write_pseudo_random;
use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::path::PathBuf;
use std::process::Command;

/// `sluice serve --sharing circus --metrics ...` with paced data sockets
/// (FTP only).
fn shared_server(pacing: &str) -> (FtpServer, std::net::SocketAddr) {
    shared_server_with(pacing, &["--no-http"])
}

/// The same with `extra` arguments (the HTTP door is on unless `--no-http`).
fn shared_server_with(pacing: &str, extra: &[&str]) -> (FtpServer, std::net::SocketAddr) {
    let mut extra_args: Vec<String> = vec![
        "--sharing".into(),
        "circus".into(),
        "--max-pacing-rate".into(),
        pacing.into(),
        "--metrics".into(),
        "127.0.0.1:0".into(),
    ];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    let s = sluice(ServeOptions {
        extra_args,
        ..Default::default()
    });
    let m = wait_for_metrics(&s);
    (s, m)
}

/// Drops the file's pages from the page cache (GNU dd), so the first
/// reads really go to the disk; the counter counts reads either way.
fn make_cold(f: &TestFile) {
    // Written back first: the kernel drops only clean pages, and on a
    // fresh machine the corpus written moments ago may still be dirty
    // (CI saw a "cold" file stay in memory, so `auto` rightly did not share).
    std::fs::File::open(&f.path)
        .and_then(|file| file.sync_all())
        .expect("write the corpus file back");
    let _ = Command::new("dd")
        .arg(format!("if={}", f.path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status();
}

/// What util-linux `fincore` says of the file's pages, for a failure's
/// message (whether the file really left the page cache).
fn residency(f: &TestFile) -> String {
    Command::new("fincore")
        .arg(&f.path)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace('\n', " | ")
        })
        .unwrap_or_else(|e| format!("fincore: {e}"))
}

fn sluice_get(streams: &str, url: &str, dest: &std::path::Path) -> Command {
    let mut c = Command::new(sluice_bin());
    c.args(["get", "-q", "-p", streams])
        .arg(url)
        .arg(dest)
        .env("NO_COLOR", "1");
    c
}

#[test]
fn mode_e_clients_of_every_kind_share_one_file_and_get_it_intact() {
    if !require_tool("globus-url-copy") || !require_tool("curl") {
        return;
    }
    // 8 MB/s per data connection: a one-stream client takes ~8 s.
    let (server, metrics) = shared_server("8M");
    let f = corpus().file(BIG);
    make_cold(f);
    let dir = tempfile::Builder::new()
        .prefix("sluice-share-")
        .tempdir()
        .expect("dest dir");
    let url = server.url(&f.name);
    let mut jobs: Vec<(PathBuf, Command)> = Vec::new();
    for (i, p) in ["4", "1", "4", "1"].into_iter().enumerate() {
        let dest = dir.path().join(format!("sluice-p{p}-{i}.bin"));
        let cmd = sluice_get(p, &url, &dest);
        jobs.push((dest, cmd));
    }
    for (i, p) in ["1", "4", "1", "4"].into_iter().enumerate() {
        let dest = dir.path().join(format!("guc-p{p}-{i}.bin"));
        let mut cmd = Command::new("globus-url-copy");
        cmd.args(["-p", p])
            .arg(&url)
            .arg(format!("file://{}", dest.display()));
        jobs.push((dest, cmd));
    }
    run_all_and_compare(&server, jobs, f);
    // The MODE E clients were served from shared blocks (at least the
    // four with -p 4; one-stream clients may ask for MODE S).
    let shared = counter(metrics, "shared_bytes_sent");
    assert!(
        shared >= 4 * f.size,
        "{shared} bytes sent from shared blocks\n{}",
        server.log_tail()
    );
}

#[test]
fn eight_mode_e_readers_of_a_cold_file_read_it_from_disk_about_once() {
    // 4 MB/s per connection, 16 MB/s per 4-stream client: ~4 s each.
    let (server, metrics) = shared_server("4M");
    let f = corpus().file(BIG);
    make_cold(f);
    let dir = tempfile::Builder::new()
        .prefix("sluice-share-")
        .tempdir()
        .expect("dest dir");
    let url = server.url(&f.name);
    let jobs = (0..8)
        .map(|i| {
            let dest = dir.path().join(format!("copy-{i}.bin"));
            let cmd = sluice_get("4", &url, &dest);
            (dest, cmd)
        })
        .collect();
    let before = counter(metrics, "bytes_read_disk");
    run_all_and_compare(&server, jobs, f);
    let read = counter(metrics, "bytes_read_disk") - before;
    let sent = counter(metrics, "bytes_sent");
    assert!(sent >= 8 * f.size, "{sent} bytes sent");
    eprintln!(
        "8 readers: {read} bytes read from disk, file {} bytes",
        f.size
    );
    // Each reader for itself: 8x. Shared: once, plus what a late starter
    // missed of the region and reads again.
    assert!(
        read < f.size * 3 / 2,
        "{read} bytes read from disk for 8 readers of {} bytes\n{}",
        f.size,
        server.log_tail()
    );
}

#[test]
fn auto_shares_a_download_only_while_another_reads_the_file() {
    // The default sharing mode; 2 MB/s per connection: a -p 4 client of
    // the 64 MiB file takes ~8 s. The file is this test's own: whether it
    // is in the page cache decides `auto`, and the corpus's files are read
    // by the tests running beside this one (CI saw one warmed that way
    // between `make_cold` and the second reader).
    let dir = tempfile::Builder::new()
        .prefix("sluice-share-")
        .tempdir()
        .expect("dest dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir root");
    let own = root.join("auto.bin");
    write_pseudo_random(&own, BIG, 0xa070);
    for (p, mode) in [
        (dir.path(), 0o755),
        (root.as_path(), 0o755),
        (own.as_path(), 0o644),
    ] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    }
    let f = &TestFile {
        name: "auto.bin".into(),
        size: BIG,
        sha256: sha256_file(&own),
        path: own,
    };
    let server = sluice(ServeOptions {
        extra_args: vec![
            "--max-pacing-rate".into(),
            "2M".into(),
            "--metrics".into(),
            "127.0.0.1:0".into(),
            "--no-http".into(),
        ],
        root: Some(root),
        ..Default::default()
    });
    let metrics = wait_for_metrics(&server);
    let url = server.url(&f.name);
    // Alone: read for itself.
    let lone = dir.path().join("lone.bin");
    let out = run(&mut sluice_get("4", &url, &lone));
    out.assert_success();
    compare_file(&lone, f).unwrap();
    assert_eq!(
        counter(metrics, "shared_bytes_sent"),
        0,
        "{}",
        server.log_tail()
    );
    // A second reader while the first is sending: shared.
    let first = dir.path().join("first.bin");
    let second = dir.path().join("second.bin");
    let sent_before = counter(metrics, "bytes_sent");
    let mut child = sluice_get("4", &url, &first)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("first client");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while counter(metrics, "bytes_sent") == sent_before {
        assert!(
            std::time::Instant::now() < deadline,
            "the first download never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the first client ended early"
        );
        std::thread::yield_now();
    }
    // Out of the page cache (the lone read had it all there): sharing
    // saves disk reads only for a file not in memory, and `auto` shares
    // only then (a warm file's readers read for themselves: the engine's
    // `sharing::tests::auto_lets_readers_of_a_file_in_memory_read_for_themselves`).
    make_cold(f);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first download ended before the second started"
    );
    let out = run(&mut sluice_get("4", &url, &second));
    out.assert_success();
    assert!(child.wait().unwrap().success(), "first client failed");
    compare_file(&first, f).unwrap();
    compare_file(&second, f).unwrap();
    let shared = counter(metrics, "shared_bytes_sent");
    assert!(
        shared > 0,
        "the second reader was not shared (page cache now: {})\n{}",
        residency(f),
        server.log_tail()
    );
}

#[test]
fn twenty_clients_of_every_kind_share_one_file_in_and_out_of_order() {
    for tool in ["globus-url-copy", "curl", "wget", "aria2c"] {
        if !require_tool(tool) {
            return;
        }
    }
    // 4 MB/s per connection: an HTTP client of the 64 MiB file takes
    // ~16 s, a 4-stream MODE E client ~4 s; all overlap.
    let (server, metrics) = shared_server_with("4M", &[]);
    let f = corpus().file(BIG);
    make_cold(f);
    let dir = tempfile::Builder::new()
        .prefix("sluice-share-")
        .tempdir()
        .expect("dest dir");
    let (url, http) = (server.url(&f.name), server.http_url(&f.name));
    let mut jobs: Vec<(PathBuf, Command)> = Vec::new();
    let dest = |kind: &str, i: usize| dir.path().join(format!("{kind}-{i}.bin"));
    for i in 0..4 {
        let d = dest("sluice-p4", i);
        jobs.push((d.clone(), sluice_get("4", &url, &d)));
        let d = dest("guc-p4", i);
        let mut c = Command::new("globus-url-copy");
        c.args(["-p", "4"])
            .arg(&url)
            .arg(format!("file://{}", d.display()));
        jobs.push((d, c));
        let d = dest("curl-http", i);
        let mut c = Command::new("curl");
        c.args(["-sS", "-f", "-o"]).arg(&d).arg(&http);
        jobs.push((d, c));
    }
    for i in 0..3 {
        let d = dest("wget", i);
        let mut c = Command::new("wget");
        c.args(["-q", "-O"]).arg(&d).arg(&http);
        jobs.push((d, c));
        let d = dest("aria2c", i);
        let mut c = Command::new("aria2c");
        c.args([
            "-x",
            "1",
            "--allow-overwrite=true",
            "--auto-file-renaming=false",
        ])
        .args(["--file-allocation=none", "-q", "-d"])
        .arg(dir.path())
        .arg("-o")
        .arg(d.file_name().expect("name"))
        .arg(&http);
        jobs.push((d, c));
    }
    // MODE S (curl over ftp:// never asks for MODE E).
    for i in 0..2 {
        let d = dest("curl-ftp", i);
        let mut c = Command::new("curl");
        c.args(["-sS", "-o"]).arg(&d).arg(&url);
        jobs.push((d, c));
    }
    assert_eq!(jobs.len(), 20);
    let before = counter(metrics, "bytes_read_disk");
    run_all_and_compare(&server, jobs, f);
    let read = counter(metrics, "bytes_read_disk") - before;
    let shared = counter(metrics, "shared_bytes_sent");
    eprintln!(
        "20 clients: {read} bytes read from disk ({:.2}x the file), {shared} sent from shared blocks",
        read as f64 / f.size as f64
    );
    // Each for itself: 20x. The in-order clients start within a second
    // of each other at one rate, so they stay within the region.
    assert!(
        read < 4 * f.size,
        "{read} bytes read from disk for 20 readers of {} bytes\n{}",
        f.size,
        server.log_tail()
    );
    // Shared blocks reached the in-order clients too (MODE E alone: 8x).
    assert!(
        shared >= 16 * f.size,
        "{shared} bytes sent from shared blocks\n{}",
        server.log_tail()
    );
}
