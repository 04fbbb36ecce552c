//! `sluice get -r` / `sluice put -r`: whole trees against `sluice serve`
//! (nested directories, spaces and UTF-8 in names, an empty file, a 5 MiB
//! file; sha256 of every file), a server killed mid-tree and restarted
//! (the job retries, resumes and ends with every file right), and
//! scripted hostile servers whose listings name paths outside DEST.

use crate::harness::corpus::{sha256_bytes, write_pseudo_random};
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{sluice, sluice_rw, ServeOptions};
use crate::harness::*;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn sluice_cmd(args: &[&str]) -> Output {
    run(Command::new(sluice_bin()).args(args))
}

/// Relative path -> sha256 of every regular file under `root`.
fn tree_sums(root: &Path) -> BTreeMap<String, String> {
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
fn make_tree(root: &Path) {
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

fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Once `progress()` says a few files are through, freezes the client
/// (SIGSTOP, so the kill lands mid-job whatever the machine's speed),
/// kill -9s the server, restarts it on the same port and root, lets the
/// client go on, and checks it ends with success after reporting a
/// retry. Returns the new server and the client's stderr.
fn kill_and_restart_mid_job(
    first: &FtpServer,
    root: &Path,
    client: &ProcessGuard,
    err: &Path,
    progress: impl Fn() -> usize,
) -> (FtpServer, String) {
    wait_for("a few files to arrive", 60, || {
        progress() >= 3 || client.exited().is_some()
    });
    signal(client.pid, "-STOP");
    assert!(
        client.exited().is_none(),
        "the client finished before the kill"
    );
    first.kill9();
    let second = sluice(ServeOptions {
        writable: true,
        root: Some(root.to_path_buf()),
        listen: Some(first.addr()),
        ..Default::default()
    });
    signal(client.pid, "-CONT");
    wait_for("the client to end", 120, || client.exited().is_some());
    let status = client.exited().unwrap();
    let stderr = fs::read_to_string(err).unwrap_or_default();
    assert!(
        status.success(),
        "{status}\n{stderr}\n{}",
        second.log_tail()
    );
    assert!(stderr.contains("retry 1"), "no retry reported:\n{stderr}");
    (second, stderr)
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// The server is killed (-9) mid-tree and a new one started on the same
/// port: the client's workers reconnect with backoff, resume their files
/// and the job ends with every file correct and exit 0. The client is
/// frozen (SIGSTOP) around the kill, so the kill lands mid-tree whatever
/// the machine's speed.
#[test]
fn tree_download_survives_a_server_killed_and_restarted() {
    let first = sluice_rw();
    let root = first.root.clone();
    let tree = root.join("many");
    for d in 0..10 {
        for f in 0..30 {
            let p = tree.join(format!("d{d}/f {f}.bin"));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            write_pseudo_random(&p, 200_000 + f * 1000, d * 100 + f);
        }
    }
    let want = tree_sums(&tree);
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("got");
    let err = work.path().join("stderr");
    let client = ProcessGuard::spawn(
        Command::new(sluice_bin())
            .args(["get", "-r", "-q", "--files", "2", "--timeout", "10"])
            .arg(first.url("many"))
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap()),
    )
    .expect("start sluice get -r");
    let done = |d: &Path| {
        fs::read_dir(d.join("d0"))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().contains(".part"))
                    .count()
            })
            .unwrap_or(0)
    };
    let (_second, stderr) = kill_and_restart_mid_job(&first, &root, &client, &err, || done(&dest));
    assert_eq!(tree_sums(&dest), want, "{stderr}");
}

/// A scripted FTP server (any number of sessions) whose MLSD of `/` is
/// `listing`; RETR of `good` sends "GOOD", anything else is 550.
fn fake_tree_server(listing: &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for ctl in l.incoming() {
            let Ok(ctl) = ctl else { return };
            thread::spawn(move || session(ctl, listing));
        }
    });
    port
}

