//! The control connection: commands out, replies in (parsed by
//! `sluice_ftp::reply::ReplyParser`), with a deadline on every wait.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use sluice_ftp::reply::{Reply, ReplyCode, ReplyParser};

use crate::error::{ClientError, Result};
use crate::tls::DataSock;
use crate::url::{FtpTls, FtpUrl};

/// An open, logged-in (after [`Control::login`]) control connection.
pub struct Control {
    stream: DataSock,
    /// The server name checked on TLS data connections (the control
    /// connection is TLS: `ftpes://`, `ftps://`).
    tls_host: Option<String>,
    parser: ReplyParser,
    timeout: Duration,
    /// Our end of the connection (data listeners bind to its IP).
    pub local: SocketAddr,
    /// The server's end (PASV/EPSV answers are checked against its IP).
    pub peer: SocketAddr,
    /// The text of the server's 220 greeting.
    pub greeting: String,
}

impl Control {
    /// Connects to the URL's host and reads the greeting.
    pub fn connect(u: &FtpUrl, timeout: Duration) -> Result<Control> {
        let what = format!("connect to {}", u.authority());
        let addrs: Vec<SocketAddr> = u
            .authority()
            .to_socket_addrs()
            .map_err(|e| ClientError::net(format!("resolve {}", u.host), e))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                let e =
                    last.unwrap_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address"));
                return Err(ClientError::net(what, e));
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream
            .local_addr()
            .map_err(|e| ClientError::net(&what, e))?;
        let peer = stream.peer_addr().map_err(|e| ClientError::net(&what, e))?;
        let _ = stream.set_read_timeout(Some(timeout));
        let _ = stream.set_write_timeout(Some(timeout));
        let (stream, tls_host) = match u.tls {
            FtpTls::Off => (DataSock::Plain(stream), None),
            FtpTls::Explicit => (DataSock::Plain(stream), None),
            FtpTls::Implicit => {
                let mut s = DataSock::tls(stream, &u.host, None)?;
                s.handshake(&u.authority())?;
                (s, Some(u.host.clone()))
            }
        };
        let mut c = Control {
            stream,
            tls_host,
            parser: ReplyParser::new(),
            timeout,
            local,
            peer,
            greeting: String::new(),
        };
        let started = Instant::now();
        loop {
            let r = c.read_reply()?;
            match r.code.0 {
                // "Service ready in nnn minutes": keep waiting, but not
                // past the timeout (a server could send 120 forever).
                120 if started.elapsed() < timeout => continue,
                120 => {
                    return Err(ClientError::net(
                        "waiting for the server's greeting",
                        std::io::Error::new(ErrorKind::TimedOut, "timed out"),
                    ))
                }
                220 => {
                    c.greeting = r.text().to_string();
                    break;
                }
                _ => return Err(refused("greeting", &r)),
            }
        }
        if u.tls == FtpTls::Explicit {
            c.start_tls(u)?;
        }
        Ok(c)
    }

    /// AUTH TLS (RFC 4217), then the handshake on this connection.
    fn start_tls(&mut self, u: &FtpUrl) -> Result<()> {
        let r = self.cmd("AUTH TLS")?;
        if r.code.0 != 234 {
            return Err(ClientError::Refused {
                what: "AUTH TLS (ftpes:// needs a server with TLS)".into(),
                reply: one_line(&r),
            });
        }
        // A placeholder while the socket moves into the TLS stream.
        let placeholder = self
            .stream
            .tcp()
            .try_clone()
            .map_err(|e| ClientError::net("control connection", e))?;
        let DataSock::Plain(tcp) =
            std::mem::replace(&mut self.stream, DataSock::Plain(placeholder))
        else {
            return Err(ClientError::Bug("AUTH TLS on a TLS connection".into()));
        };
        let mut s = DataSock::tls(tcp, &u.host, None)?;
        s.handshake(&u.authority())?;
        self.stream = s;
        self.tls_host = Some(u.host.clone());
        Ok(())
    }

    /// Whether data connections are under TLS (PROT P after AUTH TLS).
    pub fn is_tls(&self) -> bool {
        self.tls_host.is_some()
    }

    /// A data connection as this session protects them: TLS (PROT P) when
    /// the control connection is, with the same server name (and so the
    /// control connection's TLS session to resume).
    pub fn data_sock(&self, tcp: TcpStream) -> Result<DataSock> {
        match &self.tls_host {
            Some(h) => DataSock::tls(tcp, h, None),
            None => Ok(DataSock::Plain(tcp)),
        }
    }

