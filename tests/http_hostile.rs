//! HTTP/1.1 on raw sockets against `sluice serve`, hostile and over the
//! limits: bad requests get their status, a stalled head or reader is
//! dropped, connections over the limit get 503 with Retry-After, and the
//! server goes on serving a fresh connection; HTTP switched off.

use super::http::{sluice_cmd, sluice_http, RAW_TIMEOUT};
use super::http_requests::{assert_serves_fresh, body, field, get, raw, status};
use crate::harness::process::ProcessGuard;
use crate::harness::servers::{self, ServeOptions};
use crate::harness::{corpus, run};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

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
