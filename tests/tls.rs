//! TLS on both front doors, with a CA and certificates made at test time
//! (harness::certs): HTTPS to curl, wget, aria2c and `sluice get`
//! (FTPS is in `ftps.rs`); and the bad inputs: garbage and
//! stalled handshakes (others are still served), bad certificate files
//! (the start is refused), a certificate for the wrong host (the client
//! refuses with a clear error).

use crate::harness::certs::TestPki;
use crate::harness::servers::{self, FtpServer, ServeOptions};
use crate::harness::{compare_file, corpus, require_tool, run, Output, TestFile};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The sizes every TLS client is checked with (a record boundary, a TLS
/// chunk boundary and a big file).
const TLS_SIZES: [u64; 5] = [0, 1, 4095, (1 << 20) + 7, 64 << 20];

/// `sluice serve` with HTTPS and the FTP door's AUTH TLS.
pub(crate) struct TlsServer {
    pub(crate) server: FtpServer,
    pub(crate) pki: TestPki,
    pub(crate) https: u16,
}

impl TlsServer {
    pub(crate) fn start(extra: &[&str]) -> TlsServer {
        let pki = TestPki::new();
        let mut args = pki.serve_args();
        args.extend(["--https".into(), "127.0.0.1:0".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let server = servers::sluice(ServeOptions {
            extra_args: args,
            ..Default::default()
        });
        let https = server.announced_port("https");
        TlsServer { server, pki, https }
    }

    pub(crate) fn https_url(&self, rel: &str) -> String {
        format!("https://127.0.0.1:{}/{}", self.https, rel)
    }

    pub(crate) fn ca(&self) -> &Path {
        &self.pki.ca
    }
}

/// Downloads every size with `fetch(url_rel, dest)` and compares sha256.
pub(crate) fn fetch_all(s: &TlsServer, what: &str, fetch: impl Fn(&TestFile, &Path) -> Output) {
    let dir = tempfile::tempdir().expect("download dir");
    for &size in &TLS_SIZES {
        let f = corpus().file(size);
        let dest = dir.path().join(&f.name);
        let out = fetch(f, &dest);
        if !out.success() {
            panic!(
                "{what}: {} failed\n{}\n{}",
                f.name,
                out.describe(),
                s.server.log_tail()
            );
        }
        if let Err(e) = compare_file(&dest, f) {
            panic!("{what}: {}: {e}\n{}", f.name, out.describe());
        }
    }
    s.server.assert_running();
}

#[test]
fn https_to_curl_wget_and_aria2c() {
    let s = TlsServer::start(&[]);
    if require_tool("curl") {
        fetch_all(&s, "curl https", |f, dest| {
            run(Command::new("curl")
                .args(["-sS", "--fail", "--cacert"])
                .arg(s.ca())
                .arg("-o")
                .arg(dest)
                .arg(s.https_url(&f.name)))
        });
        // A range, and a listing, over TLS.
        let big = corpus().file(64 << 20);
        let out = run(Command::new("curl")
            .args(["-sS", "--fail", "-r", "1000-1999", "--cacert"])
            .arg(s.ca())
            .arg(s.https_url(&big.name)));
        out.assert_success();
        let whole = std::fs::read(corpus().dir().join(&big.name)).unwrap();
        assert_eq!(out.stdout_bytes, &whole[1000..2000]);
        let out = run(Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(s.ca())
            .arg(s.https_url("")));
        out.assert_success();
        assert!(out.stdout.contains(&big.name), "{}", out.stdout);
        // HTTP/2 is not offered: curl settles on http/1.1 through ALPN.
        let out = run(Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "-o",
                "/dev/null",
                "-w",
                "%{http_version}",
                "--cacert",
            ])
            .arg(s.ca())
            .arg(s.https_url(&corpus().file(1).name)));
        out.assert_success();
        assert_eq!(out.stdout.trim(), "1.1");
    }
    if require_tool("wget") {
        fetch_all(&s, "wget https", |f, dest| {
            run(Command::new("wget")
                .arg("-q")
                .arg(format!("--ca-certificate={}", s.ca().display()))
                .arg("-O")
                .arg(dest)
                .arg(s.https_url(&f.name)))
        });
    }
    if require_tool("aria2c") {
        fetch_all(&s, "aria2c -x 4 https", |f, dest| {
            run(Command::new("aria2c")
                .args([
                    "-q",
                    "-x",
                    "4",
                    "-s",
                    "4",
                    "--min-split-size=1M",
                    "--allow-overwrite=true",
                ])
                .arg(format!("--ca-certificate={}", s.ca().display()))
                .arg("-d")
                .arg(dest.parent().unwrap())
                .arg("-o")
                .arg(dest.file_name().unwrap())
                .arg(s.https_url(&f.name)))
        });
    }
}

/// Garbage instead of a ClientHello, and a client that stops halfway
/// through one, end their own connections; everyone else is served.
#[test]
fn broken_handshakes_do_not_disturb_others() {
    if !require_tool("curl") {
        return;
    }
    let s = TlsServer::start(&[]);
    let mut garbage = TcpStream::connect(("127.0.0.1", s.https)).unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: plain-text-on-the-tls-port\r\n\r\n")
        .unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut sink = Vec::new();
    // The server answers with a TLS alert or just closes; either way the
    // connection ends (read_to_end returns) instead of hanging.
    let _ = garbage.read_to_end(&mut sink);
    assert!(
        !sink.starts_with(b"HTTP/"),
        "plain HTTP answered on the TLS port"
    );
    let mut half = TcpStream::connect(("127.0.0.1", s.https)).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
        .unwrap();
    let f = corpus().file((1 << 20) + 7);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let out = run(Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(s.ca())
        .arg("-o")
        .arg(&dest)
        .arg(s.https_url(&f.name)));
    out.assert_success();
    compare_file(&dest, f).unwrap();
    drop(half);
    s.server.assert_running();
}

/// A certificate or key that cannot be used stops the start with a
/// message naming the file.
#[test]
fn bad_certificate_files_refuse_the_start() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "this is not PEM\n").unwrap();
    let cases: [(&Path, &Path, &str); 3] = [
        (&junk, &pki.key, "junk.pem"),
        (&pki.cert, &junk, "junk.pem"),
        // The wrong key for the certificate.
        (&pki.cert, &pki.wrong_key, "server.pem"),
    ];
    for (cert, key, named) in cases {
        let out = run(Command::new(crate::harness::sluice_bin())
            .arg("serve")
            .arg(dir.path())
            .args([
                "--ftp",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--https",
                "127.0.0.1:0",
            ])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key));
        assert!(!out.success(), "started with {cert:?} {key:?}");
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(2),
            "{}",
            out.describe()
        );
        assert!(out.stderr.contains(named), "{}", out.describe());
    }
    // --https without a certificate.
    let out = run(Command::new(crate::harness::sluice_bin())
        .arg("serve")
        .arg(dir.path())
        .args(["--ftp", "127.0.0.1:0", "--https", "127.0.0.1:0"]));
    assert!(!out.success());
    assert!(out.stderr.contains("tls_cert"), "{}", out.describe());
}

