//! What the HTTP door does when a response's transfer fails, from whose
//! fault it is ([`Fault`]) and whether any byte of the response has left:
//! before the head, our own failure still gets a status (500, or 503 for
//! a passing shortage) and the connection closes; after it, the only
//! honest signal left is to close the connection short of the announced
//! length (RFC 9112 section 8). A peer that went away or a cancelled
//! transfer gets nothing more either way.

use sluice_http::Status;
use sluice_transfer::Fault;

/// The door's answer to a failed transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Nothing was sent yet: send this status instead, then close.
    Answer(Status),
    /// Close the connection (a partial body, or nobody to tell).
    Close,
}

/// The answer for a transfer that failed with `fault` after `sent` bytes
/// of the response (head included) went out.
pub fn after(fault: Fault, sent: u64) -> Failure {
    if sent > 0 {
        return Failure::Close;
    }
    match fault {
        Fault::Disk => Failure::Answer(Status::InternalServerError),
        // The disk threads or descriptors ran short: worth a retry.
        Fault::Local | Fault::DiskFull => Failure::Answer(Status::ServiceUnavailable),
        Fault::PeerGone | Fault::PeerProtocol | Fault::Cancelled => Failure::Close,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::EngineError;
    use sluice_transfer::TransferError;
    use std::io;

    fn fault(e: EngineError) -> Fault {
        TransferError::from(e).fault()
    }

    #[test]
    fn our_failures_before_the_head_get_a_status() {
        let eio = fault(EngineError::Disk(io::Error::from_raw_os_error(5)));
        assert_eq!(after(eio, 0), Failure::Answer(Status::InternalServerError));
        let short = fault(EngineError::ShortFile { at: 3 });
        assert_eq!(
            after(short, 0),
            Failure::Answer(Status::InternalServerError)
        );
        let pool = fault(EngineError::PoolClosed);
        assert_eq!(after(pool, 0), Failure::Answer(Status::ServiceUnavailable));
    }

    #[test]
    fn a_partial_body_or_a_gone_peer_closes() {
        let eio = fault(EngineError::Disk(io::Error::from_raw_os_error(5)));
        assert_eq!(after(eio, 1), Failure::Close);
        assert_eq!(
            after(fault(EngineError::ShortFile { at: 3 }), 4096),
            Failure::Close
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(
            after(fault(EngineError::Connection(reset)), 0),
            Failure::Close
        );
        assert_eq!(after(TransferError::Stalled.fault(), 0), Failure::Close);
        assert_eq!(after(fault(EngineError::Cancelled), 0), Failure::Close);
    }
}
