//! Interop check of MODE E against globus-gridftp-server on loopback.
//!
//! Uploads a file with our MODE E sender (STOR, we connect to its PASV port
//! with N streams), downloads it back with our MODE E receiver (RETR with
//! PORT and `OPTS RETR Parallelism=N`, Globus connects N streams to us), and
//! checks both copies byte for byte.
//!
//! globus-gridftp-server -aa -anonymous-user nobody -control-interface 127.0.0.1 -p 50021 -debug &
//! cargo run -p sluice-transfer --example globus_interop -- 127.0.0.1:50021 /tmp/gi 4 [bytes] [copy|sendfile]

use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use sluice_transfer::{
    receive_mode_e, send, Cancel, Engine, EngineConfig, Mode, Progress, SendSpec,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Ctrl = BufReader<TcpStream>;

async fn reply(c: &mut Ctrl) -> (u16, String) {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        if c.read_line(&mut line).await.expect("read reply") == 0 {
            panic!("control connection closed");
        }
        all.push_str(&line);
        let b = line.as_bytes();
        if b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b' ' {
            let code = line[..3].parse().unwrap_or(0);
            print!("<- {all}");
            return (code, all);
        }
    }
}

/// Skips 111/112 markers until a completion reply.
async fn final_reply(c: &mut Ctrl) -> (u16, String) {
    loop {
        let r = reply(c).await;
        if !(110..=119).contains(&r.0) {
            return r;
        }
    }
}

async fn cmd(c: &mut Ctrl, line: &str) -> (u16, String) {
    println!("-> {line}");
    c.get_mut()
        .write_all(format!("{line}\r\n").as_bytes())
        .await
        .expect("send command");
    reply(c).await
}

fn expect(r: (u16, String), code: u16) -> String {
    assert_eq!(r.0, code, "unexpected reply {}", r.1);
    r.1
}

fn pasv_addr(text: &str) -> SocketAddr {
    let inner = &text[text.find('(').expect("(") + 1..text.find(')').expect(")")];
    let n: Vec<u16> = inner
        .split(',')
        .map(|s| s.trim().parse().expect("number"))
        .collect();
    format!("{}.{}.{}.{}:{}", n[0], n[1], n[2], n[3], n[4] * 256 + n[5])
        .parse()
        .expect("addr")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let server = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:50021".into());
    let dir = args.get(2).cloned().unwrap_or_else(|| "/tmp/gi".into());
    let streams: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let size: usize = args
        .get(4)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000_123);
    let data: Vec<u8> = (0..size as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
        .collect();
    let src = tempfile::tempfile().expect("temp");
    src.write_all_at(&data, 0).expect("write");
    let data_path = args
        .get(5)
        .and_then(|s| s.parse().ok())
        .unwrap_or(EngineConfig::default().data_path);
    let engine = Engine::new(EngineConfig {
        data_path,
        ..EngineConfig::default()
    });
    println!("data path {data_path}, {streams} streams, {size} bytes");

    let mut c = BufReader::new(TcpStream::connect(&server).await.expect("connect"));
    expect(reply(&mut c).await, 220);
    expect(cmd(&mut c, "USER anonymous").await, 331);
    expect(cmd(&mut c, "PASS sluice@").await, 230);
    expect(cmd(&mut c, "TYPE I").await, 200);
    expect(cmd(&mut c, "MODE E").await, 200);

    // Upload: we are the sender, so we connect (GFD.20: the sender is active).
    let addr = pasv_addr(&expect(cmd(&mut c, "PASV").await, 227));
    let remote = format!("{dir}/sluice-up.dat");
    // Globus answers 150 only once a data connection is up: connect first.
    println!("-> STOR {remote}");
    c.get_mut()
        .write_all(format!("STOR {remote}\r\n").as_bytes())
        .await
        .expect("send STOR");
    let mut conns = Vec::new();
    for _ in 0..streams {
        conns.push(TcpStream::connect(addr).await.expect("data connect"));
    }
    let spec = SendSpec::from_offset(
        Arc::new(src),
        0,
        Mode::Extended {
            block_size: 256 << 10,
        },
    )
    .expect("spec");
    let e2 = engine.clone();
    let sender =
        tokio::spawn(async move { send(&e2, spec, conns, Progress::new(), Cancel::new()).await });
    expect(reply(&mut c).await, 150);
    expect(final_reply(&mut c).await, 226);
    let sent = sender.await.expect("join").expect("MODE E send");
    let uploaded = std::fs::read(&remote).expect("read uploaded file");
    assert_eq!(sent as usize, size);
    assert!(uploaded == data, "uploaded copy differs");
    println!("UPLOAD OK: {sent} bytes over {streams} streams, globus wrote an identical file");

    // Download: Globus is the sender and connects to us.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listen");
    let port = listener.local_addr().expect("addr").port();
    expect(
        cmd(
            &mut c,
            &format!("OPTS RETR Parallelism={streams},{streams},{streams};"),
        )
        .await,
        200,
    );
    expect(
        cmd(
            &mut c,
            &format!("PORT 127,0,0,1,{},{}", port >> 8, port & 255),
        )
        .await,
        200,
    );
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            if tx.send(s).await.is_err() {
                return;
            }
        }
    });
    println!("-> RETR {remote}");
    c.get_mut()
        .write_all(format!("RETR {remote}\r\n").as_bytes())
        .await
        .expect("send RETR");
    let out = Arc::new(tempfile::tempfile().expect("temp"));
    let (e2, o2) = (engine.clone(), Arc::clone(&out));
    let receiver =
        tokio::spawn(
            async move { receive_mode_e(&e2, o2, rx, Progress::new(), Cancel::new()).await },
        );
    let r = reply(&mut c).await;
    assert!(r.0 == 150 || r.0 == 125, "RETR: {}", r.1);
    expect(final_reply(&mut c).await, 226);
    let summary = receiver.await.expect("join").expect("MODE E receive");
    acceptor.abort();
    let mut back = vec![0u8; size];
    out.read_exact_at(&mut back, 0).expect("read back");
    assert_eq!(out.metadata().expect("meta").len() as usize, size);
    assert!(back == data, "downloaded copy differs");
    println!(
        "DOWNLOAD OK: {} bytes over {} streams from globus, ranges {:?}",
        summary.bytes,
        summary.streams,
        summary.ranges.ranges()
    );
    let _ = cmd(&mut c, "QUIT").await;
}
