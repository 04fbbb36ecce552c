//! `sluice get -r` / `sluice put -r` / `sluice cp` against real servers:
//! whole trees up and down with `sluice serve` (nested directories, spaces
//! and UTF-8 in names, an empty file, a 5 MiB file; sha256 of every file),
//! down from nginx's autoindex and vsftpd's LIST, `--sync --delete`,
//! third-party copies, and many small files against peer servers.
//! Servers killed mid-tree: `tree_restarts.rs`; scripted hostile servers:
//! `tree_fakes.rs`.

use crate::harness::corpus::write_pseudo_random;
use crate::harness::process::ProcessGuard;
use crate::harness::servers::sluice_rw;
use crate::harness::*;
use std::collections::BTreeMap;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub(crate) fn sluice_cmd(args: &[&str]) -> Output {
    run(Command::new(sluice_bin()).args(args))
}

/// Relative path -> sha256 of every regular file under `root`.
pub(crate) fn tree_sums(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let t = e.file_type().expect("type");
            if t.is_dir() {
                walk(root, &e.path(), out);
            } else if t.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                out.insert(rel, sha256_file(&e.path()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A tree with nested directories, spaces and UTF-8 names, an empty file,
/// a 5 MiB file, a symlink and a FIFO (both must be skipped).
pub(crate) fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("a dir/sub deeper")).unwrap();
    fs::create_dir_all(root.join("日本語/ünï")).unwrap();
    fs::create_dir_all(root.join("empty dir")).unwrap();
    write_pseudo_random(&root.join("big.bin"), 5 << 20, 1);
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("a dir/with space.txt"), b"hello tree\n").unwrap();
    write_pseudo_random(&root.join("a dir/sub deeper/x;y=z.dat"), 70_000, 2);
    write_pseudo_random(&root.join("日本語/ünï/café ☕.bin"), 123_457, 3);
    fs::write(root.join("-leading dash"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
    let _ = Command::new("mkfifo").arg(root.join("fifo")).status();
}

/// put -r a tree to `sluice serve`, check the server's copy, get -r it
/// back and check that: every file by sha256, the empty directory made,
/// links and FIFOs skipped with a note, modification times kept.
#[test]
fn tree_up_and_down_against_sluice() {
    let server = sluice_rw();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    make_tree(&src);
    let want = tree_sums(&src);
    assert_eq!(want.len(), 6, "{want:?}");

    let up = sluice_cmd(&["put", "-r", "-q", src.to_str().unwrap(), &server.url("up/")]);
    up.assert_success();
    assert!(
        up.stderr.contains("skipped link: symbolic link"),
        "{}",
        up.describe()
    );
    assert!(up.stderr.contains("skipped fifo"), "{}", up.describe());
    assert!(up.stderr.contains("6 of 6 files"), "{}", up.describe());
    assert_eq!(tree_sums(&server.local("up")), want);
    assert!(server.local("up/empty dir").is_dir());

    let dest = work.path().join("down");
    let logins = || server.stderr_text().matches("session: login user=").count();
    let before = logins();
    let down = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--files",
        "3",
        "--stats",
        &server.url("up"),
        dest.to_str().unwrap(),
    ]);
    down.assert_success();
    // One session lists the tree, then each of the 3 workers logs in once
    // for all its files (not once per file: that would be 7).
    assert!(logins() > before, "no login lines in the server log");
    assert!(
        logins() - before <= 4,
        "{} logins\n{}",
        logins() - before,
        down.describe()
    );
    assert!(
        down.stderr
            .contains("stats: file big.bin bytes 5242880 seconds ")
            && down
                .stderr
                .contains("stats: file 日本語/ünï/café ☕.bin bytes 123457 "),
        "{}",
        down.describe()
    );
    assert_eq!(tree_sums(&dest), want, "{}", down.describe());
    assert!(dest.join("empty dir").is_dir());
    // The server's modification time (MLSD modify fact) is kept.
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    let secs =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(
        secs(mtime(&dest.join("big.bin"))),
        secs(mtime(&server.local("up/big.bin")))
    );
    // No leftovers.
    assert!(!tree_sums(&dest).keys().any(|k| k.ends_with(".part")));

    // The same tree over Sluice's HTTP door (its JSON listing).
    let hdest = work.path().join("http down");
    let hdown = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        &server.http_url("up/"),
        hdest.to_str().unwrap(),
    ]);
    hdown.assert_success();
    assert!(
        hdown.stderr.contains("6 of 6 files"),
        "{}",
        hdown.describe()
    );
    assert_eq!(tree_sums(&hdest), want, "{}", hdown.describe());
    assert!(hdest.join("empty dir").is_dir());
    assert_eq!(
        secs(mtime(&hdest.join("日本語/ünï/café ☕.bin"))),
        secs(mtime(&server.local("up/日本語/ünï/café ☕.bin")))
    );

    // And from nginx's HTML autoindex pages.
    if require_tool("nginx") {
        // An old time, so a kept one cannot be the download's own.
        fs::File::options()
            .write(true)
            .open(server.local("up/a dir/with space.txt"))
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
            .unwrap();
        let (_nginx, port, _dir) = nginx_autoindex(&server.local("up"));
        let ndest = work.path().join("nginx");
        let ndown = sluice_cmd(&[
            "get",
            "-r",
            "-q",
            &format!("http://127.0.0.1:{port}/"),
            ndest.to_str().unwrap(),
        ]);
        ndown.assert_success();
        assert_eq!(tree_sums(&ndest), want, "{}", ndown.describe());
        assert!(ndest.join("empty dir").is_dir());
        // nginx's Last-Modified is kept.
        assert_eq!(
            secs(mtime(&ndest.join("a dir/with space.txt"))),
            secs(mtime(&server.local("up/a dir/with space.txt")))
        );
    }
}

