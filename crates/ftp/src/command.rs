//! Control-channel commands: line splitting ([`next_line`]) and parsing
//! ([`parse_command`]) into a typed [`Command`].
//!
//! ```text
//! bytes --next_line--> one line (Telnet IAC removed, CRLF/LF stripped)
//!       --parse_command--> Command | CommandError --reply()--> "501 ..."
//! ```
//!
//! Verbs are case-insensitive. Everything after the first space is the
//! argument, kept verbatim for paths (which may contain spaces).

use crate::addr::{self, AddrError};
use crate::limits::{MAX_ECHO, MAX_LINE, MAX_OFFSET, MAX_PARALLELISM, MAX_PASS, MAX_PATH, MAX_SBUF, MAX_USER, MAX_VERB};
use crate::markers::{decimal, RangeSet};
use crate::reply::{Reply, ReplyCode};
use std::fmt;
use std::net::{SocketAddr, SocketAddrV4};

/// A password, kept as bytes. Its `Debug` prints nothing, so it cannot
/// reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Vec<u8>);

impl Password {
    /// The password bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// TYPE argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferType {
    /// `TYPE A` (optionally `A N`): ASCII, lines end in CRLF on the wire.
    Ascii,
    /// `TYPE I`: image (binary).
    Image,
    /// `TYPE L 8`: local byte size 8, the same as image on Linux.
    Local8,
}

/// MODE argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferMode {
    /// `MODE S`: stream mode, the file is the byte stream.
    Stream,
    /// `MODE E`: GridFTP extended block mode (GFD.20), parallel streams.
    ExtendedBlock,
}

/// EPSV argument (RFC 2428 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epsv {
    /// `EPSV`: a port on the control connection's address family.
    Any,
    /// `EPSV ALL`: the client will only use EPSV from now on.
    All,
    /// `EPSV 1` or `EPSV 2`: that network protocol (other numbers are
    /// parsed too; the session replies 522).
    Protocol(u8),
}

/// DCAU argument (GridFTP data channel authentication).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dcau {
    /// `DCAU N`: none.
    None,
    /// `DCAU A`: self (the peer has the same identity).
    SelfAuth,
    /// `DCAU S <subject>`: the given subject.
    Subject(String),
}

/// PROT argument (RFC 2228).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    /// `C`: clear.
    Clear,
    /// `S`: safe (integrity).
    Safe,
    /// `E`: confidential.
    Confidential,
    /// `P`: private.
    Private,
}

/// REST argument: a byte offset (stream mode) or, in MODE E, the ranges
/// already held by the receiver (the 111 marker format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restart {
    /// `REST 1000`.
    Offset(u64),
    /// `REST 0-1000,2000-3000`.
    Ranges(RangeSet),
}

/// `Parallelism=start,min,max;` from `OPTS RETR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallelism {
    /// Streams to start with.
    pub start: u32,
    /// Fewest streams.
    pub min: u32,
    /// Most streams.
    pub max: u32,
}

/// `OPTS RETR key=value;...` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetrOpts {
    /// `Parallelism=n,n,n;`, each in 1..=[`MAX_PARALLELISM`].
    pub parallelism: Option<Parallelism>,
    /// Other `key=value` pairs, kept for the session to judge.
    pub other: Vec<(String, String)>,
}

/// OPTS argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opts {
    /// `OPTS UTF8 ON|OFF`.
    Utf8(bool),
    /// `OPTS RETR ...`.
    Retr(RetrOpts),
    /// Anything else: the option name (upper-cased) and raw arguments.
    Other {
        /// Option name, upper-cased.
        name: String,
        /// Raw remainder.
        args: Vec<u8>,
    },
}

