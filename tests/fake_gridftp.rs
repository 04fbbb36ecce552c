//! `sluice get` against a scripted GridFTP server in this process, for the
//! cases real servers do not produce on demand: MODE E blocks out of
//! order, duplicated, with headers split across TCP segments; a block
//! missing although the server says 226; a checksum that does not match.

use crate::harness::control::{mode_e, parse_227};
use crate::harness::corpus::{pseudo_random_bytes, sha256_bytes};
use crate::harness::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

impl Fake {
    /// `ftp://127.0.0.1:PORT/f`: the fake serves the same data for any path.
    fn url(&self) -> String {
        format!("ftp://127.0.0.1:{}/f", self.port)
    }

    /// Waits for the session to end (the client sent QUIT); panics if the
    /// server thread did.
    fn finish(self) -> Vec<String> {
        self.join.join().expect("fake server thread");
        let log = self.log.lock().expect("log lock").clone();
        log
    }
}

const BLOCK: usize = 1000;

/// Serves one control session: `data` on RETR (as `script` says), `cksm` as
/// the CKSM answer.
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
                    // PORT's argument is the h1,h2,h3,h4,p1,p2 of a 227 reply.
                    port_addr = Some(parse_227(&cmd).expect("PORT h1,h2,h3,h4,p1,p2"));
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

/// `start` with the true checksum of `data`.
fn start_honest(data: &[u8], script: Script) -> Fake {
    start(data.to_vec(), script, sha256_bytes(data))
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
        let h = mode_e::header(0, (end - off) as u64, off as u64);
        c.write_all(&h[..5]).unwrap();
        if k < 4 {
            std::thread::sleep(Duration::from_millis(20));
        }
        c.write_all(&h[5..]).unwrap();
        c.write_all(&data[off..end]).unwrap();
    }
    // Both streams end with EOD and close; stream 0 also says EOF: 2 EODs
    // to expect.
    conns[1]
        .write_all(&mode_e::header(mode_e::EOD | mode_e::CLOSE, 0, 0))
        .unwrap();
    conns[0]
        .write_all(&mode_e::header(
            mode_e::EOF | mode_e::EOD | mode_e::CLOSE,
            0,
            2,
        ))
        .unwrap();
}

/// `sluice get -p 2 [flags] URL DEST`.
fn get_p2(flags: &[&str], url: &str, dest: &Path) -> Output {
    let mut args = vec!["get", "-p", "2"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[url, dest.to_str().expect("utf-8 path")]);
    run(Command::new(sluice_bin()).args(&args))
}

#[test]
fn scrambled_mode_e_blocks_reassemble_and_verify() {
    let data = pseudo_random_bytes(10_500, 42);
    let fake = start_honest(&data, Script::Scrambled);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let o = get_p2(&["--verify", "--stats"], &fake.url(), &dest);
    o.assert_success();
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    for line in [
        "stats: duplicate_bytes 1000",
        "stats: streams 2",
        "stats: perf_markers 1",
    ] {
        assert!(o.stderr.contains(line), "no `{line}`\n{}", o.describe());
    }
    fake.finish();
}

#[test]
fn scrambled_blocks_to_stdout_come_out_in_order() {
    let data = pseudo_random_bytes(7_777, 43);
    let fake = start_honest(&data, Script::Scrambled);
    let o = get_p2(&[], &fake.url(), Path::new("-"));
    o.assert_success();
    assert!(
        o.stdout_bytes == data,
        "stdout is not the file ({} bytes)\n{}",
        o.stdout_bytes.len(),
        o.describe()
    );
    fake.finish();
}

#[test]
fn checksum_mismatch_is_exit_8_and_keeps_only_the_part() {
    let data = pseudo_random_bytes(5_000, 44);
    let fake = start(data, Script::Scrambled, sha256_bytes(b"something else"));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let url = fake.url();
    let o = get_p2(&["--verify"], &url, &dest);
    assert_exit(&o, 8);
    assert!(
        o.stderr
            .starts_with(&format!("sluice: {url}: checksum mismatch")),
        "{}",
        o.describe()
    );
    assert!(
        !dest.exists(),
        "an unverified file must not get the final name"
    );
    assert!(dir.path().join("out.part").exists());
    fake.finish();
}

#[test]
fn missing_block_despite_226_is_exit_7() {
    let data = pseudo_random_bytes(6_000, 45);
    let fake = start_honest(&data, Script::MissingBlock);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    let o = get_p2(&[], &fake.url(), &dest);
    assert_exit(&o, 7);
    assert!(o.stderr.contains("2000..3000"), "{}", o.describe());
    assert!(!dest.exists());
    // The client gives up without QUIT: do not wait for the session.
    drop(fake);
}

#[test]
fn credentials_are_decoded_and_sent_in_user_pass() {
    let data = pseudo_random_bytes(100, 46);
    let fake = start_honest(&data, Script::Scrambled);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("ftp://us%40er:p%3Aw%20x@127.0.0.1:{}/dir%20a/f", fake.port);
    let o = get_p2(&[], &url, &dir.path().join("out"));
    o.assert_success();
    assert!(
        !o.stderr.contains("p:w x"),
        "password leaked\n{}",
        o.describe()
    );
    let log = fake.finish();
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
    let data = pseudo_random_bytes(10, 47);
    let fake = start_honest(&data, Script::Scrambled);
    let dir = tempfile::tempdir().unwrap();
    let o = get_p2(&[], &fake.url(), &dir.path().join("o"));
    o.assert_success();
    assert_eq!(fake.finish()[0], "USER anonymous");
}
