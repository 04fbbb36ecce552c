//! Explicit FTPS (AUTH TLS, PROT P) and implicit FTPS against `sluice
//! serve`: curl, lftp, Python ftplib and `sluice get/ls/put` (`ftpes://`,
//! `ftps://`, MODE E over TLS data connections); `require_tls`; broken
//! AUTH TLS handshakes that must not disturb other sessions.

use crate::harness::certs::TestPki;
use crate::harness::servers::{self, ServeOptions};
use crate::harness::{compare_file, corpus, require_tool, run, Output};
use std::process::Command;

use super::tls::{fetch_all, sluice_get, TlsServer};
/// `lftp -c` with FTPS forced (control and data) and the test CA.
fn lftp_tls(s: &TlsServer, script: &str) -> Output {
    let full = format!(
        "set cmd:fail-exit yes; set net:max-retries 1; set net:timeout 60; \
         set net:reconnect-interval-base 1; set xfer:clobber on; \
         set ftp:ssl-force true; set ftp:ssl-allow-anonymous true; \
         set ftp:ssl-protect-data true; set ftp:ssl-protect-list true; \
         set ssl:ca-file {}; set ssl:verify-certificate yes; \
         open ftp://127.0.0.1:{}; {script}",
        s.ca().display(),
        s.server.port
    );
    run(Command::new("lftp").arg("-c").arg(full))
}

fn curl_ftps(s: &TlsServer, extra: &[&str], url: &str) -> Output {
    run(Command::new("curl")
        .args(["-sS", "--ssl-reqd", "--cacert"])
        .arg(s.ca())
        .args(extra)
        .arg(url))
}

fn ftp_url(s: &TlsServer, rel: &str) -> String {
    format!("ftp://127.0.0.1:{}/{}", s.server.port, rel)
}

/// curl over explicit FTPS, passive. (curl 7.87 to 7.88.1 never start TLS
/// on an active-mode data connection, curl issue 10666; active mode under
/// PROT P is checked with ftplib and lftp below.)
#[test]
fn explicit_ftps_to_curl() {
    if !require_tool("curl") {
        return;
    }
    // --require-tls: a login or a transfer in clear would fail.
    let s = TlsServer::start(&["--require-tls"]);
    fetch_all(&s, "curl --ssl-reqd", |f, dest| {
        curl_ftps(&s, &["-o", dest.to_str().unwrap()], &ftp_url(&s, &f.name))
    });
    // A listing over a protected data connection.
    let out = curl_ftps(&s, &[], &ftp_url(&s, ""));
    out.assert_success();
    assert!(
        out.stdout.contains(&corpus().file(1).name),
        "{}",
        out.stdout
    );
    // The control log shows AUTH (curl says AUTH SSL first) and PROT P.
    let out = curl_ftps(
        &s,
        &["-v", "-o", "/dev/null"],
        &ftp_url(&s, &corpus().file(4095).name),
    );
    out.assert_success();
    for line in ["> AUTH SSL", "< 234 ", "PBSZ 0", "PROT P"] {
        assert!(out.stderr.contains(line), "{line}\n{}", out.stderr);
    }
    // The data connection resumed the control connection's TLS session:
    // the server's certificate crossed once (control), not twice.
    assert_eq!(
        out.stderr
            .matches("TLS handshake, Certificate (11)")
            .count(),
        1,
        "data connection not resumed\n{}",
        out.stderr
    );
}

#[test]
fn explicit_ftps_uploads_from_curl_and_ftplib() {
    let pki = TestPki::new();
    let mut args = pki.serve_args();
    args.extend([
        "--https".into(),
        "127.0.0.1:0".into(),
        "--require-tls".into(),
    ]);
    let server = servers::sluice(ServeOptions {
        writable: true,
        extra_args: args,
        ..Default::default()
    });
    let https = server.announced_port("https");
    let s = TlsServer { server, pki, https };
    let f = corpus().file((1 << 20) + 7);
    let src = corpus().dir().join(&f.name);
    if require_tool("curl") {
        let out = curl_ftps(&s, &["-T", src.to_str().unwrap()], &ftp_url(&s, "up-curl"));
        out.assert_success();
        compare_file(&s.server.local("up-curl"), f).unwrap();
    }
    if require_tool("python3") {
        let out = run(Command::new("python3")
            .arg(crate::harness::python_script())
            .args(["put", &s.server.port.to_string()])
            .arg(&src)
            .arg("up-ftplib")
            .arg("--tls")
            .arg(s.ca()));
        out.assert_success();
        compare_file(&s.server.local("up-ftplib"), f).unwrap();
    }
    s.server.assert_running();
}

