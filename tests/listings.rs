//! Directory listings of big directories over both doors: complete (every
//! name once, over FTP LIST/NLST/MLSD and HTTP HTML/JSON, with curl), and
//! streamed: listings that clients leave unread neither hold the server's
//! memory nor keep a small-file request from being served.

use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Entries in the big directory.
const ENTRIES: usize = 20_000;

fn http_port(server: &FtpServer) -> u16 {
    let log = server.log_tail();
    log.lines()
        .find_map(|l| {
            let rest = &l[l.find("http listening on ")? + "http listening on ".len()..];
            rest.trim().rsplit(':').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `http listening on` line\n{log}"))
}

/// A server whose root holds `big/` with [`ENTRIES`] empty files
/// `e00000`...; returns it with the expected names.
fn server_with_big_dir() -> (FtpServer, BTreeSet<String>) {
    let server = sluice(ServeOptions::default());
    let dir = server.local("big");
    std::fs::create_dir(&dir).expect("mkdir big");
    let names: BTreeSet<String> = (0..ENTRIES).map(|i| format!("e{i:05}")).collect();
    for n in &names {
        std::fs::File::create(dir.join(n)).expect("create entry");
    }
    (server, names)
}

fn curl(args: &[&str]) -> String {
    let out = run(Command::new("curl")
        .args(["-sS", "--max-time", "120"])
        .args(args));
    out.assert_success();
    out.stdout.clone()
}

/// Names in `text` that look like the big directory's (`e` + 5 digits).
fn names_in(text: &str, before: &str, after: char) -> Vec<String> {
    text.split(before)
        .skip(1)
        .filter_map(|rest| rest.split(after).next())
        .filter(|n| n.len() == 6 && n.starts_with('e'))
        .map(String::from)
        .collect()
}

#[track_caller]
fn assert_same(what: &str, got: Vec<String>, want: &BTreeSet<String>) {
    let n = got.len();
    let set: BTreeSet<String> = got.into_iter().collect();
    assert_eq!(
        n,
        want.len(),
        "{what}: {n} names for {} entries",
        want.len()
    );
    assert!(&set == want, "{what}: names differ from the directory's");
}

/// 20,000 entries listed by curl over FTP (LIST, NLST, MLSD) and HTTP
/// (HTML and JSON, kept alive so chunked, and HTTP/1.0 so until close):
/// every name exactly once.
#[test]
fn a_directory_of_20000_entries_lists_whole_over_both_doors() {
    if !require_tool("curl") {
        return;
    }
    let (server, names) = server_with_big_dir();
    let ftp = format!("ftp://127.0.0.1:{}/big/", server.port);
    let list = curl(&[&ftp]);
    let got: Vec<String> = list
        .lines()
        .filter_map(|l| l.rsplit(' ').next())
        .map(String::from)
        .collect();
    assert_same("FTP LIST", got, &names);
    let nlst = curl(&["--list-only", &ftp]);
    assert_same(
        "FTP NLST",
        nlst.lines().map(|l| l.trim().to_string()).collect(),
        &names,
    );
    let mlsd = curl(&["-Q", "TYPE A", "-X", "MLSD", &ftp]);
    let got: Vec<String> = mlsd
        .lines()
        .filter(|l| l.contains("type=file"))
        .filter_map(|l| l.split("; ").nth(1))
        .map(String::from)
        .collect();
    assert_same("FTP MLSD", got, &names);
    // A pattern over the big directory (streamed like the listing):
    // exactly the names it matches, with the directory part as written.
    let nlst = curl(&[
        "-X",
        "NLST big/e1*",
        &format!("ftp://127.0.0.1:{}/", server.port),
    ]);
    let got: Vec<String> = nlst.lines().map(|l| l.trim().to_string()).collect();
    let want: BTreeSet<String> = names
        .iter()
        .filter(|n| n.starts_with("e1"))
        .map(|n| format!("big/{n}"))
        .collect();
    assert_eq!(got.len(), want.len(), "NLST big/e1*");
    assert!(got.into_iter().collect::<BTreeSet<_>>() == want);
    let base = format!("http://127.0.0.1:{}/big/", http_port(&server));
    let html = curl(&[&base]);
    assert!(
        html.trim_end().ends_with("</html>"),
        "HTML listing not ended"
    );
    assert_same("HTTP HTML", names_in(&html, "href=\"./", '"'), &names);
    let json = curl(&[&format!("{base}?format=json")]);
    assert!(json.trim_end().ends_with('}'), "JSON listing not ended");
    assert_same("HTTP JSON", names_in(&json, "\"name\":\"", '"'), &names);
    let json10 = curl(&["--http1.0", &format!("{base}?format=json")]);
    assert_same(
        "HTTP/1.0 JSON",
        names_in(&json10, "\"name\":\"", '"'),
        &names,
    );
    server.assert_running();
}

/// Resident memory of `pid`, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// A connection with a small receive buffer, so what the client leaves
/// unread stays with the server instead of in the kernel.
fn small_window(addr: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).expect("connect");
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// Reads until `n` bytes came (the listing has started to flow).
fn read_some(s: &mut TcpStream, n: usize) {
    let mut got = 0;
    let mut buf = [0u8; 512];
    while got < n {
        let k = s.read(&mut buf).expect("listing bytes");
        assert!(k > 0, "listing ended early");
        got += k;
    }
}

/// Unread listings of a big directory (HTTP GETs and FTP LISTs whose
/// clients stop reading after the first bytes) hold little server memory
/// (the old server held each listing whole: about 3.5 MB apiece here),
/// and a request for a small file is served while they wait.
#[test]
fn unread_listings_hold_little_memory_and_do_not_block_a_small_file() {
    const HTTP_CLIENTS: usize = 24;
    const FTP_CLIENTS: usize = 8;
    let (server, _) = server_with_big_dir();
    let http = SocketAddr::from(([127, 0, 0, 1], http_port(&server)));
    // Warm up both doors once (first-use allocations are not listings').
    let mut c = server.connect();
    c.login_anonymous();
    let data = c.open_passive();
    let t = c.transfer_in("NLST big", data);
    assert_eq!(
        t.data
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        ENTRIES
    );
    let before = rss(server.pid());
    let mut held = Vec::new();
    for _ in 0..HTTP_CLIENTS {
        let mut s = small_window(http);
        s.write_all(b"GET /big/ HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        read_some(&mut s, 2048);
        held.push(s);
    }
    let mut sessions = Vec::new();
    for _ in 0..FTP_CLIENTS {
        let mut c = server.connect();
        c.login_anonymous();
        let addr = c.epsv().expect("EPSV");
        let mut data = small_window(addr);
        c.send_raw(b"LIST big\r\n").unwrap();
        let r = c.read_reply().expect("150");
        assert_eq!(r.code, 150, "{}", c.transcript());
        read_some(&mut data, 2048);
        held.push(data);
        sessions.push(c);
    }
    let grown = rss(server.pid()).saturating_sub(before);
    // A small file, on a fresh connection, while all of them wait.
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /f1.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("small file answer");
    let want = std::fs::read(&corpus().file(1).path).unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200") && out.ends_with(&want),
        "small file not served while listings wait: {:?}",
        String::from_utf8_lossy(&out[..out.len().min(200)])
    );
    let clients = (HTTP_CLIENTS + FTP_CLIENTS) as u64;
    eprintln!(
        "{clients} unread listings of {ENTRIES} entries: server RSS grew {} KiB ({} KiB each)",
        grown >> 10,
        (grown / clients) >> 10
    );
    assert!(
        grown / clients < 1536 << 10,
        "unread listings hold {} KiB each (RSS +{} KiB for {clients})",
        (grown / clients) >> 10,
        grown >> 10
    );
    drop(held);
    drop(sessions);
    server.assert_running();
}
