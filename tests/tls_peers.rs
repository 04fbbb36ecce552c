//! Peers over TLS that need more setup than a flag: headless Chromium over
//! HTTPS, trusting the test CA through its NSS store (so a certificate the
//! browser rejected would show an interstitial and fail the test, not be
//! clicked through), and rclone's FTP backend with explicit TLS, verifying
//! the server against the test CA (Go reads `SSL_CERT_FILE`).

use crate::harness::certs::TestPki;
use crate::harness::servers::{self, FtpServer, ServeOptions};
use crate::harness::{compare_file, corpus, require_tool, run};
use std::path::Path;
use std::process::Command;

/// `sluice serve --https` with the test PKI, plus `extra` flags.
fn tls_server(pki: &TestPki, writable: bool, extra: &[&str]) -> FtpServer {
    let mut args = pki.serve_args();
    args.extend(["--https".into(), "127.0.0.1:0".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    servers::sluice(ServeOptions {
        writable,
        extra_args: args,
        ..Default::default()
    })
}

/// A HOME whose NSS database (what Chromium on Linux trusts besides its
/// built-in roots) holds `ca` as a trusted TLS issuer.
fn nss_home_trusting(ca: &Path) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    let db = home.path().join(".pki/nssdb");
    std::fs::create_dir_all(&db).expect("nssdb dir");
    let db_arg = format!("sql:{}", db.display());
    run(Command::new("certutil").args(["-N", "--empty-password", "-d", &db_arg])).assert_success();
    run(Command::new("certutil")
        .args([
            "-A",
            "-d",
            &db_arg,
            "-n",
            "Sluice test CA",
            "-t",
            "C,,",
            "-i",
        ])
        .arg(ca))
    .assert_success();
    home
}

#[test]
fn chromium_lists_and_downloads_over_https_with_a_test_ca() {
    let Some(browser) = crate::http::browser_ready() else {
        return;
    };
    if !require_tool("certutil") {
        return;
    }
    let pki = TestPki::new();
    let s = tls_server(&pki, false, &[]);
    let https = s.announced_port("https");
    // `localhost`: the name a user types; the certificate names it.
    let url = format!("https://localhost:{https}/");
    let home = nss_home_trusting(&pki.ca);
    let f = corpus().file(64 << 20);
    crate::http::browser_lists_and_fetches(
        browser,
        &url,
        Some(home.path()),
        "listing-https.png",
        f,
    );
    s.assert_running();
}

/// `rclone ARGS` against the `:ftp:` backend of `s` with explicit TLS,
/// verifying the server against the test CA only.
fn rclone(
    s: &FtpServer,
    ca: &Path,
    conf: &Path,
    pass: &str,
    args: &[&str],
) -> crate::harness::Output {
    let port = s.port.to_string();
    run(Command::new("rclone")
        .env("SSL_CERT_FILE", ca)
        .env_remove("SSL_CERT_DIR")
        .arg("--config")
        .arg(conf)
        .args([
            "--ftp-host",
            "127.0.0.1",
            "--ftp-port",
            &port,
            "--ftp-user",
            "anonymous",
            "--ftp-pass",
            pass,
            "--ftp-explicit-tls",
            "--retries",
            "1",
            "--low-level-retries",
            "1",
            "--contimeout",
            "30s",
            "--timeout",
            "60s",
        ])
        .args(args))
}

#[test]
fn rclone_over_explicit_ftps() {
    if !require_tool("rclone") {
        return;
    }
    let pki = TestPki::new();
    // --require-tls: a login or a data connection in clear would fail.
    let s = tls_server(&pki, true, &["--require-tls"]);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("rclone.conf");
    std::fs::write(&conf, "").unwrap();
    let obscured = run(Command::new("rclone").args(["obscure", "rclone@"]));
    obscured.assert_success();
    let pass = obscured.stdout.trim().to_string();
    // The listing (MLSD or LIST over a protected data connection).
    let out = rclone(&s, &pki.ca, &conf, &pass, &["lsf", ":ftp:"]);
    out.assert_success();
    for f in corpus().files() {
        assert!(
            out.stdout.contains(&f.name),
            "{} missing\n{}",
            f.name,
            out.describe()
        );
    }
    for size in [0u64, 4095, (1 << 20) + 7, 64 << 20] {
        let f = corpus().file(size);
        let dest = dir.path().join(format!("got-{size}"));
        let out = rclone(
            &s,
            &pki.ca,
            &conf,
            &pass,
            &[
                "copyto",
                &format!(":ftp:{}", f.name),
                dest.to_str().unwrap(),
            ],
        );
        out.assert_success();
        compare_file(&dest, f).unwrap();
    }
    let f = corpus().file((1 << 20) + 7);
    let src = corpus().dir().join(&f.name);
    let out = rclone(
        &s,
        &pki.ca,
        &conf,
        &pass,
        &["copyto", src.to_str().unwrap(), ":ftp:up-rclone"],
    );
    out.assert_success();
    compare_file(&s.local("up-rclone"), f).unwrap();
    // The server's certificate is checked: a CA that did not sign it fails.
    let other = TestPki::new();
    let out = rclone(&s, &other.ca, &conf, &pass, &["lsf", ":ftp:"]);
    assert!(
        !out.success(),
        "an untrusted certificate was accepted\n{}",
        out.describe()
    );
    s.assert_running();
}
