//! What a load client says on the wire before the data: URLs, the
//! connection (with its receive buffer set before the SYN), FTP control
//! replies and commands, the anonymous login, and the RST of an abort.
//! Shared by the MODE S/HTTP generator (`load`) and the MODE E one
//! (`load_mode_e`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use socket2::SockRef;

/// Longest FTP reply or HTTP header line accepted from a server.
pub(super) const MAX_LINE: usize = 8192;

/// Splits `scheme://host:port/path` into (address, path).
pub(crate) fn split_url(url: &str, default_port: u16) -> Result<(SocketAddr, String)> {
    let rest = url
        .split_once("://")
        .map(|x| x.1)
        .ok_or_else(|| anyhow!("bad URL {url}"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let hp = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    let addr = hp
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow!("cannot resolve {hp}"))?;
    Ok((addr, path.to_string()))
}

pub(crate) fn connect(addr: SocketAddr, rcvbuf: Option<usize>) -> Result<TcpStream> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(b) = rcvbuf {
        sock.set_recv_buffer_size(b)?;
    }
    sock.connect_timeout(&addr.into(), Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    let s: TcpStream = sock.into();
    s.set_nodelay(true)?;
    Ok(s)
}

/// Control-channel replies and HTTP heads wait this long.
pub(super) const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A read timeout (EAGAIN from SO_RCVTIMEO) says what it is.
pub(super) fn timeout_named(e: std::io::Error) -> anyhow::Error {
    if matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) {
        anyhow!(
            "no reply from the server within {} s",
            REPLY_TIMEOUT.as_secs()
        )
    } else {
        e.into()
    }
}

fn read_line(r: &mut impl BufRead) -> Result<String> {
    let mut line = String::new();
    let n = r
        .by_ref()
        .take(MAX_LINE as u64)
        .read_line(&mut line)
        .map_err(timeout_named)?;
    if n == 0 {
        bail!("connection closed by server");
    }
    Ok(line.trim_end().to_string())
}

/// Reads one (possibly multi-line) FTP reply: returns (code, last line).
pub(crate) fn ftp_reply(r: &mut impl BufRead) -> Result<(u16, String)> {
    let first = read_line(r)?;
    let code: u16 = first
        .get(..3)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("bad FTP reply {first:?}"))?;
    let mut last = first.clone();
    if first.as_bytes().get(3) == Some(&b'-') {
        let end = format!("{code} ");
        while !last.starts_with(&end) {
            last = read_line(r)?;
        }
    }
    Ok((code, last))
}

pub(crate) fn ftp_cmd(
    w: &mut TcpStream,
    r: &mut impl BufRead,
    cmd: &str,
    want: &[u16],
) -> Result<(u16, String)> {
    w.write_all(format!("{cmd}\r\n").as_bytes())?;
    let (code, line) = ftp_reply(r)?;
    if !want.contains(&code) {
        bail!("{} -> {line}", cmd.split(' ').next().unwrap_or(cmd));
    }
    Ok((code, line))
}

/// Port from a 227 reply "(h1,h2,h3,h4,p1,p2)".
pub(super) fn pasv_port(line: &str) -> Result<u16> {
    let inner = line
        .split_once('(')
        .and_then(|(_, x)| x.split_once(')'))
        .map(|x| x.0)
        .ok_or_else(|| anyhow!("bad PASV reply {line:?}"))?;
    let n: Vec<u16> = inner
        .split(',')
        .map(|x| x.trim().parse())
        .collect::<std::result::Result<_, _>>()?;
    if n.len() != 6 {
        bail!("bad PASV reply {line:?}");
    }
    Ok(n[4] * 256 + n[5])
}

/// Greeting, anonymous login, TYPE I; returns the file's SIZE if told.
pub(crate) fn ftp_login(
    ctl: &mut TcpStream,
    rd: &mut BufReader<TcpStream>,
    path: &str,
) -> Result<Option<u64>> {
    ctl.set_read_timeout(Some(REPLY_TIMEOUT))?;
    let (c, l) = ftp_reply(rd)?;
    if c != 220 {
        bail!("greeting: {l}");
    }
    let (c, _) = ftp_cmd(ctl, rd, "USER anonymous", &[230, 331])?;
    if c == 331 {
        ftp_cmd(ctl, rd, "PASS lab@sluice", &[230])?;
    }
    ftp_cmd(ctl, rd, "TYPE I", &[200])?;
    Ok(match ftp_cmd(ctl, rd, &format!("SIZE {path}"), &[213]) {
        Ok((_, l)) => l.get(4..).and_then(|s| s.trim().parse().ok()),
        Err(_) => None,
    })
}

/// Closes with RST instead of FIN.
pub(crate) fn rst(s: &TcpStream) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

pub(crate) fn percent_decode(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&p[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pasv_and_urls() {
        assert_eq!(
            pasv_port("227 Entering Passive Mode (127,0,0,1,195,80).").unwrap(),
            195 * 256 + 80
        );
        assert!(pasv_port("227 nonsense").is_err());
        let (a, p) = split_url("ftp://127.0.0.1:2121/data/f.bin", 21).unwrap();
        assert_eq!(a.port(), 2121);
        assert_eq!(p, "/data/f.bin");
        assert_eq!(percent_decode("/a%20b"), "/a b");
    }

    #[test]
    fn reads_multiline_replies() {
        let mut r = std::io::Cursor::new(b"220-hello\r\n220-more\r\n220 ready\r\n".to_vec());
        assert_eq!(ftp_reply(&mut r).unwrap(), (220, "220 ready".to_string()));
    }
}
