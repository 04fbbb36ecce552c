//! Hostile and malformed control-channel input, on raw TCP. Every test
//! checks the reply code, and that the same server process then still
//! serves a brand-new session correctly (`assert_serves_fresh_session`).

use crate::harness::servers::under_test;
use crate::harness::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::time::Duration;

/// The longest control line any server here accepts is 4096 bytes
/// (sluice-ftp's `limits::MAX_LINE`, as vsftpd); this is well past it.
const TOO_LONG: usize = 10_000;

pub(crate) fn logged_in(server: &FtpServer) -> Control {
    let mut c = server.connect();
    c.login_anonymous();
    c
}

/// Reads the reply to an overlong line just sent on `c`: it must be 500,
/// the server must close the session, and then still serve a fresh one.
#[track_caller]
pub(crate) fn assert_500_and_close(server: &FtpServer, mut c: Control, what: &str) {
    let r = c
        .read_reply()
        .unwrap_or_else(|e| panic!("no reply to an {what}: {e}\n{}", c.transcript()));
    assert_code(&c, what, r.code, &[500]);
    assert!(
        c.is_closed(),
        "the session stayed open after an {what}\n{}",
        c.transcript()
    );
    assert_serves_fresh_session(server);
}

/// Sends each of `cmds` in one logged-in session; every reply must be one
/// of `allowed` (`why` says what is wrong with the commands). Then the
/// server must still serve a fresh session.
#[track_caller]
pub(crate) fn each_command_gets(server: &FtpServer, cmds: &[&str], why: &str, allowed: &[u16]) {
    let mut c = logged_in(server);
    for cmd in cmds {
        let r = c.cmd(cmd);
        assert_code(&c, &format!("`{cmd}` ({why})"), r.code, allowed);
    }
    c.quit();
    assert_serves_fresh_session(server);
}

/// RETR of a root-relative path gets 550 and no data; the server then
/// still serves a fresh session.
#[track_caller]
pub(crate) fn retr_gets_550(server: &FtpServer, rel: &str, what: &str) {
    let mut c = logged_in(server);
    let t = c.retr(&server.remote_path(rel));
    assert_code(&c, what, t.last().code, &[550]);
    assert!(t.data.is_empty());
    c.quit();
    assert_serves_fresh_session(server);
}

/// A test file's bytes as a server must never send them: /etc/passwd.
pub(crate) fn passwd() -> Vec<u8> {
    fs::read("/etc/passwd").expect("read /etc/passwd")
}

#[test]
fn overlong_line_before_login_gets_500_and_close() {
    let server = under_test(false);
    let mut c = server.connect();
    let mut line = vec![b'A'; TOO_LONG];
    line.extend_from_slice(b"\r\n");
    c.send_raw(&line).expect("send long line");
    assert_500_and_close(&server, c, "overlong line");
}

#[test]
fn overlong_line_after_login_gets_500_and_close() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    let line = format!("RETR {}\r\n", "x/".repeat(TOO_LONG / 2));
    c.send_raw(line.as_bytes()).expect("send long line");
    assert_500_and_close(&server, c, "overlong RETR line");
}

#[test]
fn unterminated_line_past_the_limit_gets_500_and_close() {
    let server = under_test(false);
    let mut c = server.connect();
    // No CRLF at all: the server must not wait for one forever.
    c.send_raw(&vec![b'B'; TOO_LONG]).expect("send");
    assert_500_and_close(&server, c, "unterminated overlong line");
}

#[test]
fn commands_before_login_get_530() {
    let server = under_test(false);
    let mut c = server.connect();
    for cmd in [
        "PASV",
        "EPSV",
        "RETR f1.bin",
        "STOR x.bin",
        "LIST",
        "NLST",
        "CWD /",
        "SIZE f1.bin",
        "PORT 127,0,0,1,200,10",
    ] {
        let r = c.cmd(cmd);
        assert_code(&c, &format!("`{cmd}` before login"), r.code, &[530]);
    }
    // The session itself is still usable: it can log in now.
    c.login_anonymous();
    c.quit();
    assert!(!server.local("x.bin").exists());
    assert_serves_fresh_session(&server);
}

