//! The client against a scripted GridFTP server in this process, for the
//! cases real servers do not produce on demand: MODE E blocks out of
//! order, duplicated, with headers split across TCP segments; a block
//! missing although the server says 226; a checksum that does not match.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{pattern, run};
use sha2::{Digest, Sha256};
use sluice_ftp::mode_e::BlockHeader;

#[derive(Clone, Copy)]
enum Script {
    /// Every byte, out of order, one block twice, split headers.
    Scrambled,
    /// Like Scrambled but one block never sent; still 226.
    MissingBlock,
}

struct Fake {
    port: u16,
    join: JoinHandle<()>,
    /// Every command line the server received.
    log: Arc<Mutex<Vec<String>>>,
}

const BLOCK: usize = 1000;

fn start(data: Vec<u8>, script: Script, cksm: String) -> Fake {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let join = std::thread::spawn(move || {
        let (ctl, _) = l.accept().unwrap();
        ctl.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = ctl.try_clone().unwrap();
        let mut r = BufReader::new(ctl);
        let say = |w: &mut TcpStream, s: &str| w.write_all(s.as_bytes()).unwrap();
        say(&mut w, "220 fake GridFTP\r\n");
        let mut port_addr: Option<SocketAddr> = None;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let cmd = line.trim_end().to_string();
            log2.lock().unwrap().push(cmd.clone());
            let verb = cmd.split(' ').next().unwrap_or("").to_ascii_uppercase();
            match verb.as_str() {
                "USER" => say(&mut w, "331 password\r\n"),
                "PASS" => say(&mut w, "230 in\r\n"),
                "FEAT" => say(
                    &mut w,
                    "211-Features\r\n CKSM SHA256\r\n PARALLEL\r\n211 End\r\n",
                ),
                "SIZE" => say(&mut w, &format!("213 {}\r\n", data.len())),
                "PORT" => {
                    let a = sluice_ftp::addr::parse_port(&cmd.as_bytes()[5..]).unwrap();
                    port_addr = Some(SocketAddr::V4(a));
                    say(&mut w, "200 PORT ok\r\n");
                }
                "RETR" => {
                    say(&mut w, "150 go\r\n");
                    let to = port_addr.expect("PORT before RETR");
                    send_scrambled(&data, to, script);
                    say(&mut w, "112-Perf Marker\r\n Timestamp: 1.0\r\n Stripe Index: 0\r\n Stripe Bytes Transferred: 5\r\n Total Stripe Count: 1\r\n112 End.\r\n");
                    say(&mut w, "226 done\r\n");
                }
                "CKSM" => say(&mut w, &format!("213 {cksm}\r\n")),
                "QUIT" => {
                    say(&mut w, "221 bye\r\n");
                    return;
                }
                _ => say(&mut w, "200 ok\r\n"),
            }
        }
    });
    Fake { port, join, log }
}

/// Two data connections; blocks in reverse order, alternating; block 1
/// sent twice; every header written in two pieces with a pause between.
fn send_scrambled(data: &[u8], to: SocketAddr, script: Script) {
    let mut conns = [
        TcpStream::connect(to).unwrap(),
        TcpStream::connect(to).unwrap(),
    ];
    for c in &conns {
        c.set_nodelay(true).unwrap();
    }
    let n_blocks = data.len().div_ceil(BLOCK);
    let mut order: Vec<usize> = (0..n_blocks).rev().collect();
    if n_blocks > 1 {
        order.push(1);
    }
    if let Script::MissingBlock = script {
        order.retain(|&b| b != 2);
    }
    for (k, &b) in order.iter().enumerate() {
        let c = &mut conns[k % 2];
        let off = b * BLOCK;
        let end = (off + BLOCK).min(data.len());
        let h = BlockHeader::data(off as u64, (end - off) as u64).encode();
        c.write_all(&h[..5]).unwrap();
        if k < 4 {
            std::thread::sleep(Duration::from_millis(20));
        }
        c.write_all(&h[5..]).unwrap();
        c.write_all(&data[off..end]).unwrap();
    }
    conns[1]
        .write_all(&BlockHeader::end(None, true).encode())
        .unwrap();
    conns[0]
        .write_all(&BlockHeader::end(Some(2), true).encode())
        .unwrap();
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[test]
fn scrambled_mode_e_blocks_reassemble_and_verify() {
    let data = pattern(10_500, 42);
    let fake = start(data.clone(), Script::Scrambled, sha(&data));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let o = run(&[
        "get",
        "-p",
        "2",
        "--verify",
        "--stats",
        &format!("ftp://127.0.0.1:{}/f", fake.port),
        &dest.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert!(err.contains("stats: duplicate_bytes 1000"), "{err}");
    assert!(err.contains("stats: streams 2"), "{err}");
    assert!(err.contains("stats: perf_markers 1"), "{err}");
    fake.join.join().unwrap();
}

#[test]
fn scrambled_blocks_to_stdout_come_out_in_order() {
    let data = pattern(7_777, 43);
    let fake = start(data.clone(), Script::Scrambled, sha(&data));
    let o = run(&[
        "get",
        "-p",
        "2",
        &format!("ftp://127.0.0.1:{}/f", fake.port),
        "-",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, data);
    fake.join.join().unwrap();
}

#[test]
fn checksum_mismatch_is_exit_8_and_keeps_only_the_part() {
    let data = pattern(5_000, 44);
    let fake = start(data.clone(), Script::Scrambled, sha(b"something else"));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let url = format!("ftp://127.0.0.1:{}/f", fake.port);
    let o = run(&[
        "get",
        "-p",
        "2",
        "--verify",
        &url,
        &dest.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(
        err.starts_with(&format!("sluice: {url}: checksum mismatch")),
        "{err}"
    );
    assert!(
        !dest.exists(),
        "an unverified file must not get the final name"
    );
    assert!(dir.path().join("out.part").exists());
    fake.join.join().unwrap();
}

#[test]
fn missing_block_despite_226_is_exit_7() {
    let data = pattern(6_000, 45);
    let fake = start(data.clone(), Script::MissingBlock, sha(&data));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let o = run(&[
        "get",
        "-p",
        "2",
        &format!("ftp://127.0.0.1:{}/f", fake.port),
        &dest.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(err.contains("2000..3000"), "{err}");
    assert!(!dest.exists());
    drop(fake);
}

#[test]
fn credentials_are_decoded_and_sent_in_user_pass() {
    let data = pattern(100, 46);
    let fake = start(data.clone(), Script::Scrambled, sha(&data));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let url = format!("ftp://us%40er:p%3Aw%20x@127.0.0.1:{}/dir%20a/f", fake.port);
    let o = run(&["get", "-p", "2", &url, &dest.display().to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("p:w x"), "password leaked: {err}");
    fake.join.join().unwrap();
    let log = fake.log.lock().unwrap().clone();
    assert_eq!(log[0], "USER us@er");
    assert_eq!(log[1], "PASS p:w x");
    assert!(log.contains(&"RETR /dir a/f".to_string()), "{log:?}");
    assert!(
        log.contains(&"OPTS RETR Parallelism=2,2,2;".to_string()),
        "{log:?}"
    );
}

#[test]
fn anonymous_when_url_has_no_user() {
    let data = pattern(10, 47);
    let fake = start(data.clone(), Script::Scrambled, sha(&data));
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "get",
        "-p",
        "2",
        &format!("ftp://127.0.0.1:{}/f", fake.port),
        &dir.path().join("o").display().to_string(),
    ]);
    assert!(o.status.success());
    fake.join.join().unwrap();
    assert_eq!(fake.log.lock().unwrap()[0], "USER anonymous");
}
