//! The `sluice get/put/ls` client against peers (vsftpd: MODE S;
//! globus-gridftp-server: MODE E with -p 4) and against `sluice serve`.

use crate::harness::corpus::write_prefix;
use crate::harness::servers::{gridftp, sluice_ro, sluice_rw, vsftpd};
use crate::harness::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn sluice(args: &[&str]) -> Output {
    run(Command::new(sluice_bin()).args(args).env("NO_COLOR", "1"))
}

/// `sluice get [flags] URL DEST` for every size.
fn get_all(server: &FtpServer, flags: &[&str]) {
    let what = format!("sluice get {} from {:?}", flags.join(" "), server.kind);
    download_all_sizes(server, &what, |f, dest| {
        let url = server.url(&f.name);
        let dest = dest.to_str().expect("utf-8 path");
        let mut args = vec!["get"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[&url, dest]);
        sluice(&args)
    });
}

/// `sluice put [flags] FILE URL` for every size.
fn put_all(server: &FtpServer, flags: &[&str]) {
    let what = format!("sluice put {} to {:?}", flags.join(" "), server.kind);
    upload_all_sizes(server, &what, |f, rel| {
        let url = server.url(rel);
        let src = f.path.to_str().expect("utf-8 path");
        let mut args = vec!["put"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[src, &url]);
        sluice(&args)
    });
}

/// `sluice ls URL-of-root` names every file in the root.
fn ls_names_everything(server: &FtpServer) {
    fs::create_dir(server.local("subdir")).expect("mkdir");
    let out = sluice(&["ls", &server.url("")]);
    out.assert_success();
    for f in corpus().files() {
        assert!(out.stdout.contains(&f.name), "`sluice ls` did not list {}\n{}", f.name, out.describe());
    }
    assert!(out.stdout.contains("subdir"), "`sluice ls` did not list subdir\n{}", out.describe());
    server.assert_running();
}

/// Where `sluice get` keeps a download until it is complete (the client's
/// documented contract: DEST.part, renamed to DEST on success).
fn part_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// `sluice get --continue` completes an interrupted download (DEST.part
/// holding a prefix of the file).
fn get_continue(server: &FtpServer, flags: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut failures = Vec::new();
    for (size, keep) in [(BIG, BIG / 2 + 4321), ((1 << 20) + 7, 7), (4095, 4094)] {
        let f = corpus().file(size);
        let dest = dir.path().join(&f.name);
        write_prefix(&f.path, &part_path(&dest), keep);
        let url = server.url(&f.name);
        let mut args = vec!["get", "--continue"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[&url, dest.to_str().expect("utf-8")]);
        let out = sluice(&args);
        if !out.success() {
            failures.push(format!("{} from {keep}: client failed\n{}", f.name, out.describe()));
        } else if let Err(e) = compare_file(&dest, f) {
            failures.push(format!("{} from {keep}: {e}\n{}", f.name, out.describe()));
        } else if part_path(&dest).exists() {
            failures.push(format!("{} from {keep}: {} left behind\n{}", f.name, part_path(&dest).display(), out.describe()));
        }
    }
    server.assert_running();
    assert!(failures.is_empty(), "sluice get --continue {flags:?} from {:?}:\n{}", server.kind, failures.join("\n\n"));
}

/// `sluice put --continue` completes a remote file holding a prefix.
fn put_continue(server: &FtpServer, flags: &[&str]) {
    let mut failures = Vec::new();
    for (size, keep) in [(BIG, BIG / 3 + 99), ((1 << 20) + 7, 1 << 20), (4095, 1)] {
        let f = corpus().file(size);
        let rel = format!("partial-{}", f.name);
        write_prefix(&f.path, &server.local(&rel), keep);
        let url = server.url(&rel);
        let mut args = vec!["put", "--continue"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[f.path.to_str().expect("utf-8"), &url]);
        let out = sluice(&args);
        if !out.success() {
            failures.push(format!("{} from {keep}: client failed\n{}", f.name, out.describe()));
        } else if let Err(e) = compare_file(&server.local(&rel), f) {
            failures.push(format!("{} from {keep}: {e}\n{}", f.name, out.describe()));
        }
    }
    server.assert_running();
    assert!(failures.is_empty(), "sluice put --continue {flags:?} to {:?}:\n{}", server.kind, failures.join("\n\n"));
}

