use super::super::{run, HttpSettings};
use super::*;
use crate::store::Store;
use sluice_engine::{DataPath, Engine, EngineConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn test_settings() -> HttpSettings {
    HttpSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        explicit: true,
        header_timeout: Duration::from_secs(30),
        keepalive_timeout: Duration::from_secs(30),
        send_timeout: Duration::from_secs(30),
        max_connections: 8,
        open_cache: Duration::from_secs(1),
    }
}

async fn server(path: DataPath, data: &[u8]) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), data).unwrap();
    let settings = test_settings();
    let engine = Engine::new(EngineConfig {
        data_path: path,
        ..EngineConfig::default()
    });
    let store = Store::open(dir.path(), settings.open_cache).unwrap();
    let ctx = Arc::new(HttpContext::new(Arc::new(store), settings, engine));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(run(ctx, l));
    (dir, addr)
}

async fn exchange(addr: SocketAddr, req: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_ranges_on_both_data_paths() {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for path in [DataPath::Copy, DataPath::Sendfile] {
        let (_dir, addr) = server(path, &data).await;
        let out = exchange(
            addr,
            b"GET /f HTTP/1.1\r\nHost: t\r\nRange: bytes=10-19\r\n\r\n\
              GET /f HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0,-2\r\n\r\n\
              GET /f HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        // First: exactly the 10 bytes, then the next head right after.
        let first_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(out.starts_with(b"HTTP/1.1 206 "), "{path}");
        assert_eq!(&out[first_end..first_end + 10], &data[10..20], "{path}");
        let rest = &out[first_end + 10..];
        assert!(rest.starts_with(b"HTTP/1.1 206 "), "{path}");
        let text = String::from_utf8_lossy(rest);
        assert!(text.contains("multipart/byteranges"), "{path}");
        assert!(
            text.contains("Content-Range: bytes 299998-299999/300000"),
            "{path}"
        );
        // Last: the whole file, ending the stream.
        assert!(out.ends_with(&data), "{path}");
    }
}

/// `--runtime per-core`: loop 0 accepts and hands every other
/// connection to a second loop on its own thread; both serve.
#[tokio::test]
async fn connections_handed_to_another_loop_are_served() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"hello").unwrap();
    let settings = test_settings();
    let store = Store::open(dir.path(), settings.open_cache).unwrap();
    let ctx = Arc::new(HttpContext::new(
        Arc::new(store),
        settings,
        Engine::new(EngineConfig::default()),
    ));
    let loops = crate::loops::Loops::start(2, None).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(super::super::run_spread(ctx, l, loops));
    for _ in 0..4 {
        let out = exchange(
            addr,
            b"GET /f HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(
            out.starts_with(b"HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(out.ends_with(b"\r\n\r\nhello"));
    }
}

/// HTTPS: a garbage handshake and a client stopped mid-handshake
/// end only their own connections; a real client gets ranges over
/// one kept-alive TLS connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_beside_broken_handshakes() {
    use tokio_rustls::rustls;
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let tls = crate::tls::ServerTls::load(&cert, &key).unwrap();
    let ctx = Arc::new(
        HttpContext::new(
            Arc::new(Store::open(dir.path(), test_settings().open_cache).unwrap()),
            test_settings(),
            Engine::new(EngineConfig::default()),
        )
        .with_tls(tls.https, false),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(run(ctx, l));
    // Garbage: the connection is closed.
    let mut g = TcpStream::connect(addr).await.unwrap();
    g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut sink = Vec::new();
    let _ = g.read_to_end(&mut sink).await;
    // Half a ClientHello, then silence (held open during the rest).
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut client = client;
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = connector.connect(name, tcp).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    s.write_all(
        b"GET /f HTTP/1.1\r\nHost: t\r\nRange: bytes=5-9\r\n\r\n\
          GET /f HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 206 "),
        "{}",
        String::from_utf8_lossy(&out[..60])
    );
    let first_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(&out[first_end..first_end + 5], &data[5..10]);
    assert!(out[first_end + 5..].starts_with(b"HTTP/1.1 200 "));
    assert!(out.ends_with(&data));
    drop(half);
}

/// A response that failed before any byte left gets a status when
/// the failure is ours (500 for the disk, 503 for a shortage), then
/// the connection closes; after a partial body, or when the client
/// went away, it just closes.
#[tokio::test]
async fn a_failed_response_answers_a_status_only_before_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = HttpContext::new(
        Arc::new(crate::store::Store::open(dir.path(), Duration::ZERO).unwrap()),
        test_settings(),
        Engine::new(EngineConfig::default()),
    );
    let (req, _) = parse_request(b"GET /f HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap()
        .unwrap();
    let opts = Options::default();
    let plan = respond(
        &req,
        Resource::File {
            len: 10,
            mtime: SystemTime::now(),
        },
        SystemTime::now(),
        &opts,
    );
    let eio = || TransferError::Disk(std::io::Error::from_raw_os_error(5));
    let gone = || TransferError::Connection(std::io::ErrorKind::ConnectionReset.into());
    let cases: [(TransferError, u64, &str); 4] = [
        (eio(), 0, "HTTP/1.1 500 "),
        (TransferError::Setup("pool"), 0, "HTTP/1.1 503 "),
        (eio(), 40, ""),
        (gone(), 0, ""),
    ];
    for (e, out, want) in cases {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, peer) = l.accept().await.unwrap();
        let mut conn: Conn = ctx.engine.data_conn(server).into();
        let failed = Failed {
            time: SystemTime::now(),
            plan: &plan,
            body_bytes: 0,
            out,
        };
        after_failure(&ctx, &mut conn, peer, &req, failed, &e, &opts).await;
        drop(conn);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        if want.is_empty() {
            assert!(got.is_empty(), "{e}, {out} bytes out: {text}");
        } else {
            assert!(text.starts_with(want), "{e}: {text}");
            assert!(text.contains("Connection: close"), "{text}");
        }
    }
}

#[tokio::test]
async fn an_error_closes_after_its_answer() {
    let (_dir, addr) = server(DataPath::Copy, b"x").await;
    let out = exchange(
        addr,
        b"BREW /f HTTP/1.1\r\nHost: t\r\n\r\nGET /f HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 405 "), "{text}");
    assert!(text.contains("Allow: GET, HEAD"), "{text}");
    assert_eq!(text.matches("HTTP/1.1").count(), 1, "{text}");
}
