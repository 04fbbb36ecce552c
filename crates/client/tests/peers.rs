//! The client against real servers on loopback: vsftpd (plain FTP, MODE S
//! only) and globus-gridftp-server (GridFTP: MODE E, ERET/ESTO, CKSM).
//! Each test starts its own server in a temp dir and skips with a printed
//! reason when the peer is not installed (fails instead when
//! SLUICE_REQUIRE_PEERS=1). Every transfer is checked by sha256.

mod common;

use common::{ok, pattern, run, sha256_file, Peer, SIZES};
use std::path::Path;

fn same(a: &Path, b: &Path) {
    assert_eq!(
        sha256_file(a),
        sha256_file(b),
        "{} != {}",
        a.display(),
        b.display()
    );
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Downloads every size with the given extra flags; checks content, that
/// no `.part` is left and that the summary line names `mode`.
fn get_all_sizes(peer: &Peer, flags: &[&str], mode: &str) {
    let out = peer.scratch();
    for (i, &len) in SIZES.iter().enumerate() {
        let name = format!("f{i}-{len}");
        let src = peer.put_file(&name, len, 7 + i as u64);
        let dest = out.join(format!("{name}{}", flags.join("")));
        let url = peer.url(&name);
        let mut args = vec!["get"];
        args.extend_from_slice(flags);
        args.push(&url);
        let d = dest.display().to_string();
        args.push(&d);
        let o = ok(&args);
        same(&src, &dest);
        assert!(
            !Path::new(&format!("{d}.part")).exists(),
            ".part left behind"
        );
        let e = stderr(&o);
        assert!(
            e.contains(&format!("received {} bytes", len)) || e.contains("received"),
            "{e}"
        );
        assert!(e.contains(mode), "expected {mode} in: {e}");
    }
}

fn put_all_sizes(peer: &Peer, flags: &[&str], mode: &str) {
    let local = peer.scratch();
    for (i, &len) in SIZES.iter().enumerate() {
        let name = format!("u{i}-{len}{}", flags.join("").replace(' ', ""));
        let src = local.join(&name);
        std::fs::write(&src, pattern(len, 100 + i as u64)).unwrap();
        let url = peer.url(&format!("up/{name}"));
        let s = src.display().to_string();
        let mut args = vec!["put"];
        args.extend_from_slice(flags);
        args.push(&s);
        args.push(&url);
        let o = ok(&args);
        same(&src, &peer.upload.join(&name));
        assert!(stderr(&o).contains(mode), "{}", stderr(&o));
    }
}

// ---- vsftpd -----------------------------------------------------------

#[test]
fn vsftpd_get_every_size_one_stream() {
    let Some(p) = common::vsftpd() else { return };
    get_all_sizes(&p, &[], "MODE S, 1 stream");
}

#[test]
fn vsftpd_get_parallel_falls_back_to_mode_s() {
    let Some(p) = common::vsftpd() else { return };
    get_all_sizes(&p, &["-p", "4"], "MODE S, 1 stream");
}

#[test]
fn vsftpd_put_every_size() {
    let Some(p) = common::vsftpd() else { return };
    put_all_sizes(&p, &[], "MODE S");
    put_all_sizes(&p, &["-p", "4"], "MODE S");
}

#[test]
fn vsftpd_resume_download_from_part() {
    let Some(p) = common::vsftpd() else { return };
    let len = (1 << 20) + 7;
    let src = p.put_file("r", len, 3);
    let dest = p.scratch().join("r");
    let data = std::fs::read(&src).unwrap();
    std::fs::write(p.scratch().join("r.part"), &data[..300_000]).unwrap();
    let o = ok(&[
        "get",
        "--continue",
        &p.url("r"),
        &dest.display().to_string(),
    ]);
    same(&src, &dest);
    assert!(stderr(&o).contains("resumed at 300000"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("received 748583 bytes"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn vsftpd_resume_upload() {
    let Some(p) = common::vsftpd() else { return };
    let local = p.scratch().join("big");
    let data = pattern((1 << 20) + 7, 9);
    std::fs::write(&local, &data).unwrap();
    // A first, interrupted upload left 12345 bytes on the server.
    ok(&["put", &trunc_copy(&local, 12345), &p.url("up/big")]);
    assert_eq!(
        std::fs::metadata(p.upload.join("big")).unwrap().len(),
        12345
    );
    let o = ok(&[
        "put",
        "--continue",
        &local.display().to_string(),
        &p.url("up/big"),
    ]);
    same(&local, &p.upload.join("big"));
    assert!(stderr(&o).contains("resumed at 12345"), "{}", stderr(&o));
}

#[test]
fn vsftpd_verify_unavailable_is_exit_9() {
    let Some(p) = common::vsftpd() else { return };
    p.put_file("v", 10, 1);
    let dest = p.scratch().join("v");
    let o = run(&["get", "--verify", &p.url("v"), &dest.display().to_string()]);
    assert_eq!(o.status.code(), Some(9));
    assert!(
        stderr(&o).starts_with(&format!("sluice: {}: ", p.url("v"))),
        "{}",
        stderr(&o)
    );
    assert!(!dest.exists());
}

#[test]
fn vsftpd_missing_file_is_exit_5() {
    let Some(p) = common::vsftpd() else { return };
    let dest = p.scratch().join("nothing");
    let o = run(&["get", &p.url("nothing"), &dest.display().to_string()]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("sluice: "), "{}", stderr(&o));
    assert!(!dest.exists());
    assert!(
        !p.scratch().join("nothing.part").exists(),
        "empty .part left behind"
    );
}

#[test]
fn vsftpd_get_to_stdout_and_into_directory() {
    let Some(p) = common::vsftpd() else { return };
    let src = p.put_file("s", 4095, 5);
    let o = ok(&["get", &p.url("s"), "-"]);
    assert_eq!(o.stdout, std::fs::read(&src).unwrap());
    let dir = p.scratch();
    ok(&["get", &p.url("s"), &dir.display().to_string()]);
    same(&src, &dir.join("s"));
}

#[test]
fn vsftpd_ls_lists_names() {
    let Some(p) = common::vsftpd() else { return };
    p.put_file("listed-file", 3, 1);
    let o = ok(&["ls", &p.url("")]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("listed-file"));
    let o = ok(&["ls", "-1", &p.url("")]);
    assert!(String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.trim().ends_with("listed-file")));
}

#[test]
fn connection_refused_is_exit_3() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = run(&[
        "get",
        &format!("ftp://127.0.0.1:{port}/x"),
        "/tmp/sluice-never-written",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

// ---- globus-gridftp-server --------------------------------------------

#[test]
fn globus_get_every_size_mode_e_p4_verified() {
    let Some(p) = common::globus() else { return };
    get_all_sizes(&p, &["-p", "4", "--verify"], "MODE E");
}

#[test]
fn globus_get_every_size_mode_s() {
    let Some(p) = common::globus() else { return };
    get_all_sizes(&p, &[], "MODE S, 1 stream");
}

#[test]
fn globus_put_every_size_mode_e_p4_verified() {
    let Some(p) = common::globus() else { return };
    put_all_sizes(&p, &["-p", "4", "--verify"], "MODE E, 4 streams");
}

#[test]
fn globus_put_every_size_mode_s() {
    let Some(p) = common::globus() else { return };
    put_all_sizes(&p, &[], "MODE S");
}

#[test]
fn globus_resume_download_mode_e_uses_recorded_prefix() {
    let Some(p) = common::globus() else { return };
    let len = (1 << 20) + 7;
    let src = p.put_file("r", len, 3);
    let data = std::fs::read(&src).unwrap();
    let dest = p.scratch().join("r");
    // A MODE E run left a .part with a hole after 300000 bytes and junk
    // beyond it; its side file says only the first 300000 are good.
    let mut part = data[..300_000].to_vec();
    part.extend(std::iter::repeat_n(0xAAu8, 500_000));
    std::fs::write(p.scratch().join("r.part"), &part).unwrap();
    std::fs::write(p.scratch().join("r.part.resume"), "300000\n").unwrap();
    let o = ok(&[
        "get",
        "-p",
        "4",
        "--continue",
        "--verify",
        &p.url("r"),
        &dest.display().to_string(),
    ]);
    same(&src, &dest);
    assert!(stderr(&o).contains("resumed at 300000"), "{}", stderr(&o));
    assert!(!p.scratch().join("r.part.resume").exists());
}

#[test]
fn globus_resume_download_mode_s() {
    let Some(p) = common::globus() else { return };
    let src = p.put_file("r", 64 << 20, 4);
    let data = std::fs::read(&src).unwrap();
    let dest = p.scratch().join("r");
    std::fs::write(p.scratch().join("r.part"), &data[..(10 << 20) + 3]).unwrap();
    let o = ok(&[
        "get",
        "--continue",
        &p.url("r"),
        &dest.display().to_string(),
    ]);
    same(&src, &dest);
    assert!(
        stderr(&o).contains(&format!("resumed at {}", (10 << 20) + 3)),
        "{}",
        stderr(&o)
    );
}

#[test]
fn globus_resume_upload_mode_e() {
    let Some(p) = common::globus() else { return };
    let local = p.scratch().join("big");
    let data = pattern((1 << 20) + 7, 11);
    std::fs::write(&local, &data).unwrap();
    ok(&["put", &trunc_copy(&local, 400_001), &p.url("up/big")]);
    let o = ok(&[
        "put",
        "-p",
        "4",
        "--continue",
        "--verify",
        &local.display().to_string(),
        &p.url("up/big"),
    ]);
    same(&local, &p.upload.join("big"));
    assert!(stderr(&o).contains("resumed at 400001"), "{}", stderr(&o));
}

#[test]
fn globus_ipv6_mode_e_both_ways() {
    let Some(p) = common::globus() else { return };
    if std::net::TcpStream::connect(("::1", p.port)).is_err() {
        common::skip::<()>("globus-gridftp-server not reachable on ::1");
        return;
    }
    let src = p.put_file("six", (1 << 20) + 7, 6);
    let dest = p.scratch().join("six");
    ok(&[
        "get",
        "-p",
        "4",
        &p.url6("six"),
        &dest.display().to_string(),
    ]);
    same(&src, &dest);
    ok(&[
        "put",
        "-p",
        "2",
        &dest.display().to_string(),
        &p.url6("up/six"),
    ]);
    same(&src, &p.upload.join("six"));
    ok(&["get", &p.url6("six"), &format!("{}.s", dest.display())]);
}

#[test]
fn globus_stats_counts_streams_and_stalls() {
    let Some(p) = common::globus() else { return };
    p.put_file("st", 64 << 20, 8);
    let dest = p.scratch().join("st");
    let o = ok(&[
        "get",
        "-p",
        "4",
        "--stats",
        &p.url("st"),
        &dest.display().to_string(),
    ]);
    let e = stderr(&o);
    assert!(e.contains(&format!("stats: bytes {}", 64u64 << 20)), "{e}");
    assert!(e.contains("stats: receive_stalls "), "{e}");
    let streams: u64 = e
        .lines()
        .find_map(|l| l.strip_prefix("stats: streams "))
        .and_then(|v| v.trim().parse().ok())
        .expect("streams line");
    assert!((1..=4).contains(&streams), "{e}");
}

#[test]
fn globus_missing_file_is_exit_5() {
    let Some(p) = common::globus() else { return };
    let dest = p.scratch().join("nothing");
    let o = run(&[
        "get",
        "-p",
        "4",
        &p.url("nothing"),
        &dest.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(!dest.exists());
}

/// Writes the first `n` bytes of `src` next to it and returns its path.
fn trunc_copy(src: &Path, n: usize) -> String {
    let data = std::fs::read(src).unwrap();
    let p = src.with_extension("head");
    // Same file name on the server: upload `head` under the URL's name.
    std::fs::write(&p, &data[..n]).unwrap();
    p.display().to_string()
}

#[test]
fn globus_smallest_memory_cap_applies_backpressure_without_loss() {
    let Some(p) = common::globus() else { return };
    let src = p.put_file("cap", 64 << 20, 12);
    let dest = p.scratch().join("cap");
    let o = ok(&[
        "get",
        "-p",
        "4",
        "--mem-cap",
        "1048576",
        "--stats",
        &p.url("cap"),
        &dest.display().to_string(),
    ]);
    same(&src, &dest);
    // The cap bounds what sits between drain and writer: one block may
    // pass an empty budget, so the peak is at most cap + one chunk.
    let peak: u64 = stderr(&o)
        .lines()
        .find_map(|l| l.strip_prefix("stats: mem_peak "))
        .and_then(|v| v.trim().parse().ok())
        .expect("mem_peak line");
    assert!(peak <= (1 << 20) + (128 << 10), "mem_peak {peak}");
}

#[test]
fn vsftpd_refused_login_is_exit_4_and_password_is_hidden() {
    let Some(p) = common::vsftpd() else { return };
    let url = format!("ftp://bob:s3cret@127.0.0.1:{}/x", p.port);
    let o = run(&["get", &url, &p.scratch().join("x").display().to_string()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(!stderr(&o).contains("s3cret"), "{}", stderr(&o));
}

#[test]
fn vsftpd_refused_upload_is_exit_5() {
    let Some(p) = common::vsftpd() else { return };
    let local = p.scratch().join("l");
    std::fs::write(&local, b"x").unwrap();
    // The anonymous root itself is not writable, only `up/` is.
    let o = run(&["put", &local.display().to_string(), &p.url("l")]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
}
