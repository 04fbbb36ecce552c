//! FTPS data connections under `PROT P`: MODE S downloads and uploads
//! through the engine's [`TlsConn`], and MODE E downloads over 1..n TLS
//! connections (the same block queue as in clear, `send.rs`). MODE E
//! uploads over TLS are `receive.rs`'s receiver with a handshake per
//! connection (`receive_mode_e_protected`).

use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use sluice_engine::{Cancel, Engine, FileWriter, TlsConn};
use sluice_ftp::mode_e::BlockHeader;
use tokio::task::JoinSet;

use crate::limits::{MAX_STREAMS, STREAM_PIECE};
use crate::receive::range_hook;
use crate::spec::BlockQueue;
use crate::{Mode, Progress, SendSpec, TransferError};

/// Sends the spec's ranges (MODE S) over `conn`, then TLS close_notify and
/// FIN (the end of data); returns the payload bytes sent.
pub async fn send_stream_tls(
    spec: SendSpec,
    conn: &mut TlsConn,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    spec.validate()?;
    if spec.mode != Mode::Stream {
        return Err(TransferError::Setup(
            "TLS data connections carry MODE S only",
        ));
    }
    let mut total = 0;
    for r in &spec.ranges {
        let mut pos = r.offset;
        while pos < r.end() {
            let len = (r.end() - pos).min(STREAM_PIECE);
            let n = conn
                .send_range(&spec.file, pos, len, &[], progress.counters(), &cancel)
                .await?;
            progress.add_bytes(n);
            total += n;
            pos += n;
        }
    }
    conn.shutdown().await.map_err(TransferError::Connection)?;
    Ok(total)
}

/// MODE S upload over TLS: writes everything `conn` delivers into `file`
/// from `start_offset` until the peer ends the stream; returns bytes
/// written. Answers the client's close_notify with ours (Python's ftplib
/// waits for it). The caller syncs and renames.
pub async fn receive_stream_tls(
    engine: &Engine,
    file: Arc<File>,
    start_offset: u64,
    conn: &mut TlsConn,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    let overflow = Arc::new(AtomicBool::new(false));
    let mut w = FileWriter::new(engine, file, Arc::clone(progress.counters()), cancel)
        .on_written(range_hook(&progress, &overflow));
    let got = w.copy_tls_to_eof(conn, start_offset).await?;
    let written = w.finish().await?;
    debug_assert_eq!(got, written);
    let _ = conn.shutdown().await;
    Ok(written)
}

/// MODE E download over TLS connections: blocks handed out in file order
/// to whichever stream is ready, each stream ends with EOD (stream 0 also
/// EOF = stream count), close_notify and FIN, as `send.rs` does in clear.
/// Headers carry `file offset - base` (ERET). Returns payload bytes sent.
pub async fn send_extended_tls(
    spec: SendSpec,
    base: u64,
    conns: Vec<TlsConn>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    spec.validate()?;
    let Mode::Extended { block_size } = spec.mode else {
        return Err(TransferError::Setup("MODE E sender given MODE S"));
    };
    if conns.is_empty() || conns.len() > MAX_STREAMS {
        return Err(TransferError::Setup("MODE E needs 1..=64 data connections"));
    }
    if spec.ranges.iter().any(|r| r.len > 0 && r.offset < base) {
        return Err(TransferError::Setup(
            "MODE E header base beyond a range's offset",
        ));
    }
    let queue = Arc::new(Mutex::new(BlockQueue::new(&spec.ranges, block_size, base)));
    let n_streams = conns.len() as u64;
    let inner = Cancel::new();
    let mut tasks = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let eof = (i == 0).then_some(n_streams);
        let (file, queue, progress, inner) = (
            Arc::clone(&spec.file),
            Arc::clone(&queue),
            Arc::clone(&progress),
            inner.clone(),
        );
        tasks.spawn(
            async move { tls_stream_task(conn, &file, &queue, eof, &progress, &inner).await },
        );
    }
    crate::send::join_streams(tasks, &inner, &cancel).await
}

async fn tls_stream_task(
    mut conn: TlsConn,
    file: &Arc<File>,
    queue: &Mutex<BlockQueue>,
    eof: Option<u64>,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<u64, TransferError> {
    let mut sent = 0;
    loop {
        let block = match queue.lock() {
            Ok(mut q) => q.next_block(),
            Err(_) => return Err(TransferError::Setup("block queue poisoned")),
        };
        let Some((b, wire_offset)) = block else { break };
        let header = BlockHeader::data(wire_offset, b.len).encode();
        let n = conn
            .send_range(file, b.offset, b.len, &header, progress.counters(), cancel)
            .await?;
        progress.add_bytes(n);
        sent += n;
    }
    let end = BlockHeader::end(eof, true).encode();
    conn.send_bytes(&end, progress.counters(), cancel).await?;
    conn.shutdown().await.map_err(TransferError::Connection)?;
    Ok(sent)
}
