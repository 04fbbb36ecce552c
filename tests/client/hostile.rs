//! `sluice get` / `sluice ls` against scripted misbehaving servers (HTTP
//! and FTP) in this process: each test names one way a server can lie or
//! stall, and checks the client ends with the right exit code and a clear
//! message, never reports a wrong file as success, and keeps what it had
//! for `--continue`.

use crate::harness::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;

/// The bytes every fake serves.
fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// `sluice get -q [flags] URL DEST` with a short idle timeout, so a case
/// that would wait on the server fails fast instead of hanging the suite.
fn get(flags: &[&str], url: &str, dest: &Path) -> Output {
    let mut args = vec!["get", "-q"];
    if !flags.contains(&"--timeout") {
        args.extend_from_slice(&["--timeout", "5"]);
    }
    args.extend_from_slice(flags);
    args.extend_from_slice(&[url, dest.to_str().expect("utf-8 path")]);
    run(Command::new(sluice_bin()).args(&args))
}

/// `sluice get FLAGS URL` into a fresh directory: it must fail with exit
/// `code`, say `says`, and leave no DEST.
#[track_caller]
fn get_fails(flags: &[&str], url: &str, code: i32, says: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    let o = get(flags, url, &dest);
    assert_fails_saying(&o, code, says);
    assert!(!dest.exists());
}

/// `sluice get http://127.0.0.1:PORT/f` into a fresh directory must
/// succeed and leave exactly `want` in DEST.
#[track_caller]
fn get_gives(port: u16, want: &[u8]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    let o = get(&[], &format!("http://127.0.0.1:{port}/f"), &dest);
    o.assert_success();
    assert!(
        std::fs::read(&dest).ok().as_deref() == Some(want),
        "{}",
        o.describe()
    );
}

/// Exit `code`, and `says` in what the client printed.
#[track_caller]
fn assert_fails_saying(o: &Output, code: i32, says: &str) {
    assert_exit(o, code);
    assert!(o.stderr.contains(says), "{}", o.describe());
}

/// Serves HTTP on a loopback port: each connection's request head goes
/// to `answer`, which writes whatever it likes. Connections are served
/// one after another until the test process ends.
fn http_server(answer: impl Fn(&str, &mut TcpStream) + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            answer(&String::from_utf8_lossy(&head), &mut c);
        }
    });
    port
}

/// Blocks until the client closes the connection (a server that never
/// closes on its own).
fn hold_open(c: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    while matches!(c.read(&mut sink), Ok(n) if n > 0) {}
}

/// A server that ignores `Connection: close` and keeps the connection
/// open after a complete body: the Content-Length says when the body
/// ends, so the download completes (before: idle timeout, exit 3).
#[test]
fn http_body_ends_at_content_length_when_server_keeps_connection_open() {
    let data = body(300_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", d2.len());
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2);
        hold_open(c);
    });
    get_gives(port, &data);
}

/// Bytes after the announced Content-Length are not part of the file.
#[test]
fn http_bytes_past_content_length_are_not_written() {
    let data = body(50_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 40000\r\n\r\n";
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2);
    });
    get_gives(port, &data[..40_000]);
}

/// A 206 whose Content-Length disagrees with its Content-Range: the
/// client cannot know which bytes are which; exit 7 naming both, and the
/// `.part` (a good prefix) and the old DEST stay as they were.
#[test]
fn http_206_with_content_length_not_matching_content_range_is_exit_7() {
    let data = body(10_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 5000-9999/10000\r\n\
                    Content-Length: 5010\r\n\r\n";
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2[5000..]);
        let _ = c.write_all(b"0123456789");
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    let part = dir.path().join("f.part");
    std::fs::write(&dest, b"old").expect("old dest");
    std::fs::write(&part, &data[..5000]).expect("part");
    let o = get(
        &["--continue"],
        &format!("http://127.0.0.1:{port}/f"),
        &dest,
    );
    assert_fails_saying(&o, 7, "Content-Length 5010 does not match Content-Range");
    assert_eq!(std::fs::read(&dest).expect("dest"), b"old");
    assert_eq!(std::fs::read(&part).expect("part"), &data[..5000]);
}

/// A server that stalls mid-body: exit 3 with "no data within the
/// timeout", and every byte that did arrive is in the `.part` for
/// `--continue` (before: only what filled a whole 128 KiB buffer).
#[test]
fn http_stall_mid_body_times_out_and_keeps_what_arrived() {
    let data = body(1 << 20);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", d2.len());
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2[..100_000]);
        hold_open(c);
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    let o = get(
        &["--timeout", "1"],
        &format!("http://127.0.0.1:{port}/f"),
        &dest,
    );
    assert_fails_saying(&o, 3, "timeout");
    assert!(!dest.exists());
    let part = std::fs::read(dir.path().join("f.part")).expect("part kept");
    assert_eq!(part, &data[..100_000], "{}", o.describe());
}

