//! One parsed command in, replies and actions out.

use std::net::SocketAddr;

use super::{
    Action, Change, ChecksumAlgorithm, ListFormat, Pending, Query, Session, State, StoreKind,
};
use crate::command::{Command, Dcau, Epsv, Opts, Prot, Restart, TransferMode, TransferType};
use crate::limits::{MAX_OFFSET, MAX_PARALLELISM};
use crate::listing::MlstFacts;
use crate::reply::{quote_257, Reply, ReplyCode as C};

/// FEAT lines (RFC 2389), GridFTP ones as globus-gridftp-server lists them.
const FEATURES: &[&str] = &[
    "UTF8",
    "SIZE",
    "MDTM",
    "REST STREAM",
    "EPSV",
    "EPRT",
    "TVFS",
    "PARALLEL",
    "ERET",
    "ESTO",
    "SBUF",
    "DCAU",
    "CKSM ADLER32;MD5;SHA256;SHA1;CRC32C;",
    "MFMT",
];

const HELP_LINES: &[&str] = &[
    "The following commands are recognized.",
    "ABOR APPE CDUP CKSM CWD DCAU DELE EPRT EPSV ERET ESTO FEAT HELP LIST MDTM",
    "MFMT MKD MLSD MLST MODE NLST NOOP OPTS PASS PASV PBSZ PORT PROT PWD QUIT REST",
    "REIN RETR RMD RNFR RNTO SBUF SIZE STAT STOR STRU SYST TYPE USER",
    "Help OK.",
];

impl Session {
    pub(super) fn handle_command(&mut self, cmd: Command) {
        // Mid-transfer only ABOR, STAT, NOOP and QUIT get here.
        if let State::AwaitTransfer(t) = &mut self.state {
            match cmd {
                Command::Abor => {
                    t.abor_sent = true;
                    if !t.abort_requested {
                        t.abort_requested = true;
                        self.actions.push_back(Action::Abort);
                    }
                }
                Command::Quit => {
                    t.quit_after = true;
                    if !t.abort_requested {
                        t.abort_requested = true;
                        self.actions.push_back(Action::Abort);
                    }
                }
                Command::Stat(_) => self.reply(C::SYSTEM_STATUS, "Transfer in progress."),
                _ => self.reply(C::OK, "NOOP ok."),
            }
            return;
        }
        if !matches!(cmd, Command::Rnto(_)) {
            // RNTO must follow RNFR directly.
            if !matches!(cmd, Command::Rnfr(_)) {
                self.rename_from = None;
            }
        }
        match cmd {
            Command::User(u) => self.user(u),
            Command::Pass(p) => match std::mem::replace(&mut self.state, State::AwaitUser) {
                State::AwaitPass { user } => {
                    self.state = State::AwaitLogin;
                    self.actions
                        .push_back(Action::Authenticate { user, pass: p });
                }
                State::Ready => {
                    self.state = State::Ready;
                    self.reply(C::LOGGED_IN, "Already logged in.");
                }
                other => {
                    self.state = other;
                    self.reply(C::BAD_SEQUENCE, "Login with USER first.");
                }
            },
            Command::Quit => {
                self.reply(C::CLOSING, "Goodbye.");
                self.close();
            }
            Command::Feat => {
                let mut lines = vec!["Extensions supported:".to_string()];
                if self.config.tls.offered {
                    lines.extend(TLS_FEATURES.iter().map(|f| f.to_string()));
                }
                lines.extend(FEATURES.iter().map(|f| f.to_string()));
                // The facts OPTS MLST chose carry a `*` (RFC 3659 7.8).
                lines.insert(5, self.mlst_facts.feat_line());
                lines.push("End.".into());
                self.push(&Reply::multi(C::SYSTEM_STATUS, lines));
            }
            Command::Syst => self.reply(C::SYSTEM_TYPE, "UNIX Type: L8"),
            Command::Rein => self.reinitialize(),
            Command::Noop => self.reply(C::OK, "NOOP ok."),
            Command::Help(_) => self.push(&Reply::multi(
                C::HELP,
                HELP_LINES.iter().map(|s| s.to_string()).collect(),
            )),
            Command::Opts(Opts::Utf8(_)) => self.reply(C::OK, "Always in UTF8 mode."),
            Command::Auth(mech) if self.config.tls.offered => self.auth(&mech),
            Command::Ccc if self.config.tls.offered => self.reply(
                POLICY_REFUSED,
                "CCC refused: the control connection stays protected.",
            ),
            Command::Pbsz(_) if self.config.tls.offered => {
                if self.protected {
                    self.reply(C::OK, "PBSZ=0")
                } else {
                    self.reply(C::BAD_SEQUENCE, "PBSZ needs AUTH TLS first.")
                }
            }
            Command::Prot(p) if self.config.tls.offered => self.prot(p),
            Command::Abor if self.login.is_some() => {
                self.reply(C::DATA_OPEN_NO_TRANSFER, "No transfer to ABOR.")
            }
            // AUTH TLS and the like: "not implemented" is the answer
            // RFC 4217 asks of a server without TLS, logged in or not.
            Command::Unknown(_) | Command::Auth(_) | Command::Ccc => {
                self.reply(C::NOT_IMPLEMENTED, "Command not implemented.")
            }
            _ if self.login.is_none() => {
                self.reply(C::NOT_LOGGED_IN, "Please login with USER and PASS.")
            }
            cmd => self.logged_in(cmd),
        }
    }

