use super::*;
use crate::writer::{Sink, Writer, WriterConfig};
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};

/// Drains one connection whose peer writes `sent` and then keeps the
/// connection open until the drain is over; returns the file.
fn drain_bounded(sent: &[u8], end: u64) -> (Result<DrainReport>, Vec<u8>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sent = sent.to_vec();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&sent).unwrap();
        let _ = done_rx.recv(); // hold the connection open
    });
    let sock = TcpStream::connect(addr).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let stats = Arc::new(Stats::default());
    let w = Writer::start(
        WriterConfig {
            sink: Sink::File(std::fs::File::create(&path).unwrap()),
            already: 0,
            size: None,
            mem_cap: 1 << 20,
            prefix_file: None,
            recycle: None,
        },
        stats.clone(),
    )
    .unwrap();
    let d = Drain::start(
        DrainConfig {
            framing: Framing::Bounded { base: 0, end },
            idle_timeout: Duration::from_secs(30),
            raise_priority: false,
            drs: false,
            span: None,
        },
        Source::Connected(sock.into()),
        w.input(),
        mpsc::sync_channel(0).1,
        stats,
    )
    .unwrap();
    let r = d.join();
    w.finish().unwrap();
    let _ = done_tx.send(());
    peer.join().unwrap();
    (r, std::fs::read(&path).unwrap())
}

#[test]
fn bounded_stream_ends_at_its_length_with_the_connection_open() {
    let (r, file) = drain_bounded(b"0123456789", 10);
    assert_eq!(r.unwrap().bytes, 10);
    assert_eq!(file, b"0123456789");
}

#[test]
fn bounded_stream_never_reads_past_its_end() {
    let (r, file) = drain_bounded(b"0123456789junk", 10);
    assert_eq!(r.unwrap().bytes, 10);
    assert_eq!(file, b"0123456789");
}

#[test]
fn empty_bounded_stream_is_done_at_once() {
    let (r, file) = drain_bounded(b"", 0);
    assert_eq!(r.unwrap().bytes, 0);
    assert!(file.is_empty());
}