/// No response head at all: exit 3 saying "timed out", not the EAGAIN
/// text ("Resource temporarily unavailable") of the socket timeout.
#[test]
fn http_silent_server_is_a_clear_timeout() {
    let port = http_server(|_, c| hold_open(c));
    let dir = tempfile::tempdir().expect("temp dir");
    let o = get(
        &["--timeout", "1"],
        &format!("http://127.0.0.1:{port}/f"),
        &dir.path().join("f"),
    );
    assert_fails_saying(&o, 3, "read response head: timed out");
}

/// 103 Early Hints (and other 1xx) come before the real response.
#[test]
fn http_interim_1xx_responses_are_skipped() {
    let data = body(20_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = format!(
            "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n\
             HTTP/1.1 100 Continue\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            d2.len()
        );
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2);
    });
    get_gives(port, &data);
}

/// Redirects are not followed (a server could send us anywhere, or round
/// in a loop); the error says where it pointed.
#[test]
fn http_redirect_is_exit_5_naming_the_location() {
    let port = http_server(|_, c| {
        let _ = c.write_all(
            b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.example/f\r\nContent-Length: 0\r\n\r\n",
        );
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let o = get(
        &[],
        &format!("http://127.0.0.1:{port}/f"),
        &dir.path().join("f"),
    );
    assert_fails_saying(&o, 5, "302 Found (redirect to http://elsewhere.example/f");
}

/// What the fake FTP server does on RETR/LIST/NLST, given the control
/// connection and the data connection (passive: accepted; active: made).
type OnTransfer = Box<dyn Fn(&mut TcpStream, TcpStream) + Send>;

/// One FTP control session on a loopback port: answers the commands the
/// client sends, with SIZE `size`, and hands each transfer to `on`.
fn ftp_server(size: u64, on: OnTransfer) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let Ok((ctl, _)) = l.accept() else { return };
        let mut w = ctl.try_clone().expect("clone");
        let mut r = BufReader::new(ctl);
        let say = |w: &mut TcpStream, s: &str| {
            let _ = w.write_all(s.as_bytes());
        };
        say(&mut w, "220 fake\r\n");
        let mut pasv: Option<TcpListener> = None;
        let mut port_to: Option<SocketAddr> = None;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let cmd = line.trim_end().to_string();
            let verb = cmd.split(' ').next().unwrap_or("").to_ascii_uppercase();
            match verb.as_str() {
                "USER" => say(&mut w, "331 password\r\n"),
                "PASS" => say(&mut w, "230 logged in\r\n"),
                "FEAT" | "EPSV" => say(&mut w, "500 unknown\r\n"),
                "SIZE" => say(&mut w, &format!("213 {size}\r\n")),
                "PASV" => {
                    let dl = TcpListener::bind("127.0.0.1:0").expect("bind data");
                    let p = dl.local_addr().expect("addr").port();
                    pasv = Some(dl);
                    say(
                        &mut w,
                        &format!("227 Entering (127,0,0,1,{},{})\r\n", p >> 8, p & 255),
                    );
                }
                "PORT" => {
                    port_to = Some(control::parse_227(&cmd).expect("PORT h1,h2,h3,h4,p1,p2"));
                    say(&mut w, "200 ok\r\n");
                }
                "RETR" | "LIST" | "NLST" | "STOR" => {
                    say(&mut w, "150 go\r\n");
                    // The passive listener stays open for the session: the
                    // client may connect several streams (MODE E upload).
                    let data = match (port_to.take(), &pasv) {
                        (Some(to), _) => TcpStream::connect(to).expect("active data"),
                        (None, Some(dl)) => dl.accept().expect("passive data").0,
                        (None, None) => panic!("{verb} without PORT or PASV"),
                    };
                    on(&mut w, data);
                }
                "QUIT" => {
                    say(&mut w, "221 bye\r\n");
                    return;
                }
                _ => say(&mut w, "200 ok\r\n"),
            }
        }
    });
    port
}

/// A MODE E block header: descriptor, count, offset.
fn block(desc: u8, count: u64, offset: u64) -> Vec<u8> {
    let mut h = vec![desc];
    h.extend_from_slice(&count.to_be_bytes());
    h.extend_from_slice(&offset.to_be_bytes());
    h
}