    fn user(&mut self, user: String) {
        if self.login.is_some() {
            self.reply(C::NOT_LOGGED_IN, "Can't change to another user.");
            return;
        }
        if self.config.tls.offered && !self.protected && self.config.tls.required_for(&user) {
            // Refused before the password crosses the network in clear.
            self.reply(
                C::NOT_LOGGED_IN,
                "TLS required: use AUTH TLS before USER (RFC 4217).",
            );
            return;
        }
        // The same 331 for every name, so replies do not tell which exist.
        self.login_user = Some(user.clone());
        self.state = State::AwaitPass { user };
        self.reply(C::NEED_PASSWORD, "Please specify the password.");
    }

    /// AUTH (RFC 4217 section 4): 234, then the shell's handshake.
    fn auth(&mut self, mech: &str) {
        if self.protected {
            self.reply(C::BAD_SEQUENCE, "Already protected by TLS.");
            return;
        }
        match mech {
            "TLS" | "TLS-C" => {}
            // The old names that also meant PROT P.
            "SSL" | "TLS-P" => self.prot_private = true,
            _ => {
                self.reply(C::PARAMETER_NOT_IMPLEMENTED, "Only AUTH TLS is supported.");
                return;
            }
        }
        self.reply(AUTH_OK, "Proceed with negotiation.");
        let then = std::mem::replace(&mut self.state, State::AwaitUser);
        self.state = State::AwaitTls {
            then: Box::new(then),
        };
        self.actions.push_back(Action::StartTls);
    }

    /// PROT with TLS offered: C or P (P only on a protected connection).
    fn prot(&mut self, p: Prot) {
        match p {
            Prot::Clear => {
                self.prot_private = false;
                self.reply(C::OK, "PROT C ok.");
            }
            Prot::Private if !self.protected => {
                self.reply(C::BAD_SEQUENCE, "PROT P needs AUTH TLS first.")
            }
            Prot::Private => {
                self.prot_private = true;
                self.reply(C::OK, "PROT P ok.");
            }
            Prot::Safe | Prot::Confidential => {
                self.reply(PROT_NOT_SUPPORTED, "Only PROT C and PROT P are supported.")
            }
        }
    }