/// nginx serving `root` with `autoindex on`, on a free port.
fn nginx_autoindex(root: &Path) -> (ProcessGuard, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("nginx dir");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = dir.path().join("nginx.conf");
    let d = dir.path().display();
    fs::write(
        &conf,
        format!(
            "daemon off; master_process off; worker_processes 1; user root;\n\
             pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log {d}/access.log; client_body_temp_path {d}/tmp;\n\
               proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
               server {{ listen 127.0.0.1:{port}; root {}; autoindex on; charset utf-8; }} }}\n",
            root.display()
        ),
    )
    .expect("nginx.conf");
    let proc = ProcessGuard::spawn(
        Command::new(crate::harness::process::find_tool("nginx").expect("nginx"))
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start nginx");
    wait_for("nginx to listen", 30, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (proc, port, dir)
}

fn inode(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap())
}

/// `--sync --delete` both ways: after files change, appear and vanish,
/// only those move (the summary counts them; an unchanged file keeps its
/// inode, so it was not rewritten), what the source lacks is deleted, and
/// both trees end equal by sha256.
#[test]
fn tree_sync_moves_only_what_changed_and_deletes() {
    let server = sluice_rw();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    make_tree(&src);
    sluice_cmd(&["put", "-r", "-q", src.to_str().unwrap(), &server.url("up/")]).assert_success();
    let dest = work.path().join("down");
    sluice_cmd(&["get", "-r", "-q", &server.url("up"), dest.to_str().unwrap()]).assert_success();

    // Server side: one file changed, one deleted, one new.
    fs::write(
        server.local("up/a dir/with space.txt"),
        b"changed on the server\n",
    )
    .unwrap();
    fs::remove_file(server.local("up/empty")).unwrap();
    fs::write(server.local("up/new.txt"), b"new\n").unwrap();
    // Local side: extras the mirror must remove.
    fs::write(dest.join("local-only.txt"), b"x").unwrap();
    fs::create_dir_all(dest.join("extra dir/deep")).unwrap();
    fs::write(dest.join("extra dir/deep/f"), b"x").unwrap();
    let big_ino = inode(&dest.join("big.bin"));

    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--sync",
        "--delete",
        &server.url("up"),
        dest.to_str().unwrap(),
    ]);
    o.assert_success();
    assert!(
        o.stderr.contains("2 of 6 files, 4 up to date, 3 deleted"),
        "{}",
        o.describe()
    );
    assert_eq!(
        tree_sums(&dest),
        tree_sums(&server.local("up")),
        "{}",
        o.describe()
    );
    assert!(!dest.join("extra dir").exists());
    assert_eq!(
        inode(&dest.join("big.bin")),
        big_ino,
        "an unchanged file was rewritten"
    );

    // Nothing changed: nothing moves.
    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--sync",
        &server.url("up"),
        dest.to_str().unwrap(),
    ]);
    assert!(
        o.stderr.contains("0 of 6 files, 6 up to date"),
        "{}",
        o.describe()
    );
    // --checksum: the same verdict from the server's CKSM.
    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--sync",
        "--checksum",
        &server.url("up"),
        dest.to_str().unwrap(),
    ]);
    assert!(
        o.stderr.contains("0 of 6 files, 6 up to date"),
        "{}",
        o.describe()
    );

    // Upload side: one local file changed, one deleted, one added.
    write_pseudo_random(&src.join("a dir/sub deeper/x;y=z.dat"), 80_000, 9);
    fs::remove_file(src.join("-leading dash")).unwrap();
    fs::write(src.join("added.bin"), b"added\n").unwrap();
    let o = sluice_cmd(&[
        "put",
        "-r",
        "-q",
        "--sync",
        "--delete",
        src.to_str().unwrap(),
        &server.url("up/"),
    ]);
    o.assert_success();
    // empty (gone from the server), with space.txt (changed there),
    // x;y=z.dat and added.bin move; new.txt and -leading dash are deleted.
    assert!(
        o.stderr.contains("4 of 6 files, 2 up to date, 2 deleted"),
        "{}",
        o.describe()
    );
    assert_eq!(tree_sums(&server.local("up")), tree_sums(&src));
}