/// The EOF block announces more EODs (data connections) than `-p 2` lets
/// the server open: the transfer can never end. Exit 7 at once, saying
/// so (before: a wait for the idle timeout, then exit 3 "no data"), and
/// the received prefix is kept.
#[test]
fn mode_e_eof_announcing_more_connections_than_allowed_is_exit_7() {
    let data = body(10_000);
    let d2 = data.clone();
    let port = ftp_server(
        data.len() as u64,
        Box::new(move |ctl, mut d| {
            let _ = d.write_all(&block(0, d2.len() as u64, 0));
            let _ = d.write_all(&d2);
            let _ = d.write_all(&block(64, 0, 3)); // EOF: expect 3 EODs
            let _ = d.write_all(&block(8, 0, 0)); // EOD
            let _ = ctl.write_all(b"226 done\r\n");
            hold_open(&mut d);
        }),
    );
    get_fails(
        &["-p", "2"],
        &format!("ftp://127.0.0.1:{port}/f"),
        7,
        "EOF block announces 3 data connections",
    );
}

/// `sluice ls` prints names the server chose: control characters in them
/// (terminal escapes: set the title, clear the screen) are escaped, and
/// CRLF line ends become LF.
#[test]
fn ls_escapes_control_characters_in_names() {
    let port = ftp_server(
        0,
        Box::new(|ctl, mut d| {
            let _ = d.write_all(b"ok.txt\r\n\x1b]0;pwned\x07evil\x1b[2J\r\n");
            drop(d);
            let _ = ctl.write_all(b"226 done\r\n");
        }),
    );
    let o = run(Command::new(sluice_bin()).args([
        "ls",
        "-1",
        "--timeout",
        "5",
        &format!("ftp://127.0.0.1:{port}/"),
    ]));
    o.assert_success();
    assert!(
        !o.stdout_bytes
            .iter()
            .any(|&b| b == 0x1b || b == 0x07 || b == b'\r'),
        "control bytes printed\n{}",
        o.describe()
    );
    assert_eq!(o.stdout, "ok.txt\n\\x1b]0;pwned\\x07evil\\x1b[2J\n");
}

/// A LIST whose data connection opens but never sends nor closes: exit 3
/// saying "timed out".
#[test]
fn ls_stalled_listing_is_a_clear_timeout() {
    let port = ftp_server(0, Box::new(|_, mut d| hold_open(&mut d)));
    let o = run(Command::new(sluice_bin()).args([
        "ls",
        "--timeout",
        "1",
        &format!("ftp://127.0.0.1:{port}/"),
    ]));
    assert_fails_saying(&o, 3, "read listing: timed out");
}

/// `sluice put -q --timeout 2 [flags] FILE URL`, killed after 30 s (the
/// bug this guards against was a wait without end).
fn put_with_deadline(flags: &[&str], file: &Path, url: &str) -> Output {
    // Five timeouts of 1 s for the final reply: well inside the deadline.
    let mut args = vec!["put", "-q", "--timeout", "1"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[file.to_str().expect("utf-8 path"), url]);
    run_with_timeout(
        Command::new(sluice_bin()).args(&args),
        std::time::Duration::from_secs(30),
    )
}

