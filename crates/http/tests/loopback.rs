//! Real clients (curl, wget, aria2c, Python) against a throwaway
//! blocking shell built from this crate's API, on 127.0.0.1. The shell
//! here is a test harness only (the real one is crates/server): it
//! resolves paths by joining strings, which the server must never do.
//! A test whose client program is missing prints a note and passes.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use sluice_http::{
    parse_request, respond, respond_error, DirEntry, EntryKind, Options, Resource, Segment,
};

struct Server {
    port: u16,
    root: tempfile::TempDir,
    connections: Arc<AtomicUsize>,
}

/// Pseudo-random but reproducible file contents.
fn content(len: usize) -> Vec<u8> {
    let mut x: u32 = 12345;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect()
}

fn start() -> Server {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("big.bin"), content(3_000_000)).unwrap();
    fs::write(root.path().join("small.txt"), b"hello, world\n").unwrap();
    fs::create_dir(root.path().join("sub dir")).unwrap();
    fs::write(root.path().join("sub dir").join("<a&b>.txt"), b"x").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = root.path().to_owned();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let base = base.clone();
            std::thread::spawn(move || {
                let _ = serve(stream, &base);
            });
        }
    });
    Server {
        port,
        root,
        connections,
    }
}

fn lookup(root: &Path, rel: &str) -> Resource {
    let p: PathBuf = root.join(rel);
    match fs::metadata(&p) {
        Ok(m) if m.is_file() => Resource::File {
            len: m.len(),
            mtime: m.modified().unwrap(),
        },
        Ok(m) if m.is_dir() => {
            let entries = fs::read_dir(&p)
                .unwrap()
                .flatten()
                .map(|e| {
                    let m = e.metadata().unwrap();
                    DirEntry {
                        name: e.file_name().into_string().unwrap(),
                        kind: if m.is_dir() {
                            EntryKind::Dir
                        } else {
                            EntryKind::File
                        },
                        size: if m.is_dir() { 0 } else { m.len() },
                        mtime: m.modified().ok(),
                    }
                })
                .collect();
            Resource::Directory { entries }
        }
        _ => Resource::NotFound,
    }
}

fn serve(mut s: TcpStream, root: &Path) -> std::io::Result<()> {
    let opts = Options::default();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let (plan, used, file) = loop {
            match parse_request(&buf) {
                Ok(Some((req, used))) => {
                    let path = root.join(req.path.relative());
                    let res = lookup(root, req.path.relative());
                    break (
                        respond(&req, res, SystemTime::now(), &opts),
                        used,
                        Some(path),
                    );
                }
                Ok(None) => {
                    let n = s.read(&mut chunk)?;
                    if n == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) => break (respond_error(e, SystemTime::now(), &opts), buf.len(), None),
            }
        };
        buf.drain(..used);
        s.write_all(&plan.head)?;
        for seg in &plan.body {
            match seg {
                Segment::Bytes(b) => s.write_all(b)?,
                Segment::File { offset, len } => {
                    let mut f = fs::File::open(file.as_ref().unwrap())?;
                    f.seek(SeekFrom::Start(*offset))?;
                    let copied = std::io::copy(&mut f.take(*len), &mut s)?;
                    assert_eq!(copied, *len);
                }
            }
        }
        if !plan.keep_alive {
            return Ok(());
        }
    }
}

fn have(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("note: {program} not installed, test skipped");
    }
    found
}

