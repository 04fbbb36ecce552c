//! The server side of one FTP control connection, sans-I/O.
//!
//! ```text
//!   control bytes ──handle_input──▶ ┌─────────┐ ──poll_output──▶ reply bytes
//!                                   │ Session │ ──poll_action──▶ Authenticate, OpenPassive,
//!   results ──handle_login/passive/ │         │                  Query, Change, StartRetr,
//!           result/transfer_*──────▶└─────────┘                  StartStor, List, Abort, Close
//!   now ──handle_timeout / poll_timeout (idle time)
//! ```
//!
//! The session owns the protocol: login, working directory, TYPE/MODE,
//! REST, RNFR, the data channel choice, GridFTP options, and every reply.
//! It never touches a socket, a file or a clock; the shell (crates/server)
//! performs each [`Action`] and feeds the outcome back through a
//! `handle_*` method. While an action is outstanding the session consumes
//! no further command bytes (the shell keeps them and offers them again),
//! except ABOR, STAT, NOOP and QUIT during a transfer.
//!
//! Drain order after any input: [`Session::poll_output`] then
//! [`Session::poll_action`] until `None`, then [`Session::poll_timeout`].

mod action;
mod data_setup;
mod dispatch;
mod file_ops;
#[doc(hidden)]
pub mod internal;
#[cfg(test)]
mod kept_tests;
#[cfg(test)]
mod odd_input_tests;
#[cfg(test)]
mod pipelining_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
/// Transfer started, markers, transfer done.
mod transfer_events;
#[cfg(test)]
mod transfer_tests;

pub use action::{
    Action, Answer, Change, ChecksumAlgorithm, DataChannel, DataSpec, ListFormat, ListMatch,
    LoginGrant, NamePattern, OpError, Query, StoreKind,
};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::command::{next_line, parse_command, TransferMode};
use crate::path::VirtualPath;
use crate::reply::{Reply, ReplyCode};

/// Failed logins before the session is closed: enough for typos, few
/// enough that guessing passwords over one connection is slow.
pub const MAX_LOGIN_FAILURES: u32 = 3;

/// Marker interval (seconds) when the client does not set one; Globus
/// servers send performance markers every 5 seconds by default.
pub const DEFAULT_MARKER_SECS: u32 = 5;

/// Longest a marker interval may be set to (one day).
const MAX_MARKER_SECS: u32 = 86_400;

/// What a session needs to know about its connection and policy.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The control connection's local address (where PASV listeners bind).
    pub local_addr: SocketAddr,
    /// The control connection's peer (PORT/EPRT must point here).
    pub peer_addr: SocketAddr,
    /// Close the session after this long without a command (while no
    /// transfer runs).
    pub idle_timeout: Duration,
    /// Text of the 220 greeting.
    pub greeting: String,
    /// What the session offers and demands of TLS.
    pub tls: TlsPolicy,
}

/// TLS on the control and data connections (RFC 4217): what is offered,
/// what is required. The handshakes are the shell's ([`Action::StartTls`],
/// [`DataSpec::protected`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPolicy {
    /// AUTH TLS is offered (the server has a certificate).
    pub offered: bool,
    /// The control connection is under TLS from its first byte (implicit
    /// FTPS).
    pub implicit: bool,
    /// Logins need a protected control connection, and their transfers
    /// PROT P, except for the names in `exceptions`.
    pub required: bool,
    /// Login names for which `required` is reversed (a user's own
    /// `require_tls`).
    pub exceptions: Vec<String>,
}

impl TlsPolicy {
    /// Whether `user` must protect the control connection before login.
    pub fn required_for(&self, user: &str) -> bool {
        self.required != self.exceptions.iter().any(|e| e == user)
    }
}

/// Why the session stopped taking input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionError {
    /// A command line passed [`crate::limits::MAX_LINE`] without a line end;
    /// a 500 reply is queued and the connection must be closed.
    LineTooLong,
    /// The session is closed; no more input is taken.
    Closed,
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::LineTooLong => "command line too long",
            Self::Closed => "session closed",
        })
    }
}

impl std::error::Error for SessionError {}

