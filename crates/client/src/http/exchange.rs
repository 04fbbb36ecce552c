//! One request/response head exchange on a fresh connection: connect
//! (with the transfer timeout), send the request, read until the head is
//! complete. What came after the head (the first body bytes) is returned
//! with the still-open socket, for the drain thread to continue.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use sluice_http::{parse_response_head, ClientRequest, HttpUrl, Method, ResponseHead};

use crate::error::{ClientError, Result};
use crate::tls::DataSock;

/// Bytes read per call while the head is incomplete.
const READ_CHUNK: usize = 16 << 10;

/// Most 1xx responses skipped before the final one (a server could send
/// them forever).
const MAX_INTERIM_RESPONSES: usize = 16;

/// Our User-Agent.
pub const USER_AGENT: &str = concat!("sluice/", env!("CARGO_PKG_VERSION"));

/// A response head, the body bytes read with it, and the socket.
pub struct Exchange {
    /// The parsed head.
    pub head: ResponseHead,
    /// Body bytes that arrived in the same reads as the head.
    pub early: Vec<u8>,
    /// The connection, positioned after `early` (TLS for https).
    pub sock: DataSock,
}

/// Connects to the URL's host, trying each address in turn.
pub fn connect(u: &HttpUrl, timeout: Duration) -> Result<TcpStream> {
    connect_receiving(u, timeout, false)
}

/// [`connect`] for a download body: with `drs`, the receive buffer is
/// sized before the SYN as for an FTP data connection
/// (`ftp::data::connect_receiving`), so the drain's DRS starts from the
/// same place on both (an HTTP connection left to autotuning until the
/// drain set its buffer to autotuning's start ran 13 % slower at
/// 400 Mbit/s 50 ms, lab/results/receiver-load/s11-README.md).
pub fn connect_receiving(u: &HttpUrl, timeout: Duration, drs: bool) -> Result<TcpStream> {
    let addrs = (u.host.as_str(), u.port)
        .to_socket_addrs()
        .map_err(|e| ClientError::net(format!("resolve {}", u.host), e))?;
    let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
    for a in addrs {
        match crate::drain::connect_sized(a, timeout, drs) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(ClientError::net(
        format!("connect to {}", u.host_field()),
        last,
    ))
}

/// Sends `method` for `u` (optionally ranged) and reads the response head.
pub fn request(
    u: &HttpUrl,
    method: Method,
    range: Option<(u64, Option<u64>)>,
    if_range: Option<&str>,
    timeout: Duration,
) -> Result<Exchange> {
    request_with(u, method, range, if_range, None, timeout)
}

/// [`request`] with one more field (`Want-Repr-Digest: sha-256=10`),
/// given as a constant `name: value` line.
pub fn request_with(
    u: &HttpUrl,
    method: Method,
    range: Option<(u64, Option<u64>)>,
    if_range: Option<&str>,
    extra: Option<&'static str>,
    timeout: Duration,
) -> Result<Exchange> {
    request_full(u, method, range, if_range, extra, timeout, false)
}

/// [`request_with`] on a connection sized for receiving a body with
/// `drs` ([`connect_receiving`]).
pub fn request_full(
    u: &HttpUrl,
    method: Method,
    range: Option<(u64, Option<u64>)>,
    if_range: Option<&str>,
    extra: Option<&'static str>,
    timeout: Duration,
    drs: bool,
) -> Result<Exchange> {
    let host = u.host_field();
    let req = ClientRequest {
        method,
        host: &host,
        target: &u.target,
        range,
        if_range,
        keep_alive: false,
        user_agent: USER_AGENT,
    }
    .encode()
    .map_err(|e| ClientError::Usage(format!("cannot build the request: {e}")))?;
    let req = match extra {
        // Before the empty line that ends the head.
        Some(line) if req.ends_with(b"\r\n\r\n") => {
            let mut r = req[..req.len() - 2].to_vec();
            r.extend_from_slice(line.as_bytes());
            r.extend_from_slice(b"\r\n\r\n");
            r
        }
        _ => req,
    };
    let tcp = connect_receiving(u, timeout, drs)?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(|e| ClientError::net("set socket timeout", e))?;
    let mut sock = if u.tls {
        let mut s = DataSock::tls(tcp, &u.host, Some(b"http/1.1"))?;
        s.handshake(&u.host_field())?;
        s
    } else {
        DataSock::Plain(tcp)
    };
    sock.write_all(&req)
        .and_then(|()| sock.flush())
        .map_err(|e| ClientError::net("send request", e))?;
    let mut buf = Vec::with_capacity(READ_CHUNK);
    let mut interim = 0;
    loop {
        let have = buf.len();
        buf.resize(have + READ_CHUNK, 0);
        let n = match sock.read(&mut buf[have..]) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                buf.truncate(have);
                continue;
            }
            Err(e) => return Err(ClientError::net("read response head", e)),
        };
        buf.truncate(have + n);
        if n == 0 {
            return Err(ClientError::net(
                "read response head",
                std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed before a complete response head",
                ),
            ));
        }
        while let Some((head, used)) =
            parse_response_head(&buf).map_err(|e| ClientError::Protocol(e.to_string()))?
        {
            // 1xx (100 Continue, 103 Early Hints) are interim: the real
            // response follows on the same connection (RFC 9110 15.2).
            if (100..200).contains(&head.status) && head.status != 101 {
                interim += 1;
                if interim > MAX_INTERIM_RESPONSES {
                    return Err(ClientError::Protocol(format!(
                        "more than {MAX_INTERIM_RESPONSES} interim (1xx) responses"
                    )));
                }
                buf.drain(..used);
                continue;
            }
            let early = buf.split_off(used);
            return Ok(Exchange { head, early, sock });
        }
    }
}

/// `404 Not Found` -> a refusal error naming what was asked.
pub fn refused(what: &str, head: &ResponseHead) -> ClientError {
    let mut reply = format!(
        "{} {}",
        head.status,
        crate::ftp::control::printable(&head.reason)
    );
    if (300..400).contains(&head.status) {
        if let Some(to) = head.field("location") {
            reply.push_str(&format!(
                " (redirect to {}; sluice does not follow redirects, fetch that URL instead)",
                crate::ftp::control::printable(to)
            ));
        }
    }
    ClientError::Refused {
        what: what.to_owned(),
        reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn head_and_early_body_are_split() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 1024];
            let n = s.read(&mut req).unwrap();
            let req = String::from_utf8_lossy(&req[..n]).into_owned();
            s.write_all(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 3-9/10\r\nContent-Length: 7\r\n\r\nabc")
                .unwrap();
            s.write_all(b"defg").unwrap();
            req
        });
        let u = HttpUrl::parse(&format!("http://127.0.0.1:{port}/f")).unwrap();
        let mut x = request(
            &u,
            Method::Get,
            Some((3, Some(9))),
            Some("\"e\""),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(x.head.status, 206);
        let mut rest = Vec::new();
        x.sock.read_to_end(&mut rest).unwrap();
        let mut body = x.early.clone();
        body.extend(rest);
        assert_eq!(body, b"abcdefg");
        let req = t.join().unwrap();
        assert!(req.contains("Range: bytes=3-9\r\n"), "{req}");
        assert!(req.contains("If-Range: \"e\"\r\n"), "{req}");
        assert!(req.contains("Connection: close\r\n"), "{req}");
    }
}
