//! Downloads: MODE S over one connection, MODE E over 1..n connections.
//!
//! MODE E: blocks are handed out in file order to whichever stream is ready
//! for its next one (a stream asks when its previous block has been taken
//! by the kernel), so a faster stream carries more blocks. When the queue
//! is empty each stream sends one empty header with EOD|CLOSE and closes;
//! stream 0's header also carries EOF with the offset field = number of
//! streams (the EOD count), as Globus does (descriptor 0x4C).
//!
//! Kept connections ([`send_keeping`]): each stream ends with EOD but
//! without CLOSE and stays open for the session's next transfer
//! (globus-gridftp-server does this for every MODE E download: from the
//! second file on it answers `125 ... reusing existing data connection`
//! and a small file costs no connection setup).

use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_engine::verdict::SendTally;
use sluice_engine::{Cancel, DataConn, Engine, IntoDataConn, Readers, SharedRead};
use sluice_ftp::mode_e::BlockHeader;
use sluice_platform::tcp;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::limits::{MAX_STREAMS, STREAM_PIECE};
use crate::send_shared::{send_extended_shared, send_in_order};
use crate::spec::BlockQueue;
use crate::{Conn, Mode, Progress, SendSpec, TransferError};

/// Sends the spec's ranges over `conns` and closes them; returns the payload
/// bytes sent. MODE S needs exactly one connection. On cancellation or error
/// every stream task is stopped before this returns.
pub async fn send<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    conns: Vec<C>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    send_relative(engine, spec, 0, conns, progress, cancel).await
}

/// Like [`send`], but MODE E block headers carry `file offset - base`
/// (ERET P in MODE E numbers the partial region from 0, GFD.20). `base`
/// must not exceed any range's offset; MODE S ignores it.
pub async fn send_relative<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<C>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    let (n, _) = send_inner(engine, spec, base, conns, false, progress, cancel).await?;
    Ok(n)
}

/// Like [`send_relative`] in MODE E, but every stream ends with EOD
/// without CLOSE and is handed back open (the receiver knows the transfer
/// is over from the EOD count): the sockets for the next MODE E transfer
/// on the same data channel. MODE S closes as always and returns none.
pub async fn send_keeping(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<DataConn>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    send_inner(engine, spec, base, conns, true, progress, cancel).await
}

async fn send_inner<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<C>,
    keep: bool,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    spec.validate()?;
    if spec.ranges.iter().any(|r| r.len > 0 && r.offset < base) {
        return Err(TransferError::Setup(
            "MODE E header base beyond a range's offset",
        ));
    }
    // Each connection is an engine `DataConn` (socket settings applied
    // once, data path and quantum kept across pieces); the caller may have
    // made it, sized for what the peer asked.
    let conns: Vec<DataConn> = conns
        .into_iter()
        .map(|c| c.into_data_conn(engine))
        .collect();
    match spec.mode {
        Mode::Stream => {
            let mut it = conns.into_iter();
            let (Some(conn), None) = (it.next(), it.next()) else {
                return Err(TransferError::Setup(
                    "MODE S needs exactly one data connection",
                ));
            };
            // In-order sharing: the file's selector hands this download
            // its blocks in file order while another reader is about.
            let ranges: Vec<(u64, u64)> = spec.ranges.iter().map(|r| (r.offset, r.len)).collect();
            let readers = engine
                .join_readers_in_order(&spec.file, &ranges)
                .unwrap_or(Readers::Unshared);
            let _alone = match readers {
                Readers::Shared(read) => {
                    return send_stream_shared(&read, conn, &ranges, &progress, &cancel)
                        .await
                        .map(|n| (n, Vec::new()));
                }
                Readers::Alone(mark) => Some(mark),
                Readers::Unshared => None,
            };
            send_stream(&spec, conn, &progress, &cancel)
                .await
                .map(|n| (n, Vec::new()))
        }
        Mode::Extended { block_size } => {
            if conns.is_empty() || conns.len() > MAX_STREAMS {
                return Err(TransferError::Setup("MODE E needs 1..=64 data connections"));
            }
            // Circus: readers of one file share its blocks, in any order.
            // A lone reader (`--sharing auto`) keeps its mark on the file
            // while it sends, so the next reader of the file is shared.
            let _alone = match share(engine, &spec, conns.len()) {
                Readers::Shared(read) => {
                    return send_extended_shared(
                        read, block_size, base, conns, keep, progress, cancel,
                    )
                    .await;
                }
                Readers::Alone(mark) => Some(mark),
                Readers::Unshared => None,
            };
            let conns = conns.into_iter().map(Conn::from).collect();
            send_extended(spec, block_size, base, conns, keep, progress, cancel).await
        }
    }
}

/// How the download reads its file: from its shared selector, alone, or
/// unshared (a file that cannot be told apart, `fstat` failing, is sent
/// unshared).
fn share(engine: &Engine, spec: &SendSpec, streams: usize) -> Readers {
    let ranges: Vec<(u64, u64)> = spec.ranges.iter().map(|r| (r.offset, r.len)).collect();
    match engine.join_readers(&spec.file, &ranges, streams) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("not shared: {e}");
            Readers::Unshared
        }
    }
}

