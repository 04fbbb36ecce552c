//! Sending a [`Plan`] as a [`Transfer`] (layer 2, shared with the FTP
//! door): the head and any made-here bytes (multipart part headers) go out
//! as the prefix of the next file range, and every file range leaves
//! through the connection's engine `DataConn` (or `TlsConn`), so HTTP
//! bodies take the same data path (sendfile or copy), socket settings,
//! quantum, counters, cancellation and stall policy as FTP, kept across
//! the requests of a kept-alive connection.
//!
//! The stall policy is the transfer's: a response whose client has taken
//! nothing for `send_timeout` (nginx's `send_timeout`) fails with
//! `TransferError::Stalled`, so a stalled reader does not keep a file and
//! a connection slot. What the door does after a failure is
//! [`super::failure`]'s decision.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::Cancel;
use sluice_http::{Plan, Segment};
use sluice_transfer::{Part, Progress, Transfer, TransferError};

use crate::transport::Conn;

/// A fresh transfer for one response: its own progress and counters, its
/// own token, the door's stall bound.
pub fn response_transfer(send_timeout: Duration) -> Transfer {
    Transfer::new(Progress::new(), Cancel::new()).stall_after(send_timeout)
}

/// Sends `plan` in full through `transfer`; returns the body bytes sent.
pub async fn send_plan(
    conn: &mut Conn,
    plan: &Plan,
    file: Option<&Arc<File>>,
    transfer: &Transfer,
) -> Result<u64, TransferError> {
    let parts = plan.body.iter().map(part);
    transfer.send_body(conn, file, &plan.head, parts).await
}

// A named function, not a closure: the future stays `Send` for every
// lifetime (a closure's signature is not higher-ranked here).
fn part(seg: &Segment) -> Part<'_> {
    match seg {
        Segment::Bytes(b) => Part::Bytes(b),
        Segment::File { offset, len } => Part::File {
            offset: *offset,
            len: *len,
        },
    }
}
