//! The task behind one control connection: drives a sans-I/O
//! [`Session`], performs its actions, feeds results back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Cancel, IoClass};
use sluice_ftp::command::TransferMode;
use sluice_ftp::session::{
    Action, DataChannel, LoginGrant, OpError, Session, SessionConfig, TlsPolicy,
};
use sluice_platform::fs::ServedRoot;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsStream;
use tracing::Instrument;

use super::transfer::{self, Event, Job, Work};
use super::FtpContext;
use crate::auth::Login;
use crate::data::Passive;
use crate::ops;
use crate::xferlog::Direction;

/// Performing the session's actions.
mod actions;

/// Control bytes we hold while the session is busy. A client that sends
/// more than this without waiting for replies is paused (we stop reading)
/// until the session catches up.
const MAX_PENDING_INPUT: usize = 4 * sluice_ftp::limits::MAX_LINE;

/// Greeting sent on connect.
const GREETING: &str = "Sluice FTP server ready.";
/// vsftpd's `delay_failed_login`: a refused password is answered only after
/// this long, so guessing costs a client time (other sessions go on).
const FAILED_LOGIN_DELAY: Duration = Duration::from_secs(1);
/// Longest wait for a password-check slot (`Users::check_slots`).
const CHECK_SLOT_WAIT: Duration = Duration::from_secs(10);

/// The control connection's reading side, in clear or under TLS.
enum CtlRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
    /// Taken apart for the AUTH TLS handshake, which failed.
    Gone,
}

/// The control connection's writing side.
enum CtlWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
    Gone,
}

impl CtlRead {
    async fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            CtlRead::Plain(rd) => read_some(rd, buf).await,
            CtlRead::Tls(rd) => rd.read(buf).await,
            CtlRead::Gone => Ok(0),
        }
    }
}

impl CtlWrite {
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            CtlWrite::Plain(w) => w.write_all(bytes).await,
            CtlWrite::Tls(w) => {
                w.write_all(bytes).await?;
                w.flush().await
            }
            CtlWrite::Gone => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    async fn shutdown(&mut self) {
        let _ = match self {
            CtlWrite::Plain(w) => w.shutdown().await,
            CtlWrite::Tls(w) => w.shutdown().await,
            CtlWrite::Gone => Ok(()),
        };
    }
}

struct Driver {
    ctx: Arc<FtpContext>,
    /// The configuration in force when the session connected (a SIGHUP
    /// reload applies to later sessions; logins read the current users).
    cfg: Arc<crate::config::ServeConfig>,
    session: Session,
    wr: CtlWrite,
    /// A second handle on the control socket (never read: dup'd again
    /// for each transfer's `Job::control`).
    ctl: Option<TcpStream>,
    /// AUTH TLS answered: the handshake is due.
    start_tls: bool,
    local: SocketAddr,
    peer: SocketAddr,
    login: Option<(String, Login, Arc<ServedRoot>)>,
    passive: Option<Passive>,
    /// MODE E connections kept open after the last transfer, the data
    /// channel they belong to and the direction they carried (dropped
    /// when the session says so: `Action::DropKept`, a new listener).
    cached: Option<(DataChannel, Vec<TcpStream>, Direction)>,
    running: Option<Cancel>,
    events_tx: mpsc::UnboundedSender<Event>,
    /// When control bytes were last read while a transfer ran (an
    /// upload's end looks at it: `transfer::control_closes_within`).
    input_tx: tokio::sync::watch::Sender<Option<Instant>>,
    /// Replies not written yet: those to pipelined commands go out
    /// together ([`Driver::flush`]).
    out: Vec<u8>,
}

/// Replies held back past this many bytes are written at once.
const HELD_REPLIES: usize = 16 * 1024;

/// The session's TLS policy from the configuration.
fn tls_policy(cfg: &crate::config::ServeConfig, implicit: bool) -> TlsPolicy {
    let tls = &cfg.tls;
    TlsPolicy {
        offered: tls.server.is_some(),
        implicit,
        required: tls.require_tls,
        exceptions: cfg
            .users
            .iter()
            .filter(|u| u.require_tls.is_some_and(|r| r != tls.require_tls))
            .map(|u| u.name.clone())
            .collect(),
    }
}

/// Serves one control connection until it closes.
pub async fn serve(ctx: Arc<FtpContext>, conn: TcpStream) {
    let (Ok(local), Ok(peer)) = (conn.local_addr(), conn.peer_addr()) else {
        return;
    };
    let _ = conn.set_nodelay(true);
    // ABOR is often sent with its last byte as TCP urgent data (Python's
    // ftplib sends "ABOR\r\n" with MSG_OOB); keep it in the byte stream,
    // as vsftpd does, or the line never ends.
    let _ = socket2::SockRef::from(&conn).set_out_of_band_inline(true);
    let ctl = super::transfer::control_watch(&conn);
    let (rd, wr) = conn.into_split();
    run(
        ctx,
        local,
        peer,
        CtlRead::Plain(rd),
        CtlWrite::Plain(wr),
        ctl,
        false,
    )
    .await
}