/// `sluice cp` between two `sluice serve` (third party: the data goes
/// from one server to the other), with --verify, into a directory URL;
/// and `cp` of a URL to a local path and back.
#[test]
fn cp_server_to_server_between_two_sluice_servers() {
    let a = crate::harness::servers::sluice_ro();
    let b = sluice_rw();
    let f = corpus().file((1 << 20) + 7);
    let o = sluice_cmd(&["cp", "--verify", &a.url(&f.name), &b.url("copy.bin")]);
    o.assert_success();
    assert!(o.stderr.contains("third party"), "{}", o.describe());
    compare_file(&b.local("copy.bin"), f).unwrap();
    let o = sluice_cmd(&["cp", &a.url(&f.name), &b.url("")]);
    o.assert_success();
    compare_file(&b.local(&f.name), f).unwrap();
    // A URL and a local path, both ways.
    let work = tempfile::tempdir().unwrap();
    let local = work.path().join("l.bin");
    sluice_cmd(&["cp", "-q", &a.url(&f.name), local.to_str().unwrap()]).assert_success();
    compare_file(&local, f).unwrap();
    sluice_cmd(&["cp", "-q", local.to_str().unwrap(), &b.url("back.bin")]).assert_success();
    compare_file(&b.local("back.bin"), f).unwrap();
    // MODE E, four streams from the source to the destination's one
    // passive port, blocks reassembled there by offset.
    let o = sluice_cmd(&[
        "cp",
        "-p",
        "4",
        "--verify",
        &a.url(&f.name),
        &b.url("p4.bin"),
    ]);
    o.assert_success();
    assert!(o.stderr.contains("MODE E, 4 streams"), "{}", o.describe());
    compare_file(&b.local("p4.bin"), f).unwrap();
    // Trees are not copied server to server (yet): a usage error.
    let o = sluice_cmd(&["cp", "-r", &a.url(""), &b.url("t/")]);
    assert_exit(&o, 2);
    // A read-only destination: its refusal is the error, not the source's.
    let o = sluice_cmd(&[
        "cp",
        "--timeout",
        "5",
        &b.url("back.bin"),
        &a.url("nope.bin"),
    ]);
    assert_exit(&o, 5);
    assert!(o.stderr.contains("STOR (destination)"), "{}", o.describe());
}

/// Third-party copies with globus-gridftp-server on either side, `-p 1`
/// (MODE S) and `-p 4` (MODE E, the source opening four connections).
#[test]
fn cp_server_to_server_with_globus_gridftp_server() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let f = corpus().file((1 << 20) + 7);
    let sl = sluice_rw();
    let gw = crate::harness::servers::gridftp(true);
    for (p, mode) in [("1", "MODE S, 1 stream"), ("4", "MODE E, 4 streams")] {
        let to_globus = format!("from-sluice-p{p}.bin");
        let o = sluice_cmd(&["cp", "-p", p, &sl.url(&f.name), &gw.url(&to_globus)]);
        o.assert_success();
        assert!(o.stderr.contains(mode), "{}", o.describe());
        compare_file(&gw.local(&to_globus), f).unwrap();
        let to_sluice = format!("from-globus-p{p}.bin");
        let o = sluice_cmd(&["cp", "-p", p, &gw.url(&f.name), &sl.url(&to_sluice)]);
        o.assert_success();
        assert!(o.stderr.contains(mode), "{}", o.describe());
        compare_file(&sl.local(&to_sluice), f).unwrap();
    }
}

