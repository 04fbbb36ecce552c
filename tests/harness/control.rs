//! A deliberately small raw FTP control client for the tests that must send
//! what no well-behaved client would. It keeps a transcript so a failing
//! assertion shows the whole conversation.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

/// How long to wait for one reply or one data read.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest reply line we buffer: far beyond any sane server's.
const MAX_REPLY_LINE: u64 = 64 * 1024;

/// One (possibly multi-line) FTP reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    pub lines: Vec<String>,
}

impl Reply {
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
    pub fn is_preliminary(&self) -> bool {
        (100..200).contains(&self.code)
    }
    pub fn is_error(&self) -> bool {
        (400..600).contains(&self.code)
    }
}

/// The result of a transfer command: every reply in order and the bytes
/// that arrived on the data connection.
#[derive(Debug)]
pub struct Transfer {
    pub replies: Vec<Reply>,
    pub data: Vec<u8>,
}

impl Transfer {
    /// The last (completion or refusal) reply.
    pub fn last(&self) -> &Reply {
        self.replies
            .last()
            .expect("a transfer has at least one reply")
    }
}

pub struct Control {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    transcript: Vec<String>,
    pub greeting: Reply,
}

impl Control {
    /// Connects to 127.0.0.1:port and reads the greeting, which must be 220.
    pub fn try_connect(port: u16) -> io::Result<Control> {
        Control::try_connect_to(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// Connects to `addr` and reads the greeting, which must be 220.
    pub fn try_connect_to(addr: SocketAddr) -> io::Result<Control> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let reader = BufReader::new(stream.try_clone()?);
        let mut c = Control {
            stream,
            reader,
            transcript: Vec::new(),
            greeting: Reply {
                code: 0,
                lines: vec![],
            },
        };
        let g = c.read_reply()?;
        if g.code != 220 {
            return Err(io::Error::other(format!(
                "greeting was not 220: {}",
                g.text()
            )));
        }
        c.greeting = g;
        Ok(c)
    }

    #[track_caller]
    pub fn connect(port: u16) -> Control {
        Control::try_connect(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
    }

    #[track_caller]
    pub fn connect_to(addr: SocketAddr) -> Control {
        Control::try_connect_to(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
    }

    /// The conversation so far, for failure messages.
    pub fn transcript(&self) -> String {
        self.transcript.join("\n")
    }

    /// Sends raw bytes as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
        self.transcript.push(format!(
            ">>> {shown}{}",
            if bytes.len() > 80 {
                format!("... ({} bytes)", bytes.len())
            } else {
                String::new()
            }
        ));
        self.stream.write_all(bytes)
    }

    /// Reads one reply (all lines of a multi-line one).
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        let first = self.read_line()?;
        let code = parse_code(&first).ok_or_else(|| bad_reply(&first))?;
        let mut lines = vec![first.clone()];
        if first.as_bytes().get(3) == Some(&b'-') {
            let end = format!("{code} ");
            loop {
                let l = self.read_line()?;
                let done = l.starts_with(&end) || l == code.to_string();
                lines.push(l);
                if done {
                    break;
                }
                if lines.len() > 10_000 {
                    return Err(io::Error::other("multi-line reply never ends"));
                }
            }
        }
        Ok(Reply { code, lines })
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_REPLY_LINE)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            self.transcript.push("<<< (connection closed)".into());
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "control connection closed",
            ));
        }
        let line = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\r', '\n'])
            .to_string();
        self.transcript.push(format!("<<< {line}"));
        Ok(line)
    }

    /// Sends `line` + CRLF and reads the reply.
    pub fn try_cmd(&mut self, line: &str) -> io::Result<Reply> {
        self.send_raw(format!("{line}\r\n").as_bytes())?;
        self.read_reply()
    }

    /// `try_cmd` that panics, with the transcript, on an I/O error.
    #[track_caller]
    pub fn cmd(&mut self, line: &str) -> Reply {
        match self.try_cmd(line) {
            Ok(r) => r,
            Err(e) => panic!("`{line}`: {e}\ntranscript:\n{}", self.transcript()),
        }
    }

    /// Sends USER/PASS; returns the final reply (230 on success).
    #[track_caller]
    pub fn login(&mut self, user: &str, pass: &str) -> Reply {
        let r = self.cmd(&format!("USER {user}"));
        if r.code == 331 {
            self.cmd(&format!("PASS {pass}"))
        } else {
            r
        }
    }

    /// Logs in anonymously and sets TYPE I; panics unless both succeed.
    #[track_caller]
    pub fn login_anonymous(&mut self) {
        let r = self.login("anonymous", "sluice-test@example.org");
        assert_eq!(r.code, 230, "anonymous login failed\n{}", self.transcript());
        let t = self.cmd("TYPE I");
        assert_eq!(t.code, 200, "TYPE I failed\n{}", self.transcript());
    }

    /// PASV; the data address, or the refusing reply.
    pub fn pasv(&mut self) -> Result<SocketAddr, Reply> {
        let r = self.cmd("PASV");
        if r.code != 227 {
            return Err(r);
        }
        parse_227(&r.lines[0]).ok_or(r)
    }

    /// EPSV; the data address (the control peer's, with the given port),
    /// or the refusing reply.
    pub fn epsv(&mut self) -> Result<SocketAddr, Reply> {
        let r = self.cmd("EPSV");
        if r.code != 229 {
            return Err(r);
        }
        let port = parse_229(&r.lines[0]).ok_or_else(|| r.clone())?;
        let mut addr = self.stream.peer_addr().map_err(|_| r.clone())?;
        addr.set_port(port);
        Ok(addr)
    }

    /// Opens a passive data connection (PASV, or EPSV over IPv6, then
    /// connect); panics on failure.
    #[track_caller]
    pub fn open_passive(&mut self) -> TcpStream {
        let v6 = self.stream.peer_addr().is_ok_and(|a| a.is_ipv6());
        let addr = match if v6 { self.epsv() } else { self.pasv() } {
            Ok(a) => a,
            Err(r) => panic!("passive mode refused: {}\n{}", r.text(), self.transcript()),
        };
        let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap_or_else(|e| {
            panic!("connect to PASV address {addr}: {e}\n{}", self.transcript())
        });
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s
    }

    /// PASV, connect, `RETR path`; reads the data until EOF if the server
    /// started the transfer, then the final reply.
    #[track_caller]
    pub fn retr(&mut self, path: &str) -> Transfer {
        let data = self.open_passive();
        self.transfer_in(&format!("RETR {path}"), data)
    }

    /// Sends a command that returns data on an open data connection.
    #[track_caller]
    pub fn transfer_in(&mut self, command: &str, mut data: TcpStream) -> Transfer {
        let first = self.cmd(command);
        let mut replies = vec![first.clone()];
        let mut bytes = Vec::new();
        if first.is_preliminary() {
            if let Err(e) = data.read_to_end(&mut bytes) {
                self.transcript.push(format!(
                    "(data read error after {} bytes: {e})",
                    bytes.len()
                ));
            }
            drop(data);
            self.read_final(&mut replies, command);
        }
        Transfer {
            replies,
            data: bytes,
        }
    }

    /// PASV, connect, `STOR path` (or another upload verb), send `payload`
    /// if the server started the transfer, then the final reply.
    #[track_caller]
    pub fn upload(&mut self, verb: &str, path: &str, payload: &[u8]) -> Vec<Reply> {
        let mut data = self.open_passive();
        let first = self.cmd(&format!("{verb} {path}"));
        let mut replies = vec![first.clone()];
        if first.is_preliminary() {
            let _ = data.write_all(payload);
            let _ = data.shutdown(Shutdown::Write);
            drop(data);
            self.read_final(&mut replies, verb);
        }
        replies
    }

    /// Reads replies until one that is not preliminary (GridFTP servers
    /// send 111/112 markers between the 150 and the end), appending each.
    #[track_caller]
    pub fn read_final(&mut self, replies: &mut Vec<Reply>, what: &str) {
        loop {
            match self.read_reply() {
                Ok(r) => {
                    let done = !r.is_preliminary();
                    replies.push(r);
                    if done {
                        return;
                    }
                }
                Err(e) => panic!("no final reply after `{what}`: {e}\n{}", self.transcript()),
            }
        }
    }

    /// Whether the server has closed the control connection: reads until
    /// EOF or an error (a reset counts as closed). Extra replies are logged.
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => self.transcript.push(format!(
                    "<<< (extra) {}",
                    String::from_utf8_lossy(&buf[..n]).trim_end()
                )),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    /// QUIT, ignoring errors.
    pub fn quit(mut self) {
        let _ = self.try_cmd("QUIT");
    }
}