/// What the session waits for; named for the thing awaited.
#[derive(Debug)]
enum State {
    /// Not logged in, waiting for USER.
    AwaitUser,
    /// USER given, waiting for PASS.
    AwaitPass { user: String },
    /// Authenticate action out, waiting for `handle_login`.
    AwaitLogin,
    /// Logged in, idle.
    Ready,
    /// OpenPassive out, waiting for `handle_passive`.
    AwaitPassive { extended: bool },
    /// Query/Change/Checksum out, waiting for `handle_result`.
    AwaitResult(Pending),
    /// Transfer out, waiting for `handle_transfer_done`.
    AwaitTransfer(Transfer),
    /// 234 sent and StartTls out, waiting for `handle_tls`; `then` is
    /// the state to go back to.
    AwaitTls { then: Box<State> },
    /// 221/421 sent and Close queued.
    Closed,
}

/// The question behind an outstanding `Query`/`Change`/`Checksum`.
#[derive(Debug)]
enum Pending {
    Query { path: VirtualPath, query: Query },
    Change(Change),
    Checksum,
}

/// A transfer in progress.
#[derive(Debug)]
struct Transfer {
    started: bool,
    abort_requested: bool,
    /// ABOR itself was sent (QUIT also aborts, but is not answered as ABOR).
    abor_sent: bool,
    quit_after: bool,
}

/// The data channel the next transfer will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataSetup {
    None,
    Passive,
    Active(SocketAddr),
}

/// One control connection's protocol state; see the module docs.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    state: State,
    out: Vec<u8>,
    actions: VecDeque<Action>,
    last_activity: Option<Instant>,
    login: Option<LoginGrant>,
    login_failures: u32,
    /// The name of the login under way (for its TLS requirement).
    login_user: Option<String>,
    cwd: VirtualPath,
    ascii: bool,
    mode: TransferMode,
    data: DataSetup,
    epsv_all: bool,
    rest: Option<u64>,
    rest_ranges: Option<crate::markers::RangeSet>,
    rename_from: Option<VirtualPath>,
    parallelism: u32,
    buffer: Option<u64>,
    marker_secs: u32,
    /// MLSx facts chosen with `OPTS MLST`.
    mlst_facts: crate::listing::MlstFacts,
    /// The control connection is under TLS.
    protected: bool,
    /// PROT P: data connections are TLS.
    prot_private: bool,
    /// The login needed TLS (its transfers need PROT P).
    login_requires_tls: bool,
    /// A MODE E transfer succeeded on the current data channel: the shell
    /// may hold its connections open for the next one (GridFTP data
    /// channel caching). Changing the channel or the mode drops them
    /// ([`Action::DropKept`]).
    kept: bool,
}

impl Session {
    /// A new session; its 220 greeting is already in the output.
    pub fn new(config: SessionConfig) -> Session {
        let mut s = Session {
            state: State::AwaitUser,
            out: Vec::new(),
            actions: VecDeque::new(),
            last_activity: None,
            login: None,
            login_failures: 0,
            login_user: None,
            cwd: VirtualPath::root(),
            ascii: false,
            mode: TransferMode::Stream,
            data: DataSetup::None,
            epsv_all: false,
            rest: None,
            rest_ranges: None,
            rename_from: None,
            parallelism: 1,
            kept: false,
            buffer: None,
            marker_secs: DEFAULT_MARKER_SECS,
            mlst_facts: crate::listing::MlstFacts::ALL,
            protected: config.tls.implicit,
            prot_private: false,
            login_requires_tls: false,
            config,
        };
        let greeting = s.config.greeting.clone();
        s.reply(ReplyCode::SERVICE_READY, &greeting);
        s
    }

    /// A session that says 421 (too many sessions) and closes.
    pub fn refuse(config: SessionConfig, text: &str) -> Session {
        let mut s = Session::new(config);
        s.out.clear();
        s.reply(ReplyCode::SERVICE_NOT_AVAILABLE, text);
        s.close();
        s
    }

    /// The socket buffer size the client asked for (SBUF / SITE BUFSIZE),
    /// for data connections opened from now on (a passive listener is
    /// sized before any client connects to it).
    pub fn socket_buffer(&self) -> Option<u64> {
        self.buffer
    }

    /// Starts the idle timer when the connection is accepted, so a client
    /// that connects and never sends a byte is closed after the idle time
    /// instead of holding a session slot forever.
    pub fn handle_connected(&mut self, now: Instant) {
        if self.last_activity.is_none() {
            self.last_activity = Some(now);
        }
    }