/// The server takes a MODE S upload to the end and never sends the final
/// reply: exit 3 after five idle timeouts (the server may be syncing a
/// large upload; before: the client waited forever, treating the
/// finished upload as still sending).
#[test]
fn put_without_final_reply_times_out() {
    let port = ftp_server(
        0,
        Box::new(|_, mut d| {
            let mut sink = Vec::new();
            let _ = d.read_to_end(&mut sink);
        }),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let f = dir.path().join("up");
    std::fs::write(&f, body(50_000)).expect("write");
    let o = put_with_deadline(&[], &f, &format!("ftp://127.0.0.1:{port}/up"));
    assert!(!o.timed_out, "no timeout of its own\n{}", o.describe());
    assert_fails_saying(&o, 3, "end-of-transfer reply: timed out");
}

/// The same with `-p 4` (MODE E, four streams): the blocks all go out,
/// no 226 comes. Exit 3 (before: a wait without end, the "still
/// sending" test was inverted).
#[test]
fn put_p4_without_final_reply_times_out() {
    let port = ftp_server(
        0,
        Box::new(|_, d| {
            // Keep the stream open (closing it unread would reset the
            // client's sends): the client must give up on its own.
            std::mem::forget(d);
        }),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let f = dir.path().join("up");
    std::fs::write(&f, body(50_000)).expect("write");
    let o = put_with_deadline(
        &["-p", "4", "--block-size", "4096"],
        &f,
        &format!("ftp://127.0.0.1:{port}/up"),
    );
    assert!(!o.timed_out, "no timeout of its own\n{}", o.describe());
    assert_fails_saying(&o, 3, "end-of-transfer reply: timed out");
}

/// A greeting of "120 ready in a minute" repeated forever: exit 3 after
/// the idle timeout (before: each 120 restarted the wait, without end).
#[test]
fn endless_120_greeting_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let Ok((mut c, _)) = l.accept() else { return };
        while c.write_all(b"120 ready in 1 minute\r\n").is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let o = run_with_timeout(
        Command::new(sluice_bin()).args([
            "get",
            "-q",
            "--timeout",
            "1",
            &format!("ftp://127.0.0.1:{port}/f"),
            dir.path().join("f").to_str().expect("utf-8"),
        ]),
        std::time::Duration::from_secs(30),
    );
    assert!(!o.timed_out, "no timeout of its own\n{}", o.describe());
    assert_fails_saying(&o, 3, "greeting: timed out");
}

/// `data` as a chunked body, in chunks of `size`, with the last chunk and
/// an empty trailer when `complete`.
fn chunked(data: &[u8], size: usize, complete: bool) -> Vec<u8> {
    let mut b = Vec::new();
    for c in data.chunks(size) {
        b.extend_from_slice(format!("{:x};ext=1\r\n", c.len()).as_bytes());
        b.extend_from_slice(c);
        b.extend_from_slice(b"\r\n");
    }
    if complete {
        b.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    }
    b
}

/// A chunked response (what servers send for generated content) is
/// decoded (before: exit 7 "chunked response bodies are not supported");
/// a Content-Length next to it is ignored (RFC 9112 6.3).
#[test]
fn http_chunked_body_is_decoded() {
    let data = body(200_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&chunked(&d2, 7_000, true));
        hold_open(c); // the last chunk, not the close, ends the body
    });
    get_gives(port, &data);
}

/// A chunked body cut off before its last chunk: exit 7, the `.part`
/// keeps what arrived, DEST is not created.
#[test]
fn http_chunked_body_cut_short_is_exit_7() {
    let data = body(50_000);
    let d2 = data.clone();
    let port = http_server(move |_, c| {
        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        let _ = c.write_all(&chunked(&d2, 10_000, false));
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    let o = get(&[], &format!("http://127.0.0.1:{port}/f"), &dest);
    assert_fails_saying(&o, 7, "connection closed inside the chunked body");
    assert!(!dest.exists());
    assert_eq!(
        std::fs::read(dir.path().join("f.part")).expect("part"),
        data
    );
}

/// A chunk size that is not hex, or does not fit 64 bits: exit 7.
#[test]
fn http_bad_chunk_size_is_exit_7() {
    for size_line in ["zz", "1ffffffffffffffff"] {
        let port = http_server(move |_, c| {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            let _ = c.write_all(format!("{size_line}\r\nabc\r\n0\r\n\r\n").as_bytes());
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let o = get(
            &[],
            &format!("http://127.0.0.1:{port}/f"),
            &dir.path().join("f"),
        );
        assert_fails_saying(&o, 7, "bad chunk size");
    }
}

/// A transfer coding we did not ask for and do not decode (`gzip`):
/// saving the still-encoded bytes would be a wrong file. Exit 7.
#[test]
fn http_unknown_transfer_coding_is_exit_7() {
    let port = http_server(|_, c| {
        let _ = c.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
        );
    });
    get_fails(
        &[],
        &format!("http://127.0.0.1:{port}/f"),
        7,
        "Transfer-Encoding `gzip`",
    );
}

/// `--continue` when the side file records more than the `.part` holds
/// (the part was cut short after the side file was written): resume from
/// what is really there (before: from the recorded point, the bytes in
/// between left as zeros in a file reported complete).
#[test]
fn http_continue_never_resumes_past_the_part() {
    let data = body(30_000);
    let d2 = data.clone();
    let port = http_server(move |req, c| {
        let from: usize = req
            .lines()
            .find_map(|l| l.strip_prefix("Range: bytes="))
            .and_then(|r| r.trim_end_matches('-').parse().ok())
            .unwrap_or(0);
        let head = if from == 0 {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", d2.len())
        } else {
            format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{}\r\n\r\n",
                d2.len() - 1,
                d2.len()
            )
        };
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&d2[from..]);
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("f");
    std::fs::write(dir.path().join("f.part"), &data[..1000]).expect("part");
    std::fs::write(dir.path().join("f.part.resume"), "5000\n").expect("side file");
    let o = get(
        &["--continue"],
        &format!("http://127.0.0.1:{port}/f"),
        &dest,
    );
    o.assert_success();
    assert!(
        std::fs::read(&dest).ok() == Some(data),
        "wrong file\n{}",
        o.describe()
    );
}
