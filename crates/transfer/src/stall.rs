//! The stall policy: a send whose peer takes nothing for the stall
//! timeout is stopped (nginx's `send_timeout`), so a stalled reader does
//! not keep a file and a connection slot. The engine waits for
//! writability itself under its own `idle_timeout`; this bound is the
//! door's, per transfer, and counts any byte the peer took as progress.

use std::future::Future;
use std::time::Duration;

use sluice_engine::{Cancel, Counters};

use crate::TransferError;

/// Longest gap between two progress checks.
const TICK: Duration = Duration::from_secs(1);

/// Runs `work`; when `counters` show no byte sent for `timeout`, cancels
/// `cancel` (queued disk work of the transfer is dropped) and returns
/// [`TransferError::Stalled`].
pub(crate) async fn watch<T>(
    work: impl Future<Output = Result<T, TransferError>>,
    counters: &Counters,
    timeout: Duration,
    cancel: &Cancel,
) -> Result<T, TransferError> {
    tokio::pin!(work);
    // Most small answers are taken by the socket at once: finish those
    // without arming a timer at all.
    tokio::select! {
        biased;
        r = &mut work => return r,
        _ = std::future::ready(()) => {}
    }
    let tick = TICK.min(timeout);
    let mut last = counters.snapshot().bytes_sent;
    let mut quiet = Duration::ZERO;
    loop {
        tokio::select! {
            r = &mut work => return r,
            _ = tokio::time::sleep(tick) => {
                let now = counters.snapshot().bytes_sent;
                if now == last {
                    quiet += tick;
                    if quiet >= timeout {
                        cancel.cancel();
                        return Err(TransferError::Stalled);
                    }
                } else {
                    last = now;
                    quiet = Duration::ZERO;
                }
            }
        }
    }
}
