//! The `sluice get/put/ls` client against peers (vsftpd: MODE S;
//! globus-gridftp-server: MODE E with -p 4) and against `sluice serve`.

use crate::harness::corpus::{sha256_bytes, write_prefix};
use crate::harness::servers::{gridftp, sluice_ro, sluice_rw, vsftpd};
use crate::harness::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn sluice(args: &[&str]) -> Output {
    run(Command::new(sluice_bin()).args(args).env("NO_COLOR", "1"))
}

/// `sluice get [flags] URL DEST`.
fn get(flags: &[&str], url: &str, dest: &Path) -> Output {
    let mut args = vec!["get"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[url, dest.to_str().expect("utf-8 path")]);
    sluice(&args)
}

/// `sluice put [flags] FILE URL`.
fn put(flags: &[&str], file: &Path, url: &str) -> Output {
    let mut args = vec!["put"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[file.to_str().expect("utf-8 path"), url]);
    sluice(&args)
}

/// vsftpd, or None (test skipped) when it is not installed.
fn vsftpd_peer(writable: bool) -> Option<FtpServer> {
    require_tool("vsftpd").then(|| vsftpd(writable))
}

/// globus-gridftp-server, or None (test skipped) when it is not installed.
fn gridftp_peer(writable: bool) -> Option<FtpServer> {
    require_tool("globus-gridftp-server").then(|| gridftp(writable))
}

