//! The shell end to end on loopback with a raw control connection: the
//! session driver, data connections, transfers and uploads together.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::FtpContext;
use crate::config::{ServeArgs, ServeConfig};

async fn server(
    dir: &std::path::Path,
    writable: bool,
    max_sessions: usize,
) -> std::net::SocketAddr {
    let args = ServeArgs {
        dir: Some(dir.into()),
        writable,
        max_sessions: Some(max_sessions),
        ..Default::default()
    };
    let config = ServeConfig::load(&args).unwrap();
    let engine = sluice_engine::Engine::new(sluice_engine::EngineConfig::default());
    let listener = super::bind("127.0.0.1:0".parse().unwrap(), 16)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let ctx = Arc::new(FtpContext {
        served_root: Default::default(),
        served_store: Default::default(),
        current: Arc::new(crate::reload::Current::new(&config)),
        config,
        engine,
        shutdown: crate::shutdown::Shutdown::never(),
    });
    tokio::spawn(super::run(ctx, listener, crate::loops::Loops::here()));
    addr
}

struct Client {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> (Client, String) {
        let (rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut c = Client {
            rd: BufReader::new(rd),
            wr,
        };
        let greeting = c.reply().await;
        (c, greeting)
    }

    /// One reply (multi-line replies joined), with a deadline so a hang
    /// fails the test instead of stalling it.
    async fn reply(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), async {
            let mut all = String::new();
            loop {
                let mut line = String::new();
                if self.rd.read_line(&mut line).await.unwrap() == 0 {
                    return all;
                }
                all.push_str(&line);
                let b = line.as_bytes();
                if b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b' ' {
                    return all;
                }
            }
        })
        .await
        .expect("reply in time")
    }

    async fn cmd(&mut self, c: &str) -> String {
        self.wr
            .write_all(format!("{c}\r\n").as_bytes())
            .await
            .unwrap();
        self.reply().await
    }

    async fn login(addr: std::net::SocketAddr) -> Client {
        let (mut c, _) = Client::connect(addr).await;
        assert!(c.cmd("USER anonymous").await.starts_with("331"));
        assert!(c.cmd("PASS x").await.starts_with("230"));
        c
    }

    async fn epsv(&mut self, addr: std::net::SocketAddr) -> TcpStream {
        let r = self.cmd("EPSV").await;
        let port: u16 = r
            .split("|||")
            .nth(1)
            .unwrap()
            .trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap();
        TcpStream::connect((addr.ip(), port)).await.unwrap()
    }
}

#[tokio::test]
async fn download_listing_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("f.bin"), &data).unwrap();
    let addr = server(dir.path(), false, 8).await;
    let mut c = Client::login(addr).await;
    assert!(c.cmd("TYPE I").await.starts_with("200"));
    let mut d = c.epsv(addr).await;
    assert!(c.cmd("RETR f.bin").await.starts_with("150"));
    let mut got = Vec::new();
    d.read_to_end(&mut got).await.unwrap();
    assert!(c.reply().await.starts_with("226"));
    assert_eq!(got, data);
    let mut d = c.epsv(addr).await;
    assert!(c.cmd("NLST").await.starts_with("150"));
    let mut names = String::new();
    d.read_to_string(&mut names).await.unwrap();
    assert!(c.reply().await.starts_with("226"));
    assert_eq!(names, "f.bin\r\n");
    // Read-only: uploads refused; missing files and bad REST get replies.
    let _d = c.epsv(addr).await;
    assert!(c.cmd("STOR x").await.starts_with("550"));
    assert!(c.cmd("REST 999999999").await.starts_with("350"));
    assert!(c.cmd("RETR f.bin").await.starts_with("554"));
    assert!(c.cmd("SIZE ../../etc/passwd").await.starts_with("550"));
    assert!(c.cmd("QUIT").await.starts_with("221"));
}

#[tokio::test]
async fn interrupted_upload_never_shows_under_the_final_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.bin"), b"original").unwrap();
    let addr = server(dir.path(), true, 8).await;
    let mut c = Client::login(addr).await;
    let mut d = c.epsv(addr).await;
    assert!(c.cmd("STOR keep.bin").await.starts_with("150"));
    d.write_all(&vec![7u8; 3 << 20]).await.unwrap();
    // ABOR before the data connection ends: the upload is incomplete.
    let r = c.cmd("ABOR").await;
    assert!(r.starts_with("426"), "{r}");
    assert!(c.reply().await.starts_with("226"));
    drop(d);
    assert_eq!(
        std::fs::read(dir.path().join("keep.bin")).unwrap(),
        b"original"
    );
    // A complete upload replaces it atomically.
    let mut d = c.epsv(addr).await;
    let r = c.cmd("STOR keep.bin").await;
    assert!(r.starts_with("150"), "{r}");
    d.write_all(b"new").await.unwrap();
    drop(d);
    assert!(c.reply().await.starts_with("226"));
    assert_eq!(std::fs::read(dir.path().join("keep.bin")).unwrap(), b"new");
}

