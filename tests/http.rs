//! The HTTP/1.1 front door with real clients: `sluice serve` against curl,
//! wget, aria2c, Python urllib, `sluice get` (1 and 4 streams) and headless
//! Chromium; `sluice get http://` against nginx. Raw-socket checks are in
//! `http_requests.rs`.

use crate::harness::process::{find_tool, peers_required, ProcessGuard};
use crate::harness::servers::{self, FtpServer, ServeOptions};
use crate::harness::{compare_file, corpus, require_tool, run, sha256_file, Output, TestFile};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The sizes every HTTP client is checked with.
const HTTP_SIZES: [u64; 4] = [0, 1, (1 << 20) + 7, 64 << 20];
/// How long a raw-socket read may wait before the test gives up.
pub(crate) const RAW_TIMEOUT: Duration = Duration::from_secs(60);

/// `sluice serve` with its HTTP port (the FTP side comes with it).
pub(crate) struct HttpServer {
    pub(crate) ftp: FtpServer,
    pub(crate) port: u16,
}

impl HttpServer {
    pub(crate) fn url(&self, rel: &str) -> String {
        format!("http://127.0.0.1:{}/{}", self.port, rel)
    }
}

/// Starts `sluice serve EXTRA...` (harness: `--http 127.0.0.1:0`) on the corpus root
/// and reads the HTTP port from its `http listening on ADDR` line (printed
/// before the FTP line the harness waits for).
pub(crate) fn sluice_http(extra: &[&str]) -> HttpServer {
    // The harness gives both front doors free ports (--http 127.0.0.1:0).
    let ftp = servers::sluice(ServeOptions {
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    let log = ftp.log_tail();
    let port = log
        .lines()
        .find_map(|l| {
            let rest = &l[l.find("http listening on ")? + "http listening on ".len()..];
            rest.trim().rsplit(':').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `http listening on` line\n{log}"));
    HttpServer { ftp, port }
}

/// Downloads every size with `fetch(url, dest)` and compares sha256.
fn download_all(server: &HttpServer, what: &str, fetch: impl Fn(&str, &Path) -> Output) {
    let dir = tempfile::tempdir().expect("download dir");
    for &size in &HTTP_SIZES {
        let f: &TestFile = corpus().file(size);
        let dest = dir.path().join(&f.name);
        let out = fetch(&server.url(&f.name), &dest);
        if !out.success() {
            panic!(
                "{what}: {} failed\n{}\n{}",
                f.name,
                out.describe(),
                server.ftp.log_tail()
            );
        }
        if let Err(e) = compare_file(&dest, f) {
            panic!("{what}: {}: {e}\n{}", f.name, out.describe());
        }
    }
    server.ftp.assert_running();
}

pub(crate) fn sluice_cmd() -> Command {
    Command::new(crate::harness::sluice_bin())
}

#[test]
fn curl_downloads_every_size() {
    if !require_tool("curl") {
        return;
    }
    let s = sluice_http(&[]);
    download_all(&s, "curl", |url, dest| {
        run(Command::new("curl")
            .args(["-sS", "--fail", "-o"])
            .arg(dest)
            .arg(url))
    });
}

#[test]
fn wget_downloads_every_size() {
    if !require_tool("wget") {
        return;
    }
    let s = sluice_http(&[]);
    download_all(&s, "wget", |url, dest| {
        run(Command::new("wget").args(["-q", "-O"]).arg(dest).arg(url))
    });
}

#[test]
fn aria2c_with_four_connections_downloads_every_size() {
    if !require_tool("aria2c") {
        return;
    }
    let s = sluice_http(&[]);
    download_all(&s, "aria2c -x 4", |url, dest| {
        run(Command::new("aria2c")
            .args(["-x", "4", "-s", "4", "-k", "1M", "--allow-overwrite=true"])
            .args(["--auto-file-renaming=false", "--file-allocation=none", "-q"])
            .arg("-d")
            .arg(dest.parent().expect("parent"))
            .arg("-o")
            .arg(dest.file_name().expect("name"))
            .arg(url))
    });
}

#[test]
fn python_urllib_downloads_every_size() {
    if !require_tool("python3") {
        return;
    }
    let s = sluice_http(&[]);
    download_all(&s, "python urllib", |url, dest| {
        run(Command::new("python3")
            .arg("-c")
            .arg("import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])")
            .arg(url)
            .arg(dest))
    });
}

#[test]
fn sluice_get_one_and_four_streams() {
    let s = sluice_http(&[]);
    for p in ["1", "4", "auto"] {
        download_all(&s, &format!("sluice get -p {p}"), |url, dest| {
            run(sluice_cmd().args(["get", "-q", "-p", p, url]).arg(dest))
        });
    }
}

#[test]
fn sluice_get_resumes_with_if_range() {
    let s = sluice_http(&[]);
    let f = corpus().file(64 << 20);
    let dir = tempfile::tempdir().expect("dir");
    for (p, etag) in [
        ("1", None),
        ("4", None),
        ("1", Some("\"stale\"")),
        ("4", Some("\"stale\"")),
    ] {
        let dest = dir.path().join(format!("r{p}{}", etag.is_some()));
        let part = PathBuf::from(format!("{}.part", dest.display()));
        crate::harness::corpus::write_prefix(&f.path, &part, 5_000_000);
        if let Some(e) = etag {
            // A validator from another version of the file: If-Range fails,
            // the server sends it whole, the client starts over.
            std::fs::write(format!("{}.part.etag", dest.display()), e).expect("etag file");
        }
        let out = run(sluice_cmd()
            .args(["get", "-q", "-c", "-p", p, &s.url(&f.name)])
            .arg(&dest));
        out.assert_success();
        compare_file(&dest, f).unwrap_or_else(|e| panic!("resume -p {p} etag {etag:?}: {e}"));
        assert!(!part.exists(), "part left behind");
        if etag.is_none() {
            assert!(
                out.stderr.contains("resumed at 5000000"),
                "{}",
                out.describe()
            );
        }
    }
    // A part that already holds the whole file: nothing to fetch (416 to
    // a one-stream resume, a HEAD for -p 4), and it is completed.
    for p in ["1", "4", "auto"] {
        let dest = dir.path().join(format!("whole{p}"));
        let part = PathBuf::from(format!("{}.part", dest.display()));
        std::fs::copy(&f.path, &part).expect("copy whole part");
        let out = run(sluice_cmd()
            .args(["get", "-q", "-c", "-p", p, &s.url(&f.name)])
            .arg(&dest));
        out.assert_success();
        compare_file(&dest, f).unwrap_or_else(|e| panic!("whole part -p {p}: {e}"));
        assert!(
            out.stderr.contains("received 0 bytes"),
            "{}",
            out.describe()
        );
    }
}

/// A free loopback port (bound and released: a peer that cannot be told
/// "port 0" gets this one; the window for a clash is tiny).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[test]
fn sluice_get_against_nginx() {
    if !require_tool("nginx") {
        return;
    }
    let dir = tempfile::tempdir().expect("nginx dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    crate::harness::corpus::populate(&root, false);
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    let d = dir.path().display();
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; worker_processes 1; user root;\n\
             pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log {d}/access.log; client_body_temp_path {d}/tmp;\n\
               proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
               sendfile on; server {{ listen 127.0.0.1:{port}; root {}; }} }}\n",
            root.display()
        ),
    )
    .expect("nginx.conf");
    let nginx = find_tool("nginx").expect("nginx");
    let _proc = ProcessGuard::spawn(
        Command::new(nginx)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start nginx");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen on {port}: {}",
            std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let out_dir = tempfile::tempdir().expect("out");
    for p in ["1", "4", "auto"] {
        for &size in &HTTP_SIZES {
            let f = corpus().file(size);
            let dest = out_dir.path().join(format!("{p}-{}", f.name));
            let url = format!("http://127.0.0.1:{port}/{}", f.name);
            run(sluice_cmd().args(["get", "-q", "-p", p, &url]).arg(&dest)).assert_success();
            compare_file(&dest, f).unwrap_or_else(|e| panic!("nginx -p {p} {}: {e}", f.name));
        }
    }
    // Resume from a prefix against nginx (its ETag in If-Range).
    let f = corpus().file(64 << 20);
    let dest = out_dir.path().join("resumed");
    crate::harness::corpus::write_prefix(
        &f.path,
        Path::new(&format!("{}.part", dest.display())),
        3_000_000,
    );
    let url = format!("http://127.0.0.1:{port}/{}", f.name);
    let out = run(sluice_cmd().args(["get", "-q", "-c", &url]).arg(&dest));
    out.assert_success();
    assert!(
        out.stderr.contains("resumed at 3000000"),
        "{}",
        out.describe()
    );
    compare_file(&dest, f).expect("resumed from nginx");
    // A missing file is exit 5 (refused), with the status in the message.
    let out = run(sluice_cmd()
        .args(["get", "-q", &format!("http://127.0.0.1:{port}/nope")])
        .arg(out_dir.path().join("x")));
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(5),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("404"), "{}", out.describe());
}

// ---------------------------------------------------------------------
// Headless Chromium: the listing in a real browser.

pub(crate) fn browser_ready() -> Option<(PathBuf, PathBuf)> {
    let chromium = find_tool("chromium").or_else(|| find_tool("chromium-browser"));
    let driver = find_tool("chromedriver");
    let selenium = Command::new("python3")
        .args(["-c", "import selenium"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let why = match (&chromium, &driver, selenium) {
        (None, _, _) => "chromium is not installed (apt-get install chromium)",
        (_, None, _) => "chromedriver is not installed (apt-get install chromium-driver)",
        (_, _, false) => "python selenium is not installed (pip install selenium)",
        (Some(c), Some(d), true) => return Some((c.clone(), d.clone())),
    };
    if peers_required() {
        panic!("browser test: {why} (SLUICE_REQUIRE_PEERS=1)");
    }
    eprintln!("SKIP: browser test: {why}");
    None
}

/// Headless Chromium (tests/browser/listing.py) opens the listing at
/// `url`, checks every corpus file's link, downloads `f` and saves
/// `screenshot` in target/test-artifacts; `home` is the browser's HOME
/// (its NSS store), if given. Asserts the download's sha256.
pub(crate) fn browser_lists_and_fetches(
    (chromium, driver): (PathBuf, PathBuf),
    url: &str,
    home: Option<&Path>,
    screenshot: &str,
    f: &TestFile,
) {
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifact dir");
    let downloads = tempfile::tempdir().expect("downloads");
    let profile = tempfile::tempdir().expect("profile");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser/listing.py");
    let mut cmd = Command::new("python3");
    if let Some(h) = home {
        cmd.env("HOME", h);
    }
    let out = crate::harness::run_with_timeout(
        cmd.arg(script)
            .args(["--url", url])
            .args(["--chromium"])
            .arg(&chromium)
            .args(["--driver"])
            .arg(&driver)
            .args(["--profile"])
            .arg(profile.path())
            .args(["--downloads"])
            .arg(downloads.path())
            .args(["--screenshot"])
            .arg(artifacts.join(screenshot))
            .args(["--expect"])
            .args(corpus().files().iter().map(|f| f.name.clone()))
            .args(["--fetch", &f.name]),
        Duration::from_secs(180),
    );
    out.assert_success();
    assert_eq!(
        sha256_file(&downloads.path().join(&f.name)),
        f.sha256,
        "browser download differs\n{}",
        out.describe()
    );
    assert!(artifacts.join(screenshot).is_file());
}

#[test]
fn chromium_lists_and_downloads() {
    let Some(browser) = browser_ready() else {
        return;
    };
    let s = sluice_http(&[]);
    let f = corpus().file((1 << 20) + 7);
    browser_lists_and_fetches(browser, &s.url(""), None, "listing.png", f);
}
