//! Hostile and malformed data-channel input, on raw TCP: PORT/EPRT
//! bounces and malformed addresses, REST past the end, transfers without
//! a data channel, ABOR, clients that vanish or stall mid-download, and
//! broken MODE E uploads. Every test checks the replies, and that the same
//! server process then still serves a brand-new session.

use crate::harness::control::mode_e;
use crate::harness::corpus;
use crate::harness::servers::under_test;
use crate::harness::*;
use std::fs;
use std::io::ErrorKind;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use super::bad_inputs::{each_command_gets, logged_in};

/// Starts RETR of the 64 MiB file on `c` and returns its data connection,
/// unread (the transfer is still running when this returns).
#[track_caller]
fn start_big_retr(server: &FtpServer, c: &mut Control) -> std::net::TcpStream {
    let data = c.open_passive();
    let first = c.cmd(&format!(
        "RETR {}",
        server.remote_path(&corpus().file(BIG).name)
    ));
    assert!(
        first.is_preliminary(),
        "RETR of the 64 MiB file did not start\n{}",
        c.transcript()
    );
    data
}

/// A logged-in session switched to MODE E.
fn mode_e_session(server: &FtpServer) -> Control {
    let mut c = logged_in(server);
    let r = c.cmd("MODE E");
    assert_code(&c, "MODE E", r.code, &[200]);
    c
}

/// A MODE E STOR of `payload` to `rel` must end with an error reply and
/// leave no file under that name; the server then still serves.
#[track_caller]
fn mode_e_stor_is_refused(server: &FtpServer, rel: &str, payload: &[u8], what: &str) {
    let mut c = mode_e_session(server);
    let replies = c.upload("STOR", &server.remote_path(rel), payload);
    let last = replies.last().expect("a reply");
    assert!(
        last.is_error(),
        "STOR {what} ended with {}\n{}",
        last.code,
        c.transcript()
    );
    assert!(
        !server.local(rel).exists(),
        "a failed upload ({what}) was left under its final name\n{}",
        c.transcript()
    );
    c.quit();
    assert_serves_fresh_session(server);
}

/// PORT 10.0.0.1: a bounce to a host that is not the client. Only the reply
/// is checked (no transfer is started, so nothing can leave loopback).
#[test]
fn port_to_foreign_host_is_refused() {
    each_command_gets(
        &under_test(false),
        &["PORT 10,0,0,1,200,10"],
        "bounce to 10.0.0.1",
        &[500, 501, 504],
    );
}

#[test]
fn eprt_to_foreign_host_is_refused() {
    each_command_gets(
        &under_test(false),
        &["EPRT |1|10.0.0.1|51210|"],
        "bounce to 10.0.0.1",
        &[500, 501, 504],
    );
}