fn session(ctl: TcpStream, listing: &[u8]) {
    let mut w = ctl.try_clone().unwrap();
    let mut r = BufReader::new(ctl);
    let _ = w.write_all(b"220 fake\r\n");
    let mut pasv: Option<TcpListener> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let cmd = line.trim_end().to_string();
        let (verb, arg) = cmd.split_once(' ').unwrap_or((&cmd, ""));
        let reply: Vec<u8> = match verb.to_ascii_uppercase().as_str() {
            "USER" => b"331 pw\r\n".to_vec(),
            "PASS" => b"230 in\r\n".to_vec(),
            "FEAT" | "EPSV" => b"500 no\r\n".to_vec(),
            "PASV" => {
                let dl = TcpListener::bind("127.0.0.1:0").unwrap();
                let p = dl.local_addr().unwrap().port();
                pasv = Some(dl);
                format!("227 Entering (127,0,0,1,{},{})\r\n", p >> 8, p & 255).into_bytes()
            }
            "MLSD" | "RETR" => {
                let body: &[u8] = if verb == "MLSD" {
                    listing
                } else if arg.ends_with("/good") {
                    b"GOOD"
                } else {
                    let _ = w.write_all(b"550 no such file\r\n");
                    continue;
                };
                let _ = w.write_all(b"150 go\r\n");
                let (mut d, _) = pasv.take().expect("PASV first").accept().unwrap();
                let _ = d.write_all(body);
                drop(d);
                b"226 done\r\n".to_vec()
            }
            "QUIT" => {
                let _ = w.write_all(b"221 bye\r\n");
                return;
            }
            _ => b"200 ok\r\n".to_vec(),
        };
        let _ = w.write_all(&reply);
    }
}

/// Listings that name a path outside DEST (`..`, an absolute path, a
/// name with `/`) or carry control characters: the whole job is refused
/// with exit 7 and a clear message, and nothing is written anywhere.
#[test]
fn hostile_tree_listings_are_refused() {
    let cases: [(&'static [u8], &str); 5] = [
        (
            b"type=file;size=4; good\r\ntype=file;size=4; ..\r\n",
            "`..`",
        ),
        (
            b"type=file;size=4; good\r\ntype=dir; ../../escape\r\n",
            "`../../escape`",
        ),
        (
            b"type=file;size=4; /tmp/sluice-abs-escape\r\n",
            "`/tmp/sluice-abs-escape`",
        ),
        (b"type=file;size=4; a/b\r\n", "`a/b`"),
        (
            b"type=file;size=4; evil\x1b]0;title\x07\r\n",
            "evil\\x1b]0;title\\x07",
        ),
    ];
    for (listing, shown) in cases {
        let port = fake_tree_server(listing);
        let work = tempfile::tempdir().unwrap();
        let dest = work.path().join("inner/dest");
        let o = sluice_cmd(&[
            "get",
            "-r",
            "-q",
            "--timeout",
            "5",
            &format!("ftp://127.0.0.1:{port}/"),
            dest.to_str().unwrap(),
        ]);
        assert_exit(&o, 7);
        assert!(
            o.stderr.contains("unsafe name") && o.stderr.contains(shown),
            "{}",
            o.describe()
        );
        assert!(!o.stderr.contains('\x1b'), "{}", o.describe());
        assert!(tree_sums(work.path()).is_empty(), "{}", o.describe());
        assert!(!Path::new("/tmp/sluice-abs-escape").exists());
    }
}

/// One file of the tree is refused (550): the others arrive, the summary
/// names the failed one and why, and the exit status is the refusal's (5).
#[test]
fn a_failed_file_is_listed_and_the_tree_goes_on() {
    let port = fake_tree_server(
        b"type=file;size=4; good\r\ntype=file;size=9; missing one\r\ntype=OS.unix=slink:/x; ln\r\n",
    );
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("d");
    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--timeout",
        "5",
        &format!("ftp://127.0.0.1:{port}/"),
        dest.to_str().unwrap(),
    ]);
    assert_exit(&o, 5);
    assert!(
        o.stderr
            .contains("failed: missing one: RETR: 550 no such file"),
        "{}",
        o.describe()
    );
    assert!(o.stderr.contains("1 of 2 files failed"), "{}", o.describe());
    assert!(
        o.stderr.contains("skipped ln: symbolic link"),
        "{}",
        o.describe()
    );
    assert_eq!(fs::read(dest.join("good")).unwrap(), b"GOOD");
}

