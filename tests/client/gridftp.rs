//! `sluice get/put/ls` against globus-gridftp-server: MODE S with `-p 1`,
//! MODE E with 4 streams, `--continue` from the recorded prefix, IPv6,
//! `--stats` and the smallest `--mem-cap`.

use super::*;
use crate::harness::servers::gridftp_on;
use std::net::Ipv6Addr;

#[test]
fn get_from_gridftp_mode_s() {
    let Some(s) = gridftp_peer(false) else { return };
    // -p 1: without it a big file goes MODE E with a chosen count
    // (client_streams).
    get_all(&s, &["-p", "1"], "MODE S, 1 stream");
}

#[test]
fn get_p4_from_gridftp() {
    let Some(s) = gridftp_peer(false) else { return };
    get_all(&s, &["-p", "4"], "MODE E");
}

#[test]
fn get_p4_verify_from_gridftp() {
    let Some(s) = gridftp_peer(false) else { return };
    get_all(&s, &["-p", "4", "--verify"], "MODE E");
}

#[test]
fn put_to_gridftp_mode_s() {
    let Some(s) = gridftp_peer(true) else { return };
    put_all(&s, &[], "MODE S");
}

#[test]
fn put_p4_to_gridftp() {
    let Some(s) = gridftp_peer(true) else { return };
    put_all(&s, &["-p", "4"], "MODE E, 4 streams");
}

#[test]
fn put_p4_verify_to_gridftp() {
    let Some(s) = gridftp_peer(true) else { return };
    put_all(&s, &["-p", "4", "--verify"], "MODE E, 4 streams");
}

#[test]
fn ls_gridftp() {
    let Some(s) = gridftp_peer(false) else { return };
    ls_names_everything(&s);
}

#[test]
fn get_continue_from_gridftp_mode_s() {
    let Some(s) = gridftp_peer(false) else { return };
    get_continue(&s, &[]);
}

#[test]
fn get_continue_p4_from_gridftp() {
    let Some(s) = gridftp_peer(false) else { return };
    get_continue(&s, &["-p", "4"]);
}

#[test]
fn put_continue_p4_to_gridftp() {
    let Some(s) = gridftp_peer(true) else { return };
    put_continue(&s, &["-p", "4"]);
}

#[test]
fn put_continue_p4_verify_to_gridftp() {
    let Some(s) = gridftp_peer(true) else { return };
    put_continue(&s, &["-p", "4", "--verify"]);
}

#[test]
fn verify_catches_corrupt_prefix_from_gridftp() {
    let Some(s) = gridftp_peer(false) else { return };
    verify_catches_corrupt_prefix(&s, &["-p", "4"]);
}

/// A MODE E run left a .part with good data up to 300000, junk past it,
/// and a side file (.part.resume) recording 300000: `--continue` must
/// resume from the recorded prefix, not from the .part's length.
#[test]
fn get_continue_p4_from_gridftp_uses_recorded_prefix() {
    let Some(s) = gridftp_peer(false) else { return };
    let f = corpus().file((1 << 20) + 7);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join(&f.name);
    let part = part_path(&dest);
    write_prefix(&f.path, &part, 300_000);
    let mut bytes = fs::read(&part).expect("read prefix");
    bytes.extend(std::iter::repeat_n(0xAAu8, 500_000));
    fs::write(&part, &bytes).expect("write junk");
    let side = dir.path().join(format!("{}.part.resume", f.name));
    fs::write(&side, "300000\n").expect("write side file");
    let out = get(
        &["-p", "4", "--continue", "--verify"],
        &s.url(&f.name),
        &dest,
    );
    assert_transferred(&out, &dest, f);
    assert!(
        out.stderr.contains("resumed at 300000"),
        "{}",
        out.describe()
    );
    assert!(!side.exists(), "{} left behind", side.display());
}

/// The client over IPv6 loopback (EPSV/EPRT): MODE E both ways, MODE S down.
#[test]
fn ipv6_to_and_from_gridftp() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let s = gridftp_on(Ipv6Addr::LOCALHOST.into(), true);
    let f = corpus().file((1 << 20) + 7);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join(&f.name);
    let url = s.url(&f.name);
    assert!(url.starts_with("ftp://[::1]:"), "{url}");
    assert_transferred(&get(&["-p", "4"], &url, &dest), &dest, f);
    assert_transferred(
        &put(&["-p", "2"], &dest, &s.url("up-six")),
        &s.local("up-six"),
        f,
    );
    let dest_s = dir.path().join("mode-s");
    assert_transferred(&get(&[], &url, &dest_s), &dest_s, f);
    s.assert_running();
}

/// `--stats` counts every byte, at most the streams asked for, and the
/// receive stalls.
#[test]
fn stats_from_gridftp_count_bytes_streams_and_stalls() {
    let Some(s) = gridftp_peer(false) else { return };
    let f = corpus().file(BIG);
    let dir = tempfile::tempdir().expect("temp dir");
    let out = get(
        &["-p", "4", "--stats"],
        &s.url(&f.name),
        &dir.path().join(&f.name),
    );
    out.assert_success();
    assert_eq!(stat(&out, "bytes"), BIG, "{}", out.describe());
    stat(&out, "receive_stalls");
    let streams = stat(&out, "streams");
    assert!(
        (1..=4).contains(&streams),
        "{streams} streams\n{}",
        out.describe()
    );
}

#[test]
fn missing_file_from_gridftp_p4_is_exit_5() {
    let Some(s) = gridftp_peer(false) else { return };
    missing_file_is_exit_5(&s, &["-p", "4"]);
}

/// The smallest `--mem-cap` holds the drain thread back (backpressure)
/// without losing data.
#[test]
fn smallest_mem_cap_from_gridftp_applies_backpressure_without_loss() {
    let Some(s) = gridftp_peer(false) else { return };
    let f = corpus().file(BIG);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join(&f.name);
    let out = get(
        &["-p", "4", "--mem-cap", "1048576", "--stats"],
        &s.url(&f.name),
        &dest,
    );
    assert_transferred(&out, &dest, f);
    // The cap bounds what sits between drain and writer: one block may
    // pass an empty budget, so the peak is at most cap + one chunk.
    let peak = stat(&out, "mem_peak");
    assert!(
        peak <= (1 << 20) + (128 << 10),
        "mem_peak {peak}\n{}",
        out.describe()
    );
}