    /// The server name TLS data connections check (`None` in clear).
    pub fn tls_host(&self) -> Option<String> {
        self.tls_host.clone()
    }

    /// Whether the control connection is TLS (data under PROT P).
    pub fn is_protected(&self) -> bool {
        self.tls_host.is_some()
    }

    /// USER / PASS.
    pub fn login(&mut self, user: &str, password: &str) -> Result<()> {
        let r = self.cmd(&format!("USER {user}"))?;
        let r = match r.code.0 {
            230 => return self.protect_data(),
            331 | 332 => self.cmd_secret(&format!("PASS {password}"))?,
            _ => {
                return Err(ClientError::Login {
                    reply: one_line(&r),
                })
            }
        };
        match r.code.0 {
            230 | 202 => {}
            _ => {
                return Err(ClientError::Login {
                    reply: one_line(&r),
                })
            }
        }
        self.protect_data()
    }

    /// [`Control::login`] with the commands `after` (TYPE I, FEAT, a
    /// transfer's set-up) sent in the same round trip as USER and PASS:
    /// their replies, in order. A tree worker is ready one round trip
    /// after the greeting instead of three or four. With TLS (PBSZ and
    /// PROT come between) the login goes first, then `after`, each in
    /// turn. A server that answers USER with 230 gets PASS anyway (its
    /// answer, 503 or 230, is read and dropped).
    pub fn login_pipelined(
        &mut self,
        user: &str,
        password: &str,
        after: &[&str],
    ) -> Result<Vec<Reply>> {
        self.login_pipelined_then(user, password, after, &[])
    }

    /// [`Control::login_pipelined`] that also sends `then` right behind
    /// `after`, in the same round trip, and leaves their replies unread
    /// (transfers: MLSDs behind their PORT). Clear sessions only.
    pub fn login_pipelined_then(
        &mut self,
        user: &str,
        password: &str,
        after: &[&str],
        then: &[String],
    ) -> Result<Vec<Reply>> {
        if self.is_tls() {
            if !then.is_empty() {
                return Err(ClientError::Bug("commands sent ahead on TLS".into()));
            }
            self.login(user, password)?;
            return after.iter().map(|l| self.cmd(l)).collect();
        }
        tracing::debug!(">> USER {user}");
        tracing::debug!(">> PASS ****");
        let mut lines = vec![format!("USER {user}"), format!("PASS {password}")];
        for line in after.iter().copied().chain(then.iter().map(String::as_str)) {
            tracing::debug!(">> {line}");
            lines.push(line.to_string());
        }
        self.send_lines(&lines)?;
        let u = self.read_reply()?;
        if !matches!(u.code.0, 230 | 331 | 332) {
            return Err(ClientError::Login {
                reply: one_line(&u),
            });
        }
        let p = self.read_reply()?;
        if u.code.0 != 230 && !matches!(p.code.0, 230 | 202) {
            return Err(ClientError::Login {
                reply: one_line(&p),
            });
        }
        after.iter().map(|_| self.read_reply()).collect()
    }

    /// PBSZ 0 and PROT P on a TLS session: data connections are TLS too.
    fn protect_data(&mut self) -> Result<()> {
        if self.is_protected() {
            self.expect_ok("PBSZ 0", "PBSZ 0")?;
            self.expect_ok("PROT P", "PROT P")?;
        }
        Ok(())
    }

    /// Sends one command and returns the first reply to it.
    pub fn cmd(&mut self, line: &str) -> Result<Reply> {
        tracing::debug!(">> {line}");
        self.send(line)?;
        self.read_reply()
    }

    /// Like [`Control::cmd`], without logging the argument (PASS).
    fn cmd_secret(&mut self, line: &str) -> Result<Reply> {
        tracing::debug!(">> PASS ****");
        self.send(line)?;
        self.read_reply()
    }

    /// Sends a command and requires a 2xx answer.
    pub fn expect_ok(&mut self, line: &str, what: &str) -> Result<Reply> {
        let r = self.cmd(line)?;
        if r.code.is_completion() {
            Ok(r)
        } else {
            Err(refused(what, &r))
        }
    }

    /// Writes one command line.
    pub fn send(&mut self, line: &str) -> Result<()> {
        self.send_lines(&[line])
    }

