//! Transfer errors, each mapped to the FTP reply the session sends.

use std::fmt;
use std::io;

use sluice_engine::EngineError;
use sluice_ftp::mode_e::ModeEError;

/// Why a transfer ended without completing.
#[derive(Debug)]
pub enum TransferError {
    /// ABOR or the session closed (426).
    Cancelled,
    /// A data connection failed or closed early (426).
    Connection(io::Error),
    /// The peer broke MODE E framing (426).
    Framing(ModeEError),
    /// MODE E data ended before the announced number of EODs (426).
    Incomplete {
        /// EODs seen.
        eods: u64,
        /// EODs the EOF block announced (0 if none arrived).
        expected: u64,
    },
    /// The peer exceeded a bound (too many streams, too sparse blocks) (426).
    Limit(&'static str),
    /// Reading or writing the file failed (451).
    Disk(io::Error),
    /// The disk is full or over quota (552).
    DiskFull(io::Error),
    /// The file is shorter than the requested range (451).
    ShortFile {
        /// Offset where the file ended.
        at: u64,
    },
    /// The caller asked for something this layer cannot do (451).
    Setup(&'static str),
}

impl TransferError {
    /// The FTP reply code for this error.
    pub fn reply_code(&self) -> u16 {
        match self {
            TransferError::Cancelled
            | TransferError::Connection(_)
            | TransferError::Framing(_)
            | TransferError::Incomplete { .. }
            | TransferError::Limit(_) => 426,
            TransferError::DiskFull(_) => 552,
            TransferError::Disk(_) | TransferError::ShortFile { .. } | TransferError::Setup(_) => {
                451
            }
        }
    }
}

impl From<EngineError> for TransferError {
    fn from(e: EngineError) -> Self {
        if e.is_disk_full() {
            if let EngineError::Disk(io) = e {
                return TransferError::DiskFull(io);
            }
        }
        match e {
            EngineError::Cancelled => TransferError::Cancelled,
            EngineError::Connection(io) => TransferError::Connection(io),
            EngineError::Disk(io) => TransferError::Disk(io),
            EngineError::ShortFile { at } => TransferError::ShortFile { at },
            EngineError::Idle => TransferError::Connection(io::Error::new(
                io::ErrorKind::TimedOut,
                "data connection idle",
            )),
            EngineError::PoolClosed => TransferError::Setup("disk thread pool closed"),
            EngineError::DiskJobPanicked => {
                TransferError::Setup("a disk job failed (internal error)")
            }
        }
    }
}

impl From<ModeEError> for TransferError {
    fn from(e: ModeEError) -> Self {
        TransferError::Framing(e)
    }
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferError::Cancelled => f.write_str("Transfer aborted"),
            TransferError::Connection(e) => write!(f, "Data connection failed: {e}"),
            TransferError::Framing(e) => write!(f, "Bad MODE E data: {e}"),
            TransferError::Incomplete { eods, expected } => {
                write!(f, "Data connections closed after {eods} of {expected} EODs")
            }
            TransferError::Limit(what) => write!(f, "Limit exceeded: {what}"),
            TransferError::Disk(e) => write!(f, "Local file error: {e}"),
            TransferError::DiskFull(e) => write!(f, "Insufficient storage: {e}"),
            TransferError::ShortFile { at } => write!(f, "File ended at offset {at}"),
            TransferError::Setup(what) => write!(f, "Local error: {what}"),
        }
    }
}

impl std::error::Error for TransferError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransferError::Connection(e) | TransferError::Disk(e) | TransferError::DiskFull(e) => {
                Some(e)
            }
            TransferError::Framing(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_ftp_replies() {
        let full = io::Error::from_raw_os_error(28);
        assert_eq!(
            TransferError::from(EngineError::Disk(full)).reply_code(),
            552
        );
        let eio = io::Error::from_raw_os_error(5);
        assert_eq!(
            TransferError::from(EngineError::Disk(eio)).reply_code(),
            451
        );
        assert_eq!(
            TransferError::from(EngineError::Cancelled).reply_code(),
            426
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(
            TransferError::from(EngineError::Connection(reset)).reply_code(),
            426
        );
        assert_eq!(
            TransferError::from(ModeEError::OffsetOverflow).reply_code(),
            426
        );
    }
}
