//! What the session asks the shell to do ([`Action`]), and what the shell
//! answers ([`Answer`], [`OpError`], [`LoginGrant`]).

use std::net::SocketAddr;

use crate::command::{Password, TransferMode};
use crate::path::VirtualPath;
use crate::reply::{Reply, ReplyCode};

/// Where the data connection(s) of the next transfer come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataChannel {
    /// The client connects to the listener opened by the last
    /// [`Action::OpenPassive`].
    Passive,
    /// The server connects to this address (PORT/EPRT).
    Active(SocketAddr),
}

/// How the next transfer moves its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSpec {
    /// Passive or active.
    pub channel: DataChannel,
    /// PROT P: the shell runs the server side of a TLS handshake on each
    /// data connection (passive or active) before moving data.
    pub protected: bool,
    /// MODE S or MODE E.
    pub mode: TransferMode,
    /// TYPE A: listings use CRLF (they always do); file data is sent as is.
    pub ascii: bool,
    /// Data connections for a MODE E send (`OPTS RETR Parallelism=n,..`);
    /// 1 in MODE S.
    pub parallelism: u32,
    /// Socket buffer size asked for with SBUF / SITE BUFSIZE.
    pub buffer: Option<u64>,
    /// Seconds between 112/111 markers in MODE E (`OPTS RETR markers=`).
    pub marker_interval_secs: u32,
}

/// How an upload treats what is already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// STOR: replace the file (atomically, on success).
    Replace,
    /// REST n + STOR: keep the first n bytes of what is there (a kept
    /// partial upload or the file), write the rest.
    Restart(u64),
    /// APPE: keep everything that is there, append.
    Append,
    /// ESTO A n: MODE E blocks land at n + their offset in the existing file.
    Adjusted(u64),
    /// MODE E `REST <ranges>` + STOR: the client says the server holds
    /// these ranges of an interrupted upload (they end at this offset) and
    /// sends the others; blocks land at their own offsets.
    RestartRanges(u64),
}

/// Which listing a [`Action::List`] wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFormat {
    /// LIST: `ls -l` style lines.
    Long,
    /// NLST: names only.
    Names,
    /// MLSD: RFC 3659 fact lines with the facts chosen by `OPTS MLST`.
    Machine(crate::listing::MlstFacts),
}

/// A wildcard listing (`NLST *.dat`, `LIST sub/run-??`, see
/// [`crate::glob`]), or an NLST of one file in another directory
/// (`NLST sub/a.dat` answers `sub/a.dat`, as vsftpd does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListMatch {
    /// The directory whose entries are matched.
    pub dir: VirtualPath,
    /// The argument's last component.
    pub pattern: NamePattern,
    /// What NLST writes before each matching name: the argument's
    /// directory part as the client wrote it (`sub/`, `/data/`, or empty),
    /// so `mget` can RETR each name as it came (vsftpd does the same).
    pub prefix: String,
}

/// The last component of a LIST/NLST argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamePattern {
    /// A wildcard pattern.
    Glob(crate::glob::Glob),
    /// A pattern longer than any name: matches nothing.
    TooLong,
    /// No wildcard: the name itself (a missing one is still 550).
    Exact,
}

impl NamePattern {
    /// Whether a directory entry of this name is listed.
    pub fn matches(&self, name: &[u8]) -> bool {
        match self {
            NamePattern::Glob(g) => g.matches(name),
            NamePattern::TooLong | NamePattern::Exact => false,
        }
    }
}

/// What a [`Action::Query`] wants to know about a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// CWD: is it a directory? Answer [`Answer::Done`] if so.
    ChangeDir,
    /// SIZE: [`Answer::Size`] of a regular file.
    Size,
    /// MDTM: [`Answer::Modified`] of a regular file.
    Modified,
    /// MLST: [`Answer::Facts`] (one RFC 3659 fact line with these facts,
    /// name included).
    Facts(crate::listing::MlstFacts),
    /// STAT path: [`Answer::Lines`] (LIST-style lines).
    Status,
    /// RNFR: does it exist? [`Answer::Done`] if so.
    Exists,
}

/// A file-system change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// MKD.
    Mkdir(VirtualPath),
    /// RMD.
    Rmdir(VirtualPath),
    /// DELE.
    Delete(VirtualPath),
    /// MFMT: set a regular file's modification time (Unix seconds).
    SetModified {
        /// The file.
        path: VirtualPath,
        /// Unix seconds, UTC.
        secs: i64,
    },
    /// RNFR + RNTO.
    Rename {
        /// Old name.
        from: VirtualPath,
        /// New name.
        to: VirtualPath,
    },
}