#[tokio::test]
async fn max_sessions_gives_421() {
    let dir = tempfile::tempdir().unwrap();
    let addr = server(dir.path(), false, 1).await;
    let (_first, g) = Client::connect(addr).await;
    assert!(g.starts_with("220"));
    let (_second, g) = Client::connect(addr).await;
    assert!(g.starts_with("421"), "{g}");
}

#[tokio::test]
async fn abor_sent_as_urgent_data_is_seen() {
    // Python's ftplib sends "ABOR\r\n" with MSG_OOB: the final "\n" is
    // TCP urgent data, which the server must keep inline.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big"), vec![1u8; 64 << 20]).unwrap();
    let addr = server(dir.path(), false, 8).await;
    let mut c = Client::login(addr).await;
    let mut d = c.epsv(addr).await;
    assert!(c.cmd("RETR big").await.starts_with("150"));
    let mut some = [0u8; 1024];
    d.read_exact(&mut some).await.unwrap();
    let sent = socket2::SockRef::from(c.wr.as_ref())
        .send_out_of_band(b"ABOR\r\n")
        .unwrap();
    assert_eq!(sent, 6);
    // The client stopped reading, so the transfer is still running: 426
    // for it, then 226 for ABOR (RFC 959 4.1.3).
    let r = c.reply().await;
    assert!(r.starts_with("426"), "{r}");
    let r = c.reply().await;
    assert!(r.starts_with("226"), "{r}");
    assert!(c.cmd("NOOP").await.starts_with("200"));
}

#[tokio::test]
async fn mode_e_connections_kept_by_the_client_carry_the_next_upload() {
    // globus-url-copy -fast: one EPSV, more connections than the
    // acceptor's channel holds, each ended with EOD but no CLOSE, then the
    // next STOR on the same connections without a new EPSV.
    use sluice_ftp::mode_e::BlockHeader;
    let dir = tempfile::tempdir().unwrap();
    let addr = server(dir.path(), true, 8).await;
    let mut c = Client::login(addr).await;
    assert!(c.cmd("MODE E").await.starts_with("200"));
    let r = c.cmd("EPSV").await;
    let port: u16 = r
        .split("|||")
        .nth(1)
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap();
    const STREAMS: u64 = 12;
    let mut conns = Vec::new();
    for (round, name) in ["a", "b"].into_iter().enumerate() {
        let data: Vec<u8> = (0..STREAMS * 1000)
            .map(|i| (i as usize * 7 + round) as u8)
            .collect();
        assert!(c.cmd(&format!("STOR {name}")).await.starts_with("150"));
        if round == 0 {
            for _ in 0..STREAMS {
                conns.push(TcpStream::connect((addr.ip(), port)).await.unwrap());
            }
        }
        for (i, d) in conns.iter_mut().enumerate() {
            let o = i as u64 * 1000;
            d.write_all(&BlockHeader::data(o, 1000).encode())
                .await
                .unwrap();
            d.write_all(&data[o as usize..o as usize + 1000])
                .await
                .unwrap();
            let eof = (i == 0).then_some(STREAMS);
            d.write_all(&BlockHeader::end(eof, false).encode())
                .await
                .unwrap();
        }
        let mut r = c.reply().await;
        while r.starts_with("1") {
            r = c.reply().await;
        }
        assert!(r.starts_with("226"), "{name}: {r}");
        assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), data);
    }
    assert!(c.cmd("QUIT").await.starts_with("221"));
}

/// Kept upload partials are hidden from RETR as from listings and HTTP
/// GET (crate::store): before the store, RETR of the partial's own name
/// sent its half-written bytes.
#[tokio::test]
async fn retr_of_a_kept_partial_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".up.bin.sluice-partial"), b"half").unwrap();
    std::fs::write(dir.path().join(".profile"), b"mine").unwrap();
    let addr = server(dir.path(), false, 8).await;
    let mut c = Client::login(addr).await;
    assert!(c.cmd("TYPE I").await.starts_with("200"));
    let _d = c.epsv(addr).await;
    let r = c.cmd("RETR .up.bin.sluice-partial").await;
    assert!(r.starts_with("550"), "{r}");
    // An ordinary dot file of the client's is served.
    let mut d = c.epsv(addr).await;
    assert!(c.cmd("RETR .profile").await.starts_with("150"));
    let mut got = Vec::new();
    d.read_to_end(&mut got).await.unwrap();
    assert!(c.reply().await.starts_with("226"));
    assert_eq!(got, b"mine");
}