/// One parsed control command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `USER name`.
    User(String),
    /// `PASS secret`.
    Pass(Password),
    /// `ACCT info`.
    Acct(String),
    /// `SYST`.
    Syst,
    /// `FEAT` (RFC 2389).
    Feat,
    /// `OPTS ...` (RFC 2389).
    Opts(Opts),
    /// `TYPE A|I|L 8`.
    Type(TransferType),
    /// `MODE S|E`.
    Mode(TransferMode),
    /// `STRU F` (the only structure supported; others give 504).
    Stru,
    /// `PWD` / `XPWD`.
    Pwd,
    /// `CWD path` / `XCWD path`.
    Cwd(String),
    /// `CDUP` / `XCUP`.
    Cdup,
    /// `LIST [path]` (leading `-la` style options are left in the argument).
    List(Option<String>),
    /// `NLST [path]`.
    Nlst(Option<String>),
    /// `MLSD [path]` (RFC 3659).
    Mlsd(Option<String>),
    /// `MLST [path]` (RFC 3659).
    Mlst(Option<String>),
    /// `SIZE path` (RFC 3659).
    Size(String),
    /// `MDTM path` (RFC 3659).
    Mdtm(String),
    /// `REST offset` or `REST ranges`.
    Rest(Restart),
    /// `RETR path`.
    Retr(String),
    /// `STOR path`.
    Stor(String),
    /// `APPE path`.
    Appe(String),
    /// `DELE path`.
    Dele(String),
    /// `MKD path` / `XMKD path`.
    Mkd(String),
    /// `RMD path` / `XRMD path`.
    Rmd(String),
    /// `RNFR path`.
    Rnfr(String),
    /// `RNTO path`.
    Rnto(String),
    /// `PASV`.
    Pasv,
    /// `EPSV [ALL|proto]`.
    Epsv(Epsv),
    /// `PORT h1,h2,h3,h4,p1,p2`.
    Port(SocketAddrV4),
    /// `EPRT |proto|addr|port|`.
    Eprt(SocketAddr),
    /// `ABOR`.
    Abor,
    /// `NOOP`.
    Noop,
    /// `STAT [path]`.
    Stat(Option<String>),
    /// `HELP [topic]`.
    Help(Option<String>),
    /// `QUIT`.
    Quit,
    /// `ALLO n [R m]`: the size if it parsed.
    Allo(Option<u64>),
    /// `SITE ...` other than `SITE BUFSIZE`: raw argument.
    Site(Vec<u8>),
    /// `ERET P <offset> <length> <path>`: partial retrieve.
    Eret {
        /// First byte.
        offset: u64,
        /// Number of bytes.
        length: u64,
        /// File.
        path: String,
    },
    /// `ESTO A <offset> <path>`: store with adjusted offset.
    Esto {
        /// Offset added to every incoming block's offset.
        offset: u64,
        /// File.
        path: String,
    },
    /// `SBUF n` or `SITE BUFSIZE n`: TCP buffer size for data connections.
    Sbuf(u64),
    /// `DCAU N|A|S subject`.
    Dcau(Dcau),
    /// `PROT C|S|E|P`.
    Prot(Prot),
    /// `PBSZ n`.
    Pbsz(u64),
    /// `CKSM <algorithm> <offset> <length> <path>`; length `-1` = to end.
    Cksm {
        /// Algorithm name, upper-cased (`MD5`, `ADLER32`, `SHA256`, ...).
        algorithm: String,
        /// First byte.
        offset: u64,
        /// Number of bytes, `None` for "to the end of the file".
        length: Option<u64>,
        /// File.
        path: String,
    },
    /// `SPAS`: striped passive.
    Spas,
    /// `SPOR h,h,h,h,p,p h,h,h,h,p,p ...`: striped port.
    Spor(Vec<SocketAddrV4>),
    /// A verb we do not know (upper-cased, clipped to [`MAX_VERB`]).
    Unknown(String),
}