/// 127.0.0.2 is another loopback address: not the control peer (127.0.0.1),
/// so it must be refused like any foreign host, and a test listener there
/// proves that the following RETR does not connect to it.
#[test]
fn port_and_eprt_to_another_loopback_address_never_connect() {
    let server = under_test(false);
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    listener.set_nonblocking(true).expect("nonblocking");
    let p = listener.local_addr().expect("addr").port();
    let mut c = logged_in(&server);
    for cmd in [
        format!("PORT 127,0,0,2,{},{}", p >> 8, p & 0xff),
        format!("EPRT |1|127.0.0.2|{p}|"),
    ] {
        let r = c.cmd(&cmd);
        assert_code(&c, &format!("`{cmd}`"), r.code, &[500, 501, 504]);
        let r = c.cmd(&format!("RETR {}", server.remote_path("f4095.bin")));
        if r.is_preliminary() {
            let _ = c.read_reply();
        }
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Ok((_, from)) => panic!(
                "the server connected from {from} to the refused address\n{}",
                c.transcript()
            ),
            Err(e) => panic!("accept: {e}"),
        }
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

/// `--allow-foreign-data-host` is for trusted users' third-party transfers:
/// an anonymous session's passive port must still take its data connection
/// only from the control peer. A connection from 127.0.0.2 gets nothing; the
/// one from 127.0.0.1 gets the file.
#[test]
fn foreign_host_setting_leaves_anonymous_passive_ports_closed_to_others() {
    use crate::harness::servers::{sluice, ServeOptions};
    use socket2::{Domain, Socket, Type};
    let server = sluice(ServeOptions {
        extra_args: vec!["--allow-foreign-data-host".into()],
        ..Default::default()
    });
    let mut c = logged_in(&server);
    c.cmd("TYPE I");
    let addr = c
        .pasv()
        .unwrap_or_else(|r| panic!("PASV refused: {}", r.text()));
    let foreign = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    foreign
        .bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
        .expect("bind 127.0.0.2");
    foreign
        .connect_timeout(&addr.into(), Duration::from_secs(10))
        .expect("connect from 127.0.0.2");
    let mut foreign: std::net::TcpStream = foreign.into();
    foreign
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let own = std::net::TcpStream::connect(addr).expect("connect from 127.0.0.1");
    own.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let t = c.transfer_in(&format!("RETR {}", server.remote_path("f4095.bin")), own);
    assert_eq!(
        t.replies.last().map(|r| r.code),
        Some(226),
        "{}",
        c.transcript()
    );
    assert_eq!(t.data.len(), 4095, "{}", c.transcript());
    let mut got = Vec::new();
    let _ = foreign.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "the connection from 127.0.0.2 received {} bytes",
        got.len()
    );
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn port_and_eprt_to_privileged_port_are_refused() {
    let cmds = [
        "PORT 127,0,0,1,0,22",
        "PORT 127,0,0,1,3,255",
        "EPRT |1|127.0.0.1|22|",
        "EPRT |1|127.0.0.1|1023|",
    ];
    each_command_gets(
        &under_test(false),
        &cmds,
        "port below 1024",
        &[500, 501, 504],
    );
}

#[test]
fn malformed_port_gets_501() {
    let cmds = [
        "PORT",
        "PORT 1,2,3",
        "PORT 127,0,0,1,1",
        "PORT 127,0,0,1,1,1,1",
        "PORT 127,0,0,1,300,1",
        "PORT 256,0,0,1,4,1",
        "PORT a,b,c,d,e,f",
        "PORT -1,0,0,1,4,1",
        "PORT 127,0,0,1,4,",
        "PORT 127.0.0.1:5000",
    ];
    each_command_gets(&under_test(false), &cmds, "malformed PORT", &[501]);
}

#[test]
fn malformed_eprt_gets_501() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    for cmd in [
        "EPRT",
        "EPRT garbage",
        "EPRT |1|127.0.0.1|",
        "EPRT |1|127.0.0.1|5000",
        "EPRT |1|not-an-ip|5000|",
        "EPRT |1|127.0.0.1|99999|",
        "EPRT |1|127.0.0.1|abc|",
        "EPRT |1|::1|5000|",
        "EPRT ||||",
    ] {
        let r = c.cmd(cmd);
        assert_code(&c, &format!("`{cmd}`"), r.code, &[501]);
    }
    // An unknown network protocol has its own code (RFC 2428: 522).
    let r = c.cmd("EPRT |9|127.0.0.1|5000|");
    assert_code(&c, "EPRT with protocol 9", r.code, &[501, 522]);
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn rest_beyond_eof_then_retr_is_an_error() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    let rest = c.cmd("REST 100000");
    if rest.code == 350 {
        let t = c.retr(&server.remote_path("f4095.bin"));
        assert!(
            t.last().is_error(),
            "RETR after REST past the end (4095-byte file) ended with {}\n{}",
            t.last().code,
            c.transcript()
        );
        assert!(
            t.data.is_empty(),
            "{} bytes were sent from beyond the end of the file",
            t.data.len()
        );
    } else {
        // Refusing the REST itself (knowing no file yet) is allowed too.
        assert!(
            rest.is_error(),
            "REST 100000 got {}\n{}",
            rest.code,
            c.transcript()
        );
    }
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn malformed_rest_gets_501() {
    let cmds = [
        "REST",
        "REST -1",
        "REST abc",
        "REST 99999999999999999999999999",
        "REST 1e9",
    ];
    each_command_gets(&under_test(false), &cmds, "malformed REST", &[501]);
}

#[test]
fn retr_before_pasv_or_port_gets_425_or_503() {
    let server = under_test(false);
    let retr = format!("RETR {}", server.remote_path("f4095.bin"));
    each_command_gets(&server, &[&retr], "no data connection set up", &[425, 503]);
}

/// ABOR in the middle of a download: the transfer stops, the replies end
/// with 226 (or 225), and the same session carries on.
#[test]
fn abor_during_retr_then_session_continues() {
    let server = under_test(false);
    let mut c = logged_in(&server);
    let mut data = start_big_retr(&server, &mut c);
    let mut buf = vec![0u8; 256 * 1024];
    std::io::Read::read_exact(&mut data, &mut buf).expect("read the first 256 KiB");
    c.send_raw(b"ABOR\r\n").expect("send ABOR");
    drop(data);
    let mut codes = Vec::new();
    while codes.len() < 4 {
        let r = c
            .read_reply()
            .unwrap_or_else(|e| panic!("no reply to ABOR: {e}\n{}", c.transcript()));
        codes.push(r.code);
        if r.code == 225 || r.code == 226 {
            break;
        }
    }
    assert!(
        matches!(codes.last(), Some(225 | 226))
            && codes.iter().all(|c| [225, 226, 426, 451].contains(c)),
        "replies to ABOR mid-transfer: {codes:?} (want optional 426/451, then 225/226)\n{}",
        c.transcript()
    );
    let r = c.cmd("NOOP");
    assert_code(&c, "NOOP after ABOR", r.code, &[200]);
    // And a new transfer on the same session works.
    let f = corpus().file(4095);
    let t = c.retr(&server.remote_path(&f.name));
    assert!(
        t.last().code == 226 && corpus::sha256_bytes(&t.data) == f.sha256,
        "RETR after ABOR failed\n{}",
        c.transcript()
    );
    c.quit();
    assert_serves_fresh_session(&server);
}

/// Clients that vanish mid-download (control and data closed at once)
/// must not disturb the server.
#[test]
fn clients_vanishing_mid_transfer_do_not_hurt_the_server() {
    let server = under_test(false);
    for _ in 0..3 {
        let mut c = logged_in(&server);
        let mut data = start_big_retr(&server, &mut c);
        let mut buf = vec![0u8; 64 * 1024];
        std::io::Read::read_exact(&mut data, &mut buf).expect("read the first 64 KiB");
        drop(data);
        drop(c);
    }
    assert_serves_fresh_session(&server);
}

/// A MODE E upload whose block header claims 1 TiB: refused (the header is
/// past any sane bound, or the stream ends early), never a file under the
/// target name.
#[test]
fn mode_e_upload_with_absurd_block_length_is_refused() {
    let mut payload = mode_e::header(0, 1 << 40, 0).to_vec();
    payload.extend_from_slice(&[0x55; 1000]);
    mode_e_stor_is_refused(
        &under_test(true),
        "bogus.bin",
        &payload,
        "with a 1 TiB MODE E block",
    );
}

/// A MODE E upload cut off in the middle of a block (no EOD, no EOF) is an
/// error, and is never presented as a complete file.
#[test]
fn mode_e_upload_cut_short_is_not_presented_as_complete() {
    let mut payload = mode_e::header(0, 4096, 0).to_vec();
    payload.extend_from_slice(&[0x55; 1000]);
    mode_e_stor_is_refused(
        &under_test(true),
        "cut.bin",
        &payload,
        "of a truncated MODE E block",
    );
}

/// The raw MODE E encoder above is right: the same session layout with a
/// complete block and EOF/EOD uploads the file intact (checked against
/// globus-gridftp-server in peers.rs too).
#[test]
fn mode_e_raw_upload_control() {
    let server = under_test(true);
    let f = corpus().file(4095);
    let data = fs::read(&f.path).expect("read");
    let mut c = mode_e_session(&server);
    let replies = c.upload(
        "STOR",
        &server.remote_path("raw.bin"),
        &mode_e::single_stream(&data),
    );
    assert_code(
        &c,
        "STOR of one MODE E block + EOF/EOD",
        replies.last().expect("reply").code,
        &[226, 250],
    );
    compare_file(&server.local("raw.bin"), f).unwrap_or_else(|e| panic!("{e}\n{}", c.transcript()));
    c.quit();
}

/// A client that starts a big download and never reads it must not hold up
/// anyone else: a new session is served in full meanwhile.
#[test]
fn a_stalled_reader_does_not_block_other_sessions() {
    let server = under_test(false);
    let mut stalled = logged_in(&server);
    let data = start_big_retr(&server, &mut stalled);
    // `data` is never read: the server's socket buffers fill and stay full.
    for _ in 0..2 {
        assert_serves_fresh_session(&server);
    }
    drop(data);
    drop(stalled);
    assert_serves_fresh_session(&server);
}
