//! The generator against small local servers (HTTP ranges and wrap).

use super::*;

/// Reads a request head from `s` (None when the client went away).
fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(_) => head.push(buf[0]),
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Closes gently: shuts our side, then drains until the client closes.
fn close_gently(mut s: TcpStream) {
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 1024];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

#[test]
fn a_spread_start_asks_for_the_rest_then_wraps_to_the_first_byte() {
    // An HTTP server with ranges: a 100 000-byte file; it answers the
    // first two requests and refuses the third (which ends the test).
    const SIZE: usize = 100_000;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for i in 0..3 {
            let (mut s, _) = l.accept().unwrap();
            let Some(head) = read_head(&mut s) else {
                return heads;
            };
            let from = head.lines().find_map(|l| {
                l.strip_prefix("Range: bytes=")
                    .and_then(|r| r.strip_suffix('-'))
                    .and_then(|x| x.parse::<usize>().ok())
            });
            heads.push(head);
            if i == 2 {
                let _ = s.write_all(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n");
            } else if let Some(a) = from {
                let _ = write!(
                    s,
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{}/{SIZE}\r\nContent-Length: {}\r\n\r\n",
                    SIZE - 1,
                    SIZE - a
                );
                let _ = s.write_all(&vec![1u8; SIZE - a]);
            } else {
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n");
                let _ = s.write_all(&vec![2u8; SIZE]);
            }
            close_gently(s);
        }
        heads
    });
    let spec = LoadSpec {
        downloads: vec![DownloadSpec {
            url: format!("http://127.0.0.1:{port}/f"),
            class: "c".into(),
            start_s: 0.0,
            rate_bps: None,
            abort_after_s: None,
            rcvbuf: None,
            id: 1,
            streams: 0,
            offset: 60_000,
            wrap: true,
        }],
        sample_ms: 50,
        deadline_s: Some(60.0),
        client_series: true,
    };
    let rep = run(&spec).unwrap();
    let r = &rep.results[0];
    let heads = server.join().unwrap();
    assert!(heads[0].contains("Range: bytes=60000-\r\n"), "{}", heads[0]);
    assert!(
        !heads[1].contains("Range:"),
        "the next arrival starts at 0: {}",
        heads[1]
    );
    // The rest from 60 000, then the whole file, then the refusal.
    assert_eq!(r.bytes, 40_000 + SIZE as u64);
    assert_eq!(r.offset, 60_000);
    assert_eq!(r.expected, Some(40_000));
    assert_eq!(r.wraps, 2);
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("503")),
        "{:?}",
        r.error
    );
    assert_eq!(rep.timeline["c"].iter().sum::<u64>(), r.bytes);
    // The series counts both requests' bytes, never going back.
    assert_eq!(r.series.last().copied(), Some(r.bytes));
    assert!(r.series.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn a_partial_answer_must_start_at_the_asked_offset() {
    let head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-999/1000\r\n\r\n";
    assert_eq!(content_range_len(head, 100).unwrap(), 900);
    assert!(content_range_len(head, 0).is_err());
    assert!(content_range_len("HTTP/1.1 206 x\r\n\r\n", 100).is_err());
    assert!(content_range_len("HTTP/1.1 206 x\r\ncontent-range: bytes 5-4/9\r\n", 5).is_err());
    assert_eq!(rest_of(Some(1000), 300), Some(700));
    assert_eq!(rest_of(None, 300), None);
}

#[test]
fn downloads_over_http_from_a_local_server() {
    // A tiny HTTP server on loopback serving 100 000 bytes.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let body = vec![7u8; 100_000];
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(&body);
        // Close gently: shut our side, then drain until the client
        // closes, so no unread byte turns our close into a RST that
        // could destroy body bytes still in flight.
        let _ = s.shutdown(std::net::Shutdown::Write);
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let spec = LoadSpec {
        downloads: vec![DownloadSpec {
            url: format!("http://127.0.0.1:{port}/f"),
            class: "c".into(),
            start_s: 0.0,
            rate_bps: None,
            abort_after_s: None,
            rcvbuf: None,
            id: 9,
            streams: 0,
            offset: 0,
            wrap: false,
        }],
        sample_ms: 50,
        deadline_s: Some(30.0),
        client_series: true,
    };
    let rep = run(&spec).unwrap();
    assert_eq!(rep.results[0].bytes, 100_000, "{:?}", rep.results[0].error);
    assert!(rep.results[0].complete);
    assert_eq!(rep.timeline["c"].iter().sum::<u64>(), 100_000);
    // The per-download series ends at the whole body (the last sample follows the end).
    assert_eq!(rep.results[0].id, 9);
    assert_eq!(rep.results[0].series.last().copied(), Some(100_000));
    assert!(rep.results[0].series.windows(2).all(|w| w[0] <= w[1]));
}