/// Why a line could not become a [`Command`]. Each maps to one reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// No terminator within [`MAX_LINE`] bytes. Framing is lost: reply,
    /// then close the control connection.
    LineTooLong,
    /// An empty line.
    Empty,
    /// A verb that is not letters, or too long. Carries a clipped, escaped
    /// echo of the input.
    UnknownCommand(String),
    /// The verb needs an argument.
    MissingArgument(&'static str),
    /// The argument is malformed.
    BadArgument(&'static str),
    /// The argument is well-formed but not supported (`MODE B`, `TYPE E`).
    Unsupported(&'static str),
    /// A path longer than [`MAX_PATH`], or a user/password over its bound.
    TooLong(&'static str),
    /// A path or name that is not UTF-8 or contains NUL, CR or LF.
    BadPath(&'static str),
    /// EPRT with a network protocol other than 1 or 2.
    UnsupportedProtocol,
}

impl CommandError {
    /// The reply to send for this error. Text is fixed and short; only
    /// [`CommandError::UnknownCommand`] echoes (a clipped, escaped slice).
    pub fn reply(&self) -> Reply {
        use ReplyCode as C;
        match self {
            Self::LineTooLong => Reply::new(C::SYNTAX_ERROR, "Input line too long."),
            Self::Empty => Reply::new(C::SYNTAX_ERROR, "Empty command."),
            Self::UnknownCommand(echo) => Reply::new(C::SYNTAX_ERROR, format!("Unknown command '{echo}'.")),
            Self::MissingArgument(v) => Reply::new(C::BAD_ARGUMENTS, format!("{v} needs an argument.")),
            Self::BadArgument(v) => Reply::new(C::BAD_ARGUMENTS, format!("Bad {v} argument.")),
            Self::Unsupported(v) => Reply::new(C::PARAMETER_NOT_IMPLEMENTED, format!("{v} parameter not supported.")),
            Self::TooLong(v) => Reply::new(C::BAD_ARGUMENTS, format!("{v} argument too long.")),
            Self::BadPath(v) => Reply::new(C::BAD_FILE_NAME, format!("{v}: file name not allowed.")),
            Self::UnsupportedProtocol => {
                Reply::new(C::BAD_NETWORK_PROTOCOL, "Network protocol not supported, use (1,2)")
            }
        }
    }

    /// Whether the control connection must be closed after the reply
    /// (framing lost).
    pub fn closes_connection(&self) -> bool {
        matches!(self, Self::LineTooLong)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.reply();
        write!(f, "{} {}", r.code, r.text())
    }
}

impl std::error::Error for CommandError {}

/// A clipped, escaped echo of client bytes, safe to put in a reply:
/// printable ASCII kept, everything else as `\xNN`, at most [`MAX_ECHO`]
/// characters of output, then `...` if anything was left out.
pub fn echo(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        let piece = if (0x20..0x7f).contains(&b) && b != b'\\' && b != b'\'' {
            (b as char).to_string()
        } else {
            format!("\\x{b:02x}")
        };
        if s.len() + piece.len() > MAX_ECHO {
            s.push_str("...");
            return s;
        }
        s.push_str(&piece);
    }
    s
}

const IAC: u8 = 255;

/// Split the first line off `buf`.
///
/// Returns `Ok(Some((line, used)))` with the line's CRLF (or bare LF)
/// removed and Telnet IAC sequences stripped (RFC 854: `IAC IAC` is a
/// data 0xFF; `IAC WILL/WONT/DO/DONT opt` and other `IAC x` pairs, such
/// as the `IAC IP IAC DM` clients send before ABOR, are dropped);
/// `used <= buf.len()` is the number of bytes consumed. `Ok(None)` means
/// no terminator yet (then `buf.len() < MAX_LINE`).
/// [`CommandError::LineTooLong`] as soon as [`MAX_LINE`] bytes are held
/// without a terminator among them.
pub fn next_line(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, CommandError> {
    let mut line = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        if i >= MAX_LINE {
            return Err(CommandError::LineTooLong);
        }
        let b = buf[i];
        if b == IAC {
            match buf.get(i + 1) {
                None if buf.len() >= MAX_LINE => return Err(CommandError::LineTooLong),
                None => return Ok(None),
                Some(&IAC) => {
                    line.push(IAC);
                    i += 2;
                }
                // WILL, WONT, DO, DONT carry one option byte.
                Some(251..=254) => i += 3,
                Some(_) => i += 2,
            }
            continue;
        }
        if b == b'\n' {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some((line, i + 1)));
        }
        line.push(b);
        i += 1;
    }
    // An IAC sequence may have stepped past the end; judge by what we hold.
    if buf.len() >= MAX_LINE {
        return Err(CommandError::LineTooLong);
    }
    Ok(None)
}

/// Parse one line (without terminator) into a [`Command`].
pub fn parse_command(line: &[u8]) -> Result<Command, CommandError> {
    if line.len() > MAX_LINE {
        return Err(CommandError::LineTooLong);
    }
    let line = line.strip_suffix(b"\r\n").or_else(|| line.strip_suffix(b"\n")).unwrap_or(line);
    // Leading spaces are tolerated (some clients send them after Telnet
    // sequences); the argument itself is kept verbatim.
    let line = &line[line.iter().take_while(|&&b| b == b' ').count()..];
    if line.is_empty() {
        return Err(CommandError::Empty);
    }
    let (verb, arg) = match line.iter().position(|&b| b == b' ') {
        Some(sp) => (&line[..sp], Some(&line[sp + 1..])),
        None => (line, None),
    };
    if verb.len() > MAX_VERB || !verb.iter().all(u8::is_ascii_alphanumeric) {
        return Err(CommandError::UnknownCommand(echo(verb)));
    }
    let verb_up = verb.to_ascii_uppercase();
    // An argument of only spaces counts as absent ("LIST " from some clients).
    let arg = arg.filter(|a| !a.iter().all(|&b| b == b' '));
    Ok(match &verb_up[..] {
        b"USER" => Command::User(name(arg, "USER", MAX_USER)?),
        b"PASS" => {
            let a = arg.unwrap_or(b"");
            if a.len() > MAX_PASS {
                return Err(CommandError::TooLong("PASS"));
            }
            Command::Pass(Password(a.to_vec()))
        }
        b"ACCT" => Command::Acct(name(arg, "ACCT", MAX_USER)?),
        b"SYST" => Command::Syst,
        b"FEAT" => Command::Feat,
        b"OPTS" => Command::Opts(opts(need(arg, "OPTS")?)?),
        b"TYPE" => Command::Type(transfer_type(need(arg, "TYPE")?)?),
        b"MODE" => Command::Mode(match word(need(arg, "MODE")?) {
            b"S" | b"s" => TransferMode::Stream,
            b"E" | b"e" => TransferMode::ExtendedBlock,
            b"B" | b"b" | b"C" | b"c" => return Err(CommandError::Unsupported("MODE")),
            _ => return Err(CommandError::BadArgument("MODE")),
        }),
        b"STRU" => match word(need(arg, "STRU")?) {
            b"F" | b"f" => Command::Stru,
            b"R" | b"r" | b"P" | b"p" => return Err(CommandError::Unsupported("STRU")),
            _ => return Err(CommandError::BadArgument("STRU")),
        },
        b"PWD" | b"XPWD" => Command::Pwd,
        b"CWD" | b"XCWD" => Command::Cwd(path(arg, "CWD")?),
        b"CDUP" | b"XCUP" => Command::Cdup,
        b"LIST" => Command::List(opt_path(arg, "LIST")?),
        b"NLST" => Command::Nlst(opt_path(arg, "NLST")?),
        b"MLSD" => Command::Mlsd(opt_path(arg, "MLSD")?),
        b"MLST" => Command::Mlst(opt_path(arg, "MLST")?),
        b"SIZE" => Command::Size(path(arg, "SIZE")?),
        b"MDTM" => Command::Mdtm(path(arg, "MDTM")?),
        b"REST" => Command::Rest(restart(need(arg, "REST")?)?),
        b"RETR" => Command::Retr(path(arg, "RETR")?),
        b"STOR" => Command::Stor(path(arg, "STOR")?),
        b"APPE" => Command::Appe(path(arg, "APPE")?),
        b"DELE" => Command::Dele(path(arg, "DELE")?),
        b"MKD" | b"XMKD" => Command::Mkd(path(arg, "MKD")?),
        b"RMD" | b"XRMD" => Command::Rmd(path(arg, "RMD")?),
        b"RNFR" => Command::Rnfr(path(arg, "RNFR")?),
        b"RNTO" => Command::Rnto(path(arg, "RNTO")?),
        b"PASV" => Command::Pasv,
        b"EPSV" => Command::Epsv(match arg.map(<[u8]>::trim_ascii) {
            None => Epsv::Any,
            Some(a) if a.eq_ignore_ascii_case(b"ALL") => Epsv::All,
            Some(a) => Epsv::Protocol(
                u8::try_from(number(a, "EPSV")?).map_err(|_| CommandError::BadArgument("EPSV"))?,
            ),
        }),
        b"PORT" => Command::Port(addr::parse_port(need(arg, "PORT")?).map_err(|_| CommandError::BadArgument("PORT"))?),
        b"EPRT" => Command::Eprt(addr::parse_eprt(need(arg, "EPRT")?).map_err(|e| match e {
            AddrError::UnsupportedProtocol => CommandError::UnsupportedProtocol,
            _ => CommandError::BadArgument("EPRT"),
        })?),
        b"ABOR" => Command::Abor,
        b"NOOP" => Command::Noop,
        b"STAT" => Command::Stat(opt_path(arg, "STAT")?),
        b"HELP" => Command::Help(opt_path(arg, "HELP")?),
        b"QUIT" => Command::Quit,
        b"ALLO" => Command::Allo(arg.and_then(|a| a.trim_ascii().split(|&b| b == b' ').next()).and_then(|n| decimal(n).ok())),
        b"SITE" => site(need(arg, "SITE")?)?,
        b"ERET" => eret(need(arg, "ERET")?)?,
        b"ESTO" => esto(need(arg, "ESTO")?)?,
        b"SBUF" => Command::Sbuf(sbuf(need(arg, "SBUF")?, "SBUF")?),
        b"DCAU" => Command::Dcau(dcau(need(arg, "DCAU")?)?),
        b"PROT" => Command::Prot(match word(need(arg, "PROT")?).to_ascii_uppercase().as_slice() {
            b"C" => Prot::Clear,
            b"S" => Prot::Safe,
            b"E" => Prot::Confidential,
            b"P" => Prot::Private,
            _ => return Err(CommandError::BadArgument("PROT")),
        }),
        b"PBSZ" => Command::Pbsz(number(need(arg, "PBSZ")?, "PBSZ")?),
        b"CKSM" => cksm(need(arg, "CKSM")?)?,
        b"SPAS" => Command::Spas,
        b"SPOR" => {
            let mut addrs = Vec::new();
            for part in need(arg, "SPOR")?.split(|&b| b == b' ').filter(|p| !p.is_empty()) {
                if addrs.len() >= MAX_PARALLELISM as usize {
                    return Err(CommandError::BadArgument("SPOR"));
                }
                addrs.push(addr::parse_port(part).map_err(|_| CommandError::BadArgument("SPOR"))?);
            }
            Command::Spor(addrs)
        }
        _ => Command::Unknown(String::from_utf8_lossy(&verb_up).into_owned()),
    })
}

fn need<'a>(arg: Option<&'a [u8]>, verb: &'static str) -> Result<&'a [u8], CommandError> {
    arg.ok_or(CommandError::MissingArgument(verb))
}

/// The argument trimmed of surrounding spaces.
fn word(a: &[u8]) -> &[u8] {
    a.trim_ascii()
}

fn number(a: &[u8], verb: &'static str) -> Result<u64, CommandError> {
    decimal(a).map_err(|_| CommandError::BadArgument(verb))
}

fn text(a: &[u8], verb: &'static str, max: usize) -> Result<String, CommandError> {
    if a.len() > max {
        return Err(CommandError::TooLong(verb));
    }
    if a.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(CommandError::BadPath(verb));
    }
    String::from_utf8(a.to_vec()).map_err(|_| CommandError::BadPath(verb))
}

fn name(arg: Option<&[u8]>, verb: &'static str, max: usize) -> Result<String, CommandError> {
    text(need(arg, verb)?, verb, max)
}

fn path(arg: Option<&[u8]>, verb: &'static str) -> Result<String, CommandError> {
    text(need(arg, verb)?, verb, MAX_PATH)
}

fn opt_path(arg: Option<&[u8]>, verb: &'static str) -> Result<Option<String>, CommandError> {
    arg.map(|a| text(a, verb, MAX_PATH)).transpose()
}

fn transfer_type(a: &[u8]) -> Result<TransferType, CommandError> {
    let up = a.trim_ascii().to_ascii_uppercase();
    let mut parts = up.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let t = match (parts.next(), parts.next()) {
        (Some(b"A"), None | Some(b"N")) => TransferType::Ascii,
        (Some(b"I"), None) => TransferType::Image,
        (Some(b"L"), Some(b"8")) => TransferType::Local8,
        (Some(b"A" | b"E" | b"L"), _) => return Err(CommandError::Unsupported("TYPE")),
        _ => return Err(CommandError::BadArgument("TYPE")),
    };
    if parts.next().is_some() {
        return Err(CommandError::BadArgument("TYPE"));
    }
    Ok(t)
}

fn restart(a: &[u8]) -> Result<Restart, CommandError> {
    let a = a.trim_ascii();
    if a.contains(&b'-') {
        RangeSet::parse(a).map(Restart::Ranges).map_err(|_| CommandError::BadArgument("REST"))
    } else {
        number(a, "REST").map(Restart::Offset)
    }
}

fn sbuf(a: &[u8], verb: &'static str) -> Result<u64, CommandError> {
    let n = number(a, verb)?;
    if n > MAX_SBUF {
        return Err(CommandError::BadArgument(verb));
    }
    Ok(n)
}

fn opts(a: &[u8]) -> Result<Opts, CommandError> {
    let a = a.trim_ascii();
    let (name, rest) = match a.iter().position(|&b| b == b' ') {
        Some(sp) => (&a[..sp], a[sp + 1..].trim_ascii()),
        None => (a, &b""[..]),
    };
    let name_up = name.to_ascii_uppercase();
    match &name_up[..] {
        b"UTF8" | b"UTF-8" => match rest.to_ascii_uppercase().as_slice() {
            b"ON" | b"" => Ok(Opts::Utf8(true)),
            b"OFF" => Ok(Opts::Utf8(false)),
            _ => Err(CommandError::BadArgument("OPTS")),
        },
        b"RETR" => retr_opts(rest).map(Opts::Retr),
        _ => {
            if name.len() > MAX_VERB {
                return Err(CommandError::BadArgument("OPTS"));
            }
            Ok(Opts::Other { name: String::from_utf8_lossy(&name_up).into_owned(), args: rest.to_vec() })
        }
    }
}

fn retr_opts(a: &[u8]) -> Result<RetrOpts, CommandError> {
    let bad = CommandError::BadArgument("OPTS");
    let mut o = RetrOpts::default();
    for item in a.split(|&b| b == b';').map(<[u8]>::trim_ascii).filter(|i| !i.is_empty()) {
        let eq = item.iter().position(|&b| b == b'=').ok_or(bad.clone())?;
        let (k, v) = (&item[..eq], &item[eq + 1..]);
        if k.eq_ignore_ascii_case(b"Parallelism") {
            let mut n = [0u32; 3];
            let mut parts = v.split(|&b| b == b',');
            for slot in &mut n {
                let p = decimal(parts.next().ok_or(bad.clone())?).map_err(|_| bad.clone())?;
                if p == 0 || p > u64::from(MAX_PARALLELISM) {
                    return Err(bad);
                }
                *slot = p as u32;
            }
            if parts.next().is_some() {
                return Err(bad);
            }
            o.parallelism = Some(Parallelism { start: n[0], min: n[1], max: n[2] });
        } else {
            if o.other.len() >= 16 {
                return Err(bad);
            }
            let k = String::from_utf8(k.to_vec()).map_err(|_| bad.clone())?;
            let v = String::from_utf8(v.to_vec()).map_err(|_| bad.clone())?;
            o.other.push((k, v));
        }
    }
    Ok(o)
}

fn site(a: &[u8]) -> Result<Command, CommandError> {
    let t = a.trim_ascii_start();
    let (sub, rest) = match t.iter().position(|&b| b == b' ') {
        Some(sp) => (&t[..sp], &t[sp + 1..]),
        None => (t, &b""[..]),
    };
    if sub.eq_ignore_ascii_case(b"BUFSIZE") {
        return Ok(Command::Sbuf(sbuf(rest, "SITE BUFSIZE")?));
    }
    Ok(Command::Site(a.to_vec()))
}

/// Split off the first space-separated token.
fn token(a: &[u8]) -> Option<(&[u8], &[u8])> {
    let a = a.trim_ascii_start();
    let sp = a.iter().position(|&b| b == b' ')?;
    Some((&a[..sp], &a[sp + 1..]))
}

fn eret(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("ERET");
    let (module, rest) = token(a).ok_or(bad.clone())?;
    if !module.eq_ignore_ascii_case(b"P") {
        return Err(CommandError::Unsupported("ERET"));
    }
    let (off, rest) = token(rest).ok_or(bad.clone())?;
    let (len, p) = token(rest).ok_or(bad)?;
    let offset = number(off, "ERET")?;
    let length = number(len, "ERET")?;
    end_within_limit(offset, length, "ERET")?;
    Ok(Command::Eret { offset, length, path: path(Some(p), "ERET")? })
}

/// `offset + length` must not pass [`MAX_OFFSET`] (what `off_t` can hold).
fn end_within_limit(offset: u64, length: u64, verb: &'static str) -> Result<(), CommandError> {
    match offset.checked_add(length) {
        Some(end) if end <= MAX_OFFSET => Ok(()),
        _ => Err(CommandError::BadArgument(verb)),
    }
}

fn esto(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("ESTO");
    let (module, rest) = token(a).ok_or(bad.clone())?;
    if !module.eq_ignore_ascii_case(b"A") {
        return Err(CommandError::Unsupported("ESTO"));
    }
    let (off, p) = token(rest).ok_or(bad)?;
    Ok(Command::Esto { offset: number(off, "ESTO")?, path: path(Some(p), "ESTO")? })
}

fn cksm(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("CKSM");
    let (alg, rest) = token(a).ok_or(bad.clone())?;
    let (off, rest) = token(rest).ok_or(bad.clone())?;
    let (len, p) = token(rest).ok_or(bad.clone())?;
    if alg.is_empty() || alg.len() > MAX_VERB || !alg.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') {
        return Err(bad);
    }
    let offset = number(off, "CKSM")?;
    let length = if len == b"-1" { None } else { Some(number(len, "CKSM")?) };
    if let Some(l) = length {
        end_within_limit(offset, l, "CKSM")?;
    }
    Ok(Command::Cksm {
        algorithm: String::from_utf8_lossy(&alg.to_ascii_uppercase()).into_owned(),
        offset,
        length,
        path: path(Some(p), "CKSM")?,
    })
}