    /// Writes command lines sent ahead of their replies in one write, so
    /// they leave in as few segments as their bytes need. Each its own
    /// write (TCP_NODELAY) is a segment each: a batch of 20 short
    /// commands then used up a new connection's initial window of 10
    /// segments and the rest waited a round trip for its ACKs (traced on
    /// linkem at 50 ms: `put -r --sync`'s login, MKDs and MLSDs).
    pub fn send_lines<S: AsRef<str>>(&mut self, lines: &[S]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.as_ref().len() + 2).sum());
        for line in lines {
            buf.extend_from_slice(line.as_ref().as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        self.stream
            .write_all(&buf)
            .and_then(|()| self.stream.flush())
            .map_err(|e| ClientError::net("send command", e))
    }

    /// Waits up to the idle timeout for the next reply.
    pub fn read_reply(&mut self) -> Result<Reply> {
        match self.poll_reply(self.timeout)? {
            Some(r) => Ok(r),
            None => Err(ClientError::net(
                "waiting for the server's reply",
                std::io::Error::new(ErrorKind::TimedOut, "timed out"),
            )),
        }
    }

    /// Waits at most `wait` for the next reply; `None` if none came.
    pub fn poll_reply(&mut self, wait: Duration) -> Result<Option<Reply>> {
        let deadline = Instant::now() + wait;
        loop {
            match self.parser.poll_reply() {
                Ok(Some(r)) => {
                    tracing::debug!("<< {} {}", r.code, r.text());
                    return Ok(Some(r));
                }
                Ok(None) => {}
                Err(e) => return Err(ClientError::Protocol(format!("control reply: {e}"))),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let _ = self
                .stream
                .tcp()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(ClientError::net(
                        "control connection",
                        std::io::Error::new(ErrorKind::UnexpectedEof, "closed by the server"),
                    ))
                }
                Ok(n) => self
                    .parser
                    .handle_input(&buf[..n])
                    .map_err(|e| ClientError::Protocol(format!("control reply: {e}")))?,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ClientError::net("control connection", e)),
            }
        }
    }

    /// Polite goodbye; errors do not matter any more.
    pub fn quit(mut self) {
        let _ = self.send("QUIT");
        let _ = self.poll_reply(Duration::from_millis(500));
    }

    /// Whether the greeting names a GridFTP server (globus-gridftp-server:
    /// "HOST GridFTP Server 13.x ... ready.", Sluice: "Sluice FTP server
    /// ready."), before FEAT says so: transfers sent behind a PORT before
    /// the login's answers (a listing a round trip sooner) go only to
    /// these. Another server may take PORT and never connect (a client
    /// behind NAT, a firewall): its listing then waits for the server's
    /// connect timeout, where a passive one would just work.
    pub fn greets_as_gridftp(&self) -> bool {
        greets_as_gridftp(&self.greeting)
    }

    /// The idle timeout this connection was opened with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// A refusal error from a reply.
pub fn refused(what: &str, r: &Reply) -> ClientError {
    ClientError::Refused {
        what: what.to_string(),
        reply: one_line(r),
    }
}

/// Server text made safe to print: control characters (a terminal escape
/// sequence in a reply must not reach the user's terminal) dropped, and
/// clipped to 200 characters.
pub fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// `code text` of a reply's first line, clipped, for error messages.
pub fn one_line(r: &Reply) -> String {
    let mut t = printable(r.text());
    if t.is_empty() {
        t = "(no text)".into();
    }
    format!("{} {}", r.code, t)
}

/// Whether a reply code means "command not known / not allowed here",
/// i.e. try something else rather than fail.
pub fn is_unsupported(code: ReplyCode) -> bool {
    matches!(code.0, 500 | 501 | 502 | 504 | 522)
}

/// [`Control::greets_as_gridftp`] on a 220's text.
fn greets_as_gridftp(greeting: &str) -> bool {
    let g = greeting.to_ascii_lowercase();
    g.contains("gridftp") || g.starts_with("sluice ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings_of_gridftp_servers_are_told_apart() {
        assert!(greets_as_gridftp(
            "host.example GridFTP Server 13.25 (gcc64, 1704983466-1) [Globus Toolkit 6.2] ready."
        ));
        assert!(greets_as_gridftp("Sluice FTP server ready."));
        assert!(!greets_as_gridftp("(vsFTPd 3.0.3)"));
        assert!(!greets_as_gridftp(
            "ProFTPD Server (Debian) [::ffff:10.0.0.1]"
        ));
        assert!(!greets_as_gridftp(""));
    }

    #[test]
    fn printable_drops_terminal_escapes_and_clips() {
        assert_eq!(printable("12\x1b[2J34\x07"), "12[2J34");
        assert_eq!(printable(&"a".repeat(500)).len(), 200);
    }
}
