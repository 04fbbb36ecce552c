//! GridFTP data channel caching on downloads: `sluice serve` keeps a MODE E
//! download's data connections open after their EOD (no CLOSE) and sends
//! the next file on them with `125`, as globus-gridftp-server does. Real
//! clients, real binaries, every file's sha256 compared; the server's
//! debug log says how many data connections it made and reused.

use crate::harness::corpus::write_pseudo_random;
use crate::harness::servers::{sluice, FtpServer, ServeOptions};
use crate::harness::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

/// ~50 small files in 3 directories under `root/tree`.
fn small_tree(root: &Path) -> BTreeMap<String, String> {
    let mut want = BTreeMap::new();
    for d in 0..3 {
        let dir = root.join(format!("tree/d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for i in 0..17 {
            let size = ((i * 4099 + d * 31) % 90_000) as u64;
            let p = dir.join(format!("f{i:02}"));
            write_pseudo_random(&p, size, (d * 100 + i) as u64);
            want.insert(format!("d{d}/f{i:02}"), sha256_file(&p));
        }
    }
    want
}

/// Relative path -> sha256 of the regular files under `dir`.
fn sums(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for d in fs::read_dir(dir).unwrap() {
        let d = d.unwrap().path();
        for f in fs::read_dir(&d).unwrap() {
            let f = f.unwrap().path();
            let rel = f.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
            out.insert(rel, sha256_file(&f));
        }
    }
    out
}

fn serve(root: &Path) -> FtpServer {
    sluice(ServeOptions {
        root: Some(root.to_path_buf()),
        extra_args: vec!["--log-level".into(), "debug".into()],
        ..ServeOptions::default()
    })
}

/// (data connections made, transfers on kept ones) from the debug log.
fn connection_counts(server: &FtpServer) -> (usize, usize) {
    let log = server.stderr_text();
    let made: usize = log
        .lines()
        .filter(|l| l.contains("data connections made"))
        .map(|l| {
            l.split("streams=")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(1)
        })
        .sum();
    let reused = log
        .lines()
        .filter(|l| l.contains("reusing kept data connections"))
        .count();
    (made, reused)
}

/// globus-url-copy -pp -r (one session, then -cc 4: four) downloads a
/// tree of 51 small files from `sluice serve`: every file right, and far
/// fewer data connections than files (one per session for its first
/// RETR, one per directory listing).
#[test]
fn globus_url_copy_pp_reuses_mode_e_download_connections() {
    if !require_tool("globus-url-copy") {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let root = top.path().join("root");
    let want = small_tree(&root);
    let files = want.len();
    for cc in ["1", "4"] {
        let server = serve(&root);
        let dest = top.path().join(format!("down-cc{cc}"));
        fs::create_dir_all(&dest).unwrap();
        let out = run(Command::new("globus-url-copy").args([
            "-pp",
            "-r",
            "-cc",
            cc,
            &server.url("tree/"),
            &format!("file://{}/", dest.display()),
        ]));
        out.assert_success();
        assert_eq!(sums(&dest), want, "-cc {cc}\n{}", out.describe());
        let (made, reused) = connection_counts(&server);
        eprintln!("-cc {cc}: {made} data connections made, {reused} transfers on kept ones, {files} files");
        // 3 directory listings plus at most one RETR connection per
        // session: at most 3 + 4 + 4 (globus may list on its own too).
        assert!(
            made <= 12 && reused + made >= files && reused >= files - 8,
            "-cc {cc}: {made} data connections made, {reused} transfers on kept ones, \
             {files} files\n{}",
            server.stderr_text()
        );
    }
}

fn sluice_get_tree(url: &str, dest: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(["get", "-r", "-q"]).args(extra).arg(url).arg(dest);
    run(&mut cmd)
}

/// `sluice get -r` lists a level's directories pipelined on one kept MODE
/// E connection and moves small files on one kept connection per worker:
/// from `sluice serve` (one worker: two data connections for 4 listings
/// and 51 files; four workers: five), a re-sync (one), and from
/// globus-gridftp-server (which needs the PORT side the client takes);
/// every file's sha256 compared.
#[test]
fn sluice_get_tree_keeps_one_mode_e_connection_per_worker() {
    let top = tempfile::tempdir().unwrap();
    let root = top.path().join("root");
    let want = small_tree(&root);
    let files = want.len();
    for workers in ["1", "4"] {
        let server = serve(&root);
        let dest = top.path().join(format!("down-{workers}"));
        let out = sluice_get_tree(&server.url("tree/"), &dest, &["--files", workers]);
        out.assert_success();
        assert_eq!(sums(&dest), want, "--files {workers}\n{}", out.describe());
        let (made, reused) = connection_counts(&server);
        let workers: usize = workers.parse().unwrap();
        // The 4 listings (tree/, then its 3 directories pipelined) share
        // one connection; then one per worker.
        assert!(
            made <= 1 + workers && reused >= files - workers + 3,
            "--files {workers}: {made} data connections made, {reused} transfers on kept \
             ones, {files} files\n{}",
            server.stderr_text()
        );
    }
    // A re-sync with nothing to do lists the 4 directories on one data
    // connection and moves nothing.
    let server = serve(&root);
    let dest = top.path().join("down-1");
    let out = sluice_get_tree(&server.url("tree/"), &dest, &["--sync"]);
    out.assert_success();
    assert!(out.stderr.contains("51 up to date"), "{}", out.describe());
    assert_eq!(
        connection_counts(&server),
        (1, 3),
        "{}",
        server.stderr_text()
    );
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let g = crate::harness::servers::gridftp(true);
    let there = g.local("tree");
    small_tree(&g.local(""));
    assert!(there.is_dir());
    let dest = top.path().join("down-globus");
    let out = sluice_get_tree(&g.url("tree/"), &dest, &["--files", "2"]);
    out.assert_success();
    assert_eq!(sums(&dest), want, "from globus\n{}", out.describe());
}

fn sluice_put_tree(src: &Path, url: &str, extra: &[&str]) -> Output {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(["put", "-r", "-q"]).args(extra).arg(src).arg(url);
    run(&mut cmd)
}

fn serve_writable(root: &Path) -> FtpServer {
    sluice(ServeOptions {
        root: Some(root.to_path_buf()),
        writable: true,
        extra_args: vec!["--log-level".into(), "debug".into()],
        ..ServeOptions::default()
    })
}

/// `sluice put -r` sends every file of a worker on one kept MODE E
/// connection, STORs and data pipelined ahead of the replies: to `sluice
/// serve` (one worker: one data connection for 51 files; four workers:
/// at most four), a `--sync` after one file changed (that file only),
/// and to globus-gridftp-server; every file's sha256 compared.
#[test]
fn sluice_put_tree_keeps_one_mode_e_connection_per_worker() {
    let top = tempfile::tempdir().unwrap();
    let src = top.path().join("src");
    let want = small_tree(&src);
    let files = want.len();
    let tree = src.join("tree");
    for workers in ["1", "4"] {
        let root = top.path().join(format!("srv-{workers}"));
        fs::create_dir_all(&root).unwrap();
        let server = serve_writable(&root);
        let out = sluice_put_tree(&tree, &server.url("up/"), &["--files", workers]);
        out.assert_success();
        assert_eq!(
            sums(&root.join("up")),
            want,
            "--files {workers}\n{}",
            out.describe()
        );
        let (made, reused) = connection_counts(&server);
        let workers: usize = workers.parse().unwrap();
        assert!(
            made <= workers && reused >= files - workers,
            "--files {workers}: {made} data connections made, {reused} transfers on kept \
             ones, {files} files\n{}",
            server.stderr_text()
        );
    }
    // One file changed (same size, another time): the re-sync sends it
    // alone, on the kept channel.
    let changed = tree.join("d1/f03");
    let size = fs::metadata(&changed).unwrap().len();
    write_pseudo_random(&changed, size, 4242);
    fs::File::options()
        .write(true)
        .open(&changed)
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000))
        .unwrap();
    let want = sums(&tree);
    let root = top.path().join("srv-1");
    let server = serve_writable(&root);
    let out = sluice_put_tree(&tree, &server.url("up/"), &["--sync"]);
    out.assert_success();
    assert!(
        out.stderr.contains("1 of 51 files, 50 up to date"),
        "{}",
        out.describe()
    );
    assert_eq!(sums(&root.join("up")), want);
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let g = crate::harness::servers::gridftp(true);
    let out = sluice_put_tree(&tree, &g.url("up/"), &["--files", "2"]);
    out.assert_success();
    assert_eq!(sums(&g.local("up")), want, "to globus\n{}", out.describe());
    // A re-sync lists globus's copy with the MLSDs sent behind the login
    // (no MFMT there: the times differ, so every file goes again).
    let out = sluice_put_tree(&tree, &g.url("up/"), &["--sync"]);
    out.assert_success();
    assert!(out.stderr.contains("of 51 files"), "{}", out.describe());
    assert_eq!(
        sums(&g.local("up")),
        want,
        "re-sync to globus\n{}",
        out.describe()
    );
    // vsftpd refuses MODE E and has no MLSD: the MLSDs sent ahead are
    // read and dropped, the upload goes the MODE S way.
    if !require_tool("vsftpd") {
        return;
    }
    let v = crate::harness::servers::vsftpd(true);
    for _ in 0..2 {
        let out = sluice_put_tree(&tree, &v.url("up/"), &["--sync"]);
        out.assert_success();
        assert_eq!(sums(&v.local("up")), want, "to vsftpd\n{}", out.describe());
    }
}

/// A refused STOR with files pipelined behind it (their data already on
/// the kept connection) gives that connection up: the files behind are
/// sent again on a new one and arrive right, the refused file fails
/// alone, the exit status says so.
#[test]
fn sluice_put_tree_refused_file_in_a_pipelined_run() {
    let top = tempfile::tempdir().unwrap();
    let src = top.path().join("src");
    let mut want = small_tree(&src);
    let root = top.path().join("srv");
    // A directory where the tree has d1/f05: its STOR is refused.
    fs::create_dir_all(root.join("up/d1/f05")).unwrap();
    want.remove("d1/f05");
    let server = serve_writable(&root);
    let out = sluice_put_tree(&src.join("tree"), &server.url("up/"), &["--files", "1"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("50 of 51 files") && out.stderr.contains("1 failed"),
        "{}",
        out.describe()
    );
    // Refused with files behind it: retried alone on a new connection.
    assert!(out.stderr.contains("d1/f05: "), "{}", out.describe());
    let mut got = BTreeMap::new();
    for (rel, sum) in want
        .keys()
        .map(|k| (k.clone(), sha256_file(&root.join("up").join(k))))
    {
        got.insert(rel, sum);
    }
    assert_eq!(got, want);
}
