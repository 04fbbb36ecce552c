//! The HTTP/1.1 front door: `sluice serve` against curl, wget, aria2c,
//! Python urllib, `sluice get` (1 and 4 streams) and headless Chromium;
//! `sluice get http://` against nginx; Range/conditional/keep-alive
//! behaviour on raw sockets; and hostile input, each answered with its
//! status while the server goes on serving a fresh connection.

use crate::harness::process::{find_tool, peers_required, ProcessGuard};
use crate::harness::servers::{self, FtpServer, ServeOptions};
use crate::harness::{compare_file, corpus, require_tool, run, sha256_file, Output, TestFile};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The sizes every HTTP client is checked with.
const HTTP_SIZES: [u64; 4] = [0, 1, (1 << 20) + 7, 64 << 20];
/// How long a raw-socket read may wait before the test gives up.
const RAW_TIMEOUT: Duration = Duration::from_secs(60);

/// `sluice serve` with its HTTP port (the FTP side comes with it).
struct HttpServer {
    ftp: FtpServer,
    port: u16,
}

impl HttpServer {
    fn url(&self, rel: &str) -> String {
        format!("http://127.0.0.1:{}/{}", self.port, rel)
    }
}

/// Starts `sluice serve EXTRA...` (harness: `--http 127.0.0.1:0`) on the corpus root
/// and reads the HTTP port from its `http listening on ADDR` line (printed
/// before the FTP line the harness waits for).
fn sluice_http(extra: &[&str]) -> HttpServer {
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

fn sluice_cmd() -> Command {
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
// Raw-socket checks.

/// Sends `request` on a fresh connection and reads until the server
/// closes it (or RAW_TIMEOUT).
fn raw(port: u16, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    // The server may answer and close before it read everything (414,
    // 431): a failed write is fine, the answer is what we check.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// The status codes of every response in `bytes`, in order (heads are
/// found by their status line; bodies here never contain one).
fn statuses(bytes: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(bytes);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text[i + 9..].get(..3)?.parse().ok())
        .collect()
}

fn status(bytes: &[u8]) -> u16 {
    statuses(bytes).first().copied().unwrap_or_else(|| {
        panic!(
            "no response: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        )
    })
}

/// Body of a single response (after the blank line).
fn body(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end");
    &bytes[at + 4..]
}

fn field(bytes: &[u8], name: &str) -> Option<String> {
    let at = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..at]).into_owned();
    head.lines().find_map(|l| {
        l.split_once(':')
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The server still answers a plain GET on a fresh connection.
#[track_caller]
fn assert_serves_fresh(s: &HttpServer) {
    let r = raw(
        s.port,
        b"GET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        status(&r),
        200,
        "fresh connection after bad input\n{}",
        s.ftp.log_tail()
    );
    assert_eq!(body(&r), std::fs::read(&corpus().file(1).path).expect("f1"));
}

fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

#[test]
fn ranges_conditionals_and_listings() {
    let s = sluice_http(&[]);
    let f = corpus().file((1 << 20) + 7);
    let data = std::fs::read(&f.path).expect("read");
    let p = s.port;
    let name = format!("/{}", f.name);

    let r = raw(p, &get(&name, "Range: bytes=100-199\r\n"));
    assert_eq!(status(&r), 206);
    assert_eq!(body(&r), &data[100..200]);
    assert_eq!(
        field(&r, "content-range").as_deref(),
        Some("bytes 100-199/1048583")
    );
    let r = raw(p, &get(&name, "Range: bytes=1048000-\r\n"));
    assert_eq!(body(&r), &data[1048000..]);
    let r = raw(p, &get(&name, "Range: bytes=-7\r\n"));
    assert_eq!(body(&r), &data[data.len() - 7..]);
    let r = raw(p, &get(&name, "Range: bytes=0-0,10-19\r\n"));
    assert_eq!(status(&r), 206);
    assert!(field(&r, "content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    let b = body(&r);
    assert!(
        b.windows(10).any(|w| w == &data[10..20]),
        "second part present"
    );
    let r = raw(p, &get(&name, "Range: bytes=2000000-\r\n"));
    assert_eq!(status(&r), 416);
    assert_eq!(
        field(&r, "content-range").as_deref(),
        Some("bytes */1048583")
    );

    // Validators, 304, If-Range.
    let r = raw(
        p,
        &format!("HEAD {name} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    );
    assert_eq!(status(&r), 200);
    assert!(body(&r).is_empty(), "HEAD has no body");
    assert_eq!(field(&r, "content-length").as_deref(), Some("1048583"));
    assert_eq!(field(&r, "accept-ranges").as_deref(), Some("bytes"));
    let etag = field(&r, "etag").expect("etag");
    let lm = field(&r, "last-modified").expect("last-modified");
    assert_eq!(
        status(&raw(p, &get(&name, &format!("If-None-Match: {etag}\r\n")))),
        304
    );
    assert_eq!(
        status(&raw(
            p,
            &get(&name, &format!("If-Modified-Since: {lm}\r\n"))
        )),
        304
    );
    let r = raw(
        p,
        &get(&name, &format!("Range: bytes=5-9\r\nIf-Range: {etag}\r\n")),
    );
    assert_eq!((status(&r), body(&r)), (206, &data[5..10]));
    let r = raw(
        p,
        &get(&name, "Range: bytes=5-9\r\nIf-Range: \"other\"\r\n"),
    );
    assert_eq!(status(&r), 200, "If-Range mismatch sends the whole file");
    assert_eq!(body(&r).len(), data.len());

    // Keep-alive with three pipelined requests in one write, then HTTP/1.0.
    let r = raw(
        p,
        b"GET /f1.bin HTTP/1.1\r\nHost: t\r\n\r\nHEAD /f0.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(statuses(&r), [200, 200, 200]);
    let r = raw(p, b"GET /f1.bin HTTP/1.0\r\n\r\n");
    assert_eq!(status(&r), 200);
    assert_eq!(body(&r).len(), 1);

    // Listings.
    let r = raw(p, &get("/", ""));
    assert_eq!(status(&r), 200);
    let html = String::from_utf8_lossy(body(&r)).into_owned();
    for f in corpus().files() {
        assert!(html.contains(&format!("href=\"./{}\"", f.name)), "{html}");
    }
    let r = raw(p, &get("/?format=json", ""));
    assert_eq!(
        field(&r, "content-type").as_deref(),
        Some("application/json")
    );
    assert!(String::from_utf8_lossy(body(&r)).contains("\"f1048583.bin\""));
    let r = raw(p, &get("/nope/", ""));
    assert_eq!(status(&r), 404);

    // The access log has combined-format lines.
    let log = s.ftp.log_tail();
    assert!(
        log.contains(&format!("\"GET {name} HTTP/1.1\" 206 100 \"-\" \"-\"")),
        "no access line\n{log}"
    );
}

/// RFC 9110 13.1.1, 13.1.4, 13.2.2: If-Match (strong) and, without it,
/// If-Unmodified-Since are checked first; failing, 412 with no body and
/// the current validators, before any 304 or 206 could be chosen.
#[test]
fn if_match_and_if_unmodified_since_give_412() {
    let s = sluice_http(&[]);
    let p = s.port;
    let f = corpus().file((1 << 20) + 7);
    let data = std::fs::read(&f.path).expect("read");
    let name = format!("/{}", f.name);
    let r = raw(
        p,
        &format!("HEAD {name} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    );
    let etag = field(&r, "etag").expect("etag");
    let lm = field(&r, "last-modified").expect("last-modified");
    let epoch = "Thu, 01 Jan 1970 00:00:00 GMT";
    for extra in [
        "If-Match: \"nope\"\r\n".to_owned(),
        format!("If-Match: W/{etag}\r\n"),
        format!("If-Unmodified-Since: {epoch}\r\n"),
        format!("If-Match: \"nope\"\r\nIf-None-Match: {etag}\r\n"),
        format!("If-Match: \"nope\"\r\nRange: bytes=0-9\r\nIf-Range: {etag}\r\n"),
        format!("If-Unmodified-Since: {epoch}\r\nRange: bytes=0-9\r\n"),
    ] {
        let r = raw(p, &get(&name, &extra));
        assert_eq!(status(&r), 412, "{extra}{}", String::from_utf8_lossy(&r));
        assert!(body(&r).is_empty(), "{extra}");
        assert_eq!(field(&r, "content-length").as_deref(), Some("0"), "{extra}");
        assert_eq!(field(&r, "etag").as_ref(), Some(&etag), "{extra}");
        assert_eq!(field(&r, "last-modified").as_ref(), Some(&lm), "{extra}");
    }
    // Passing conditions serve as before.
    for extra in [
        format!("If-Match: {etag}\r\n"),
        "If-Match: *\r\n".to_owned(),
        format!("If-Match: \"a\", {etag}\r\n"),
        format!("If-Unmodified-Since: {lm}\r\n"),
        format!("If-Match: {etag}\r\nIf-Unmodified-Since: {epoch}\r\n"),
    ] {
        let r = raw(p, &get(&name, &extra));
        assert_eq!(status(&r), 200, "{extra}");
        assert_eq!(body(&r).len(), data.len(), "{extra}");
    }
    let r = raw(
        p,
        &get(&name, &format!("If-Match: {etag}\r\nRange: bytes=5-9\r\n")),
    );
    assert_eq!((status(&r), body(&r)), (206, &data[5..10]));
    // A 412 keeps the connection usable: the next pipelined request is answered.
    let r = raw(
        p,
        format!(
            "GET {name} HTTP/1.1\r\nHost: t\r\nIf-Match: \"nope\"\r\n\r\n\
             GET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(statuses(&r), [412, 200]);
    // curl sends the same and sees the same.
    if require_tool("curl") {
        let out = run(Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "If-Match: \"nope\"", &s.url(&f.name)]));
        assert_eq!(out.stdout.trim(), "412", "{}", out.describe());
    }
}

/// Names with control bytes cannot be requested (the path parser refuses
/// them), so the listings leave them out, and every link a listing
/// offers leads to its file.
#[test]
fn listings_offer_only_names_that_can_be_fetched() {
    let s = sluice_http(&[]);
    let root = s.ftp.root.clone();
    let bad = [
        "bad-new\nline",
        "bad-cr\rx",
        "bad-tab\there",
        "bad-ctl\u{1}\u{1b}[31m",
        "bad-del\u{7f}",
    ];
    for name in bad {
        std::fs::write(root.join(name), b"x").expect("odd name");
    }
    std::fs::write(root.join("good é?#.txt"), b"good").expect("good name");
    let r = raw(s.port, &get("/", ""));
    assert_eq!(status(&r), 200);
    let html = String::from_utf8(body(&r).to_vec()).expect("utf-8 page");
    let r = raw(s.port, &get("/?format=json", ""));
    let json = String::from_utf8(body(&r).to_vec()).expect("utf-8 json");
    for page in [&html, &json] {
        assert!(!page.contains("bad-"), "{page}");
        assert!(
            !page.bytes().any(|b| b < 0x20 && b != b'\n' || b == 0x7f),
            "raw control bytes: {page:?}"
        );
    }
    assert!(json.contains("\"good é?#.txt\""), "{json}");
    // Follow every link of the page (HEAD: the corpus holds big files).
    let links: Vec<&str> = html
        .split("href=\"./")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(links.contains(&"good%20%C3%A9%3F%23.txt"), "{html}");
    assert_eq!(links.len(), corpus().files().len() + 1, "{html}");
    for link in links {
        let r = raw(
            s.port,
            format!("HEAD /{link} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&r), 200, "link {link}");
    }
    assert_eq!(
        body(&raw(s.port, &get("/good%20%C3%A9%3F%23.txt", ""))),
        b"good"
    );
    assert_serves_fresh(&s);
}

/// FIFOs and sockets answer 403, so the listings leave them out instead
/// of offering links that only ever fail.
#[test]
fn listings_leave_out_fifos_and_sockets() {
    let s = sluice_http(&[]);
    let root = s.ftp.root.clone();
    let st = std::process::Command::new("mkfifo")
        .arg(root.join("a-fifo"))
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed");
    let _sock = std::os::unix::net::UnixListener::bind(root.join("a-socket")).expect("bind");
    assert_eq!(status(&raw(s.port, &get("/a-fifo", ""))), 403);
    for path in ["/", "/?format=json"] {
        let r = raw(s.port, &get(path, ""));
        assert_eq!(status(&r), 200);
        let page = String::from_utf8_lossy(body(&r)).into_owned();
        assert!(page.contains("f1.bin"), "{page}");
        for gone in ["a-fifo", "a-socket"] {
            assert!(!page.contains(gone), "{path} lists {gone}:\n{page}");
        }
    }
    assert_serves_fresh(&s);
}

/// Targets of the server's open descriptors that end with `suffix`.
fn open_fds_ending(pid: u32, suffix: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|t| t.to_string_lossy().into_owned())
                .filter(|t| t.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (generously) until `cond` holds; panics with `what` if it never does.
#[track_caller]
fn wait_for(s: &HttpServer, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + RAW_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}\n{}", s.ftp.log_tail());
        thread::sleep(Duration::from_millis(100));
    }
}

/// The open-file cache lets go of files on its own: a deleted file is
/// closed (its space freed) and an expired entry is dropped without any
/// further request for that path.
#[test]
fn the_open_file_cache_does_not_keep_deleted_or_old_files_open() {
    // A long-lived cache: the file is surely still cached when we look,
    // and only its lost link can make the server close it.
    let s = sluice_http(&["--http-open-cache", "3600"]);
    let pid = s.ftp.pid();
    let path = s.ftp.root.join("rotate.log");
    std::fs::write(&path, vec![b'l'; 100_000]).expect("file");
    assert_eq!(status(&raw(s.port, &get("/rotate.log", ""))), 200);
    wait_for(&s, "the cache never held the file", || {
        !open_fds_ending(pid, "/rotate.log").is_empty()
    });
    std::fs::remove_file(&path).expect("delete");
    wait_for(&s, "the deleted file stays open", || {
        open_fds_ending(pid, "/rotate.log (deleted)").is_empty()
    });
    assert_serves_fresh(&s);

    // A one-second cache and a file renamed away (still linked, so only
    // the expiry can release it), never asked for again.
    let s = sluice_http(&["--http-open-cache", "1"]);
    let pid = s.ftp.pid();
    let path = s.ftp.root.join("app.log");
    std::fs::write(&path, b"log line\n").expect("file");
    assert_eq!(status(&raw(s.port, &get("/app.log", ""))), 200);
    std::fs::rename(&path, s.ftp.root.join("app.log.1")).expect("rotate");
    wait_for(&s, "the expired entry stays open", || {
        open_fds_ending(pid, "/app.log").is_empty() && open_fds_ending(pid, "/app.log.1").is_empty()
    });
    // And a downloaded-then-deleted file under the default-sized cache.
    let path = s.ftp.root.join("gone.bin");
    std::fs::write(&path, b"bytes").expect("file");
    assert_eq!(status(&raw(s.port, &get("/gone.bin", ""))), 200);
    std::fs::remove_file(&path).expect("delete");
    wait_for(&s, "the deleted file stays open", || {
        open_fds_ending(pid, "/gone.bin (deleted)").is_empty()
    });
    assert_serves_fresh(&s);
}

/// Over the connection limit, the 503 says when to try again.
#[test]
fn the_connection_limit_503_carries_retry_after() {
    let s = sluice_http(&["--http-max-connections", "1"]);
    let hold = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    let mut c = hold.try_clone().expect("clone");
    c.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    c.write_all(b"GET /f1.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("write");
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).expect("answer");
    assert_eq!(status(&buf[..n]), 200);
    let r = raw(s.port, &get("/f1.bin", ""));
    assert_eq!(status(&r), 503);
    assert_eq!(field(&r, "retry-after").as_deref(), Some("1"));
}

#[test]
fn bad_requests_get_their_status_and_the_server_goes_on() {
    let s = sluice_http(&[]);
    let root = s.ftp.root.clone();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret"), b"secret").expect("secret");
    std::os::unix::fs::symlink(outside.path().join("secret"), root.join("leak")).expect("symlink");
    std::os::unix::fs::symlink(outside.path(), root.join("leakdir")).expect("symlink");
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(10_000));
    let many: String = (0..200).map(|i| format!("X-{i}: y\r\n")).collect();
    let big_field = format!("X: {}\r\n", "y".repeat(40_000));
    let cases: Vec<(&str, Vec<u8>, &[u16])> = vec![
        ("long request line", long_line.into_bytes(), &[414]),
        ("too many fields", get("/", &many), &[431]),
        ("too large head", get("/", &big_field), &[431]),
        ("garbage", b"HELLO\r\n\r\n".to_vec(), &[400]),
        ("no Host in 1.1", b"GET / HTTP/1.1\r\n\r\n".to_vec(), &[400]),
        (
            "bad version",
            b"GET / HTTP/2.0\r\nHost: t\r\n\r\n".to_vec(),
            &[505, 400],
        ),
        (
            "POST",
            b"POST /f1.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".to_vec(),
            &[405],
        ),
        (
            "DELETE",
            get("/f1.bin", "")
                .iter()
                .copied()
                .skip(3)
                .fold(b"DELETE".to_vec(), |mut v, b| {
                    v.push(b);
                    v
                }),
            &[405],
        ),
        ("dot-dot", get("/../../../../etc/passwd", ""), &[404, 400]),
        (
            "encoded dot-dot",
            get("/%2e%2e/%2e%2e/etc/passwd", ""),
            &[404, 400],
        ),
        (
            "encoded slash",
            get("/..%2f..%2fetc%2fpasswd", ""),
            &[404, 400],
        ),
        ("symlink out of root", get("/leak", ""), &[404, 403]),
        (
            "through a symlinked dir",
            get("/leakdir/secret", ""),
            &[404, 403],
        ),
        ("NUL", get("/f1.bin%00", ""), &[400, 404]),
    ];
    for (what, req, allowed) in cases {
        let r = raw(s.port, &req);
        let got = status(&r);
        assert!(
            allowed.contains(&got),
            "{what}: got {got}, want {allowed:?}\n{}",
            String::from_utf8_lossy(&r[..r.len().min(500)])
        );
        assert!(
            !r.windows(6).any(|w| w == b"secret"),
            "{what}: leaked the outside file"
        );
        assert_serves_fresh(&s);
    }
    // The listing does not show the escaping symlinks.
    let html = String::from_utf8_lossy(&raw(s.port, &get("/", ""))).into_owned();
    assert!(!html.contains("leak"), "{html}");
}

#[test]
fn a_stalled_request_head_is_closed_and_others_are_served() {
    let s = sluice_http(&["--http-header-timeout", "1"]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    c.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    c.write_all(b"GET /f1.bin HTTP/1.1\r\nHo")
        .expect("partial head");
    // While that one stalls, another client is served.
    assert_serves_fresh(&s);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    assert_eq!(status(&out), 408, "stalled head answered 408 and closed");
    // A connection that sends nothing at all is closed too.
    let mut idle = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    idle.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    let mut out = Vec::new();
    let _ = idle.read_to_end(&mut out);
    assert!(out.is_empty() || status(&out) == 408);
    assert_serves_fresh(&s);
}

#[test]
fn a_stalled_reader_is_dropped_after_the_send_timeout() {
    let s = sluice_http(&["--http-send-timeout", "1"]);
    let f = corpus().file(64 << 20);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    // A small receive window so the server's sends block early.
    c.write_all(&get(&format!("/{}", f.name), ""))
        .expect("request");
    // Read nothing until the server must have given up (it waits for one
    // second without progress; we wait for its log line, not a clock).
    let deadline = Instant::now() + RAW_TIMEOUT;
    while !s
        .ftp
        .log_tail()
        .contains(&format!("\"GET /{} HTTP/1.1\" 200", f.name))
    {
        assert!(
            Instant::now() < deadline,
            "no access line for the stalled response\n{}",
            s.ftp.log_tail()
        );
        thread::sleep(Duration::from_millis(100));
    }
    c.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    assert!(
        (out.len() as u64) < f.size,
        "the server sent everything to a client that was not reading ({} bytes)",
        out.len()
    );
    assert_serves_fresh(&s);
}

#[test]
fn connections_over_the_limit_get_503() {
    let s = sluice_http(&["--http-max-connections", "2"]);
    let hold: Vec<TcpStream> = (0..2)
        .map(|_| {
            let c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
            // One exchange proves this connection holds a slot.
            let mut c2 = c.try_clone().expect("clone");
            c2.write_all(b"GET /f1.bin HTTP/1.1\r\nHost: t\r\n\r\n")
                .expect("write");
            let mut buf = [0u8; 512];
            c2.set_read_timeout(Some(RAW_TIMEOUT)).expect("timeout");
            let n = c2.read(&mut buf).expect("answer");
            assert_eq!(status(&buf[..n]), 200);
            c
        })
        .collect();
    let r = raw(s.port, &get("/f1.bin", ""));
    assert_eq!(status(&r), 503);
    for c in &hold {
        let _ = c.shutdown(Shutdown::Both);
    }
    drop(hold);
    // Slots come back when those connections end.
    let deadline = Instant::now() + RAW_TIMEOUT;
    loop {
        let r = raw(s.port, &get("/f1.bin", ""));
        if status(&r) == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slots never came back");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn http_can_be_switched_off_and_served_alone() {
    // --no-ftp: HTTP only (the harness waits for an FTP line, so start by hand).
    let dir = tempfile::tempdir().expect("root");
    std::fs::write(dir.path().join("a"), b"abc").expect("file");
    let child = ProcessGuard::spawn(
        sluice_cmd()
            .args(["serve", "--no-ftp", "--http", "127.0.0.1:0"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .expect("start");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.take_stdout().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("line");
    assert!(line.starts_with("http listening on 127.0.0.1:"), "{line}");
    let port: u16 = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    let r = raw(port, &get("/a", ""));
    assert_eq!(body(&r), b"abc");
    drop(child);
    // --no-http: no HTTP line at all.
    let s = servers::sluice(ServeOptions {
        extra_args: vec!["--no-http".into()],
        ..Default::default()
    });
    assert!(!s.log_tail().contains("http listening"), "{}", s.log_tail());
    // Neither: refused at start.
    let o = run(sluice_cmd()
        .args(["serve", "--no-http", "--no-ftp"])
        .arg(dir.path()));
    assert!(!o.success(), "{}", o.describe());
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