    fn logged_in(&mut self, cmd: Command) {
        if self.login_requires_tls && !self.prot_private && is_data_command(&cmd) {
            self.reply(
                DATA_PROTECTION_REQUIRED,
                "Data connections must be protected: send PROT P.",
            );
            return;
        }
        match cmd {
            Command::Acct(_) => self.reply(C::SUPERFLUOUS, "ACCT not needed."),
            Command::Opts(Opts::Retr(o)) => {
                if let Some(p) = o.parallelism {
                    self.parallelism = p.start.clamp(1, MAX_PARALLELISM);
                }
                for (k, v) in &o.other {
                    if k.eq_ignore_ascii_case("markers") {
                        if let Ok(n) = v.trim().parse::<u32>() {
                            self.set_marker_secs(n);
                        }
                    }
                }
                self.reply(C::OK, "OPTS Command Successful.");
            }
            Command::Opts(Opts::Other { name, args }) if name == "MLST" => {
                // RFC 3659 7.9: the facts named (unknown ones ignored),
                // echoed back; an empty list selects none.
                self.mlst_facts = MlstFacts::parse(&String::from_utf8_lossy(&args));
                let text = format!("MLST OPTS {}", self.mlst_facts.selected());
                self.reply(C::OK, text.trim_end());
            }
            Command::Opts(Opts::Other { .. }) => {
                self.reply(C::BAD_ARGUMENTS, "Option not understood.")
            }
            Command::Type(t) => {
                self.ascii = t == TransferType::Ascii;
                let text = if self.ascii {
                    "Switching to ASCII mode."
                } else {
                    "Switching to Binary mode."
                };
                self.reply(C::OK, text);
            }
            Command::Mode(m) => {
                self.drop_kept();
                self.mode = m;
                self.reply(C::OK, "Mode set.");
            }
            Command::Stru => self.reply(C::OK, "Structure set to F."),
            Command::Allo(_) => self.reply(C::SUPERFLUOUS, "ALLO command ignored."),
            Command::Pwd => {
                let text = format!("{} is the current directory", quote_257(self.cwd.as_str()));
                self.reply(C::PATHNAME, &text);
            }
            Command::Cwd(p) => self.query(&p, Query::ChangeDir),
            Command::Cdup => {
                let parent = self.cwd.parent();
                self.ask(parent, Query::ChangeDir);
            }
            Command::Size(p) => self.query(&p, Query::Size),
            Command::Mdtm(p) => self.query(&p, Query::Modified),
            Command::Mlst(p) => {
                let q = Query::Facts(self.mlst_facts);
                self.query(p.as_deref().unwrap_or(""), q)
            }
            Command::Stat(None) => self.status(),
            Command::Stat(Some(p)) => self.query(strip_ls_flags(&p), Query::Status),
            Command::Rest(Restart::Offset(n)) => {
                if n > MAX_OFFSET {
                    self.reply(C::BAD_ARGUMENTS, "Bad REST offset.");
                } else {
                    self.rest = Some(n);
                    let text = format!("Restarting at {n}. Send STOR or RETR.");
                    self.reply(C::PENDING, &text);
                }
            }
            Command::Rest(Restart::Ranges(set)) => {
                // GridFTP restart markers need MODE E, where blocks carry
                // their offsets (GFD.20 section 4). A MODE S stream has no
                // offsets, so there only one prefix `0-N` can be skipped:
                // it means REST N.
                match set.ranges() {
                    _ if self.mode == TransferMode::ExtendedBlock => {
                        self.rest = None;
                        self.rest_ranges = Some(set);
                        self.reply(C::PENDING, "Restart markers accepted.");
                    }
                    [r] if r.start == 0 => {
                        self.rest_ranges = None;
                        self.rest = Some(r.end);
                        let text = format!("Restarting at {}. Send STOR or RETR.", r.end);
                        self.reply(C::PENDING, &text);
                    }
                    _ => self.reply(
                        C::PARAMETER_NOT_IMPLEMENTED,
                        "REST ranges other than 0-N need MODE E.",
                    ),
                }
            }
            Command::Pasv => self.passive(false),
            Command::Epsv(Epsv::All) => {
                self.epsv_all = true;
                self.reply(C::OK, "EPSV ALL ok.");
            }
            Command::Epsv(Epsv::Protocol(p)) if p != self.family() => {
                let text = format!("Network protocol not supported, use ({}).", self.family());
                self.reply(C::BAD_NETWORK_PROTOCOL, &text);
            }
            Command::Epsv(_) => self.passive(true),
            Command::Port(a) => self.active(SocketAddr::V4(a)),
            Command::Eprt(a) => self.active(a),
            Command::Spas | Command::Spor(_) => {
                self.reply(C::NOT_IMPLEMENTED, "Striping not supported.")
            }
            Command::Sbuf(n) => {
                self.buffer = Some(n);
                self.reply(C::OK, "SBUF Command Successful.");
            }
            Command::Dcau(Dcau::None) => self.reply(C::OK, "DCAU N ok."),
            Command::Dcau(_) => self.reply(
                C::PARAMETER_NOT_IMPLEMENTED,
                "Only DCAU N is supported (no GSI).",
            ),
            Command::Prot(Prot::Clear) => self.reply(C::OK, "PROT C ok."),
            Command::Prot(_) => self.reply(PROT_NOT_SUPPORTED, "Only PROT C is supported."),
            Command::Pbsz(_) => self.reply(C::OK, "PBSZ=0"),
            Command::Site(_) => self.reply(C::NOT_IMPLEMENTED, "SITE command not supported."),
            Command::List(p) => self.list(p, ListFormat::Long),
            Command::Nlst(p) => self.list(p, ListFormat::Names),
            Command::Mlsd(p) => self.list(p, ListFormat::Machine(self.mlst_facts)),
            Command::Retr(p) => {
                let offset = self.rest.take().unwrap_or(0);
                let skip = self
                    .rest_ranges
                    .take()
                    .map(|s| s.ranges().to_vec())
                    .unwrap_or_default();
                self.retr(&p, offset, None, skip);
            }
            Command::Eret {
                offset,
                length,
                path,
            } => {
                self.rest = None;
                self.rest_ranges = None;
                self.retr(&path, offset, Some(length), Vec::new());
            }
            Command::Stor(p) => {
                let kind = match (self.rest.take(), self.rest_ranges.take()) {
                    // MODE E restart: keep what is there; blocks land at
                    // their own offsets.
                    (_, Some(set)) => {
                        StoreKind::RestartRanges(set.ranges().last().map(|r| r.end).unwrap_or(0))
                    }
                    (None | Some(0), None) => StoreKind::Replace,
                    (Some(n), None) => StoreKind::Restart(n),
                };
                self.stor(&p, kind);
            }
            Command::Appe(p) => {
                self.rest = None;
                self.rest_ranges = None;
                self.stor(&p, StoreKind::Append);
            }
            Command::Esto { offset, path } => {
                self.rest = None;
                self.rest_ranges = None;
                self.stor(&path, StoreKind::Adjusted(offset));
            }
            Command::Dele(p) => self.change(&p, Change::Delete),
            Command::Mfmt { secs, path } => {
                self.change(&path, |path| Change::SetModified { path, secs })
            }
            Command::Mkd(p) => self.change(&p, Change::Mkdir),
            Command::Rmd(p) => self.change(&p, Change::Rmdir),
            Command::Rnfr(p) => {
                if self.writable() {
                    if let Some(path) = self.resolve(&p) {
                        self.rename_from = Some(path.clone());
                        self.ask(path, Query::Exists);
                    }
                }
            }
            Command::Rnto(p) => match self.rename_from.take() {
                None => self.reply(C::BAD_SEQUENCE, "RNFR required first."),
                Some(from) => self.change(&p, |to| Change::Rename { from, to }),
            },
            Command::Cksm {
                algorithm,
                offset,
                length,
                path,
            } => {
                let Some(alg) = ChecksumAlgorithm::from_name(&algorithm) else {
                    self.reply(
                        C::PARAMETER_NOT_IMPLEMENTED,
                        "Checksum algorithm not supported.",
                    );
                    return;
                };
                if let Some(path) = self.resolve(&path) {
                    self.state = State::AwaitResult(Pending::Checksum);
                    self.actions.push_back(Action::Checksum {
                        algorithm: alg,
                        path,
                        offset,
                        len: length,
                    });
                }
            }
            // Handled before login too; listed for exhaustiveness.
            Command::User(_)
            | Command::Pass(_)
            | Command::Quit
            | Command::Feat
            | Command::Syst
            | Command::Rein
            | Command::Noop
            | Command::Help(_)
            | Command::Abor
            | Command::Unknown(_)
            | Command::Auth(_)
            | Command::Ccc
            | Command::Opts(Opts::Utf8(_)) => {
                self.reply(C::BAD_SEQUENCE, "Bad sequence of commands.")
            }
        }
    }

