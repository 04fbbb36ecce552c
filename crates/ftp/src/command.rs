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
use crate::limits::{MAX_LINE, MAX_PARALLELISM, MAX_PASS, MAX_USER, MAX_VERB};
use crate::markers::{decimal, RangeSet};
use std::fmt;
use std::net::{SocketAddr, SocketAddrV4};

mod args;
mod error;
mod line;

use args::{
    cksm, dcau, eret, esto, mfmt, name, need, number, opt_path, opts, path, restart, sbuf, site,
    transfer_type, word,
};
pub use error::CommandError;
pub use line::{echo, next_line};

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
    /// `MFMT YYYYMMDDHHMMSS path` (draft-somers-ftp-mfxx): set the
    /// modification time, UTC.
    Mfmt {
        /// Unix seconds.
        secs: i64,
        /// The file.
        path: String,
    },
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
    /// `REIN` (RFC 959: log out, keep the connection).
    Rein,
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
    /// `AUTH mechanism` (RFC 2228, 4217), mechanism upper-cased
    /// (`TLS`, `SSL`, `TLS-C`, `TLS-P`).
    Auth(String),
    /// `CCC` (RFC 4217 clear command channel).
    Ccc,
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

impl Command {
    /// The canonical verb, for logs and replies (`XPWD` gives `PWD`,
    /// `SITE BUFSIZE` gives `SBUF`; never an argument, so never a password).
    pub fn verb(&self) -> &str {
        match self {
            Self::User(_) => "USER",
            Self::Pass(_) => "PASS",
            Self::Acct(_) => "ACCT",
            Self::Syst => "SYST",
            Self::Feat => "FEAT",
            Self::Opts(_) => "OPTS",
            Self::Type(_) => "TYPE",
            Self::Mode(_) => "MODE",
            Self::Stru => "STRU",
            Self::Pwd => "PWD",
            Self::Cwd(_) => "CWD",
            Self::Cdup => "CDUP",
            Self::List(_) => "LIST",
            Self::Nlst(_) => "NLST",
            Self::Mlsd(_) => "MLSD",
            Self::Mlst(_) => "MLST",
            Self::Size(_) => "SIZE",
            Self::Mdtm(_) => "MDTM",
            Self::Mfmt { .. } => "MFMT",
            Self::Rest(_) => "REST",
            Self::Retr(_) => "RETR",
            Self::Stor(_) => "STOR",
            Self::Appe(_) => "APPE",
            Self::Dele(_) => "DELE",
            Self::Mkd(_) => "MKD",
            Self::Rmd(_) => "RMD",
            Self::Rnfr(_) => "RNFR",
            Self::Rein => "REIN",
            Self::Rnto(_) => "RNTO",
            Self::Pasv => "PASV",
            Self::Epsv(_) => "EPSV",
            Self::Port(_) => "PORT",
            Self::Eprt(_) => "EPRT",
            Self::Abor => "ABOR",
            Self::Noop => "NOOP",
            Self::Stat(_) => "STAT",
            Self::Help(_) => "HELP",
            Self::Quit => "QUIT",
            Self::Allo(_) => "ALLO",
            Self::Site(_) => "SITE",
            Self::Eret { .. } => "ERET",
            Self::Esto { .. } => "ESTO",
            Self::Sbuf(_) => "SBUF",
            Self::Dcau(_) => "DCAU",
            Self::Prot(_) => "PROT",
            Self::Pbsz(_) => "PBSZ",
            Self::Auth(_) => "AUTH",
            Self::Ccc => "CCC",
            Self::Cksm { .. } => "CKSM",
            Self::Spas => "SPAS",
            Self::Spor(_) => "SPOR",
            Self::Unknown(v) => v,
        }
    }
}

/// Parse one line (without terminator) into a [`Command`].
pub fn parse_command(line: &[u8]) -> Result<Command, CommandError> {
    if line.len() > MAX_LINE {
        return Err(CommandError::LineTooLong);
    }
    let line = line
        .strip_suffix(b"\r\n")
        .or_else(|| line.strip_suffix(b"\n"))
        .unwrap_or(line);
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
        b"MFMT" => mfmt(arg)?,
        b"REST" => Command::Rest(restart(need(arg, "REST")?)?),
        b"RETR" => Command::Retr(path(arg, "RETR")?),
        b"STOR" => Command::Stor(path(arg, "STOR")?),
        b"APPE" => Command::Appe(path(arg, "APPE")?),
        b"DELE" => Command::Dele(path(arg, "DELE")?),
        b"MKD" | b"XMKD" => Command::Mkd(path(arg, "MKD")?),
        b"RMD" | b"XRMD" => Command::Rmd(path(arg, "RMD")?),
        b"RNFR" => Command::Rnfr(path(arg, "RNFR")?),
        b"REIN" => Command::Rein,
        b"RNTO" => Command::Rnto(path(arg, "RNTO")?),
        b"PASV" => Command::Pasv,
        b"EPSV" => Command::Epsv(match arg.map(<[u8]>::trim_ascii) {
            None => Epsv::Any,
            Some(a) if a.eq_ignore_ascii_case(b"ALL") => Epsv::All,
            Some(a) => Epsv::Protocol(
                u8::try_from(number(a, "EPSV")?).map_err(|_| CommandError::BadArgument("EPSV"))?,
            ),
        }),
        b"PORT" => Command::Port(
            addr::parse_port(need(arg, "PORT")?).map_err(|_| CommandError::BadArgument("PORT"))?,
        ),
        b"EPRT" => Command::Eprt(addr::parse_eprt(need(arg, "EPRT")?).map_err(|e| match e {
            AddrError::UnsupportedProtocol => CommandError::UnsupportedProtocol,
            _ => CommandError::BadArgument("EPRT"),
        })?),
        b"ABOR" => Command::Abor,
        b"NOOP" => Command::Noop,
        b"STAT" => Command::Stat(opt_path(arg, "STAT")?),
        b"HELP" => Command::Help(opt_path(arg, "HELP")?),
        b"QUIT" => Command::Quit,
        b"ALLO" => Command::Allo(
            arg.and_then(|a| a.trim_ascii().split(|&b| b == b' ').next())
                .and_then(|n| decimal(n).ok()),
        ),
        b"SITE" => site(need(arg, "SITE")?)?,
        b"ERET" => eret(need(arg, "ERET")?)?,
        b"ESTO" => esto(need(arg, "ESTO")?)?,
        b"SBUF" => Command::Sbuf(sbuf(need(arg, "SBUF")?, "SBUF")?),
        b"DCAU" => Command::Dcau(dcau(need(arg, "DCAU")?)?),
        b"PROT" => Command::Prot(
            match word(need(arg, "PROT")?).to_ascii_uppercase().as_slice() {
                b"C" => Prot::Clear,
                b"S" => Prot::Safe,
                b"E" => Prot::Confidential,
                b"P" => Prot::Private,
                _ => return Err(CommandError::BadArgument("PROT")),
            },
        ),
        b"PBSZ" => Command::Pbsz(number(need(arg, "PBSZ")?, "PBSZ")?),
        b"AUTH" => {
            Command::Auth(String::from_utf8_lossy(word(need(arg, "AUTH")?)).to_ascii_uppercase())
        }
        b"CCC" => Command::Ccc,
        b"CKSM" => cksm(need(arg, "CKSM")?)?,
        b"SPAS" => Command::Spas,
        b"SPOR" => {
            let mut addrs = Vec::new();
            for part in need(arg, "SPOR")?
                .split(|&b| b == b' ')
                .filter(|p| !p.is_empty())
            {
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

#[cfg(test)]
mod tests;
