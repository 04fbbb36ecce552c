//! Stream counts of `sluice get`: chosen automatically with `-p auto`
//! (HTTP ranges against `sluice serve`; FTP MODE E against `sluice serve`
//! and globus-gridftp-server, restarted with the ranges received when the
//! count changes), the default when `-p` is not given; forced by `-p N`.

use crate::harness::corpus::write_pseudo_random;
use crate::harness::servers::{gridftp, sluice, sluice_ro, ServeOptions};
use crate::harness::*;
use std::path::Path;
use std::process::Command;

/// `sluice get -q --stats FLAGS URL DEST`.
fn get(flags: &[&str], url: &str, dest: &Path) -> Output {
    run(Command::new(sluice_bin())
        .args(["get", "-q", "--stats"])
        .args(flags)
        .arg(url)
        .arg(dest))
}

/// The value of the `stats: NAME VALUE` line.
#[track_caller]
fn stat(out: &Output, name: &str) -> u64 {
    let prefix = format!("stats: {name} ");
    out.stderr
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` line\n{}", out.describe()))
}

#[track_caller]
fn summary_says(out: &Output, expected: &str) {
    assert!(
        out.stderr.contains(expected),
        "summary does not say `{expected}`\n{}",
        out.describe()
    );
}

#[test]
fn http_get_p_auto_chooses_its_stream_count() {
    let server = sluice_ro();
    let f = corpus().file(BIG);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("auto.bin");
    let out = get(&["-p", "auto"], &server.http_url(&f.name), &dest);
    assert_transferred(&out, &dest, f);
    summary_says(&out, "(HTTP, auto ");
    let chosen = stat(&out, "streams_auto");
    assert!((1..=64).contains(&chosen), "{}", out.describe());
    assert!(stat(&out, "streams_peak") >= 1);
    // Every connection it opened was a range of the one file.
    assert!(stat(&out, "streams") >= stat(&out, "streams_peak"));
    // No -p: chosen the same way (the default).
    let out = get(&[], &server.http_url(&f.name), &dest);
    assert_transferred(&out, &dest, f);
    summary_says(&out, "(HTTP, auto ");
    assert!(stat(&out, "streams_auto") >= 1, "{}", out.describe());
    // -p 1: one stream, not chosen.
    let out = get(&["-p", "1"], &server.http_url(&f.name), &dest);
    assert_transferred(&out, &dest, f);
    summary_says(&out, "(HTTP, 1 stream)");
    assert_eq!(stat(&out, "streams_auto"), 0, "{}", out.describe());
    server.assert_running();
}

#[test]
fn http_auto_adds_streams_when_each_connection_is_paced() {
    // Every connection the server makes is paced to 4 MB/s: two streams
    // move twice as much, and the controller must see it and climb (one
    // stream would take 12 s: long enough for the time gate to let a
    // probe through). The file is written pseudo-randomly so a misplaced
    // range shows.
    let server = sluice(ServeOptions {
        extra_args: vec!["--max-pacing-rate".into(), "4M".into()],
        ..Default::default()
    });
    let src = server.root.join("paced.bin");
    write_pseudo_random(&src, 48 << 20, 1313);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("paced.bin");
    let out = get(&["-p", "auto"], &server.http_url("paced.bin"), &dest);
    out.assert_success();
    assert_eq!(sha256_file(&dest), sha256_file(&src), "{}", out.describe());
    summary_says(&out, "(HTTP, auto ");
    assert!(
        stat(&out, "streams_peak") >= 2,
        "never went past one paced stream\n{}",
        out.describe()
    );
    assert!(stat(&out, "streams_changes") >= 1);
    // Ranges were cut and split, never fetched twice over.
    assert!(
        stat(&out, "bytes") <= (48 << 20) + (1 << 20),
        "{}",
        out.describe()
    );
}

#[test]
fn p_n_forces_n_streams() {
    let server = sluice_ro();
    let f = corpus().file(BIG);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("fixed.bin");
    for n in [1u64, 3] {
        let out = get(&["-p", &n.to_string()], &server.http_url(&f.name), &dest);
        assert_transferred(&out, &dest, f);
        let s = if n == 1 { "" } else { "s" };
        summary_says(&out, &format!("(HTTP, {n} stream{s})"));
        assert_eq!(stat(&out, "streams"), n);
        assert_eq!(stat(&out, "streams_peak"), n);
        assert_eq!(stat(&out, "streams_auto"), 0, "{}", out.describe());
    }
    // -p 0 is neither auto nor a count.
    let out = get(&["-p", "0"], &server.http_url(&f.name), &dest);
    assert_exit(&out, 2);
}

#[test]
fn ftp_get_p_auto_restarts_on_more_streams_when_each_is_paced() {
    // As over HTTP, each data connection is paced to 4 MB/s. MODE E fixes
    // a transfer's parallelism, so every change of count is an ABOR and a
    // RETR with the ranges received as restart marker: the file must come
    // out whole, each byte once.
    let server = sluice(ServeOptions {
        extra_args: vec!["--max-pacing-rate".into(), "4M".into()],
        ..Default::default()
    });
    let src = server.root.join("paced.bin");
    write_pseudo_random(&src, 48 << 20, 1414);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("paced.bin");
    let out = get(&["-p", "auto"], &server.url("paced.bin"), &dest);
    out.assert_success();
    assert_eq!(sha256_file(&dest), sha256_file(&src), "{}", out.describe());
    summary_says(&out, "(MODE E, auto ");
    assert!(
        stat(&out, "streams_peak") >= 2,
        "never went past one paced stream\n{}",
        out.describe()
    );
    assert!(stat(&out, "streams_changes") >= 1);
    assert_eq!(stat(&out, "duplicate_bytes"), 0);
    assert!(stat(&out, "bytes") <= 48 << 20, "{}", out.describe());
    assert!(!dir.path().join("paced.bin.part").exists());
    server.assert_running();
}

#[test]
fn ftp_auto_and_p_n_against_globus_gridftp_server() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let s = gridftp(false);
    let f = corpus().file(BIG);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("g.bin");
    let out = get(&["-p", "auto"], &s.url(&f.name), &dest);
    assert_transferred(&out, &dest, f);
    summary_says(&out, "(MODE E, auto ");
    assert!((1..=64).contains(&stat(&out, "streams_auto")));
    let out = get(&["-p", "3"], &s.url(&f.name), &dest);
    assert_transferred(&out, &dest, f);
    summary_says(&out, "(MODE E, 3 streams)");
    assert_eq!(stat(&out, "streams_auto"), 0);
    // A small file is not worth a second stream: one MODE S stream.
    let small = corpus().file((1 << 20) + 7);
    let out = get(&["-p", "auto"], &s.url(&small.name), &dest);
    assert_transferred(&out, &dest, small);
    summary_says(&out, "(MODE S, 1 stream)");
}
