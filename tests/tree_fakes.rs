//! `sluice get -r` against servers scripted in the test: FTP listings and
//! HTTP JSON listings that name paths outside DEST (refused, nothing
//! written), a refused file in a tree (the rest goes on), a pipelining
//! server refusing every fifth file, and a keep-alive HTTP server mixing
//! plain, chunked, redirected and missing files.

use crate::harness::corpus::sha256_bytes;
use crate::harness::*;
use crate::trees::{sluice_cmd, tree_sums};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;

/// What a scripted FTP server says: its FEAT reply, whether it offers
/// EPSV (otherwise PASV), and the body of `MLSD` or `RETR path` (`None`:
/// 550). Anything else is `200 ok`.
struct Script {
    feat: &'static [u8],
    epsv: bool,
    body: fn(verb: &str, arg: &str, data: &ScriptData) -> Option<Vec<u8>>,
    data: ScriptData,
}

/// What a script's `body` reads: a listing, or a count of files.
enum ScriptData {
    Listing(&'static [u8]),
    Files(usize),
}

/// Serves `script` on a loopback port (any number of sessions, one
/// thread each). Commands are read line by line and answered in order,
/// as RFC 959 servers do, so pipelined commands are answered in step.
fn scripted_ftp(script: Script) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let script = std::sync::Arc::new(script);
    thread::spawn(move || {
        for ctl in l.incoming() {
            let Ok(ctl) = ctl else { return };
            let script = script.clone();
            thread::spawn(move || scripted_session(ctl, &script));
        }
    });
    port
}

fn scripted_session(ctl: TcpStream, script: &Script) {
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
        let verb = verb.to_ascii_uppercase();
        let reply: Vec<u8> = match verb.as_str() {
            "USER" => b"331 pw\r\n".to_vec(),
            "PASS" => b"230 in\r\n".to_vec(),
            "FEAT" => script.feat.to_vec(),
            "EPSV" | "PASV" if (verb == "EPSV") != script.epsv => b"500 no\r\n".to_vec(),
            "EPSV" | "PASV" => {
                let dl = TcpListener::bind("127.0.0.1:0").unwrap();
                let p = dl.local_addr().unwrap().port();
                pasv = Some(dl);
                match script.epsv {
                    true => format!("229 Entering Extended Passive Mode (|||{p}|)\r\n"),
                    false => format!("227 Entering (127,0,0,1,{},{})\r\n", p >> 8, p & 255),
                }
                .into_bytes()
            }
            "MLSD" | "RETR" => {
                let Some(body) = (script.body)(&verb, arg, &script.data) else {
                    // The passive listener stays; the next EPSV/PASV replaces it.
                    let _ = w.write_all(b"550 no such file\r\n");
                    continue;
                };
                let _ = w.write_all(b"150 go\r\n");
                let (mut d, _) = pasv.take().expect("EPSV/PASV first").accept().unwrap();
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

/// A scripted FTP server (PASV only, no FEAT) whose MLSD of `/` is
/// `listing`; RETR of `good` sends "GOOD", anything else is 550.
fn fake_tree_server(listing: &'static [u8]) -> u16 {
    scripted_ftp(Script {
        feat: b"500 no\r\n",
        epsv: false,
        body: |verb, arg, data| match (verb, data) {
            ("MLSD", ScriptData::Listing(l)) => Some(l.to_vec()),
            ("RETR", _) if arg.ends_with("/good") => Some(b"GOOD".to_vec()),
            _ => None,
        },
        data: ScriptData::Listing(listing),
    })
}

/// `get -r URL` into a fresh directory's `inner/dest`: refused as a whole
/// (exit 7) with "unsafe name" and `shown` in the message, and nothing
/// written anywhere under the directory.
#[track_caller]
fn get_tree_refused(url: &str, shown: &str) -> Output {
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("inner/dest");
    let o = sluice_cmd(&[
        "get",
        "-r",
        "-q",
        "--timeout",
        "5",
        url,
        dest.to_str().unwrap(),
    ]);
    assert_exit(&o, 7);
    assert!(
        o.stderr.contains("unsafe name") && o.stderr.contains(shown),
        "{}",
        o.describe()
    );
    assert!(tree_sums(work.path()).is_empty(), "{}", o.describe());
    o
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
        let o = get_tree_refused(&format!("ftp://127.0.0.1:{port}/"), shown);
        assert!(!o.stderr.contains('\x1b'), "{}", o.describe());
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
/// fifth, which is refused with 550.
fn fake_pipelining_server(n: usize) -> u16 {
    scripted_ftp(Script {
        feat: b"211-Features:\r\n EPSV\r\n MLST type*;size*;\r\n211 End\r\n",
        epsv: true,
        body: |verb, arg, data| {
            let ScriptData::Files(n) = *data else {
                return None;
            };
            if verb == "MLSD" {
                let listing = (0..n)
                    .map(|i| format!("type=file;size={}; f{i:02}\r\n", pipelined_body(i).len()))
                    .collect::<String>();
                return Some(listing.into_bytes());
            }
            let i: usize = arg.trim_start_matches("/f").parse().unwrap();
            (i % 5 != 3).then(|| pipelined_body(i))
        },
        data: ScriptData::Files(n),
    })
}

fn pipelined_body(i: usize) -> Vec<u8> {
    format!("f{i:02}").repeat(i * 97 + 1).into_bytes()
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
        get_tree_refused(&format!("http://127.0.0.1:{port}/"), shown);
    }
}
