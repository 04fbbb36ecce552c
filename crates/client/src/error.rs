//! The client's error type: each variant says whose fault it was and maps
//! to one documented exit code (see `cli::EXIT_CODES_HELP`).

use std::fmt;
use std::io;

/// Why a client command failed. Displayed as `<what>: <cause>`.
#[derive(Debug)]
pub enum ClientError {
    /// Bad arguments or URL (exit 2).
    Usage(String),
    /// Connect, read or write on a socket failed, or timed out (exit 3).
    Network {
        /// What we were doing.
        what: String,
        /// The socket error.
        cause: io::Error,
    },
    /// USER/PASS refused (exit 4).
    Login {
        /// The server's reply, one line.
        reply: String,
    },
    /// The server answered a request with a 4xx/5xx reply (exit 5).
    Refused {
        /// The request.
        what: String,
        /// The server's reply, one line.
        reply: String,
    },
    /// A local file could not be opened, read or written (exit 6).
    Local {
        /// What we were doing.
        what: String,
        /// The file-system error.
        cause: io::Error,
    },
    /// The server sent something the protocol does not allow (exit 7).
    Protocol(String),
    /// `--verify`: server and local checksums differ (exit 8).
    ChecksumMismatch {
        /// Algorithm name as in CKSM.
        algo: String,
        /// The server's checksum.
        server: String,
        /// Ours.
        local: String,
        /// What the user can do about it (empty: nothing to add).
        advice: String,
    },
    /// `--verify`: no checksum algorithm both sides know (exit 9).
    NoChecksum(String),
    /// Writing to stdout hit a closed pipe: exit quietly with 0, as `rg` does.
    BrokenPipe,
    /// One of our own invariants failed (exit 1).
    Bug(String),
    /// A tree transfer where some files failed for good (the exit code
    /// of the first failure; the summary lists every one).
    Tree {
        /// Files that failed.
        failed: usize,
        /// Files in the tree.
        total: usize,
        /// The first failure's error.
        first: Box<ClientError>,
    },
}

impl ClientError {
    /// The process exit code documented in `--help`.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Bug(_) => 1,
            ClientError::Usage(_) => 2,
            ClientError::Network { .. } => 3,
            ClientError::Login { .. } => 4,
            ClientError::Refused { .. } => 5,
            ClientError::Local { .. } => 6,
            ClientError::Protocol(_) => 7,
            ClientError::ChecksumMismatch { .. } => 8,
            ClientError::NoChecksum(_) => 9,
            ClientError::BrokenPipe => 0,
            ClientError::Tree { first, .. } => first.exit_code().max(1),
        }
    }

    /// A network error with context.
    pub fn net(what: impl Into<String>, cause: io::Error) -> Self {
        // A socket read or write timeout surfaces as EAGAIN ("Resource
        // temporarily unavailable"), which tells the user nothing.
        let cause = if cause.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(io::ErrorKind::TimedOut, "timed out")
        } else {
            cause
        };
        ClientError::Network {
            what: what.into(),
            cause,
        }
    }

    /// A local file error with context.
    pub fn local(what: impl Into<String>, cause: io::Error) -> Self {
        if cause.kind() == io::ErrorKind::BrokenPipe {
            return ClientError::BrokenPipe;
        }
        ClientError::Local {
            what: what.into(),
            cause,
        }
    }
}

impl ClientError {
    /// A checksum mismatch with `advice` for the user; other errors as
    /// they are.
    pub fn with_advice(self, advice: impl FnOnce() -> String) -> ClientError {
        match self {
            ClientError::ChecksumMismatch {
                algo,
                server,
                local,
                ..
            } => ClientError::ChecksumMismatch {
                algo,
                server,
                local,
                advice: advice(),
            },
            e => e,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Usage(m) => write!(f, "usage: {m}"),
            ClientError::Network { what, cause } => write!(f, "{what}: {cause}"),
            ClientError::Login { reply } => write!(f, "login refused: {reply}"),
            ClientError::Refused { what, reply } => write!(f, "{what}: {reply}"),
            ClientError::Local { what, cause } => write!(f, "{what}: {cause}"),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
            ClientError::ChecksumMismatch {
                algo,
                server,
                local,
                advice,
            } => {
                write!(
                    f,
                    "checksum mismatch: {algo} server {server} != local {local}"
                )?;
                if !advice.is_empty() {
                    write!(f, " ({advice})")?;
                }
                Ok(())
            }
            ClientError::NoChecksum(m) => write!(f, "cannot verify: {m}"),
            ClientError::BrokenPipe => write!(f, "broken pipe"),
            ClientError::Bug(m) => write!(f, "internal error (bug): {m}"),
            ClientError::Tree {
                failed,
                total,
                first,
            } => write!(f, "{failed} of {total} files failed (first: {first})"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Shorthand used across the client.
pub type Result<T> = std::result::Result<T, ClientError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_timeout_reads_as_timed_out() {
        let e = ClientError::net("read listing", io::Error::from(io::ErrorKind::WouldBlock));
        assert_eq!(e.to_string(), "read listing: timed out");
        assert_eq!(e.exit_code(), 3);
        let e = ClientError::net("x", io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(e.to_string().starts_with("x: "), "{e}");
        assert_ne!(e.to_string(), "x: timed out");
    }

    #[test]
    fn a_checksum_mismatch_carries_advice_and_exit_8() {
        let e = ClientError::ChecksumMismatch {
            algo: "MD5".into(),
            server: "aa".into(),
            local: "bb".into(),
            advice: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "checksum mismatch: MD5 server aa != local bb"
        );
        let e = e.with_advice(|| "try again".into());
        assert_eq!(
            e.to_string(),
            "checksum mismatch: MD5 server aa != local bb (try again)"
        );
        assert_eq!(e.exit_code(), 8);
        let other = ClientError::Protocol("x".into()).with_advice(|| unreachable!());
        assert_eq!(other.to_string(), "protocol error: x");
    }
}
