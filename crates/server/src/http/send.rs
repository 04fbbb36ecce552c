//! Sending a [`Plan`]: the head and any made-here bytes go out as the
//! prefix of the next file range, and every file range leaves through the
//! connection's engine `DataConn` (or `TlsConn`), so HTTP bodies take the same data
//! path (sendfile or copy), socket settings, quantum and counters as FTP,
//! kept across the requests of a kept-alive connection.
//!
//! The engine waits for writability itself (its own `idle_timeout`); on
//! top of that a watchdog here closes a response whose client has taken
//! nothing for `send_timeout` (nginx's `send_timeout`), so a stalled
//! reader does not keep a file and a connection slot.

use std::fmt;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Cancel, Counters, EngineError};

use crate::transport::Conn;
use sluice_http::{Plan, Segment};

/// Longest gap between two progress checks of the watchdog.
const WATCHDOG_TICK: Duration = Duration::from_secs(1);

/// Why a response was not sent in full.
#[derive(Debug)]
pub enum SendError {
    /// The client took no byte for the send timeout.
    Stalled,
    /// The plan named file bytes but no file was open (a bug).
    NoFile,
    /// The engine's sender failed (peer gone, disk error, short file).
    Engine(EngineError),
    /// A streamed listing could not be read on (its body is cut short).
    Listing(String),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Stalled => f.write_str("client took nothing within the send timeout"),
            SendError::NoFile => f.write_str("plan names file bytes without a file"),
            SendError::Engine(e) => write!(f, "{e}"),
            SendError::Listing(e) => write!(f, "listing stopped: {e}"),
        }
    }
}

impl From<EngineError> for SendError {
    fn from(e: EngineError) -> Self {
        SendError::Engine(e)
    }
}

/// Sends `plan` in full; `counters` counts what went out (head included).
pub async fn send_plan(
    conn: &mut Conn,
    plan: &Plan,
    file: Option<&Arc<File>>,
    counters: &Counters,
    send_timeout: Duration,
) -> Result<(), SendError> {
    let cancel = Cancel::new();
    let work = send_segments(conn, plan, file, counters, &cancel);
    tokio::pin!(work);
    // Most small answers are taken by the socket at once: finish those
    // without arming the watchdog's timer at all.
    tokio::select! {
        biased;
        r = &mut work => return r,
        _ = std::future::ready(()) => {}
    }
    let tick = WATCHDOG_TICK.min(send_timeout);
    let mut last = counters.snapshot().bytes_sent;
    let mut quiet = Duration::ZERO;
    loop {
        tokio::select! {
            r = &mut work => return r,
            _ = tokio::time::sleep(tick) => {
                let now = counters.snapshot().bytes_sent;
                if now == last {
                    quiet += tick;
                    if quiet >= send_timeout {
                        cancel.cancel();
                        return Err(SendError::Stalled);
                    }
                } else {
                    last = now;
                    quiet = Duration::ZERO;
                }
            }
        }
    }
}

async fn send_segments(
    conn: &mut Conn,
    plan: &Plan,
    file: Option<&Arc<File>>,
    counters: &Counters,
    cancel: &Cancel,
) -> Result<(), SendError> {
    // The common answer, head and one file range: no copy of the head.
    if let [Segment::File { offset, len }] = plan.body[..] {
        let f = file.ok_or(SendError::NoFile)?;
        conn.send_range(f, offset, len, &plan.head, counters, cancel)
            .await?;
        return Ok(());
    }
    // Bytes waiting to go out in front of the next file range: the head,
    // then (multipart) each part's header, so each reaches the kernel in
    // the same call as the file bytes that follow it.
    let mut pending: Vec<u8> = plan.head.clone();
    for seg in &plan.body {
        match seg {
            Segment::Bytes(b) => pending.extend_from_slice(b),
            Segment::File { offset, len } => {
                let f = file.ok_or(SendError::NoFile)?;
                conn.send_range(f, *offset, *len, &pending, counters, cancel)
                    .await?;
                pending.clear();
            }
        }
    }
    if !pending.is_empty() {
        conn.send_bytes(&pending, counters, cancel).await?;
    }
    Ok(())
}