#[test]
fn explicit_ftps_to_lftp_and_ftplib() {
    // --require-tls: a login or a transfer in clear would fail (lftp does
    // not use TLS for anonymous logins unless ftp:ssl-allow-anonymous).
    let s = TlsServer::start(&["--require-tls"]);
    if require_tool("lftp") {
        fetch_all(&s, "lftp ftp:ssl-force", |f, dest| {
            lftp_tls(&s, &format!("get {} -o {}", f.name, dest.display()))
        });
        // lftp lists (ftp:ssl-protect-list) and gets in parallel pieces,
        // each a TLS data connection resuming the control session.
        let big = corpus().file(64 << 20);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("pget");
        let out = lftp_tls(
            &s,
            &format!("cls -1; pget -n 4 {} -o {}", big.name, dest.display()),
        );
        out.assert_success();
        assert!(out.stdout.contains(&big.name), "{}", out.describe());
        compare_file(&dest, big).unwrap();
    }
    if require_tool("lftp") {
        // Active mode: the server connects, and is still the TLS server.
        let f = corpus().file((1 << 20) + 7);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("active");
        let out = lftp_tls(
            &s,
            &format!(
                "set ftp:passive-mode false; get {} -o {}",
                f.name,
                dest.display()
            ),
        );
        out.assert_success();
        compare_file(&dest, f).unwrap();
    }
    if require_tool("python3") {
        for active in [false, true] {
            let what = if active {
                "ftplib FTP_TLS prot_p, active"
            } else {
                "ftplib FTP_TLS prot_p"
            };
            fetch_all(&s, what, |f, dest| {
                let mut cmd = Command::new("python3");
                cmd.arg(crate::harness::python_script())
                    .args(["get", &s.server.port.to_string(), &f.name])
                    .arg(dest)
                    .arg("--tls")
                    .arg(s.ca());
                if active {
                    cmd.arg("--active");
                }
                run(&mut cmd)
            });
        }
    }
}

/// `--require-tls`: USER in clear gets 530 (before any password is
/// sent), a client without TLS fails, one with TLS is served.
#[test]
fn require_tls_refuses_logins_in_clear() {
    let s = TlsServer::start(&["--require-tls"]);
    let mut c = s.server.connect();
    let r = c.cmd("USER anonymous");
    assert_eq!(r.code, 530, "{}", c.transcript());
    assert!(r.text().contains("AUTH TLS"), "{}", c.transcript());
    let r = c.cmd("PASS x@y");
    assert_eq!(r.code, 503, "{}", c.transcript());
    let feat = c.cmd("FEAT");
    assert!(feat.text().contains("AUTH TLS"), "{}", c.transcript());
    c.quit();
    if require_tool("curl") {
        let f = corpus().file(4095);
        let out = run(Command::new("curl")
            .args(["-sS", "-o", "/dev/null"])
            .arg(ftp_url(&s, &f.name)));
        assert!(
            !out.success(),
            "plain FTP login accepted\n{}",
            out.describe()
        );
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("f");
        curl_ftps(&s, &["-o", dest.to_str().unwrap()], &ftp_url(&s, &f.name)).assert_success();
        compare_file(&dest, f).unwrap();
    }
    s.server.assert_running();
}