/// An interrupted download (DEST.part) with one wrong byte, then `get --continue --verify`: the
/// client must either fail or end with the right file; never report
/// success for a corrupt one.
fn verify_catches_corrupt_prefix(server: &FtpServer, flags: &[&str]) {
    let f = corpus().file((1 << 20) + 7);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join(&f.name);
    let part = part_path(&dest);
    write_prefix(&f.path, &part, 1 << 19);
    let mut bytes = fs::read(&part).expect("read prefix");
    bytes[1000] ^= 0xff;
    fs::write(&part, &bytes).expect("corrupt prefix");
    let url = server.url(&f.name);
    let mut args = vec!["get", "--continue", "--verify"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[&url, dest.to_str().expect("utf-8")]);
    let out = sluice(&args);
    if out.success() {
        if let Err(e) = compare_file(&dest, f) {
            panic!("--verify reported success for a corrupt file: {e}\n{}", out.describe());
        }
    }
    server.assert_running();
}

// ---- against vsftpd (MODE S only) ----

#[test]
fn get_from_vsftpd() {
    if !require_tool("vsftpd") {
        return;
    }
    get_all(&vsftpd(false), &[]);
}

/// `-p 4` against a server without MODE E: the client's documented
/// fallback is one MODE S stream, with the same result.
#[test]
fn get_p4_from_vsftpd_falls_back_to_mode_s() {
    if !require_tool("vsftpd") {
        return;
    }
    get_all(&vsftpd(false), &["-p", "4"]);
}

#[test]
fn put_to_vsftpd() {
    if !require_tool("vsftpd") {
        return;
    }
    put_all(&vsftpd(true), &[]);
}

#[test]
fn ls_vsftpd() {
    if !require_tool("vsftpd") {
        return;
    }
    ls_names_everything(&vsftpd(false));
}

#[test]
fn get_continue_from_vsftpd() {
    if !require_tool("vsftpd") {
        return;
    }
    get_continue(&vsftpd(false), &[]);
}

#[test]
fn put_continue_to_vsftpd() {
    if !require_tool("vsftpd") {
        return;
    }
    put_continue(&vsftpd(true), &[]);
}

// ---- against globus-gridftp-server (MODE E, 4 streams) ----

fn have_gridftp() -> bool {
    require_tool("globus-gridftp-server")
}

#[test]
fn get_p4_from_gridftp() {
    if !have_gridftp() {
        return;
    }
    get_all(&gridftp(false), &["-p", "4"]);
}

#[test]
fn get_p4_verify_from_gridftp() {
    if !have_gridftp() {
        return;
    }
    get_all(&gridftp(false), &["-p", "4", "--verify"]);
}

#[test]
fn put_p4_to_gridftp() {
    if !have_gridftp() {
        return;
    }
    put_all(&gridftp(true), &["-p", "4"]);
}

#[test]
fn put_p4_verify_to_gridftp() {
    if !have_gridftp() {
        return;
    }
    put_all(&gridftp(true), &["-p", "4", "--verify"]);
}

#[test]
fn ls_gridftp() {
    if !have_gridftp() {
        return;
    }
    ls_names_everything(&gridftp(false));
}

#[test]
fn get_continue_p4_from_gridftp() {
    if !have_gridftp() {
        return;
    }
    get_continue(&gridftp(false), &["-p", "4"]);
}

#[test]
fn put_continue_p4_to_gridftp() {
    if !have_gridftp() {
        return;
    }
    put_continue(&gridftp(true), &["-p", "4"]);
}

#[test]
fn verify_catches_corrupt_prefix_from_gridftp() {
    if !have_gridftp() {
        return;
    }
    verify_catches_corrupt_prefix(&gridftp(false), &["-p", "4"]);
}

// ---- against sluice serve ----

#[test]
fn get_from_sluice() {
    get_all(&sluice_ro(), &[]);
}

#[test]
fn get_p4_from_sluice() {
    get_all(&sluice_ro(), &["-p", "4"]);
}

#[test]
fn get_p4_verify_from_sluice() {
    get_all(&sluice_ro(), &["-p", "4", "--verify"]);
}

#[test]
fn put_to_sluice() {
    put_all(&sluice_rw(), &[]);
}

#[test]
fn put_p4_verify_to_sluice() {
    put_all(&sluice_rw(), &["-p", "4", "--verify"]);
}

#[test]
fn ls_sluice() {
    ls_names_everything(&sluice_ro());
}

#[test]
fn get_continue_p4_from_sluice() {
    get_continue(&sluice_ro(), &["-p", "4"]);
}

#[test]
fn put_continue_to_sluice() {
    put_continue(&sluice_rw(), &[]);
}

/// ESTO A k in MODE E (blocks numbered from k).
#[test]
fn put_continue_p4_to_sluice() {
    put_continue(&sluice_rw(), &["-p", "4"]);
}

#[test]
fn verify_catches_corrupt_prefix_from_sluice() {
    verify_catches_corrupt_prefix(&sluice_ro(), &["-p", "4"]);
}