/// Serves one implicit-FTPS control connection (`--ftps`): the TLS
/// handshake first, then the session, protected from its greeting on.
pub async fn serve_implicit(ctx: Arc<FtpContext>, conn: TcpStream) {
    let Some(server) = ctx
        .current
        .config()
        .tls
        .server
        .as_ref()
        .map(|s| Arc::clone(&s.ftp))
    else {
        return;
    };
    let (Ok(local), Ok(peer)) = (conn.local_addr(), conn.peer_addr()) else {
        return;
    };
    let _ = conn.set_nodelay(true);
    let ctl = super::transfer::control_watch(&conn);
    let tls = match crate::tls::handshake(server, conn).await {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(error = %e, "TLS handshake failed");
            return;
        }
    };
    let (rd, wr) = tokio::io::split(TlsStream::from(tls));
    run(
        ctx,
        local,
        peer,
        CtlRead::Tls(rd),
        CtlWrite::Tls(wr),
        ctl,
        true,
    )
    .await
}

/// AUTH TLS: the server side of the handshake on the control connection
/// (whose 234 is out). `None` when it failed; the connection is gone.
async fn upgrade(
    cfg: &crate::config::ServeConfig,
    rd: CtlRead,
    wr: CtlWrite,
) -> Option<(CtlRead, CtlWrite)> {
    let server = cfg.tls.server.as_ref().map(|s| Arc::clone(&s.ftp))?;
    let (CtlRead::Plain(rd), CtlWrite::Plain(wr)) = (rd, wr) else {
        return None;
    };
    let tcp = rd.reunite(wr).ok()?;
    match crate::tls::handshake(server, tcp).await {
        Ok(tls) => {
            tracing::debug!("control connection protected");
            let (rd, wr) = tokio::io::split(TlsStream::from(tls));
            Some((CtlRead::Tls(rd), CtlWrite::Tls(wr)))
        }
        Err(e) => {
            tracing::info!(error = %e, "TLS handshake on the control connection failed");
            None
        }
    }
}

/// The session loop of one control connection, clear or TLS.
async fn run(
    ctx: Arc<FtpContext>,
    local: SocketAddr,
    peer: SocketAddr,
    mut rd: CtlRead,
    wr: CtlWrite,
    ctl: Option<TcpStream>,
    implicit: bool,
) {
    let cfg = ctx.current.config();
    let mut session = Session::new(SessionConfig {
        local_addr: local,
        peer_addr: peer,
        idle_timeout: cfg.idle_timeout,
        greeting: GREETING.into(),
        tls: tls_policy(&cfg, implicit),
    });
    session.handle_connected(Instant::now());
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let mut d = Driver {
        ctx,
        cfg,
        session,
        wr,
        ctl,
        start_tls: false,
        local,
        peer,
        login: None,
        passive: None,
        cached: None,
        running: None,
        events_tx,
        input_tx: tokio::sync::watch::channel(None).0,
        out: Vec::new(),
    };
    tracing::debug!("connected");
    let mut inbuf: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut peer_closed = false;
    let shutdown = d.ctx.shutdown.clone();
    let mut draining = shutdown.is_draining();
    let mut cut = false;
    'conn: loop {
        // Input buffered behind an outstanding action (PASS, SIZE, CWD...)
        // is offered again as soon as the session is free: waiting for the
        // next read would stall pipelined commands that arrived in the
        // same segment until the client sent more bytes.
        loop {
            if !d.drive().await {
                break 'conn;
            }
            if std::mem::take(&mut d.start_tls) {
                // The 234 goes out before the handshake waits for the
                // client's hello.
                if !d.flush().await {
                    break 'conn;
                }
                // Bytes after AUTH TLS's line, before our 234, cannot be
                // a proper ClientHello: the client did not wait.
                let ok = if inbuf.is_empty() {
                    let old_rd = std::mem::replace(&mut rd, CtlRead::Gone);
                    let old_wr = std::mem::replace(&mut d.wr, CtlWrite::Gone);
                    match upgrade(&d.cfg, old_rd, old_wr).await {
                        Some((r, w)) => {
                            rd = r;
                            d.wr = w;
                            true
                        }
                        None => false,
                    }
                } else {
                    tracing::info!("bytes sent before the 234 to AUTH TLS; closing");
                    false
                };
                d.session.handle_tls(ok);
                if !ok {
                    break 'conn;
                }
                continue;
            }
            // While the server stops, only a session with a transfer
            // running reads on (ABOR, STAT); no new command starts.
            if inbuf.is_empty() || d.session.is_closed() || (draining && d.running.is_none()) {
                break;
            }
            match d.session.handle_input(Instant::now(), &inbuf) {
                Ok(0) => break,
                Ok(used) => {
                    inbuf.drain(..used.min(inbuf.len()));
                }
                Err(e) => {
                    tracing::info!(error = %e, "closing session");
                    inbuf.clear();
                }
            }
        }
        // Every reply is out before the session waits for anything.
        if !d.flush().await {
            break 'conn;
        }
        if draining && d.running.is_none() {
            // The server is stopping and this session has nothing running
            // (any transfer's final reply is already out): 421 and close.
            let _ =
                d.wr.write_all(&super::refusal("Server shutting down."))
                    .await;
            tracing::debug!("closed: server stopping");
            break;
        }
        let deadline = d.session.poll_timeout().map(tokio::time::Instant::from_std);
        let can_read = !peer_closed && inbuf.len() < MAX_PENDING_INPUT;
        tokio::select! {
            r = rd.read_some(&mut buf), if can_read => match r {
                Ok(0) | Err(_) => {
                    peer_closed = true;
                    if let Some(c) = &d.running {
                        c.cancel();
                    } else {
                        break;
                    }
                }
                Ok(n) => {
                    inbuf.extend_from_slice(&buf[..n]);
                    if d.running.is_some() {
                        d.input_tx.send_replace(Some(Instant::now()));
                    }
                }
            },
            Some(ev) = events_rx.recv() => match ev {
                Event::Started(size) => d.session.handle_transfer_started(size),
                Event::StartedReusing(size) => d.session.handle_transfer_started_reusing(size),
                Event::Marker(r) => d.session.handle_marker(&r),
                Event::Kept(channel, conns, dir) => d.cached = Some((channel, conns, dir)),
                Event::Done(result) => {
                    d.running = None;
                    if result.is_err() {
                        // The data channel is torn down after a failure.
                        d.cached = None;
                    }
                    d.session.handle_transfer_done(Instant::now(), result);
                    if peer_closed {
                        break;
                    }
                }
            },
            _ = sleep_until(deadline), if deadline.is_some() => {
                d.session.handle_timeout(Instant::now());
            }
            _ = shutdown.draining(), if !draining => draining = true,
            _ = shutdown.cutting(), if draining && !cut => {
                // The shutdown timeout is over: end the transfer (an
                // upload keeps its partial); its Done reply comes next.
                cut = true;
                if let Some(c) = &d.running {
                    c.cancel();
                }
            }
        }
    }
    if let Some(c) = &d.running {
        c.cancel();
    }
    d.wr.shutdown().await;
    tracing::debug!("disconnected");
}