/// A scripted server that lists EPSV in FEAT (so `sluice get -r`
/// pipelines: the next file's EPSV and RETR arrive before this one's
/// 226) and serves `n` files `f00`..: `f` + index repeated, except every
/// fifth, which is refused with 550. Commands are read line by line and
/// answered in order, as RFC 959 servers do.
fn fake_pipelining_server(n: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for ctl in l.incoming() {
            let Ok(ctl) = ctl else { return };
            thread::spawn(move || pipelining_session(ctl, n));
        }
    });
    port
}

fn pipelined_body(i: usize) -> Vec<u8> {
    format!("f{i:02}").repeat(i * 97 + 1).into_bytes()
}

fn pipelining_session(ctl: TcpStream, n: usize) {
    let mut w = ctl.try_clone().unwrap();
    let mut r = BufReader::new(ctl);
    let _ = w.write_all(b"220 fake\r\n");
    let mut pasv: Option<TcpListener> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let cmd = line.trim_end().to_string();
        let (verb, arg) = cmd.split_once(' ').unwrap_or((&cmd, ""));
        let reply: Vec<u8> = match verb.to_ascii_uppercase().as_str() {
            "USER" => b"331 pw\r\n".to_vec(),
            "PASS" => b"230 in\r\n".to_vec(),
            "FEAT" => b"211-Features:\r\n EPSV\r\n MLST type*;size*;\r\n211 End\r\n".to_vec(),
            "EPSV" => {
                let dl = TcpListener::bind("127.0.0.1:0").unwrap();
                let p = dl.local_addr().unwrap().port();
                pasv = Some(dl);
                format!("229 Entering Extended Passive Mode (|||{p}|)\r\n").into_bytes()
            }
            "MLSD" | "RETR" => {
                let body = if verb == "MLSD" {
                    (0..n)
                        .map(|i| format!("type=file;size={}; f{i:02}\r\n", pipelined_body(i).len()))
                        .collect::<String>()
                        .into_bytes()
                } else {
                    let i: usize = arg.trim_start_matches("/f").parse().unwrap();
                    if i % 5 == 3 {
                        // The passive listener stays; the next EPSV replaces it.
                        let _ = w.write_all(b"550 no such file\r\n");
                        continue;
                    }
                    pipelined_body(i)
                };
                let _ = w.write_all(b"150 go\r\n");
                let (mut d, _) = pasv.take().expect("EPSV first").accept().unwrap();
                let _ = d.write_all(&body);
                drop(d);
                b"226 done\r\n".to_vec()
            }
            "QUIT" => {
                let _ = w.write_all(b"221 bye\r\n");
                return;
            }
            _ => b"200 ok\r\n".to_vec(),
        };
        let _ = w.write_all(&reply);
    }
}

