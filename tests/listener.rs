//! The listener both front doors share (server/src/listener.rs): the
//! listen backlog, and what clients see when the server is out of file
//! descriptors.

use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// The backlog `ss -ltn` shows (Send-Q of a listening socket) for `port`.
fn backlog_of(port: u16) -> Option<u32> {
    let out = Command::new("ss").args(["-ltnH"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // State Recv-Q Send-Q Local:Port Peer:Port
        let local = f.get(3)?;
        (local.rsplit(':').next()? == port.to_string())
            .then(|| f.get(2)?.parse().ok())
            .flatten()
    })
}

fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}

fn http_port(server: &FtpServer) -> u16 {
    let log = server.log_tail();
    log.lines()
        .find_map(|l| {
            let rest = &l[l.find("http listening on ")? + "http listening on ".len()..];
            rest.trim().rsplit(':').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `http listening on` line\n{log}"))
}

/// Both doors listen with nginx's backlog (511) by default, and with
/// `--listen-backlog N` when given; 128 dropped SYNs in a burst of 3,000.
#[test]
fn both_doors_listen_with_a_large_configurable_backlog() {
    if !require_tool("ss") {
        return;
    }
    let server = sluice(ServeOptions::default());
    let want = 511.min(somaxconn());
    for (door, port) in [("ftp", server.port), ("http", http_port(&server))] {
        assert_eq!(backlog_of(port), Some(want), "{door} listen backlog");
    }
    let server = sluice(ServeOptions {
        extra_args: vec!["--listen-backlog".into(), "1000".into()],
        ..Default::default()
    });
    let want = 1000.min(somaxconn());
    for (door, port) in [("ftp", server.port), ("http", http_port(&server))] {
        assert_eq!(
            backlog_of(port),
            Some(want),
            "{door} listen backlog (--listen-backlog 1000)"
        );
    }
    // The same from the configuration file.
    let dir = tempfile::tempdir().expect("config dir");
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "listen_backlog = 700\n").expect("write config");
    let server = sluice(ServeOptions {
        extra_args: vec!["--config".into(), file.display().to_string()],
        ..Default::default()
    });
    let want = 700.min(somaxconn());
    for (door, port) in [("ftp", server.port), ("http", http_port(&server))] {
        assert_eq!(backlog_of(port), Some(want), "{door} listen_backlog = 700");
    }
}

/// Descriptor limit for the server under test: what it needs to start
/// (about 15 in a debug build) plus a handful of sessions.
const NOFILE: u64 = 26;

/// One FTP client's fate.
enum Fate {
    /// Greeted (and logged in, if asked); the connection is kept.
    Held(TcpStream),
    /// 421 instead of the greeting.
    RefusedAtGreeting,
    /// 421 to a valid login.
    RefusedAtLogin,
}

/// Connects, reads the greeting and, if `login`, logs in anonymously.
/// Every reply must come (a read timeout fails the test): 220 then
/// 331/230, or a 421 anywhere; never 530 (the login is valid).
fn client(server: &FtpServer, login: bool) -> Fate {
    let s = TcpStream::connect(server.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    let mut wr = s.try_clone().unwrap();
    let mut line = String::new();
    let mut reply = |rd: &mut BufReader<TcpStream>| {
        line.clear();
        rd.read_line(&mut line).unwrap_or_else(|e| {
            panic!(
                "no reply from the server (a client left hanging): {e}\n{}",
                server.log_tail()
            )
        });
        line.get(..3).unwrap_or("").to_string()
    };
    match reply(&mut rd).as_str() {
        "220" => {}
        "421" => return Fate::RefusedAtGreeting,
        other => panic!("greeting {other:?}"),
    }
    if !login {
        return Fate::Held(s);
    }
    wr.write_all(b"USER anonymous\r\n").unwrap();
    assert_eq!(reply(&mut rd), "331");
    wr.write_all(b"PASS x@y\r\n").unwrap();
    match reply(&mut rd).as_str() {
        "230" => Fate::Held(s),
        "421" => Fate::RefusedAtLogin,
        other => panic!(
            "a valid login got {other:?} while the server is out of descriptors (want 421)\n{}",
            server.log_tail()
        ),
    }
}

/// Out of file descriptors: every client gets an answer, none hangs
/// without a greeting and none gets 530. Idle connections first, until
/// the accept itself fails and the queued client is told 421; then one
/// of them leaves and the next client, greeted, logs in while the served
/// root cannot be opened: 421 again, not 530. The start-up log warns
/// that the limit is short; once clients leave, new ones are served.
#[test]
fn out_of_descriptors_clients_get_421_and_the_server_recovers() {
    if !require_tool("prlimit") {
        return;
    }
    let server = sluice(ServeOptions {
        nofile: Some(NOFILE),
        ..Default::default()
    });
    assert!(
        server.log_tail().contains("open-file limit"),
        "no warning that RLIMIT_NOFILE is short of --max-sessions\n{}",
        server.log_tail()
    );
    let mut held = Vec::new();
    let mut at_greeting = 0;
    for _ in 0..2 * NOFILE {
        match client(&server, false) {
            Fate::Held(s) => held.push(s),
            Fate::RefusedAtGreeting => at_greeting += 1,
            Fate::RefusedAtLogin => unreachable!("no login asked"),
        }
        if at_greeting > 1 {
            break;
        }
    }
    assert!(
        at_greeting > 1,
        "{} clients held, none refused with 421 under {NOFILE} descriptors\n{}",
        held.len(),
        server.log_tail()
    );
    // One descriptor comes free (when the server sees the close): the
    // next client greeted cannot have the root opened for its login.
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client(&server, true) {
            Fate::RefusedAtLogin => break,
            Fate::RefusedAtGreeting => {}
            Fate::Held(_) => panic!("a login succeeded with no descriptor to spare"),
        }
        assert!(
            Instant::now() < deadline,
            "no client was greeted\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.assert_running();
    // Failed accepts are logged once per interval with a count, not once
    // per failure (the old loop wrote ten lines a second).
    let lines = server.log_tail().matches("out of file descriptors").count();
    assert!(
        lines <= 6,
        "{lines} log lines about descriptors\n{}",
        server.log_tail()
    );
    drop(held);
    // The sessions end as the server sees the closes: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Fate::Held(_) = client(&server, true) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no login succeeds after the other clients left\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