    /// Takes control-channel bytes; returns how many it consumed. Bytes
    /// not consumed (a partial line, or commands that must wait for an
    /// outstanding action) must be offered again, followed by new ones.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, SessionError> {
        if matches!(self.state, State::Closed) {
            return Err(SessionError::Closed);
        }
        if self.last_activity.is_none() {
            self.last_activity = Some(now);
        }
        let mut used = 0;
        while used < bytes.len() && !matches!(self.state, State::Closed) {
            let (line, n) = match next_line(&bytes[used..]) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(_) => {
                    self.reply(ReplyCode::SYNTAX_ERROR, "Input line too long.");
                    self.close();
                    return Err(SessionError::LineTooLong);
                }
            };
            if self.is_busy() && !(self.in_transfer() && urgent(&line)) {
                break;
            }
            used += n;
            self.last_activity = Some(now);
            if line.is_empty() {
                // A bare line end gets no reply, as vsftpd does: some
                // clients and NAT boxes send one as a keep-alive and never
                // read an answer, which would put every later reply out
                // of step. A line of spaces is a command and gets 500.
                continue;
            }
            match parse_command(&line) {
                Ok(cmd) => self.handle_command(cmd),
                // Every refused line is answered: a client waiting for a
                // reply must not hang. A flood of them is bounded like any
                // bad line: the shell holds little unread input and reads
                // no more until the replies are written.
                Err(e) => {
                    self.rename_from = None;
                    if e.verb() == Some("USER") && matches!(self.state, State::AwaitPass { .. }) {
                        // A refused USER replaces the one before it: the
                        // next PASS must not log in as the earlier name.
                        self.state = State::AwaitUser;
                    }
                    self.push(&e.reply());
                    if e.closes_connection() {
                        self.close();
                        return Err(SessionError::LineTooLong);
                    }
                }
            }
        }
        Ok(used)
    }

    /// Appends pending reply bytes to `out`.
    pub fn poll_output(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.out);
    }

    /// The next thing the shell must do.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the idle timer fires, if it runs (it does not while an action
    /// is outstanding, nor before [`Session::handle_connected`] or any input).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_busy() || matches!(self.state, State::Closed) {
            return None;
        }
        self.last_activity.map(|t| t + self.config.idle_timeout)
    }

    /// Checks the idle timer; a spurious call does nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.poll_timeout() {
            if now >= deadline {
                self.reply(ReplyCode::SERVICE_NOT_AVAILABLE, "Timeout.");
                self.close();
            }
        }
    }

    /// True once the session has queued [`Action::Close`].
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The working directory.
    pub fn cwd(&self) -> &VirtualPath {
        &self.cwd
    }

    /// The login's rights, once logged in.
    pub fn login(&self) -> Option<LoginGrant> {
        self.login
    }

    /// Whether the control connection is under TLS.
    pub fn is_protected(&self) -> bool {
        self.protected
    }

    /// The shell's outcome of an [`Action::StartTls`]: the handshake on
    /// the control connection succeeded (now protected) or failed (the
    /// connection is unusable: closed).
    pub fn handle_tls(&mut self, ok: bool) {
        let State::AwaitTls { then } = std::mem::replace(&mut self.state, State::AwaitUser) else {
            return;
        };
        if ok {
            self.protected = true;
            self.state = *then;
        } else {
            self.state = State::Closed;
            self.actions.push_back(Action::Close);
        }
    }

    /// The shell's verdict on an [`Action::Authenticate`].
    pub fn handle_login(&mut self, grant: Option<LoginGrant>) {
        if !matches!(self.state, State::AwaitLogin) {
            return;
        }
        match grant {
            Some(g) => {
                self.login = Some(g);
                self.login_requires_tls = self.config.tls.offered
                    && self
                        .login_user
                        .as_deref()
                        .is_some_and(|u| self.config.tls.required_for(u));
                self.state = State::Ready;
                self.reply(ReplyCode::LOGGED_IN, "Login successful.");
            }
            None => {
                self.login_failures += 1;
                self.reply(ReplyCode::NOT_LOGGED_IN, "Login incorrect.");
                self.state = State::AwaitUser;
                if self.login_failures >= MAX_LOGIN_FAILURES {
                    self.reply(ReplyCode::SERVICE_NOT_AVAILABLE, "Too many login failures.");
                    self.close();
                }
            }
        }
    }

    /// The shell cannot serve the session now (out of file descriptors,
    /// say): 421 with `text` and close, whatever was outstanding. Not a
    /// failed login: the client should try again later.
    pub fn handle_unavailable(&mut self, text: &str) {
        if matches!(self.state, State::Closed) {
            return;
        }
        self.reply(ReplyCode::SERVICE_NOT_AVAILABLE, text);
        self.close();
    }

    /// The shell's answer to [`Action::OpenPassive`]: the address to
    /// announce (the listener's, or `--pasv-address` with its port), or
    /// `None` if no listener could be opened.
    pub fn handle_passive(&mut self, announce: Option<SocketAddr>) {
        let State::AwaitPassive { extended } = self.state else {
            return;
        };
        self.state = State::Ready;
        match (announce, extended) {
            (None, _) => {
                self.data = DataSetup::None;
                self.reply(ReplyCode::CANT_OPEN_DATA, "Can't open passive connection.");
            }
            (Some(a), true) => {
                self.data = DataSetup::Passive;
                let text = format!("Entering Extended Passive Mode (|||{}|).", a.port());
                self.reply(ReplyCode::EXTENDED_PASSIVE, &text);
            }
            (Some(SocketAddr::V4(a)), false) => {
                self.data = DataSetup::Passive;
                self.reply(ReplyCode::PASSIVE, &crate::addr::format_227(a));
            }
            (Some(SocketAddr::V6(a)), false) => match a.ip().to_ipv4_mapped() {
                Some(v4) => {
                    self.data = DataSetup::Passive;
                    let v4 = std::net::SocketAddrV4::new(v4, a.port());
                    self.reply(ReplyCode::PASSIVE, &crate::addr::format_227(v4));
                }
                None => {
                    self.data = DataSetup::None;
                    self.actions.push_back(Action::ClosePassive);
                    self.reply(
                        ReplyCode::BAD_NETWORK_PROTOCOL,
                        "PASV needs IPv4; use EPSV.",
                    );
                }
            },
        }
    }

    /// The shell's answer to a `Query`, `Change` or `Checksum`.
    pub fn handle_result(&mut self, result: Result<Answer, OpError>) {
        let State::AwaitResult(_) = &self.state else {
            return;
        };
        let State::AwaitResult(pending) = std::mem::replace(&mut self.state, State::Ready) else {
            return;
        };
        match result {
            Ok(answer) => self.answer(pending, answer),
            Err(e) => {
                // A refused command leaves no state: a failed RNFR must not
                // arm the RNTO after it.
                self.rename_from = None;
                self.push(&e.reply())
            }
        }
    }

    /// REIN (RFC 959 4.1.1): forget the login and every setting, as on a
    /// fresh connection, and answer 220. The shell drops its login when
    /// [`Session::login`] goes back to `None`.
    fn reinitialize(&mut self) {
        if self.data == DataSetup::Passive {
            self.actions.push_back(Action::ClosePassive);
        }
        self.drop_kept();
        self.state = State::AwaitUser;
        self.login = None;
        self.cwd = VirtualPath::root();
        self.ascii = false;
        self.mode = TransferMode::Stream;
        self.data = DataSetup::None;
        self.epsv_all = false;
        self.rest = None;
        self.rest_ranges = None;
        self.rename_from = None;
        self.parallelism = 1;
        self.buffer = None;
        self.marker_secs = DEFAULT_MARKER_SECS;
        self.mlst_facts = crate::listing::MlstFacts::ALL;
        // The control connection stays protected (the shell cannot take
        // TLS off it), and so does the data protection level with it.
        self.login_requires_tls = false;
        self.login_user = None;
        self.reply(ReplyCode::SERVICE_READY, "Service ready for new user.");
    }
}

/// Commands the session answers while a transfer runs (RFC 959 4.1.3:
/// ABOR, STAT and QUIT may arrive mid-transfer; NOOP is harmless).
fn urgent(line: &[u8]) -> bool {
    let verb: Vec<u8> = line
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| **b != b' ')
        .map(u8::to_ascii_uppercase)
        .collect();
    matches!(&verb[..], b"ABOR" | b"STAT" | b"NOOP" | b"QUIT")
}