/// Checksum algorithms CKSM accepts, named as Globus names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumAlgorithm {
    /// `ADLER32` (8 hex digits).
    Adler32,
    /// `MD5`.
    Md5,
    /// `SHA256` (also accepted as `SHA-256`).
    Sha256,
    /// `SHA1` (also `SHA-1`; what older Globus and dCache setups ask for).
    Sha1,
    /// `CRC32C` (Castagnoli, 8 hex digits; what S3 and Google Cloud
    /// Storage record, so a copy can be checked against the object store).
    Crc32c,
}

impl ChecksumAlgorithm {
    /// Parses a CKSM algorithm name (already upper-cased by the parser).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ADLER32" => Some(Self::Adler32),
            "MD5" => Some(Self::Md5),
            "SHA256" | "SHA-256" => Some(Self::Sha256),
            "SHA1" | "SHA-1" => Some(Self::Sha1),
            "CRC32C" => Some(Self::Crc32c),
            _ => None,
        }
    }

    /// The name as it appears in FEAT and CKSM.
    pub fn name(self) -> &'static str {
        match self {
            Self::Adler32 => "ADLER32",
            Self::Md5 => "MD5",
            Self::Sha256 => "SHA256",
            Self::Sha1 => "SHA1",
            Self::Crc32c => "CRC32C",
        }
    }
}

/// Something the shell must do. Each action that expects an answer says
/// which `handle_*` method takes it; the session accepts nothing else on
/// the control channel (except ABOR, STAT, NOOP, QUIT during a transfer)
/// until that answer arrives.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Check a login. Answer: [`Session::handle_login`](super::Session::handle_login).
    Authenticate {
        /// USER argument.
        user: String,
        /// PASS argument (its `Debug` is redacted; never log it).
        pass: Password,
    },
    /// Open a passive listener on the control connection's local address
    /// (replacing any previous one). Answer:
    /// [`handle_passive`](super::Session::handle_passive) with the address
    /// to announce.
    OpenPassive {
        /// EPSV (announce port only) rather than PASV (IPv4 address too).
        extended: bool,
    },
    /// Forget any passive listener (PORT/EPRT replaced it). No answer.
    ClosePassive,
    /// Close the data connections kept open after the last MODE E
    /// transfer (GridFTP data channel caching): the client changed the
    /// data channel (PORT/EPRT/PASV/EPSV), the mode, or a transfer failed.
    /// No answer.
    DropKept,
    /// A question about a path. Answer: [`handle_result`](super::Session::handle_result).
    Query {
        /// The path.
        path: VirtualPath,
        /// The question.
        query: Query,
    },
    /// A change to the tree (the session has checked the login may write).
    /// Answer: `handle_result` with [`Answer::Done`].
    Change(Change),
    /// CKSM, computed off the event loop. Answer: `handle_result` with
    /// [`Answer::Checksum`].
    Checksum {
        /// Algorithm.
        algorithm: ChecksumAlgorithm,
        /// File.
        path: VirtualPath,
        /// First byte.
        offset: u64,
        /// Byte count, `None` for "to the end".
        len: Option<u64>,
    },
    /// Send a listing over the data channel. Answer: `handle_transfer_started`
    /// (optional), then `handle_transfer_done`.
    List {
        /// Directory (or file) to list.
        path: VirtualPath,
        /// LIST, NLST or MLSD.
        format: ListFormat,
        /// Data channel.
        data: DataSpec,
        /// LIST/NLST whose last component is a wildcard: when `path` does
        /// not exist under that very name, the entries of `matching.dir`
        /// that match are listed instead.
        matching: Option<ListMatch>,
    },
    /// Send a file (RETR, or ERET with `len`). Answer as for `List`.
    StartRetr {
        /// File.
        path: VirtualPath,
        /// First byte (REST or ERET offset).
        offset: u64,
        /// Byte count, `None` for "to the end".
        len: Option<u64>,
        /// MODE E restart (`REST 0-100,200-300`): ranges the client already
        /// has; only the rest of `offset..offset+len` is sent. Sorted,
        /// disjoint (from [`crate::markers::RangeSet`]).
        skip: Vec<std::ops::Range<u64>>,
        /// Data channel, mode, parallelism.
        data: DataSpec,
    },
    /// Receive a file (STOR/APPE/ESTO). Answer as for `List`.
    StartStor {
        /// Target name.
        path: VirtualPath,
        /// Replace, restart, append or adjusted store.
        kind: StoreKind,
        /// Data channel and mode.
        data: DataSpec,
    },
    /// Stop the running transfer; then answer `handle_transfer_done` with
    /// [`OpError::Aborted`] (or the real outcome if it had finished).
    Abort,
    /// Write out pending output (the 234 to AUTH TLS), then run the server
    /// side of a TLS handshake on the control connection. Answer:
    /// [`handle_tls`](super::Session::handle_tls).
    StartTls,
    /// Write out pending output, then close the control connection.
    Close,
}