fn run(program: &str, args: &[&str]) -> std::process::Output {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn curl_full_range_head_and_keep_alive() {
    if !have("curl") {
        return;
    }
    let srv = start();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", srv.port);
    let big = content(3_000_000);

    // Two full downloads in one curl: the second reuses the connection.
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (out.path().join("a"), out.path().join("b"));
    run(
        "curl",
        &[
            "-sS",
            "-f",
            "-o",
            a.to_str().unwrap(),
            &url("/big.bin"),
            "-o",
            b.to_str().unwrap(),
            &url("/small.txt"),
        ],
    );
    assert_eq!(fs::read(&a).unwrap(), big);
    assert_eq!(fs::read(&b).unwrap(), b"hello, world\n");
    assert_eq!(
        srv.connections.load(Ordering::SeqCst),
        1,
        "curl did not reuse the connection"
    );

    // Single range.
    let body = run("curl", &["-sS", "-f", "-r", "1000-1999", &url("/big.bin")]).stdout;
    assert_eq!(body, &big[1000..2000]);
    // Suffix range.
    let body = run("curl", &["-sS", "-f", "-r", "-100", &url("/big.bin")]).stdout;
    assert_eq!(body, &big[big.len() - 100..]);

    // Multipart: curl prints the raw multipart body.
    let body = run("curl", &["-sS", "-f", "-r", "0-4,7-11", &url("/small.txt")]).stdout;
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("Content-Range: bytes 0-4/13\r\n\r\nhello\r\n--"),
        "{text}"
    );
    assert!(
        text.contains("Content-Range: bytes 7-11/13\r\n\r\nworld\r\n--"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("--"));

    // HEAD, 416, 404, conditional.
    let head = String::from_utf8(run("curl", &["-sS", "-I", &url("/small.txt")]).stdout).unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains("Content-Length: 13\r\n"),
        "{head}"
    );
    let code = |args: &[&str]| {
        String::from_utf8(
            run(
                "curl",
                &[&["-sS", "-o", "/dev/null", "-w", "%{http_code}"], args].concat(),
            )
            .stdout,
        )
        .unwrap()
    };
    assert_eq!(code(&["-r", "100-", &url("/small.txt")]), "416");
    assert_eq!(code(&[&url("/missing")]), "404");
    assert_eq!(code(&[&url("/../../etc/passwd")]), "404");
    assert_eq!(code(&["--path-as-is", &url("/a%2Fb")]), "400");
    // A future date is invalid and ignored (curl -z would fake a 304 itself).
    assert_eq!(
        code(&[
            "-H",
            "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT",
            &url("/small.txt")
        ]),
        "200"
    );
    let lm = head
        .lines()
        .find_map(|l| l.strip_prefix("Last-Modified: "))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        code(&[
            "-H",
            &format!("If-Modified-Since: {lm}"),
            &url("/small.txt")
        ]),
        "304"
    );
    assert_eq!(code(&["-X", "POST", &url("/small.txt")]), "405");
    assert_eq!(code(&["--http1.0", &url("/small.txt")]), "200");

    // Directory: redirect, HTML, JSON.
    assert_eq!(code(&[&url("/sub%20dir")]), "301");
    let html = String::from_utf8(run("curl", &["-sS", "-fL", &url("/sub%20dir")]).stdout).unwrap();
    assert!(
        html.contains("<a href=\"./%3Ca%26b%3E.txt\">&lt;a&amp;b&gt;.txt</a>"),
        "{html}"
    );
    let json =
        String::from_utf8(run("curl", &["-sS", "-f", &url("/?format=json")]).stdout).unwrap();
    assert!(
        json.contains("\"name\":\"sub dir\",\"type\":\"dir\""),
        "{json}"
    );
    drop(srv.root);
}

#[test]
fn aria2c_parallel_ranges() {
    if !have("aria2c") {
        return;
    }
    let srv = start();
    let out = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/big.bin", srv.port);
    run(
        "aria2c",
        &[
            "-q",
            "-x4",
            "-s4",
            "-k1M",
            "--allow-overwrite=true",
            "-d",
            out.path().to_str().unwrap(),
            &url,
        ],
    );
    assert_eq!(
        fs::read(out.path().join("big.bin")).unwrap(),
        content(3_000_000)
    );
    assert!(
        srv.connections.load(Ordering::SeqCst) >= 2,
        "aria2c used one connection"
    );
}

#[test]
fn wget_resume() {
    if !have("wget") {
        return;
    }
    let srv = start();
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("big.bin");
    let big = content(3_000_000);
    fs::write(&dest, &big[..1_234_567]).unwrap();
    let url = format!("http://127.0.0.1:{}/big.bin", srv.port);
    run("wget", &["-q", "-c", "-O", dest.to_str().unwrap(), &url]);
    assert_eq!(fs::read(&dest).unwrap(), big);
}

#[test]
fn pipelined_requests_on_one_connection() {
    let srv = start();
    let mut s = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: h\r\n\r\nHEAD /small.txt HTTP/1.1\r\nHost: h\r\n\r\n\
                  GET /small.txt HTTP/1.1\r\nHost: h\r\nRange: bytes=7-\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let mut rest = &all[..];
    let mut bodies = Vec::new();
    for method in [
        sluice_http::Method::Get,
        sluice_http::Method::Head,
        sluice_http::Method::Get,
    ] {
        let (head, used) = sluice_http::parse_response_head(rest).unwrap().unwrap();
        let n = match head.framing(method) {
            sluice_http::Framing::Length(n) => n as usize,
            sluice_http::Framing::None => 0,
            other => panic!("{other:?}"),
        };
        bodies.push((head.status, rest[used..used + n].to_vec()));
        rest = &rest[used + n..];
    }
    assert!(rest.is_empty());
    assert_eq!(
        bodies,
        vec![
            (200, b"hello, world\n".to_vec()),
            (200, Vec::new()),
            (206, b"world\n".to_vec())
        ]
    );
    assert_eq!(srv.connections.load(Ordering::SeqCst), 1);
}