fn dcau(a: &[u8]) -> Result<Dcau, CommandError> {
    let a = a.trim_ascii();
    let (mode, rest) = match a.iter().position(|&b| b == b' ') {
        Some(sp) => (&a[..sp], a[sp + 1..].trim_ascii()),
        None => (a, &b""[..]),
    };
    match (mode.to_ascii_uppercase().as_slice(), rest.is_empty()) {
        (b"N", true) => Ok(Dcau::None),
        (b"A", true) => Ok(Dcau::SelfAuth),
        (b"S", false) => Ok(Dcau::Subject(text(rest, "DCAU", MAX_PATH)?)),
        _ => Err(CommandError::BadArgument("DCAU")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, CommandError> {
        parse_command(s.as_bytes())
    }

    #[test]
    fn verbs_are_case_insensitive_and_paths_keep_spaces() {
        assert_eq!(p("retr a b.txt").unwrap(), Command::Retr("a b.txt".into()));
        assert_eq!(p("RETR  lead").unwrap(), Command::Retr(" lead".into()));
        assert_eq!(p("Stor x ").unwrap(), Command::Stor("x ".into()));
        assert_eq!(p("xpwd").unwrap(), Command::Pwd);
        assert_eq!(p("XCUP").unwrap(), Command::Cdup);
        assert_eq!(p("XMKD d").unwrap(), Command::Mkd("d".into()));
        assert_eq!(p("XRMD d").unwrap(), Command::Rmd("d".into()));
        assert_eq!(p("XCWD /").unwrap(), Command::Cwd("/".into()));
    }

    #[test]
    fn optional_arguments() {
        assert_eq!(p("LIST").unwrap(), Command::List(None));
        assert_eq!(p("LIST ").unwrap(), Command::List(None));
        assert_eq!(p("LIST -la").unwrap(), Command::List(Some("-la".into())));
        assert_eq!(p("MLSD").unwrap(), Command::Mlsd(None));
        assert_eq!(p("MLST f").unwrap(), Command::Mlst(Some("f".into())));
        assert_eq!(p("NLST d").unwrap(), Command::Nlst(Some("d".into())));
        assert_eq!(p("STAT").unwrap(), Command::Stat(None));
        assert_eq!(p("HELP SITE").unwrap(), Command::Help(Some("SITE".into())));
    }

    #[test]
    fn missing_arguments() {
        for v in ["RETR", "STOR", "CWD", "SIZE", "MDTM", "REST", "PORT", "EPRT", "TYPE", "MODE", "USER", "ERET", "CKSM"] {
            assert!(matches!(p(v), Err(CommandError::MissingArgument(_))), "{v}");
        }
        assert_eq!(p("RETR").unwrap_err().reply().code, ReplyCode::BAD_ARGUMENTS);
    }

    #[test]
    fn login() {
        assert_eq!(p("USER anonymous").unwrap(), Command::User("anonymous".into()));
        let Command::Pass(pw) = p("PASS s3cr et").unwrap() else { panic!() };
        assert_eq!(pw.as_bytes(), b"s3cr et");
        assert!(!format!("{pw:?}").contains("s3cr"));
        assert_eq!(p("PASS").unwrap(), Command::Pass(Password(Vec::new())));
        let long = format!("USER {}", "u".repeat(MAX_USER + 1));
        assert_eq!(p(&long), Err(CommandError::TooLong("USER")));
    }

    #[test]
    fn type_mode_stru() {
        assert_eq!(p("TYPE I").unwrap(), Command::Type(TransferType::Image));
        assert_eq!(p("type a").unwrap(), Command::Type(TransferType::Ascii));
        assert_eq!(p("TYPE A N").unwrap(), Command::Type(TransferType::Ascii));
        assert_eq!(p("TYPE L 8").unwrap(), Command::Type(TransferType::Local8));
        assert_eq!(p("TYPE E"), Err(CommandError::Unsupported("TYPE")));
        assert_eq!(p("TYPE L 7"), Err(CommandError::Unsupported("TYPE")));
        assert_eq!(p("TYPE X"), Err(CommandError::BadArgument("TYPE")));
        assert_eq!(p("TYPE I extra"), Err(CommandError::BadArgument("TYPE")));
        assert_eq!(p("MODE E").unwrap(), Command::Mode(TransferMode::ExtendedBlock));
        assert_eq!(p("mode s").unwrap(), Command::Mode(TransferMode::Stream));
        assert_eq!(p("MODE B").unwrap_err().reply().code, ReplyCode::PARAMETER_NOT_IMPLEMENTED);
        assert_eq!(p("STRU F").unwrap(), Command::Stru);
        assert_eq!(p("STRU R"), Err(CommandError::Unsupported("STRU")));
    }

    #[test]
    fn opts() {
        assert_eq!(p("OPTS UTF8 ON").unwrap(), Command::Opts(Opts::Utf8(true)));
        assert_eq!(p("opts utf8 off").unwrap(), Command::Opts(Opts::Utf8(false)));
        let Command::Opts(Opts::Retr(r)) = p("OPTS RETR Parallelism=4,2,8;").unwrap() else { panic!() };
        assert_eq!(r.parallelism, Some(Parallelism { start: 4, min: 2, max: 8 }));
        let Command::Opts(Opts::Retr(r)) = p("OPTS RETR StripeLayout=Blocked;BlockSize=1048576;").unwrap() else {
            panic!()
        };
        assert_eq!(r.parallelism, None);
        assert_eq!(r.other.len(), 2);
        assert_eq!(p("OPTS RETR Parallelism=0,1,1;"), Err(CommandError::BadArgument("OPTS")));
        assert_eq!(p("OPTS RETR Parallelism=65,1,1;"), Err(CommandError::BadArgument("OPTS")));
        assert_eq!(p("OPTS RETR Parallelism=1,1;"), Err(CommandError::BadArgument("OPTS")));
        assert_eq!(p("OPTS RETR Parallelism=99999999999999999999,1,1;"), Err(CommandError::BadArgument("OPTS")));
        assert_eq!(
            p("OPTS MLST type;size;").unwrap(),
            Command::Opts(Opts::Other { name: "MLST".into(), args: b"type;size;".to_vec() })
        );
    }

    #[test]
    fn rest() {
        assert_eq!(p("REST 100").unwrap(), Command::Rest(Restart::Offset(100)));
        assert_eq!(p("REST -1"), Err(CommandError::BadArgument("REST")));
        assert_eq!(p("REST 18446744073709551616"), Err(CommandError::BadArgument("REST")));
        let Command::Rest(Restart::Ranges(r)) = p("REST 0-100,200-300").unwrap() else { panic!() };
        assert_eq!(r.ranges(), &[0..100, 200..300]);
    }

    #[test]
    fn data_channel_setup() {
        assert_eq!(p("PASV").unwrap(), Command::Pasv);
        assert_eq!(p("EPSV").unwrap(), Command::Epsv(Epsv::Any));
        assert_eq!(p("EPSV ALL").unwrap(), Command::Epsv(Epsv::All));
        assert_eq!(p("epsv all").unwrap(), Command::Epsv(Epsv::All));
        assert_eq!(p("EPSV 2").unwrap(), Command::Epsv(Epsv::Protocol(2)));
        assert_eq!(p("EPSV 300"), Err(CommandError::BadArgument("EPSV")));
        assert_eq!(p("PORT 127,0,0,1,4,1").unwrap(), Command::Port("127.0.0.1:1025".parse().unwrap()));
        assert_eq!(p("PORT 127,0,0,256,4,1"), Err(CommandError::BadArgument("PORT")));
        assert_eq!(p("EPRT |2|::1|5000|").unwrap(), Command::Eprt("[::1]:5000".parse().unwrap()));
        assert_eq!(p("EPRT |3|x|5000|"), Err(CommandError::UnsupportedProtocol));
        assert_eq!(p("EPRT |3|x|5000|").unwrap_err().reply().code, ReplyCode::BAD_NETWORK_PROTOCOL);
        assert_eq!(p("SPAS").unwrap(), Command::Spas);
        assert_eq!(
            p("SPOR 127,0,0,1,4,1 127,0,0,1,4,2").unwrap(),
            Command::Spor(vec!["127.0.0.1:1025".parse().unwrap(), "127.0.0.1:1026".parse().unwrap()])
        );
    }

    #[test]
    fn gridftp() {
        assert_eq!(
            p("ERET P 100 200 my file").unwrap(),
            Command::Eret { offset: 100, length: 200, path: "my file".into() }
        );
        assert_eq!(p("ERET X 1 2 f"), Err(CommandError::Unsupported("ERET")));
        assert_eq!(p("ERET P 1 f"), Err(CommandError::BadArgument("ERET")));
        assert_eq!(p("ERET P 9223372036854775807 1 f"), Err(CommandError::BadArgument("ERET")));
        assert_eq!(p("ESTO A 5 f g").unwrap(), Command::Esto { offset: 5, path: "f g".into() });
        assert_eq!(p("SBUF 1048576").unwrap(), Command::Sbuf(1 << 20));
        assert_eq!(p("SITE BUFSIZE 4096").unwrap(), Command::Sbuf(4096));
        assert_eq!(p("site bufsize 4096").unwrap(), Command::Sbuf(4096));
        assert_eq!(p("SBUF 99999999999"), Err(CommandError::BadArgument("SBUF")));
        assert_eq!(p("SITE CHMOD 644 f").unwrap(), Command::Site(b"CHMOD 644 f".to_vec()));
        assert_eq!(p("DCAU N").unwrap(), Command::Dcau(Dcau::None));
        assert_eq!(p("DCAU A").unwrap(), Command::Dcau(Dcau::SelfAuth));
        assert_eq!(p("DCAU S /O=x/CN=y z").unwrap(), Command::Dcau(Dcau::Subject("/O=x/CN=y z".into())));
        assert_eq!(p("DCAU S"), Err(CommandError::BadArgument("DCAU")));
        assert_eq!(p("PROT P").unwrap(), Command::Prot(Prot::Private));
        assert_eq!(p("PROT c").unwrap(), Command::Prot(Prot::Clear));
        assert_eq!(p("PBSZ 0").unwrap(), Command::Pbsz(0));
        assert_eq!(
            p("CKSM md5 0 -1 a b").unwrap(),
            Command::Cksm { algorithm: "MD5".into(), offset: 0, length: None, path: "a b".into() }
        );
        assert_eq!(
            p("CKSM ADLER32 10 20 f").unwrap(),
            Command::Cksm { algorithm: "ADLER32".into(), offset: 10, length: Some(20), path: "f".into() }
        );
        assert_eq!(p("CKSM MD5 0 -2 f"), Err(CommandError::BadArgument("CKSM")));
        assert_eq!(p("ALLO 1000").unwrap(), Command::Allo(Some(1000)));
        assert_eq!(p("ALLO 1000 R 10").unwrap(), Command::Allo(Some(1000)));
        assert_eq!(p("ALLO").unwrap(), Command::Allo(None));
    }

    #[test]
    fn unknown_and_bad_verbs() {
        assert_eq!(p("AUTH TLS").unwrap(), Command::Unknown("AUTH".into()));
        assert_eq!(p("clnt x").unwrap(), Command::Unknown("CLNT".into()));
        assert_eq!(p(""), Err(CommandError::Empty));
        assert_eq!(p("   "), Err(CommandError::Empty));
        let e = parse_command(b"R\xffTR x").unwrap_err();
        assert!(matches!(e, CommandError::UnknownCommand(_)));
        let r = e.reply();
        assert_eq!(r.code, ReplyCode::SYNTAX_ERROR);
        assert!(r.text().contains("\\xff"));
        let long = "A".repeat(1000);
        let r = p(&long).unwrap_err().reply();
        assert!(r.text().len() < 60, "echo is clipped: {}", r.text());
    }

    #[test]
    fn bad_paths() {
        assert_eq!(parse_command(b"RETR a\0b"), Err(CommandError::BadPath("RETR")));
        assert_eq!(parse_command(b"RETR a\rb"), Err(CommandError::BadPath("RETR")));
        assert_eq!(parse_command(b"RETR \xff\xfe"), Err(CommandError::BadPath("RETR")));
        let long = format!("RETR {}", "a".repeat(MAX_PATH + 1));
        assert_eq!(p(&long), Err(CommandError::TooLong("RETR")));
        assert_eq!(p("RETR é").unwrap(), Command::Retr("é".into()));
    }

    #[test]
    fn trailing_crlf_is_tolerated() {
        assert_eq!(p("NOOP\r\n").unwrap(), Command::Noop);
        assert_eq!(p("QUIT\n").unwrap(), Command::Quit);
    }

    #[test]
    fn lines() {
        assert_eq!(next_line(b"NOOP\r\nQUIT\r\n").unwrap(), Some((b"NOOP".to_vec(), 6)));
        assert_eq!(next_line(b"NOOP\nQUIT").unwrap(), Some((b"NOOP".to_vec(), 5)));
        assert_eq!(next_line(b"NOOP\r").unwrap(), None);
        assert_eq!(next_line(b"").unwrap(), None);
        // Telnet: IAC IP IAC DM before ABOR; IAC IAC is a literal 0xff;
        // option negotiation is dropped.
        assert_eq!(next_line(b"\xff\xf4\xff\xf2ABOR\r\n").unwrap(), Some((b"ABOR".to_vec(), 10)));
        assert_eq!(next_line(b"a\xff\xffb\n").unwrap(), Some((b"a\xffb".to_vec(), 5)));
        assert_eq!(next_line(b"\xff\xfb\x01NOOP\n").unwrap(), Some((b"NOOP".to_vec(), 8)));
        assert_eq!(next_line(b"NO\xff").unwrap(), None);
    }

    #[test]
    fn long_lines_fail_early() {
        let mut buf = vec![b'a'; MAX_LINE - 1];
        assert_eq!(next_line(&buf).unwrap(), None);
        buf.push(b'\n');
        assert!(next_line(&buf).unwrap().is_some());
        let buf = vec![b'a'; MAX_LINE];
        assert_eq!(next_line(&buf), Err(CommandError::LineTooLong));
        let mut buf = vec![b'a'; MAX_LINE + 10];
        buf.push(b'\n');
        assert_eq!(next_line(&buf), Err(CommandError::LineTooLong));
        assert!(CommandError::LineTooLong.closes_connection());
        assert_eq!(CommandError::LineTooLong.reply().code, ReplyCode::SYNTAX_ERROR);
    }

    #[test]
    fn echo_escapes() {
        assert_eq!(echo(b"ab'\\\r"), "ab\\x27\\x5c\\x0d");
        assert!(echo(&[b'x'; 100]).ends_with("..."));
        assert_eq!(echo(&[b'x'; MAX_ECHO]).len(), MAX_ECHO);
        assert!(echo(&[0u8; 100]).len() <= MAX_ECHO + 3);
    }
}
