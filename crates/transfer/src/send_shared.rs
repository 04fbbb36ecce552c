//! Downloads under Circus sharing (`--sharing auto|circus`).
//!
//! MODE E: the file's shared selector in the engine decides which block
//! each stream sends next, in any order; every block goes out with its
//! MODE E offset and the client reassembles (GFD.20 allows any order). The
//! end of data is as in `send.rs`: an empty EOD|CLOSE header per stream,
//! stream 0's with EOF and the EOD count.
//!
//! In order (MODE S, HTTP bodies): one connection takes the selector's
//! pieces as they come, which for an in-order reader is file order
//! ([`send_in_order`]).

use std::sync::Arc;

use sluice_engine::{Cancel, Counters, DataConn, EngineError, SharedRead};
use sluice_ftp::mode_e::BlockHeader;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::send::{join_streams, Watch};
use crate::{Progress, TransferError};

/// Sends what `read` hands out over `conns` in MODE E blocks of at most
/// `block_size`, header offsets `file offset - base`; returns the payload
/// bytes sent.
pub(crate) async fn send_extended_shared(
    read: SharedRead,
    block_size: u64,
    base: u64,
    conns: Vec<DataConn>,
    keep: bool,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    let read = Arc::new(read);
    let n_streams = conns.len() as u64;
    let inner = Cancel::new();
    let mut tasks = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let eof = if i == 0 { Some(n_streams) } else { None };
        let (read, progress, inner) = (Arc::clone(&read), Arc::clone(&progress), inner.clone());
        tasks.spawn(async move {
            shared_stream(conn, &read, block_size, base, eof, keep, &progress, &inner).await
        });
    }
    // The demand is dropped when the last stream task lets go of `read`
    // (done, failed or cancelled).
    drop(read);
    join_streams(tasks, &inner, &cancel).await
}

#[allow(clippy::too_many_arguments)]
async fn shared_stream(
    mut conn: DataConn,
    read: &SharedRead,
    block_size: u64,
    base: u64,
    eof: Option<u64>,
    keep: bool,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<(u64, Option<TcpStream>), TransferError> {
    let watch = Watch::start(conn.stream());
    let mut sent = 0;
    while let Some(piece) = read.next(progress.counters(), cancel).await? {
        let end = piece.offset + piece.len;
        let mut pos = piece.offset;
        while pos < end {
            let len = (end - pos).min(block_size);
            let header = BlockHeader::data(pos - base, len).encode();
            let n = conn
                .send_piece(&header, &piece, pos, len, progress.counters(), cancel)
                .await?;
            progress.add_bytes(n);
            sent += n;
            pos += n;
        }
        read.sent(piece);
    }
    let end = BlockHeader::end(eof, !keep).encode();
    conn.send_bytes(&end, progress.counters(), cancel).await?;
    watch.finish(conn.stream(), progress);
    if keep {
        return Ok((sent, Some(conn.into_stream())));
    }
    conn.shutdown().await.map_err(TransferError::Connection)?;
    Ok((sent, None))
}

/// Sends the next `len` bytes `read` hands out (an in-order reader: the
/// next `len` bytes of its ranges, in file order) over `conn`, the first
/// behind `prefix`; returns the file bytes sent. `on_piece` hears of each
/// piece sent (progress).
pub(crate) async fn send_in_order(
    conn: &mut DataConn,
    read: &SharedRead,
    prefix: &[u8],
    len: u64,
    counters: &Counters,
    cancel: &Cancel,
    mut on_piece: impl FnMut(u64),
) -> Result<u64, EngineError> {
    let mut prefix = prefix;
    let mut sent = 0;
    while sent < len {
        let Some(piece) = read.next(counters, cancel).await? else {
            // Handed out in full before `len`: the ranges registered
            // were shorter than those sent (a caller's bug).
            return Err(EngineError::Cancelled);
        };
        let n = conn
            .send_piece(prefix, &piece, piece.offset, piece.len, counters, cancel)
            .await?;
        prefix = &[];
        sent += n;
        on_piece(n);
        read.sent(piece);
    }
    Ok(sent)
}