/// The value of the `stats: NAME VALUE` line `--stats` printed.
#[track_caller]
fn stat(out: &Output, name: &str) -> u64 {
    let prefix = format!("stats: {name} ");
    out.stderr
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` line\n{}", out.describe()))
}

/// Marks a successful run as failed if its summary line on stderr lacks
/// `expected` (the mode and stream count the client settled on, or the
/// resume offset).
fn require_summary(mut out: Output, expected: &str) -> Output {
    if out.success() && !out.stderr.contains(expected) {
        out.problem = Some(format!("summary does not say `{expected}`"));
    }
    out
}

/// Marks a successful download as failed if it left DEST.part behind.
fn no_part_left(mut out: Output, dest: &Path) -> Output {
    if out.success() && part_path(dest).exists() {
        out.problem = Some(format!("{} left behind", part_path(dest).display()));
    }
    out
}

/// `sluice get [flags] URL DEST` for every size; each run must name `mode`
/// in its summary and leave no DEST.part.
fn get_all(server: &FtpServer, flags: &[&str], mode: &str) {
    let what = format!("sluice get {} from {:?}", flags.join(" "), server.kind);
    download_all_sizes(server, &what, |f, dest| {
        no_part_left(
            require_summary(get(flags, &server.url(&f.name), dest), mode),
            dest,
        )
    });
}

/// `sluice put [flags] FILE URL` for every size; each run must name `mode`
/// in its summary.
fn put_all(server: &FtpServer, flags: &[&str], mode: &str) {
    let what = format!("sluice put {} to {:?}", flags.join(" "), server.kind);
    upload_all_sizes(server, &what, |f, rel| {
        require_summary(put(flags, &f.path, &server.url(rel)), mode)
    });
}

/// `sluice ls URL-of-root` names every file in the root; so does `ls -1`,
/// one name a line.
fn ls_names_everything(server: &FtpServer) {
    fs::create_dir(server.local("subdir")).expect("mkdir");
    let out = sluice(&["ls", &server.url("")]);
    out.assert_success();
    for f in corpus().files() {
        assert!(
            out.stdout.contains(&f.name),
            "`sluice ls` did not list {}\n{}",
            f.name,
            out.describe()
        );
    }
    assert!(
        out.stdout.contains("subdir"),
        "`sluice ls` did not list subdir\n{}",
        out.describe()
    );
    let out = sluice(&["ls", "-1", &server.url("")]);
    out.assert_success();
    for name in corpus()
        .files()
        .iter()
        .map(|f| f.name.as_str())
        .chain(["subdir"])
    {
        assert!(
            out.stdout.lines().any(|l| l.trim().ends_with(name)),
            "`sluice ls -1` has no line for {name}\n{}",
            out.describe()
        );
    }
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
/// holding a prefix of the file), fetching only the rest, and says where
/// it resumed.
fn get_continue(server: &FtpServer, flags: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let what = format!("sluice get --continue {flags:?} from {:?}", server.kind);
    let cases = [(BIG, BIG / 2 + 4321), ((1 << 20) + 7, 7), (4095, 4094)];
    resume_cases(server, &what, &cases, |f, keep| {
        let dest = dir.path().join(&f.name);
        write_prefix(&f.path, &part_path(&dest), keep);
        let flags = [&["--continue"][..], flags].concat();
        let out = require_summary(
            get(&flags, &server.url(&f.name), &dest),
            &format!("resumed at {keep}"),
        );
        // Only the missing part crosses the wire.
        let out = require_summary(out, &format!("received {} bytes", f.size - keep));
        (dest.clone(), no_part_left(out, &dest))
    });
}

/// `sluice put --continue` completes a remote file holding a prefix and
/// says where it resumed.
fn put_continue(server: &FtpServer, flags: &[&str]) {
    let what = format!("sluice put --continue {flags:?} to {:?}", server.kind);
    let cases = [(BIG, BIG / 3 + 99), ((1 << 20) + 7, 1 << 20), (4095, 1)];
    resume_cases(server, &what, &cases, |f, keep| {
        let rel = format!("partial-{}", f.name);
        write_prefix(&f.path, &server.local(&rel), keep);
        let flags = [&["--continue"][..], flags].concat();
        let out = require_summary(
            put(&flags, &f.path, &server.url(&rel)),
            &format!("resumed at {keep}"),
        );
        (server.local(&rel), out)
    });
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
    let out = get(
        &[&["--continue", "--verify"][..], flags].concat(),
        &server.url(&f.name),
        &dest,
    );
    if out.success() {
        if let Err(e) = compare_file(&dest, f) {
            panic!(
                "--verify reported success for a corrupt file: {e}\n{}",
                out.describe()
            );
        }
    } else if out.status.and_then(|s| s.code()) == Some(8) {
        // A mismatch says what to do: the kept part cannot be resumed.
        assert!(
            out.stderr.contains("download again without --continue"),
            "{}",
            out.describe()
        );
    }
    server.assert_running();
}

/// `sluice get [flags]` of a file the server does not have: exit 5, and
/// neither DEST nor an empty DEST.part left behind.
fn missing_file_is_exit_5(server: &FtpServer, flags: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("nothing");
    let out = get(flags, &server.url("nothing"), &dest);
    assert_exit(&out, 5);
    assert!(out.stderr.contains("sluice: "), "{}", out.describe());
    assert!(
        !dest.exists(),
        "{} created\n{}",
        dest.display(),
        out.describe()
    );
    assert!(
        !part_path(&dest).exists(),
        "empty .part left behind\n{}",
        out.describe()
    );
    server.assert_running();
}

// ---- against vsftpd (MODE S only) ----

#[test]
fn get_from_vsftpd() {
    let Some(s) = vsftpd_peer(false) else { return };
    get_all(&s, &[], "MODE S, 1 stream");
}

/// `-p 4` against a server without MODE E: the client's documented
/// fallback is one MODE S stream, with the same result.
#[test]
fn get_p4_from_vsftpd_falls_back_to_mode_s() {
    let Some(s) = vsftpd_peer(false) else { return };
    get_all(&s, &["-p", "4"], "MODE S, 1 stream");
}

#[test]
fn put_to_vsftpd() {
    let Some(s) = vsftpd_peer(true) else { return };
    put_all(&s, &[], "MODE S");
}

#[test]
fn put_p4_to_vsftpd_falls_back_to_mode_s() {
    let Some(s) = vsftpd_peer(true) else { return };
    put_all(&s, &["-p", "4"], "MODE S, 1 stream");
}

#[test]
fn ls_vsftpd() {
    let Some(s) = vsftpd_peer(false) else { return };
    ls_names_everything(&s);
}

#[test]
fn get_continue_from_vsftpd() {
    let Some(s) = vsftpd_peer(false) else { return };
    get_continue(&s, &[]);
}

#[test]
fn put_continue_to_vsftpd() {
    let Some(s) = vsftpd_peer(true) else { return };
    put_continue(&s, &[]);
}

/// DEST `-` writes the file to stdout; an existing directory as DEST gets
/// the URL's file name.
#[test]
fn get_to_stdout_and_into_directory_from_vsftpd() {
    let Some(s) = vsftpd_peer(false) else { return };
    let f = corpus().file(4095);
    let out = get(&[], &s.url(&f.name), Path::new("-"));
    out.assert_success();
    assert!(
        out.stdout_bytes == fs::read(&f.path).expect("read original"),
        "stdout is not the file\n{}",
        out.describe()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    assert_transferred(
        &get(&[], &s.url(&f.name), dir.path()),
        &dir.path().join(&f.name),
        f,
    );
}

/// A device or FIFO named as DEST (say /dev/null in a benchmark) is written
/// in place: the download must not rename a `.part` over the node. A FIFO
/// stands in for /dev/null so a failure cannot break the machine.
#[test]
fn get_into_a_fifo_writes_through_it_and_leaves_it_a_fifo() {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt as _;
    let s = sluice_ro();
    let f = corpus().file((1 << 20) + 7);
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("sink");
    for (flags, url) in [
        (vec!["-p", "4"], s.url(&f.name)),
        (vec!["-p", "4"], s.http_url(&f.name)),
    ] {
        let st = Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(st.success(), "mkfifo failed");
        let path = fifo.clone();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            fs::File::open(&path)
                .expect("open fifo")
                .read_to_end(&mut got)
                .expect("read fifo");
            got
        });
        let out = get(&flags, &url, &fifo);
        out.assert_success();
        let got = reader.join().expect("reader thread");
        assert_eq!(
            sha256_bytes(&got),
            sha256_file(&f.path),
            "{url}: bytes through the fifo differ\n{}",
            out.describe()
        );
        let kind = fs::symlink_metadata(&fifo)
            .expect("fifo still there")
            .file_type();
        assert!(
            kind.is_fifo(),
            "{url}: the fifo was replaced\n{}",
            out.describe()
        );
        assert!(
            !dir.path().join("sink.part").exists(),
            "{url}: a .part was left"
        );
        fs::remove_file(&fifo).expect("remove fifo");
    }
    // Resuming into a device makes no sense: a usage error, not a stray file.
    let st = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed");
    let out = get(&["--continue"], &s.url(&f.name), &fifo);
    assert_exit(&out, 2);
    assert!(
        out.stderr.contains("regular file DEST"),
        "{}",
        out.describe()
    );
}

/// vsftpd offers no CKSM: `--verify` cannot be honoured (exit 9), and the
/// unverified file does not get the final name.
#[test]
fn verify_unavailable_from_vsftpd_is_exit_9() {
    let Some(s) = vsftpd_peer(false) else { return };
    let f = corpus().file(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join(&f.name);
    let url = s.url(&f.name);
    let out = get(&["--verify"], &url, &dest);
    assert_exit(&out, 9);
    assert!(
        out.stderr.starts_with(&format!("sluice: {url}: ")),
        "{}",
        out.describe()
    );
    assert!(
        !dest.exists(),
        "unverified file renamed to {}",
        dest.display()
    );
}

#[test]
fn missing_file_from_vsftpd_is_exit_5() {
    let Some(s) = vsftpd_peer(false) else { return };
    missing_file_is_exit_5(&s, &[]);
}

/// vsftpd here takes only anonymous logins: a named user is refused (exit
/// 4) and the error line does not show the password.
#[test]
fn refused_login_to_vsftpd_is_exit_4_and_password_is_hidden() {
    let Some(s) = vsftpd_peer(false) else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("ftp://bob:s3cret@{}/x", s.addr());
    let out = get(&[], &url, &dir.path().join("x"));
    assert_exit(&out, 4);
    assert!(
        !out.stderr.contains("s3cret"),
        "password shown\n{}",
        out.describe()
    );
}

#[test]
fn refused_upload_to_read_only_vsftpd_is_exit_5() {
    let Some(s) = vsftpd_peer(false) else { return };
    let f = corpus().file(1);
    let out = put(&[], &f.path, &s.url("new-file"));
    assert_exit(&out, 5);
    assert!(!s.local("new-file").exists());
}

/// Nothing listens on the port: a network error, exit 3.
#[test]
fn connection_refused_is_exit_3() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("probe port")
        .port();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = get(
        &[],
        &format!("ftp://127.0.0.1:{port}/x"),
        &dir.path().join("x"),
    );
    assert_exit(&out, 3);
}

// Against globus-gridftp-server (MODE E, 4 streams): in client/gridftp.rs.
mod gridftp;

// ---- against sluice serve ----

#[test]
fn get_from_sluice() {
    get_all(&sluice_ro(), &["-p", "1"], "MODE S, 1 stream");
}

#[test]
fn get_p4_from_sluice() {
    get_all(&sluice_ro(), &["-p", "4"], "MODE E");
}

#[test]
fn get_p4_verify_from_sluice() {
    get_all(&sluice_ro(), &["-p", "4", "--verify"], "MODE E");
}

#[test]
fn put_to_sluice() {
    put_all(&sluice_rw(), &[], "MODE S");
}

#[test]
fn put_p4_verify_to_sluice() {
    put_all(&sluice_rw(), &["-p", "4", "--verify"], "MODE E");
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
mod hostile;