fn parse_code(line: &str) -> Option<u16> {
    let b = line.as_bytes();
    if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    if b.len() > 3 && b[3] != b' ' && b[3] != b'-' {
        return None;
    }
    line[..3].parse().ok()
}

fn bad_reply(line: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not an FTP reply line: {line:?}"),
    )
}

/// The address in `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)`.
pub fn parse_227(line: &str) -> Option<SocketAddr> {
    // After the code; from the parenthesis if there is one (RFC 1123 lets
    // servers format the rest freely).
    let start = line.find('(').map_or(4, |i| i + 1).min(line.len());
    let nums: Vec<u8> = line[start..]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(6)
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    if nums.len() != 6 {
        return None;
    }
    let ip = Ipv4Addr::new(nums[0], nums[1], nums[2], nums[3]);
    let port = u16::from(nums[4]) << 8 | u16::from(nums[5]);
    Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
}

/// The port in `229 Entering Extended Passive Mode (|||port|)`.
pub fn parse_229(line: &str) -> Option<u16> {
    let inner = &line[line.find('(')? + 1..line.rfind(')')?];
    let d = inner.chars().next()?;
    let fields: Vec<&str> = inner.split(d).collect();
    if fields.len() != 5 {
        return None;
    }
    fields[3].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_227_with_and_without_parentheses() {
        let a = parse_227("227 Entering Passive Mode (127,0,0,1,195,80).").unwrap();
        assert_eq!(a, "127.0.0.1:50000".parse().unwrap());
        let b = parse_227("227 =127,0,0,1,0,21").unwrap();
        assert_eq!(b, "127.0.0.1:21".parse().unwrap());
        assert!(parse_227("227 nothing here").is_none());
    }

    #[test]
    fn parses_229() {
        assert_eq!(
            parse_229("229 Entering Extended Passive Mode (|||50000|)"),
            Some(50000)
        );
        assert_eq!(parse_229("229 ok (!!!21!)"), Some(21));
        assert_eq!(parse_229("229 (|||x|)"), None);
        assert_eq!(parse_229("229 no parens"), None);
    }

    #[test]
    fn parses_codes() {
        assert_eq!(parse_code("220 hi"), Some(220));
        assert_eq!(parse_code("211-Features"), Some(211));
        assert_eq!(parse_code("230"), Some(230));
        assert_eq!(parse_code("2300 x"), None);
        assert_eq!(parse_code("ab"), None);
    }
}

/// MODE E block descriptor bits (GFD.20 / RFC 959 block mode).
pub mod mode_e {
    /// End of data: no more blocks on this stream.
    pub const EOD: u8 = 0x08;
    /// End of file: the offset field holds how many EODs to expect.
    pub const EOF: u8 = 0x40;
    /// The sender closes this data connection after the block.
    pub const CLOSE: u8 = 0x04;

    /// A 17-byte MODE E header: descriptor, byte count, offset (big-endian).
    pub fn header(descriptor: u8, count: u64, offset: u64) -> [u8; 17] {
        let mut h = [0u8; 17];
        h[0] = descriptor;
        h[1..9].copy_from_slice(&count.to_be_bytes());
        h[9..17].copy_from_slice(&offset.to_be_bytes());
        h
    }

    /// One stream carrying `data` at offset 0 as one block, then EOF+EOD.
    pub fn single_stream(data: &[u8]) -> Vec<u8> {
        let mut out = header(0, data.len() as u64, 0).to_vec();
        out.extend_from_slice(data);
        out.extend_from_slice(&header(EOF | EOD, 0, 1));
        out
    }
}