/// Pipelined downloads (`get -r` sends the next file's EPSV and RETR
/// before the current 226) stay in step when files in the middle are
/// refused: every other file arrives whole, the refused ones are listed,
/// exit status 5. One worker and two, so refusals fall both on a
/// pipelined RETR and on one sent alone.
#[test]
fn pipelined_tree_download_stays_in_step_across_refused_files() {
    let n = 23;
    let port = fake_pipelining_server(n);
    for files in ["1", "2"] {
        let work = tempfile::tempdir().unwrap();
        let dest = work.path().join("d");
        let o = sluice_cmd(&[
            "get",
            "-r",
            "-q",
            "--files",
            files,
            "--timeout",
            "10",
            &format!("ftp://127.0.0.1:{port}/"),
            dest.to_str().unwrap(),
        ]);
        assert_exit(&o, 5);
        let refused: Vec<usize> = (0..n).filter(|i| i % 5 == 3).collect();
        assert!(
            o.stderr
                .contains(&format!("{} of {n} files failed", refused.len())),
            "{}",
            o.describe()
        );
        for i in 0..n {
            let got = fs::read(dest.join(format!("f{i:02}")));
            if refused.contains(&i) {
                assert!(
                    o.stderr.contains(&format!("failed: f{i:02}: RETR")),
                    "{}",
                    o.describe()
                );
                assert!(got.is_err(), "f{i:02} exists");
            } else {
                assert_eq!(
                    sha256_bytes(&got.unwrap()),
                    sha256_bytes(&pipelined_body(i)),
                    "f{i:02}\n{}",
                    o.describe()
                );
            }
        }
        assert!(!tree_sums(&dest).keys().any(|k| k.ends_with(".part")));
    }
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

/// An HTTP server whose every answer is the JSON listing `body`.
fn fake_json_server(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A keep-alive HTTP server (several requests per connection) listing
/// `plain`, `chunked`, `moved`, `gone` and `last` in its JSON listing:
/// `plain` and `last` come with Content-Length, `chunked` chunked,
/// `moved` is a 302 to `plain`, `gone` a 404. Counts the connections it
/// accepted.
fn fake_keepalive_http_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            counted.fetch_add(1, Ordering::Relaxed);
            thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut line = String::new();
                    let mut close = false;
                    while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                        close |= line.to_ascii_lowercase().starts_with("connection: close");
                        line.clear();
                    }
                    let target = first.split(' ').nth(1).unwrap_or("").to_string();
                    let sent = match target.as_str() {
                        "/?format=json" => {
                            let body = r#"{"path":"/","truncated":false,"entries":[{"name":"plain","type":"file","size":5,"mtime":1000000000},{"name":"chunked","type":"file","size":7,"mtime":null},{"name":"moved","type":"file","size":5,"mtime":null},{"name":"gone","type":"file","size":1,"mtime":null},{"name":"last","type":"file","size":4,"mtime":null}]}"#;
                            write!(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
                        }
                        "/plain" => write!(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain"),
                        "/last" => write!(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nLast-Modified: Sun, 09 Sep 2001 01:46:40 GMT\r\n\r\nlast"),
                        "/chunked" => write!(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nchunked\r\n0\r\n\r\n"),
                        "/moved" => write!(c, "HTTP/1.1 302 Found\r\nLocation: /plain\r\nContent-Length: 0\r\n\r\n"),
                        _ => write!(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
                    };
                    if sent.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (port, conns)
}

/// `get -r` over HTTP keeps one connection per worker for plain `200`
/// responses with a length, and hands anything else (chunked, a
/// redirect, an error) to the single-file download: every file right,
/// the 404 and the redirect listed (without retries), modification times
/// from the listing or Last-Modified.
#[test]
fn http_tree_keeps_connections_and_falls_back_for_odd_responses() {
    let (port, conns) = fake_keepalive_http_server();
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("d");
    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--files",
        "1",
        "--timeout",
        "5",
        &format!("http://127.0.0.1:{port}/"),
        dest.to_str().unwrap(),
    ]);
    assert_exit(&o, 5);
    // A 404 is final over HTTP (FTP's 4xx is transient, HTTP's is not):
    // listed at once, not retried for 15 s.
    assert!(
        o.stderr.contains("failed: gone: GET: 404"),
        "{}",
        o.describe()
    );
    assert!(!o.stderr.contains("retry"), "{}", o.describe());
    // Redirects are not followed (the single-file download says so).
    assert!(
        o.stderr.contains("failed: moved: GET: 302"),
        "{}",
        o.describe()
    );
    assert!(o.stderr.contains("2 of 5 files failed"), "{}", o.describe());
    assert_eq!(fs::read(dest.join("plain")).unwrap(), b"plain");
    assert_eq!(fs::read(dest.join("chunked")).unwrap(), b"chunked");
    assert!(!dest.join("moved").exists());
    assert_eq!(fs::read(dest.join("last")).unwrap(), b"last");
    let secs = |p: &str| {
        fs::metadata(dest.join(p))
            .unwrap()
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert_eq!(secs("plain"), 1_000_000_000);
    assert_eq!(secs("last"), 1_000_000_000);
    assert!(!tree_sums(&dest).keys().any(|k| k.ends_with(".part")));
    // The listing, the worker's kept connection, one per odd response
    // given to the single-file download (which may use one more for a
    // HEAD or the redirect), and a new kept one after each: far fewer
    // than a connection per request would take.
    let n = conns.load(std::sync::atomic::Ordering::Relaxed);
    assert!(n <= 12, "{n} connections\n{}", o.describe());
}

/// The JSON listing of an HTTP server is held to the same rules as MLSD:
/// `..`, a path or an absolute name refuses the job, nothing is written.
#[test]
fn hostile_http_json_listing_is_refused() {
    for (name, shown) in [
        ("..", "`..`"),
        ("../../x", "`../../x`"),
        ("/tmp/sluice-json-escape", "`/tmp/sluice-json-escape`"),
    ] {
        let body: &'static str = Box::leak(
            format!(r#"{{"path":"/","truncated":false,"entries":[{{"name":"{name}","type":"file","size":1,"mtime":null}}]}}"#)
                .into_boxed_str(),
        );
        let port = fake_json_server(body);
        let work = tempfile::tempdir().unwrap();
        let dest = work.path().join("d");
        let o = sluice_cmd(&[
            "get",
            "-r",
            "-q",
            "--timeout",
            "5",
            &format!("http://127.0.0.1:{port}/"),
            dest.to_str().unwrap(),
        ]);
        assert_exit(&o, 7);
        assert!(
            o.stderr.contains("unsafe name") && o.stderr.contains(shown),
            "{}",
            o.describe()
        );
        assert!(tree_sums(work.path()).is_empty(), "{}", o.describe());
    }
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
    let o = sluice_cmd(&["cp", "-p", "4", &a.url(&f.name), &b.url("x")]);
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

/// Third-party copies with globus-gridftp-server on either side (`-p 1`).
#[test]
fn cp_server_to_server_with_globus_gridftp_server() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let f = corpus().file((1 << 20) + 7);
    let sl = sluice_rw();
    let gw = crate::harness::servers::gridftp(true);
    let o = sluice_cmd(&["cp", &sl.url(&f.name), &gw.url("from-sluice.bin")]);
    o.assert_success();
    compare_file(&gw.local("from-sluice.bin"), f).unwrap();
    let o = sluice_cmd(&["cp", &gw.url(&f.name), &sl.url("from-globus.bin")]);
    o.assert_success();
    compare_file(&sl.local("from-globus.bin"), f).unwrap();
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

/// `put -r` with the server killed (-9) mid-tree and restarted on the
/// same port: the workers reconnect, resume or resend their files, and
/// the server ends with every file right.
#[test]
fn tree_upload_survives_a_server_killed_and_restarted() {
    let first = sluice_rw();
    let root = first.root.clone();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    for d in 0..10 {
        for f in 0..30 {
            let p = src.join(format!("d{d}/f {f}.bin"));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            write_pseudo_random(&p, 200_000 + f * 1000, 7 + d * 100 + f);
        }
    }
    let err = work.path().join("stderr");
    let client = ProcessGuard::spawn(
        Command::new(sluice_bin())
            .args(["put", "-r", "-q", "--files", "2", "--timeout", "10"])
            .arg(&src)
            .arg(first.url("up/"))
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap()),
    )
    .expect("start sluice put -r");
    let arrived = || {
        fs::read_dir(root.join("up/d0"))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    let (second, stderr) = kill_and_restart_mid_job(&first, &root, &client, &err, arrived);
    let mut got = tree_sums(&root.join("up"));
    // The server may keep its own partial-upload files; only names the
    // source has count.
    let want = tree_sums(&src);
    got.retain(|k, _| want.contains_key(k));
    let wrong: Vec<String> = want
        .keys()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| {
            let size = |p: &Path| fs::metadata(p).map(|m| m.len()).ok();
            format!(
                "{k}: server {:?} bytes, source {:?}",
                size(&root.join("up").join(k)),
                size(&src.join(k))
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{wrong:?}\n{stderr}\n{}",
        second.log_tail()
    );
}

/// An interrupted upload that had written every byte (a server killed
/// with -9 after the last write leaves exactly this: `.NAME.sluice-partial`
/// holding the whole file, no NAME); SIZE reports the partial. `put
/// --continue` (and a retried file of `put -r`) must still end the
/// transfer so the partial becomes the file (before: exit 0, "resumed at
/// 100000", and no file).
#[test]
fn put_continue_commits_a_partial_that_has_every_byte() {
    let server = sluice_rw();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("f.bin");
    write_pseudo_random(&src, 100_000, 11);
    fs::copy(&src, server.local(".f.bin.sluice-partial")).unwrap();
    assert!(!server.local("f.bin").exists());
    let o = sluice_cmd(&[
        "put",
        "-q",
        "--continue",
        src.to_str().unwrap(),
        &server.url("f.bin"),
    ]);
    o.assert_success();
    assert_eq!(
        sha256_file(&server.local("f.bin")),
        sha256_file(&src),
        "{}",
        o.describe()
    );
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
