//! Engine errors: whose fault (peer, disk, us) and whether it was cancelled.

use std::fmt;
use std::io;

/// Why an engine operation stopped.
#[derive(Debug)]
pub enum EngineError {
    /// The cancellation token fired (ABOR, session closed).
    Cancelled,
    /// The data connection failed or the peer closed it early.
    Connection(io::Error),
    /// Reading or writing the file failed.
    Disk(io::Error),
    /// The file ended before the requested range did (truncated under us).
    ShortFile {
        /// Offset where the file ended.
        at: u64,
    },
    /// The peer neither sent nor took data for `idle_timeout`.
    Idle,
    /// The disk thread pool has shut down.
    PoolClosed,
    /// A disk job panicked (a bug); its thread lives on.
    DiskJobPanicked,
}

impl EngineError {
    /// True when the disk was full or over quota (maps to FTP 552).
    pub fn is_disk_full(&self) -> bool {
        // ENOSPC (28) and EDQUOT (122) on Linux.
        matches!(self, EngineError::Disk(e) if matches!(e.raw_os_error(), Some(28 | 122)))
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Cancelled => f.write_str("transfer cancelled"),
            EngineError::Connection(e) => write!(f, "data connection: {e}"),
            EngineError::Disk(e) => write!(f, "file I/O: {e}"),
            EngineError::ShortFile { at } => write!(f, "file ended at offset {at}"),
            EngineError::Idle => f.write_str("data connection idle too long"),
            EngineError::PoolClosed => f.write_str("disk thread pool closed"),
            EngineError::DiskJobPanicked => f.write_str("a disk job failed (internal error)"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Connection(e) | EngineError::Disk(e) => Some(e),
            _ => None,
        }
    }
}