/// Whether this kernel puts the `tls` upper layer protocol on a socket.
fn kernel_has_tls() -> bool {
    use std::os::fd::AsFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    sluice_platform::ktls::set_ulp_tls(s.as_fd()).is_ok()
}

/// `--ktls on`: on a kernel with kernel TLS, HTTPS bodies go through it
/// and curl (every size, a range, two requests on one connection) and
/// `sluice get` check out by sha256; on a kernel without it (this
/// project's machines), the start is refused with a message saying so.
/// `--ktls auto` (the default) is what every other HTTPS test runs.
#[test]
fn ktls_on_uses_kernel_tls_or_refuses_the_start() {
    if !kernel_has_tls() {
        let pki = TestPki::new();
        let dir = tempfile::tempdir().unwrap();
        let out = run(Command::new(crate::harness::sluice_bin())
            .arg("serve")
            .arg(dir.path())
            .args([
                "--ftp",
                "127.0.0.1:0",
                "--https",
                "127.0.0.1:0",
                "--ktls",
                "on",
            ])
            .args(pki.serve_args()));
        assert_refused(&out, 2, &["--ktls on", "no kernel TLS"]);
        return;
    }
    let s = TlsServer::start(&["--ktls", "on"]);
    fetch_all(&s, "curl https over kTLS", |f, dest| {
        run(Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(s.ca())
            .arg("-o")
            .arg(dest)
            .arg(s.https_url(&f.name)))
    });
    let big = corpus().file(64 << 20);
    let whole = std::fs::read(corpus().dir().join(&big.name)).unwrap();
    let out = run(Command::new("curl")
        .args(["-sS", "--fail", "-r", "1000-1999", "--cacert"])
        .arg(s.ca())
        .arg(s.https_url(&big.name)));
    out.assert_success();
    assert_eq!(out.stdout_bytes, &whole[1000..2000]);
    // Two requests on one connection: the second is read through the
    // kernel's TLS after the first body.
    let small = corpus().file(4095);
    let out = run(Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(s.ca())
        .arg(s.https_url(&small.name))
        .arg(s.https_url(&small.name)));
    out.assert_success();
    assert_eq!(out.stdout_bytes.len(), 2 * 4095);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big");
    sluice_get(
        &["--ca", s.ca().to_str().unwrap()],
        &s.https_url(&big.name),
        &dest,
    )
    .assert_success();
    compare_file(&dest, big).unwrap();
    s.server.assert_running();
}