/// AUTH TLS answered with garbage, and a client that stops mid-handshake:
/// only those sessions end.
#[test]
fn broken_auth_tls_handshakes_do_not_disturb_others() {
    let s = TlsServer::start(&[]);
    let mut c = s.server.connect();
    assert_eq!(c.cmd("AUTH TLS").code, 234, "{}", c.transcript());
    c.send_raw(b"USER anonymous\r\nPASS x\r\n").unwrap();
    assert!(
        c.is_closed(),
        "garbage after 234 kept the session\n{}",
        c.transcript()
    );
    let mut stalled = s.server.connect();
    assert_eq!(stalled.cmd("AUTH TLS").code, 234);
    stalled.send_raw(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    crate::harness::assert_serves_fresh_session(&s.server);
    if require_tool("curl") {
        let f = corpus().file((1 << 20) + 7);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("f");
        curl_ftps(&s, &["-o", dest.to_str().unwrap()], &ftp_url(&s, &f.name)).assert_success();
        compare_file(&dest, f).unwrap();
    }
    drop(stalled);
    s.server.assert_running();
}

#[test]
fn implicit_ftps_to_curl() {
    if !require_tool("curl") {
        return;
    }
    let s = TlsServer::start(&["--ftps", "127.0.0.1:0"]);
    let port = s.server.announced_port("ftps");
    fetch_all(&s, "curl ftps://", |f, dest| {
        run(Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(s.ca())
            .arg("-o")
            .arg(dest)
            .arg(format!("ftps://127.0.0.1:{port}/{}", f.name)))
    });
}

/// `sluice get/ls/put` over `ftpes://` (AUTH TLS, PROT P) and `ftps://`
/// (implicit) against a server that requires TLS; `-p 4` downloads in
/// MODE E over four TLS data connections (the server connects, and is the
/// TLS server on each); `put -p 4` sends MODE E over four TLS data
/// connections the client opens (the server secures each as it arrives).
#[test]
fn sluice_client_over_ftpes_and_ftps() {
    let pki = TestPki::new();
    let mut args = pki.serve_args();
    args.extend([
        "--https".into(),
        "127.0.0.1:0".into(),
        "--ftps".into(),
        "127.0.0.1:0".into(),
        "--require-tls".into(),
    ]);
    let server = servers::sluice(ServeOptions {
        writable: true,
        extra_args: args,
        ..Default::default()
    });
    let https = server.announced_port("https");
    let ftps = server.announced_port("ftps");
    let s = TlsServer { server, pki, https };
    let ca = s.ca().to_str().unwrap().to_string();
    let explicit = |rel: &str| format!("ftpes://127.0.0.1:{}/{rel}", s.server.port);
    for p in ["1", "4"] {
        fetch_all(&s, &format!("sluice get -p {p} ftpes://"), |f, dest| {
            sluice_get(&["--ca", &ca, "-p", p], &explicit(&f.name), dest)
        });
    }
    // The summary line says how it went: MODE E, four streams.
    let big = corpus().file(64 << 20);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big");
    let out = run(Command::new(crate::harness::sluice_bin())
        .args(["get", "-p", "4", "--ca", &ca])
        .arg(explicit(&big.name))
        .arg(&dest));
    out.assert_success();
    assert!(
        out.stderr.contains("MODE E, 4 streams"),
        "{}",
        out.describe()
    );
    compare_file(&dest, big).unwrap();
    fetch_all(&s, "sluice get ftps://", |f, dest| {
        sluice_get(
            &["--ca", &ca],
            &format!("ftps://127.0.0.1:{ftps}/{}", f.name),
            dest,
        )
    });
    let out = run(Command::new(crate::harness::sluice_bin())
        .args(["ls", "-1", "--ca", &ca])
        .arg(explicit("")));
    out.assert_success();
    assert!(
        out.stdout.contains(&corpus().file(1).name),
        "{}",
        out.describe()
    );
    // Uploads: MODE E over four TLS data connections (the client connects,
    // the server is the TLS server on each), and MODE S for one stream.
    for (p, size) in [
        ("4", 64u64 << 20),
        ("4", (1 << 20) + 7),
        ("4", 0),
        ("1", 4095),
    ] {
        let f = corpus().file(size);
        let name = format!("put-ftpes-{p}-{size}");
        let out = run(Command::new(crate::harness::sluice_bin())
            .args(["put", "-p", p, "--ca", &ca])
            .arg(corpus().dir().join(&f.name))
            .arg(explicit(&name)));
        out.assert_success();
        let want = if p == "4" {
            "MODE E, 4 streams"
        } else {
            "MODE S, 1 stream"
        };
        assert!(out.stderr.contains(want), "{want}\n{}", out.describe());
        compare_file(&s.server.local(&name), f).unwrap();
    }
    let f = corpus().file((1 << 20) + 7);
    // Plain ftp:// to the same server: refused at USER (exit 4, login).
    let dir = tempfile::tempdir().unwrap();
    let out = sluice_get(&[], &ftp_url(&s, &f.name), &dir.path().join("x"));
    assert_eq!(
        out.status.and_then(|c| c.code()),
        Some(4),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("AUTH TLS"), "{}", out.describe());
    s.server.assert_running();
}
