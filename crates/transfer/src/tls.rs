//! FTPS data connections under `PROT P`: MODE S downloads and uploads
//! through the engine's [`TlsConn`], and MODE E downloads over 1..n TLS
//! connections (checked here, then sent by `send.rs`'s MODE E sender, the
//! one clear connections use). MODE E
//! uploads over TLS are `receive.rs`'s receiver with a handshake per
//! connection (`receive_mode_e_protected`).

use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sluice_engine::{Cancel, Engine, FileWriter, TlsConn};

use crate::limits::{MAX_STREAMS, STREAM_PIECE};
use crate::receive::range_hook;
use crate::{Conn, Mode, Progress, SendSpec, TransferError};

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
    let conns = conns.into_iter().map(Conn::from).collect();
    crate::send::send_extended(spec, block_size, base, conns, false, progress, cancel)
        .await
        .map(|(n, _)| n)
}