#[test]
fn non_anonymous_user_is_refused_with_530() {
    let server = under_test(false);
    let mut c = server.connect();
    let r = c.login("bob", "secret");
    assert_code(
        &c,
        "USER bob / PASS secret with no user configuration",
        r.code,
        &[530],
    );
    let r = c.cmd("PASV");
    assert_code(&c, "PASV after a refused login", r.code, &[530]);
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn retr_of_a_directory_gets_550() {
    let server = under_test(false);
    fs::create_dir(server.local("adir")).expect("mkdir");
    retr_gets_550(&server, "adir", "RETR of a directory");
}

#[test]
fn retr_of_a_missing_file_gets_550() {
    retr_gets_550(
        &under_test(false),
        "no-such-file.bin",
        "RETR of a missing file",
    );
}

/// `..` never leaves the root: every attempt is refused (or finds nothing
/// inside the root), and /etc/passwd is never sent.
#[test]
fn path_traversal_with_dotdot_is_refused() {
    let server = under_test(false);
    let secret = passwd();
    let mut c = logged_in(&server);
    for path in [
        "../../etc/passwd",
        "/../../../../etc/passwd",
        "../../../../../../../../../../etc/passwd",
        "f1.bin/../../../../etc/passwd",
        "./../.././../etc/passwd",
        "//..//..//etc/passwd",
    ] {
        let t = c.retr(path);
        assert!(
            t.last().is_error(),
            "RETR {path} ended with {}\n{}",
            t.last().code,
            c.transcript()
        );
        assert!(
            t.data.is_empty() && t.data != secret,
            "RETR {path} sent {} bytes\n{}",
            t.data.len(),
            c.transcript()
        );
    }
    // CWD upwards may succeed (staying at the root) or be refused, but the
    // root stays the root.
    let _ = c.cmd("CWD ../../../../..");
    let t = c.retr("etc/passwd");
    assert!(
        t.last().is_error() && t.data.is_empty(),
        "after CWD .., RETR etc/passwd sent {} bytes\n{}",
        t.data.len(),
        c.transcript()
    );
    let data = c.open_passive();
    let t = c.transfer_in("LIST ../../../..", data);
    let listing = String::from_utf8_lossy(&t.data);
    let names: Vec<&str> = listing.split_whitespace().collect();
    for outside in ["proc", "sys", "usr", "etc"] {
        assert!(
            !names.contains(&outside),
            "LIST ../../../.. shows `{outside}` from outside the root:\n{listing}\n{}",
            c.transcript()
        );
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

/// Symlinks inside the root that point outside it are not followed.
#[test]
fn symlinks_pointing_outside_the_root_are_refused() {
    let server = under_test(false);
    let secret = passwd();
    symlink("/etc/passwd", server.local("pw")).expect("symlink");
    symlink("/etc", server.local("etcdir")).expect("symlink");
    symlink("..", server.local("parent")).expect("symlink");
    symlink("../../../../../../../../etc/passwd", server.local("relpw")).expect("symlink");
    let mut c = logged_in(&server);
    for path in [
        "pw",
        "etcdir/passwd",
        "parent/root/f1.bin",
        "relpw",
        "etcdir/../etc/passwd",
    ] {
        let t = c.retr(&server.remote_path(path));
        assert!(
            t.last().is_error() && t.data != secret && t.data.is_empty(),
            "RETR {path} (symlink out of the root) ended with {} and sent {} bytes\n{}",
            t.last().code,
            t.data.len(),
            c.transcript()
        );
    }
    let r = c.cmd(&format!("CWD {}", server.remote_path("etcdir")));
    if !r.is_error() {
        let t = c.retr("passwd");
        assert!(
            t.data.is_empty(),
            "after CWD into a symlink to /etc, RETR passwd sent {} bytes\n{}",
            t.data.len(),
            c.transcript()
        );
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn unknown_command_gets_500_or_502() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    for cmd in [
        "XYZZY",
        "XYZZY with arguments",
        &"Q".repeat(200),
        "RETR\u{7f}",
        "\u{1}\u{2}\u{3}",
    ] {
        let r = c.cmd(cmd);
        assert_code(
            &c,
            &format!("unknown command {:?}", &cmd[..cmd.len().min(20)]),
            r.code,
            &[500, 502],
        );
    }
    // The session goes on.
    let r = c.cmd("NOOP");
    assert_code(&c, "NOOP after unknown commands", r.code, &[200]);
    c.quit();
    assert_serves_fresh_session(&server);
}

/// An empty line, or one of only spaces, gets an answer before and after
/// login: a client waiting for a reply must not hang. (vsftpd 3.0.3 answers
/// a line of spaces with 500, 530 before login, but ignores a bare CRLF,
/// so only sluice is held to the bare-CRLF case.)
#[test]
fn bare_line_ends_are_ignored_and_blank_commands_get_500() {
    let server = under_test(false);
    let mut c = server.connect();
    // A bare CRLF (a keep-alive) gets no reply, as from vsftpd: the
    // reply to the NOOP after it is the next one read.
    c.send_raw(b"\r\n").expect("send");
    let r = c.cmd("   ");
    assert_code(&c, "spaces before login", r.code, &[500, 530]);
    c.login_anonymous();
    c.send_raw(b"\r\n").expect("send");
    let r = c.cmd("NOOP");
    assert_code(&c, "NOOP after a bare CRLF", r.code, &[200]);
    let r = c.cmd("   ");
    assert_code(&c, "spaces after login", r.code, &[500]);
    c.quit();
    assert_serves_fresh_session(&server);
}

/// A NUL or another control character in USER is refused as a bad user
/// name (not a file name), and the PASS after it logs nobody in, not even
/// a name that an earlier USER gave.
#[test]
fn control_characters_in_user_are_refused() {
    let server = under_test(false);
    let mut c = server.connect();
    for (before, raw) in [
        (false, &b"USER anony\0mous\r\n"[..]),
        (false, b"USER anony\x01mous\r\n"),
        (true, b"USER anony\x1bmous\r\n"),
    ] {
        if before {
            let r = c.cmd("USER anonymous");
            if r.code == 230 {
                // vsftpd with no_anon_password: logged in at once, so
                // there is no earlier name left waiting for PASS.
                c.quit();
                assert_serves_fresh_session(&server);
                return;
            }
            assert_code(&c, "USER anonymous", r.code, &[331]);
        }
        c.send_raw(raw).expect("send USER");
        let r = c
            .read_reply()
            .unwrap_or_else(|e| panic!("no reply to USER: {e}\n{}", c.transcript()));
        // vsftpd: 530 "This FTP server is anonymous only."
        assert_code(&c, "USER with a control character", r.code, &[501, 530]);
        assert!(
            !r.text().contains("file name"),
            "USER refused with a file-name wording\n{}",
            c.transcript()
        );
        let r = c.cmd("PASS sluice-test@example.org");
        assert_code(&c, "PASS after a refused USER", r.code, &[503, 530]);
    }
    // The session can still log in properly.
    c.login_anonymous();
    c.quit();
    assert_serves_fresh_session(&server);
}

/// LIST writes `p` for a FIFO and `s` for a socket as `ls -l` does (or `?`
/// while the server cannot tell the type), never `-`, which says "plain
/// file".
#[test]
fn list_does_not_show_fifos_and_sockets_as_plain_files() {
    let server = under_test(false);
    let st = std::process::Command::new("mkfifo")
        .arg(server.local("a-fifo"))
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed");
    let _sock = std::os::unix::net::UnixListener::bind(server.local("a-socket"))
        .expect("bind a unix socket");
    let mut c = logged_in(&server);
    let data = c.open_passive();
    let t = c.transfer_in("LIST", data);
    assert_code(&c, "LIST", t.last().code, &[226]);
    let listing = String::from_utf8_lossy(&t.data);
    for (name, want) in [("a-fifo", 'p'), ("a-socket", 's'), ("f4095.bin", '-')] {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("LIST does not show {name}:\n{listing}"));
        let first = line.chars().next();
        assert!(
            first == Some(want),
            "LIST shows {name} as {line:?}, want type `{want}`"
        );
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

/// A path ending in `/` names a directory: on a regular file RETR, SIZE,
/// MDTM, DELE and RNFR fail with 550 (vsftpd: open() gives ENOTDIR), while
/// a directory works with the slash as without it.
#[test]
fn a_trailing_slash_on_a_file_gets_550() {
    let server = under_test(true);
    fs::create_dir(server.local("adir")).expect("mkdir");
    let file = server.remote_path("f4095.bin");
    let mut c = logged_in(&server);
    let t = c.retr(&format!("{file}/"));
    assert_code(&c, "RETR file/", t.last().code, &[550]);
    assert!(t.data.is_empty(), "RETR file/ sent {} bytes", t.data.len());
    for verb in ["SIZE", "MDTM", "DELE", "RNFR"] {
        let r = c.cmd(&format!("{verb} {file}/"));
        assert_code(&c, &format!("{verb} file/"), r.code, &[550]);
    }
    assert!(server.local("f4095.bin").is_file(), "DELE file/ removed it");
    let dir = server.remote_path("adir");
    let r = c.cmd(&format!("CWD {dir}/"));
    assert_code(&c, "CWD dir/", r.code, &[250]);
    let r = c.cmd("CDUP");
    assert_code(&c, "CDUP", r.code, &[200, 250]);
    let mut listings = vec!["LIST", "NLST"];
    if server.kind == Kind::Sluice {
        listings.push("MLSD");
    }
    for verb in listings {
        let data = c.open_passive();
        let t = c.transfer_in(&format!("{verb} {dir}/"), data);
        assert_code(&c, &format!("{verb} dir/"), t.last().code, &[226]);
    }
    let new = server.remote_path("newdir");
    let r = c.cmd(&format!("MKD {new}/"));
    assert_code(&c, "MKD dir/", r.code, &[257]);
    let r = c.cmd(&format!("RMD {new}/"));
    assert_code(&c, "RMD dir/", r.code, &[250]);
    assert!(!server.local("newdir").exists());
    c.quit();
    assert_serves_fresh_session(&server);
}

/// Many idle control connections (well under the session limit) do not
/// keep a new one from being served.
#[test]
fn many_idle_sessions_do_not_starve_a_new_one() {
    let server = under_test(false);
    let idle: Vec<Control> = (0..32).map(|_| server.connect()).collect();
    assert_serves_fresh_session(&server);
    drop(idle);
    assert_serves_fresh_session(&server);
}

/// Commands pipelined behind one the server answers asynchronously (PASS,
/// SIZE, CWD, MDTM, MLST, STAT, CKSM) are answered without the client
/// sending more bytes: all of them go in one write, then every reply is
/// read in order (a stall shows as a read timeout).
#[test]
fn commands_pipelined_after_an_asynchronous_one_are_all_answered() {
    let server = under_test(false);
    let mut c = server.connect();
    let file = server.remote_path("f4095.bin");
    let cmds = [
        ("USER anonymous".to_string(), vec![331]),
        ("PASS x@y".to_string(), vec![230]),
        (format!("SIZE {file}"), vec![213]),
        ("SYST".to_string(), vec![215]),
        (format!("MDTM {file}"), vec![213]),
        ("CWD /".to_string(), vec![250]),
        (format!("MLST {file}"), vec![250]),
        (format!("STAT {file}"), vec![211, 212, 213]),
        ("PWD".to_string(), vec![257]),
        (format!("CKSM MD5 0 -1 {file}"), vec![213, 500, 502]),
        ("NOOP".to_string(), vec![200]),
    ];
    let stream: String = cmds.iter().map(|(c, _)| format!("{c}\r\n")).collect();
    c.send_raw(stream.as_bytes())
        .expect("send the pipelined commands");
    for (cmd, codes) in &cmds {
        let r = c
            .read_reply()
            .unwrap_or_else(|e| panic!("no reply to pipelined `{cmd}`: {e}\n{}", c.transcript()));
        assert_code(&c, &format!("pipelined `{cmd}`"), r.code, codes);
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

/// A refused RNFR leaves nothing armed: the RNTO after it is refused (503)
/// and the symlink it named is not renamed.
#[test]
fn a_refused_rnfr_does_not_arm_rnto() {
    let server = under_test(true);
    symlink("/etc", server.local("outlink")).expect("symlink");
    let mut c = logged_in(&server);
    let r = c.cmd(&format!("RNFR {}", server.remote_path("outlink")));
    assert_code(&c, "RNFR of a symlink out of the root", r.code, &[550]);
    let r = c.cmd(&format!("RNTO {}", server.remote_path("x")));
    assert_code(&c, "RNTO after a refused RNFR", r.code, &[503]);
    assert!(
        fs::symlink_metadata(server.local("outlink")).is_ok()
            && fs::symlink_metadata(server.local("x")).is_err(),
        "the refused RNFR's link was renamed\n{}",
        c.transcript()
    );
    c.quit();
    assert_serves_fresh_session(&server);
}

/// REIN logs the user out (RFC 959 4.1.1): 220, then commands need a new
/// login, which works.
#[test]
fn rein_logs_the_user_out() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    let r = c.cmd("REIN");
    assert_code(&c, "REIN", r.code, &[220]);
    let r = c.cmd("PWD");
    assert_code(&c, "PWD after REIN", r.code, &[530]);
    c.login_anonymous();
    let r = c.cmd("PWD");
    assert_code(&c, "PWD after a new login", r.code, &[257]);
    c.quit();
    assert_serves_fresh_session(&server);
}

/// SIGHUP (the conventional "reload", sent by operators and logrotate
/// scripts) must not end the server and its sessions: it reloads the
/// configuration (here: no file, the same flags) and serves on; an open
/// session survives it.
#[test]
fn sighup_reloads_and_keeps_serving() {
    let server = under_test(false);
    if server.kind != Kind::Sluice {
        return; // vsftpd's own SIGHUP handling is not what this checks
    }
    let mut before = logged_in(&server);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // The log line proves the signal was delivered and handled.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !server.stderr_text().contains("configuration reloaded") {
        assert!(
            std::time::Instant::now() < deadline,
            "no SIGHUP log line\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(before.cmd("NOOP").code, 200, "{}", before.transcript());
    server.assert_running();
    let mut c = logged_in(&server);
    assert_eq!(c.cmd("NOOP").code, 200, "{}", c.transcript());
}