/// `sluice cp -f LIST`: pairs in both directions, quoted paths with
/// spaces, a comment; a missing source fails alone, the summary names
/// it, and the exit status is its refusal (5).
#[test]
fn cp_from_a_list_of_pairs() {
    let server = sluice_rw();
    let f = corpus().file((1 << 20) + 7);
    let work = tempfile::tempdir().unwrap();
    let local_up = work.path().join("up source.bin");
    write_pseudo_random(&local_up, 300_000, 7);
    let got = work.path().join("got it.bin");
    let list = work.path().join("list");
    fs::write(
        &list,
        format!(
            "# pairs\n{} \"{}\"\n\"{}\" {}\n{} \"{}\"\n",
            server.url(&f.name),
            got.display(),
            local_up.display(),
            server.url("up%20dest.bin"),
            server.url("missing.bin"),
            work.path().join("never").display(),
        ),
    )
    .unwrap();
    let o = sluice_cmd(&["cp", "-q", "--timeout", "5", "-f", list.to_str().unwrap()]);
    assert_exit(&o, 5);
    assert!(
        o.stderr.contains("2 of 3 files, 1 failed"),
        "{}",
        o.describe()
    );
    assert!(
        o.stderr.contains("failed: ftp://") && o.stderr.contains("missing.bin"),
        "{}",
        o.describe()
    );
    compare_file(&got, f).unwrap();
    assert_eq!(
        sha256_file(&server.local("up dest.bin")),
        sha256_file(&local_up)
    );
    assert!(!work.path().join("never").exists());
}

/// vsftpd has no MLSD: `sluice get -r` lists with `LIST -a` instead
/// (names with spaces and UTF-8 kept, the symlink and FIFO skipped),
/// sha256 of every file compared.
#[test]
fn tree_down_from_vsftpd_without_mlsd() {
    if !require_tool("vsftpd") {
        return;
    }
    let server = crate::harness::servers::vsftpd(false);
    let src = server.local("tree");
    make_tree(&src);
    let dest = tempfile::tempdir().unwrap();
    let out = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--files",
        "3",
        &server.url("tree/"),
        dest.path().join("t").to_str().unwrap(),
    ]);
    out.assert_success();
    let want = tree_sums(&src);
    assert!(want.len() >= 6, "{want:?}");
    assert_eq!(
        tree_sums(&dest.path().join("t")),
        want,
        "{}",
        out.describe()
    );
}

/// Many small files up to vsftpd and globus-gridftp-server and back: the
/// pipelined uploads (STOR as the data connection is made, the next EPSV
/// sent with the end of the data) and downloads (the next EPSV and RETR
/// before the 226) against real servers, sha256 of every file.
#[test]
fn many_small_files_up_and_down_against_peer_servers() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    for d in 0..3 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for i in 0..40 {
            let size = (i * 977 + d * 13) % 70_000;
            write_pseudo_random(
                &src.join(format!("d{d}/f{i:02}")),
                size as u64,
                (d * 100 + i) as u64,
            );
        }
    }
    let want = tree_sums(&src);
    assert_eq!(want.len(), 120);
    let mut servers = Vec::new();
    if require_tool("vsftpd") {
        servers.push(("vsftpd", crate::harness::servers::vsftpd(true)));
    }
    if require_tool("globus-gridftp-server") {
        servers.push(("globus", crate::harness::servers::gridftp(true)));
    }
    for (name, server) in servers {
        let up = sluice_cmd(&[
            "put",
            "-r",
            "-q",
            "--files",
            "2",
            src.to_str().unwrap(),
            &server.url("up/"),
        ]);
        up.assert_success();
        assert_eq!(
            tree_sums(&server.local("up")),
            want,
            "{name}\n{}",
            up.describe()
        );
        let dest = work.path().join(format!("down-{name}"));
        let down = sluice_cmd(&[
            "get",
            "-r",
            "-q",
            "--files",
            "2",
            &server.url("up/"),
            dest.to_str().unwrap(),
        ]);
        down.assert_success();
        assert_eq!(tree_sums(&dest), want, "{name}\n{}", down.describe());
    }
}