/// One read from the control connection. Not `AsyncReadExt::read`: tokio
/// treats a short read as "drained" and waits for the next edge, but with
/// SO_OOBINLINE the kernel stops a read at the urgent mark, so the byte
/// after it ("\n" of an urgent "ABOR\r\n") would sit unread with no new
/// edge coming. `try_read` keeps readiness until it sees EWOULDBLOCK.
async fn read_some(rd: &OwnedReadHalf, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        rd.readable().await?;
        match rd.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Whether a kept download connection can still carry data: the client
/// has neither closed it nor sent anything on it (a receiver never does).
/// A peek that does not wait: no bytes pending is `WouldBlock`.
fn still_open(conn: &TcpStream) -> bool {
    let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    matches!(
        socket2::SockRef::from(conn).peek(&mut b),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    )
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    /// Writes the replies held back; false if the connection broke.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let ok = self.wr.write_all(&self.out).await.is_ok();
        self.out.clear();
        ok
    }

    /// Takes replies and performs actions until the session is quiet.
    /// Returns false when the connection should close. Replies are held
    /// (up to [`HELD_REPLIES`] bytes) while pipelined commands that came
    /// with them are taken, and written once the input is used up (the
    /// caller's [`Driver::flush`]): each write is a segment on the
    /// TCP_NODELAY control connection, and a client's batch of twenty
    /// commands answered reply by reply used up the connection's initial
    /// window of ten segments, the rest waiting a round trip for ACKs
    /// (traced on linkem at 50 ms: `sluice put -r --sync`'s login, MKDs
    /// and set-up). Slow actions (CKSM, a password check) get the
    /// replies before them out first.
    async fn drive(&mut self) -> bool {
        loop {
            self.session.poll_output(&mut self.out);
            if self.out.len() >= HELD_REPLIES && !self.flush().await {
                return false;
            }
            let Some(action) = self.session.poll_action() else {
                if self.session.login().is_none() {
                    // REIN logged the session out.
                    self.login = None;
                }
                return true;
            };
            let slow = matches!(
                action,
                Action::Authenticate { .. } | Action::Checksum { .. }
            );
            if slow && !self.flush().await {
                return false;
            }
            if !self.perform(action).await {
                self.session.poll_output(&mut self.out);
                let _ = self.flush().await;
                return false;
            }
        }
    }
}