/// The shell's answer to a [`Action::Query`], [`Action::Change`] or
/// [`Action::Checksum`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Done, nothing to report (CWD, RNFR, MKD, RMD, DELE, RNTO).
    Done,
    /// SIZE.
    Size(u64),
    /// MDTM: seconds since the Unix epoch (UTC).
    Modified(u64),
    /// MLST: the fact line for the path (`type=file;size=..; name`).
    Facts(String),
    /// STAT path: listing lines.
    Lines(Vec<String>),
    /// CKSM: lower-case hex digest.
    Checksum(String),
}

/// What a successful login may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginGrant {
    /// STOR/APPE/ESTO/DELE/MKD/RMD/RNFR/RNTO allowed.
    pub writable: bool,
    /// PORT/EPRT may name other hosts (never for anonymous logins).
    pub allow_foreign_data_host: bool,
}

/// Why an operation failed, as the shell reports it. Each variant has one
/// fixed reply; none carries server-side paths or `io::Error` text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpError {
    /// No such file or directory.
    NotFound,
    /// A regular file was needed.
    NotAFile,
    /// A directory was needed.
    NotADirectory,
    /// Refused by permissions (or outside the served root).
    PermissionDenied,
    /// The name already exists.
    AlreadyExists,
    /// RMD of a non-empty directory.
    NotEmpty,
    /// Disk full or quota exceeded.
    NoSpace,
    /// Name not allowed.
    BadName,
    /// REST/ERET offset past the end of the file.
    OffsetBeyondEof,
    /// REST + STOR with nothing to resume: no interrupted upload of the name
    /// is kept (a complete file under the name is not one).
    NoPartial,
    /// APPE/ESTO/REST+STOR of a complete file while an interrupted upload
    /// of the same name is kept: the offset the client learned from SIZE
    /// may belong to either one.
    PartialPending,
    /// Another upload of the same name is in progress.
    Busy,
    /// Could not open (or lost) the data connection before any data.
    DataConnection,
    /// The data connection broke mid-transfer.
    ConnectionLost,
    /// ABOR (or QUIT) stopped the transfer.
    Aborted,
    /// A MODE E peer sent a malformed block.
    BadData,
    /// The request is valid but this server cannot do it (yet).
    NotSupported,
    /// Something failed on our side (logged by the shell).
    Local,
}

impl OpError {
    /// The one reply for this failure.
    pub fn reply(self) -> Reply {
        use ReplyCode as C;
        let (code, text) = match self {
            Self::NotFound => (C::FILE_UNAVAILABLE, "No such file or directory."),
            Self::NotAFile => (C::FILE_UNAVAILABLE, "Not a plain file."),
            Self::NotADirectory => (C::FILE_UNAVAILABLE, "Not a directory."),
            Self::PermissionDenied => (C::FILE_UNAVAILABLE, "Permission denied."),
            Self::AlreadyExists => (C::FILE_UNAVAILABLE, "File exists."),
            Self::NotEmpty => (C::FILE_UNAVAILABLE, "Directory not empty."),
            Self::NoSpace => (C::INSUFFICIENT_STORAGE, "Insufficient storage space."),
            Self::BadName => (C::BAD_FILE_NAME, "File name not allowed."),
            Self::OffsetBeyondEof => (ReplyCode(554), "Restart offset beyond end of file."),
            Self::NoPartial => (
                ReplyCode(554),
                "No interrupted upload of this name to resume; STOR without REST sends the whole file.",
            ),
            // 5xx: nothing changes by retrying (lftp retries 4xx forever).
            Self::PartialPending => (
                C::FILE_UNAVAILABLE,
                "Both a complete file and an interrupted upload have this name; STOR without REST replaces both.",
            ),
            Self::Busy => (
                C::FILE_UNAVAILABLE_TRANSIENT,
                "Another upload of this name is in progress.",
            ),
            Self::DataConnection => (C::CANT_OPEN_DATA, "Can't open data connection."),
            Self::ConnectionLost => (C::TRANSFER_ABORTED, "Connection closed; transfer aborted."),
            Self::Aborted => (C::TRANSFER_ABORTED, "Transfer aborted."),
            Self::BadData => (C::TRANSFER_ABORTED, "Bad data from peer; transfer aborted."),
            Self::NotSupported => (C::PARAMETER_NOT_IMPLEMENTED, "Not supported in this mode."),
            Self::Local => (C::LOCAL_ERROR, "Local error in processing."),
        };
        Reply::new(code, text)
    }
}