pub(crate) fn sluice_get(extra: &[&str], url: &str, dest: &Path) -> Output {
    run(Command::new(crate::harness::sluice_bin())
        .arg("get")
        .arg("-q")
        .args(extra)
        .arg(url)
        .arg(dest))
}

/// `sluice get https://` with one and four connections (ranges), and
/// `sluice ls`/`get` of a listing, checked against the test CA.
#[test]
fn sluice_get_over_https() {
    let s = TlsServer::start(&[]);
    let ca = s.ca().to_str().unwrap().to_string();
    for p in ["1", "4"] {
        fetch_all(&s, &format!("sluice get -p {p} https://"), |f, dest| {
            sluice_get(&["--ca", &ca, "-p", p], &s.https_url(&f.name), dest)
        });
    }
    // A name in the certificate (DNS) rather than its IP address.
    let f = corpus().file(4095);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("byname");
    let url = format!("https://localhost:{}/{}", s.https, f.name);
    sluice_get(&["--ca", &ca], &url, &dest).assert_success();
    compare_file(&dest, f).unwrap();
}

/// The client refuses a server whose certificate does not name it, or
/// that its trust store does not know, with a clear error and exit 3;
/// `--insecure` (only when asked) gets through.
/// `sluice serve` with HTTPS on `cert`/`key`, and the URL of a 4095-byte
/// corpus file on it.
fn https_server_with(cert: &Path, key: &Path) -> (FtpServer, String, &'static TestFile) {
    let mut args = crate::harness::certs::tls_args(cert, key);
    args.extend(["--https".into(), "127.0.0.1:0".into()]);
    let server = servers::sluice(ServeOptions {
        extra_args: args,
        ..Default::default()
    });
    let port = server.announced_port("https");
    let f = corpus().file(4095);
    let url = format!("https://127.0.0.1:{port}/{}", f.name);
    (server, url, f)
}

/// Asserts a client run ended with exit status `code` and says `what`.
fn assert_refused(out: &Output, code: i32, what: &[&str]) {
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(code),
        "{}",
        out.describe()
    );
    for w in what {
        assert!(out.stderr.contains(w), "{w:?} missing: {}", out.describe());
    }
}

#[test]
fn sluice_get_refuses_a_wrong_certificate() {
    let pki = TestPki::new();
    let (server, url, f) = https_server_with(&pki.wrong_cert, &pki.wrong_key);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let ca = pki.ca.to_str().unwrap();
    // Signed by the trusted CA, but for wrong.example.
    let out = sluice_get(&["--ca", ca], &url, &dest);
    assert_refused(&out, 3, &["certificate", "not valid for name"]);
    assert!(!dest.exists());
    // No --ca: the system roots do not know the test CA.
    let out = sluice_get(&[], &url, &dest);
    assert_refused(&out, 3, &["--ca FILE"]);
    let out = sluice_get(&["--insecure"], &url, &dest);
    out.assert_success();
    compare_file(&dest, f).unwrap();
    server.assert_running();
}

