//! Transfer errors, and whose fault each one is ([`Fault`]). The doors
//! map the fault to their own answer: FTP to a reply code
//! (server `ftp/transfer.rs`), HTTP to a status before the head or a
//! close after a partial body (server `http/failure.rs`). Nothing here
//! knows either protocol's codes.

use std::fmt;
use std::io;

use sluice_engine::EngineError;
use sluice_ftp::mode_e::ModeEError;

/// Why a transfer ended without completing.
#[derive(Debug)]
pub enum TransferError {
    /// ABOR, the session closed, or the door stopped it ([`Fault::Cancelled`]).
    Cancelled,
    /// A data connection failed or closed early ([`Fault::PeerGone`]).
    Connection(io::Error),
    /// The peer took (or sent) nothing for the stall timeout
    /// ([`Fault::PeerGone`]).
    Stalled,
    /// The peer broke MODE E framing ([`Fault::PeerProtocol`]).
    Framing(ModeEError),
    /// MODE E data ended before the announced number of EODs
    /// ([`Fault::PeerGone`]: its connections closed early).
    Incomplete {
        /// EODs seen.
        eods: u64,
        /// EODs the EOF block announced (0 if none arrived).
        expected: u64,
    },
    /// The peer exceeded a bound (too many streams, too sparse blocks)
    /// ([`Fault::PeerProtocol`]).
    Limit(&'static str),
    /// Reading or writing the file failed ([`Fault::Disk`]).
    Disk(io::Error),
    /// The disk is full or over quota ([`Fault::DiskFull`]).
    DiskFull(io::Error),
    /// The file is shorter than the requested range: it shrank under us
    /// ([`Fault::Disk`]).
    ShortFile {
        /// Offset where the file ended.
        at: u64,
    },
    /// A local resource failed (the disk threads are gone, a job
    /// panicked) or the caller asked for something this layer cannot do
    /// ([`Fault::Local`]).
    Setup(&'static str),
}

/// Whose fault a [`TransferError`] is: what a door needs to choose its
/// answer, and what the logs need to tell a client problem from ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Stopped on purpose (ABOR, session or server closing).
    Cancelled,
    /// The peer went away, reset, or stopped taking or sending data.
    PeerGone,
    /// The peer sent something the protocol forbids or a bound refuses.
    PeerProtocol,
    /// The file could not be read or written (I/O error, shrank).
    Disk,
    /// The disk is full or over quota.
    DiskFull,
    /// Ours: a local resource or an internal error.
    Local,
}

impl TransferError {
    /// Whose fault this is.
    pub fn fault(&self) -> Fault {
        match self {
            TransferError::Cancelled => Fault::Cancelled,
            TransferError::Connection(_)
            | TransferError::Stalled
            | TransferError::Incomplete { .. } => Fault::PeerGone,
            TransferError::Framing(_) | TransferError::Limit(_) => Fault::PeerProtocol,
            TransferError::Disk(_) | TransferError::ShortFile { .. } => Fault::Disk,
            TransferError::DiskFull(_) => Fault::DiskFull,
            TransferError::Setup(_) => Fault::Local,
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
            TransferError::Stalled => f.write_str("Peer took nothing within the stall timeout"),
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
    fn engine_errors_are_typed_by_whose_fault_they_are() {
        let fault = |e: EngineError| TransferError::from(e).fault();
        assert_eq!(
            fault(EngineError::Disk(io::Error::from_raw_os_error(28))),
            Fault::DiskFull
        );
        assert_eq!(
            fault(EngineError::Disk(io::Error::from_raw_os_error(122))),
            Fault::DiskFull
        );
        assert_eq!(
            fault(EngineError::Disk(io::Error::from_raw_os_error(5))),
            Fault::Disk
        );
        assert_eq!(fault(EngineError::ShortFile { at: 7 }), Fault::Disk);
        assert_eq!(fault(EngineError::Cancelled), Fault::Cancelled);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(fault(EngineError::Connection(reset)), Fault::PeerGone);
        assert_eq!(fault(EngineError::Idle), Fault::PeerGone);
        assert_eq!(fault(EngineError::PoolClosed), Fault::Local);
        assert_eq!(fault(EngineError::DiskJobPanicked), Fault::Local);
        assert_eq!(
            TransferError::from(ModeEError::OffsetOverflow).fault(),
            Fault::PeerProtocol
        );
        assert_eq!(TransferError::Limit("x").fault(), Fault::PeerProtocol);
        assert_eq!(TransferError::Stalled.fault(), Fault::PeerGone);
        assert_eq!(
            TransferError::Incomplete {
                eods: 1,
                expected: 2
            }
            .fault(),
            Fault::PeerGone
        );
        assert_eq!(TransferError::Setup("x").fault(), Fault::Local);
    }
}