    fn status(&mut self) {
        let lines = vec![
            "Sluice FTP server status:".to_string(),
            format!("Connected from {}", self.config.peer_addr.ip()),
            format!("TYPE: {}", if self.ascii { "ASCII" } else { "BINARY" }),
            format!(
                "MODE: {}",
                if self.mode == TransferMode::Stream {
                    "Stream"
                } else {
                    "Extended block"
                }
            ),
            "End of status".to_string(),
        ];
        self.push(&Reply::multi(C::SYSTEM_STATUS, lines));
    }
}

/// 536 (RFC 2228: "Requested PROT level not supported by mechanism").
const PROT_NOT_SUPPORTED: C = C(536);
/// 234 (RFC 2228: "Security data exchange complete"; RFC 4217 AUTH TLS).
const AUTH_OK: C = C(234);
/// 534 (RFC 2228: "Request denied for policy reasons"; RFC 4217 CCC).
const POLICY_REFUSED: C = C(534);
/// 521 (RFC 4217 section 9: the server does not allow unprotected data
/// connections at this PROT level).
const DATA_PROTECTION_REQUIRED: C = C(521);

/// FEAT lines of RFC 4217, listed when a certificate is configured.
const TLS_FEATURES: &[&str] = &["AUTH TLS", "PBSZ", "PROT"];

/// Commands that open a data connection.
fn is_data_command(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::List(_)
            | Command::Nlst(_)
            | Command::Mlsd(_)
            | Command::Retr(_)
            | Command::Eret { .. }
            | Command::Stor(_)
            | Command::Appe(_)
            | Command::Esto { .. }
    )
}

/// IPv4-mapped IPv6 peers compare equal to their IPv4 form.
pub(super) fn canonical(a: SocketAddr) -> std::net::IpAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(*v6.ip()),
        },
        SocketAddr::V4(v4) => std::net::IpAddr::V4(*v4.ip()),
    }
}

/// `LIST -la dir` -> `dir`: many clients pass ls flags; we ignore them.
pub(super) fn strip_ls_flags(arg: &str) -> &str {
    let mut rest = arg.trim_start();
    while rest.starts_with('-') {
        match rest.find(' ') {
            Some(i) => rest = rest[i..].trim_start(),
            None => return "",
        }
    }
    rest
}