/// An expired server certificate: `sluice get` says so (not "unknown CA")
/// and exits 3, curl and wget refuse it too, and the server goes on
/// serving (a client that accepts the risk with `--insecure` gets the
/// file).
#[test]
fn an_expired_certificate_is_refused_with_a_clear_error() {
    let pki = TestPki::new();
    let (server, url, f) = https_server_with(&pki.expired_cert, &pki.expired_key);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let ca = pki.ca.to_str().unwrap();
    let out = sluice_get(&["--ca", ca], &url, &dest);
    assert_refused(&out, 3, &["certificate", "expired"]);
    assert!(!out.stderr.contains("--ca FILE"), "{}", out.describe());
    assert!(!dest.exists());
    // curl's "SSL certificate problem" exit code is 60.
    let out = run(Command::new("curl")
        .args(["-sS", "--cacert", ca, "-o"])
        .arg(&dest)
        .arg(&url));
    assert_refused(&out, 60, &["expired"]);
    let out = sluice_get(&["--insecure"], &url, &dest);
    out.assert_success();
    compare_file(&dest, f).unwrap();
    server.assert_running();
}

/// SIGHUP with a new certificate in the config file: new handshakes on
/// both doors get it, an HTTPS download started before runs on to the
/// end; a key that does not load is refused and the certificate in force
/// stays.
#[test]
fn sighup_reloads_the_certificate() {
    if !require_tool("curl") {
        return;
    }
    let pki = TestPki::new();
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("sluice.toml");
    let write = |cert: &Path, key: &Path| {
        std::fs::write(
            &conf,
            format!("https = \"127.0.0.1:0\"\ntls_cert = {cert:?}\ntls_key = {key:?}\n"),
        )
        .unwrap()
    };
    write(&pki.cert, &pki.key);
    let server = servers::sluice(ServeOptions {
        extra_args: vec!["--config".into(), conf.to_str().unwrap().into()],
        ..Default::default()
    });
    let port = server.announced_port("https");
    let ca = pki.ca.to_str().unwrap().to_string();
    let small = corpus().file(4095);
    let dir = tempfile::tempdir().unwrap();
    let get = |host: &str, url_host: &str, ftp: bool| {
        let dest = dir.path().join("small");
        let _ = std::fs::remove_file(&dest);
        let (url, p) = if ftp {
            (
                format!("ftp://{url_host}:{}/{}", server.port, small.name),
                server.port,
            )
        } else {
            (format!("https://{url_host}:{port}/{}", small.name), port)
        };
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--fail", "--cacert", &ca, "-o"])
            .arg(&dest)
            .args(["--resolve", &format!("{host}:{p}:127.0.0.1")]);
        if ftp {
            cmd.arg("--ssl-reqd");
        }
        let out = run(cmd.arg(url));
        (out, dest)
    };
    for ftp in [false, true] {
        let (out, dest) = get("localhost", "localhost", ftp);
        out.assert_success();
        compare_file(&dest, small).unwrap();
    }
    // A slow download under the old certificate, across the reload.
    let big = corpus().file(64 << 20);
    let big_dest = dir.path().join("big");
    let mut slow = Command::new("curl");
    slow.args([
        "-sS",
        "--fail",
        "--limit-rate",
        "16M",
        "--cacert",
        &ca,
        "-o",
    ])
    .arg(&big_dest)
    .arg(format!("https://127.0.0.1:{port}/{}", big.name));
    let slow = std::thread::spawn(move || run(&mut slow));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&big_dest).map_or(0, |m| m.len()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "slow download never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    write(&pki.wrong_cert, &pki.wrong_key);
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    server.wait_for_log("configuration reloaded", 1);
    for ftp in [false, true] {
        // The old name is no longer in the certificate...
        let (out, _) = get("localhost", "localhost", ftp);
        assert!(
            !out.success(),
            "old certificate still served\n{}",
            out.describe()
        );
        // ...the new one is.
        let (out, dest) = get("wrong.example", "wrong.example", ftp);
        out.assert_success();
        compare_file(&dest, small).unwrap();
    }
    let out = slow.join().unwrap();
    out.assert_success();
    compare_file(&big_dest, big).unwrap();
    // A key that does not load: refused, the running certificate stays.
    let junk = conf_dir.path().join("junk.pem");
    std::fs::write(&junk, "not a key\n").unwrap();
    write(&pki.cert, &junk);
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    server.wait_for_log("new configuration refused", 1);
    let (out, _) = get("wrong.example", "wrong.example", false);
    out.assert_success();
    server.assert_running();
}