async fn send_stream(
    spec: &SendSpec,
    mut conn: DataConn,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<u64, TransferError> {
    let watch = Watch::start(conn.stream());
    let mut total = 0;
    for r in &spec.ranges {
        let mut pos = r.offset;
        while pos < r.end() {
            // Pieces keep progress current; each is still many chunks.
            let len = (r.end() - pos).min(STREAM_PIECE);
            let n = conn
                .send_range(&spec.file, pos, len, &[], progress.counters(), cancel)
                .await?;
            progress.add_bytes(n);
            total += n;
            pos += n;
        }
    }
    // End of data in MODE S is the close; FIN follows the queued data.
    conn.shutdown().await.map_err(TransferError::Connection)?;
    watch.finish(conn.stream(), progress);
    Ok(total)
}

/// MODE S from the file's shared selector (in order).
async fn send_stream_shared(
    read: &SharedRead,
    mut conn: DataConn,
    ranges: &[(u64, u64)],
    progress: &Progress,
    cancel: &Cancel,
) -> Result<u64, TransferError> {
    let watch = Watch::start(conn.stream());
    let len = ranges.iter().map(|r| r.1).sum();
    let total = send_in_order(
        &mut conn,
        read,
        &[],
        len,
        progress.counters(),
        cancel,
        |n| progress.add_bytes(n),
    )
    .await?;
    conn.shutdown().await.map_err(TransferError::Connection)?;
    watch.finish(conn.stream(), progress);
    Ok(total)
}

/// MODE E over clear or TLS connections (`tls.rs` after its checks):
/// blocks handed out in file order to whichever stream is ready. With
/// `keep`, clear connections end without CLOSE and come back open.
pub(crate) async fn send_extended(
    spec: SendSpec,
    block_size: u64,
    base: u64,
    conns: Vec<Conn>,
    keep: bool,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    let queue = Arc::new(Mutex::new(BlockQueue::new(&spec.ranges, block_size, base)));
    let n_streams = conns.len() as u64;
    // Our own token, so one failing stream stops the others.
    let inner = Cancel::new();
    let mut tasks = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let eof = if i == 0 { Some(n_streams) } else { None };
        let (file, queue, progress, inner) = (
            Arc::clone(&spec.file),
            Arc::clone(&queue),
            Arc::clone(&progress),
            inner.clone(),
        );
        tasks.spawn(
            async move { stream_task(conn, &file, &queue, eof, keep, &progress, &inner).await },
        );
    }
    join_streams(tasks, &inner, &cancel).await
}

/// Waits for every stream task of a MODE E transfer: the first error
/// stops the others (through `inner`) and is the result; the caller's
/// `cancel` stops them all.
pub(crate) async fn join_streams(
    mut tasks: JoinSet<Result<(u64, Option<TcpStream>), TransferError>>,
    inner: &Cancel,
    cancel: &Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    let mut total = 0u64;
    let mut kept = Vec::new();
    let mut first_err: Option<TransferError> = None;
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok((n, conn)))) => {
                    total += n;
                    kept.extend(conn);
                }
                Some(Ok(Err(e))) => {
                    inner.cancel();
                    first_err.get_or_insert(e);
                }
                Some(Err(_panic_or_abort)) => {
                    inner.cancel();
                    first_err.get_or_insert(TransferError::Setup("sender task failed"));
                }
            },
            _ = cancel.cancelled(), if !inner.is_cancelled() => {
                inner.cancel();
                first_err.get_or_insert(TransferError::Cancelled);
            }
        }
    }
    match first_err {
        // A stream that stopped because another failed reports Cancelled;
        // the first error is the cause.
        Some(e) => Err(e),
        None => Ok((total, kept)),
    }
}

async fn stream_task(
    mut conn: Conn,
    file: &Arc<std::fs::File>,
    queue: &Mutex<BlockQueue>,
    eof: Option<u64>,
    keep: bool,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<(u64, Option<TcpStream>), TransferError> {
    let watch = Watch::start(conn.tcp());
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
    // Only a clear connection is kept (a TLS one would need its session
    // carried over too).
    let keep = keep && matches!(conn, Conn::Plain(_));
    let end = BlockHeader::end(eof, !keep).encode();
    conn.send_bytes(&end, progress.counters(), cancel).await?;
    watch.finish(conn.tcp(), progress);
    match conn {
        Conn::Plain(c) if keep => Ok((sent, Some(c.into_stream()))),
        mut conn => {
            conn.shutdown().await.map_err(TransferError::Connection)?;
            Ok((sent, None))
        }
    }
}

/// A data connection's `TCP_INFO` at the start of its part of a transfer,
/// to tally what limited it at the end (a MODE E connection kept from an
/// earlier transfer counts from here, not from its handshake).
pub(crate) struct Watch(Option<(tcp::TcpInfo, Instant)>);

impl Watch {
    pub(crate) fn start(conn: &TcpStream) -> Watch {
        Watch(
            tcp::tcp_info(conn.as_fd())
                .ok()
                .map(|i| (i, Instant::now())),
        )
    }

    /// The connection has sent its last byte: its tally is read once the
    /// kernel has them all acknowledged ([`Progress::settle`]), or now if
    /// the socket cannot be kept.
    pub(crate) fn finish(self, conn: &TcpStream, progress: &Progress) {
        let Some((before, t0)) = self.0 else { return };
        match conn.as_fd().try_clone_to_owned() {
            Ok(fd) => progress.add_pending(before, t0, fd),
            Err(_) => {
                if let Ok(after) = tcp::tcp_info(conn.as_fd()) {
                    progress.add_tally(&SendTally::between(&before, &after, t0.elapsed()));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
