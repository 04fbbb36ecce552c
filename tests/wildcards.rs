//! NLST and LIST with a wildcard in the last component (`NLST *.dat`,
//! what `mget *.dat` sends), as vsftpd answers them: the matching names,
//! with the directory part as the client wrote it on NLST; no match is
//! an empty listing (226), not an error. Checked with Python ftplib
//! against `sluice serve` (and against vsftpd with
//! SLUICE_ITEST_SERVER=vsftpd), and with tnftp's `mget`, sha256 compared.

use crate::harness::corpus::sha256_file;
use crate::harness::servers::{sluice_ro, under_test};
use crate::harness::*;
use std::fs;
use std::process::{Command, Stdio};

/// Python ftplib: one line per request, the code (or error) and the
/// listing's lines, separated by tabs.
const FTPLIB: &str = r#"
import ftplib, sys
f = ftplib.FTP()
f.connect('127.0.0.1', int(sys.argv[1]), timeout=30)
f.login()
for cmd in sys.argv[2:]:
    lines = []
    try:
        r = f.retrlines(cmd, lines.append)
        print('\t'.join([r[:3]] + lines))
    except ftplib.all_errors as e:
        print('\t'.join([str(e)[:3]] + lines))
f.quit()
"#;

fn ftplib(server: &FtpServer, cmds: &[&str]) -> Vec<(String, Vec<String>)> {
    let out = run(Command::new("python3")
        .args(["-c", FTPLIB, &server.port.to_string()])
        .args(cmds));
    out.assert_success();
    let got: Vec<(String, Vec<String>)> = out
        .stdout
        .lines()
        .map(|l| {
            let mut parts = l.split('\t').map(String::from);
            (parts.next().unwrap_or_default(), parts.collect())
        })
        .collect();
    assert_eq!(got.len(), cmds.len(), "{}", out.describe());
    got
}

fn make_tree(server: &FtpServer) {
    fs::create_dir_all(server.local("w/sub")).unwrap();
    fs::create_dir_all(server.local("w/dir.dat")).unwrap();
    for (name, body) in [
        ("w/a.dat", "a"),
        ("w/b.dat", "bb"),
        ("w/c.txt", "c"),
        ("w/sp ace.dat", "space"),
        ("w/.hidden.dat", "h"),
        ("w/sub/x.dat", "x"),
        ("w/sub/y.txt", "y"),
    ] {
        fs::write(server.local(name), body).unwrap();
    }
}

/// The cases vsftpd and Sluice answer alike (run against vsftpd with
/// SLUICE_ITEST_SERVER=vsftpd).
#[test]
fn nlst_and_list_expand_wildcards_as_vsftpd_does() {
    if !require_tool("python3") {
        return;
    }
    let server = under_test(false);
    make_tree(&server);
    let p = server.remote_path("w");
    let list = [
        format!("NLST {p}/*.dat"),
        format!("NLST {p}/sub/*.dat"),
        format!("NLST {p}/?.dat"),
        format!("NLST {p}/*.none"),
        format!("NLST {p}/.h*"),
        format!("LIST {p}/*.txt"),
        format!("LIST {p}/sub/*.txt"),
        format!("NLST {p}/a.dat"),
    ];
    let refs: Vec<&str> = list.iter().map(String::as_str).collect();
    let got = ftplib(&server, &refs);
    let sorted = |v: &Vec<String>| {
        let mut v = v.clone();
        v.sort();
        v
    };
    let names = |v: &[&str]| v.iter().map(|n| format!("{p}/{n}")).collect::<Vec<_>>();
    for (i, (code, _)) in got.iter().enumerate() {
        assert_eq!(code, "226", "{}: {got:?}", list[i]);
    }
    // `*` matches directories too, never hidden names.
    assert_eq!(
        sorted(&got[0].1),
        names(&["a.dat", "b.dat", "dir.dat", "sp ace.dat"])
    );
    assert_eq!(got[1].1, names(&["sub/x.dat"]));
    assert_eq!(got[2].1, names(&["a.dat", "b.dat"]));
    assert!(got[3].1.is_empty(), "{got:?}");
    assert_eq!(got[4].1, names(&[".hidden.dat"]));
    assert_eq!(got[5].1.len(), 1, "{got:?}");
    assert!(got[5].1[0].starts_with('-') && got[5].1[0].ends_with(" c.txt"));
    assert!(got[6].1[0].ends_with(" y.txt"), "{got:?}");
    assert_eq!(got[7].1, names(&["a.dat"]));
}

/// What vsftpd does not do: sets (`[ab]`, `[!a]`, as ProFTPD), a name
/// with wildcard characters listed as itself, and upload partials never
/// matched, even by `.*`.
#[test]
fn sets_literal_names_and_partials() {
    if !require_tool("python3") {
        return;
    }
    let server = sluice_ro();
    make_tree(&server);
    fs::write(server.local("w/[1].dat"), "lit").unwrap();
    fs::write(server.local("w/.a.dat.sluice-partial"), "part").unwrap();
    let got = ftplib(
        &server,
        &[
            "NLST w/[ab].dat",
            "NLST w/[!a].dat",
            "NLST w/[1].dat",
            "NLST w/.*",
            "MLSD w",
        ],
    );
    assert_eq!(got[0].1, ["w/a.dat", "w/b.dat"]);
    assert_eq!(got[1].1, ["w/b.dat"]);
    assert_eq!(got[2].1, ["w/[1].dat"]);
    assert_eq!(got[3].1, ["w/.hidden.dat"]);
    assert_eq!(got[4].0, "226");
}

/// tnftp's `mget *.dat` and `mget sub/*.dat`: every matching file arrives
/// whole (NLST with the prefix, then RETR of each name).
#[test]
fn tnftp_mget_fetches_the_matching_files() {
    if !require_tool("tnftp") {
        return;
    }
    let server = sluice_ro();
    make_tree(&server);
    fs::remove_dir(server.local("w/dir.dat")).unwrap();
    let dest = tempfile::tempdir().unwrap();
    fs::create_dir(dest.path().join("sub")).unwrap();
    let mut child = Command::new("tnftp")
        .args(["-n", "-p", &server.url("w/")])
        .current_dir(dest.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tnftp");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"prompt off\nbinary\nmget *.dat\nmget sub/*.dat\nquit\n")
            .unwrap();
    }
    let out = child.wait_with_output().expect("tnftp output");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = Vec::new();
    for e in walk(dest.path()) {
        got.push(e.strip_prefix(dest.path()).unwrap().display().to_string());
    }
    got.sort();
    assert_eq!(got, ["a.dat", "b.dat", "sp ace.dat", "sub/x.dat"], "{log}");
    for rel in &got {
        assert_eq!(
            sha256_file(&dest.path().join(rel)),
            sha256_file(&server.local(&format!("w/{rel}"))),
            "{rel}"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
