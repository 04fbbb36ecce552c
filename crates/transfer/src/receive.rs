//! MODE E uploads: blocks from connections that arrive on a channel,
//! each written at its offset (MODE S: `receive_stream.rs`).

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;

use sluice_engine::{Cancel, Engine, FileWriter, ReadStatus, TlsConn, WrittenFn};
use sluice_ftp::limits::MAX_OFFSET;
use sluice_ftp::markers::RangeSet;
use sluice_ftp::mode_e::{Descriptor, Event, ModeEError, StreamDecoder, HEADER_LEN};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::limits::MAX_STREAMS;
use crate::{Progress, TransferError};

/// What a MODE E upload delivered.
#[derive(Debug)]
pub struct ReceiveSummary {
    /// Payload bytes written to the file.
    pub bytes: u64,
    /// Data connections that carried this transfer (one that closed or
    /// sent a lone CLOSE before its first block is not counted).
    pub streams: usize,
    /// File byte ranges written (the caller checks they cover what it expects).
    pub ranges: RangeSet,
    /// Connections that ended with EOD but without CLOSE: the sender keeps
    /// them open and may send the next transfer's blocks on them
    /// (GridFTP data channel caching, `globus-url-copy -fast`).
    pub kept: Vec<TcpStream>,
}

/// Hook that records written ranges into `progress` and flags overflow.
pub(crate) fn range_hook(progress: &Arc<Progress>, overflow: &Arc<AtomicBool>) -> Arc<WrittenFn> {
    let (p, o) = (Arc::clone(progress), Arc::clone(overflow));
    Arc::new(move |off, len| {
        if !p.add_range(off, len) {
            o.store(true, Ordering::Relaxed);
        }
    })
}

/// PROT P: the server side of the TLS handshake, run on each data
/// connection of a MODE E upload as it arrives (in the stream's own task,
/// so the handshakes of parallel streams overlap).
pub type Protect = Arc<
    dyn Fn(TcpStream) -> Pin<Box<dyn Future<Output = std::io::Result<TlsConn>> + Send>>
        + Send
        + Sync,
>;

/// One MODE E data connection: clear, or TLS under PROT P.
enum Wire {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

impl Wire {
    async fn read_exact(
        &mut self,
        w: &mut FileWriter,
        buf: &mut [u8],
    ) -> Result<ReadStatus, TransferError> {
        Ok(match self {
            Wire::Plain(c) => w.read_exact(c, buf).await?,
            Wire::Tls(c) => w.read_exact_tls(c, buf).await?,
        })
    }

    async fn copy_exact(
        &mut self,
        w: &mut FileWriter,
        at: u64,
        len: u64,
    ) -> Result<(), TransferError> {
        match self {
            Wire::Plain(c) => w.copy_exact(c, at, len).await?,
            Wire::Tls(c) => w.copy_exact_tls(c, at, len).await?,
        }
        Ok(())
    }

    /// The connection after its EOD, when the sender may send the next
    /// transfer on it (clear only: a TLS session is not handed on, the
    /// stream ends with close_notify).
    async fn after_eod(self, close: bool) -> Option<TcpStream> {
        match self {
            Wire::Plain(c) => (!close).then_some(c),
            Wire::Tls(mut c) => {
                let _ = c.shutdown().await;
                None
            }
        }
    }
}

/// How one MODE E stream ended.
enum StreamEnd {
    /// It carried part of the transfer and ended with EOD (or CLOSE).
    Eod {
        bytes: u64,
        eof_count: Option<u64>,
        /// The connection, when the sender keeps it (EOD without CLOSE).
        kept: Option<TcpStream>,
    },
    /// It closed, or sent a lone CLOSE, before any block: a cached
    /// connection the sender gave up on. Not part of this transfer.
    Unused,
}

/// MODE E upload: reads blocks from every connection that arrives on `conns`
/// and writes each at its offset, until the EOF block's EOD count is met.
/// Fails with 426 if the channel closes and all streams end first.
pub async fn receive_mode_e(
    engine: &Engine,
    file: Arc<File>,
    conns: mpsc::Receiver<TcpStream>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    receive_mode_e_relative(engine, file, 0, conns, progress, cancel).await
}

/// Like [`receive_mode_e`], but a block with header offset `o` lands at
/// file offset `base + o`: ESTO A k and APPE number their blocks from the
/// start of the written region (GFD.20). Progress ranges are file offsets.
pub async fn receive_mode_e_relative(
    engine: &Engine,
    file: Arc<File>,
    base: u64,
    conns: mpsc::Receiver<TcpStream>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    receive_mode_e_protected(engine, file, base, conns, None, progress, cancel).await
}

/// [`receive_mode_e_relative`] where, with `protect`, every connection
/// first completes a TLS handshake (PROT P) and carries its blocks inside
/// TLS. A failed handshake fails the transfer like a reset connection.
pub async fn receive_mode_e_protected(
    engine: &Engine,
    file: Arc<File>,
    base: u64,
    mut conns: mpsc::Receiver<TcpStream>,
    protect: Option<Protect>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<ReceiveSummary, TransferError> {
    let inner = Cancel::new();
    let idle = engine.config().idle_timeout;
    let overflow = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    let mut accepted = 0usize;
    let mut streams = 0usize;
    let mut eods = 0u64;
    let mut expected: Option<u64> = None;
    let mut bytes = 0u64;
    let mut kept = Vec::new();
    let mut channel_open = true;
    let mut result: Result<(), TransferError> = Ok(());
    loop {
        if expected.is_some_and(|n| eods >= n) {
            break;
        }
        if !channel_open && tasks.is_empty() {
            result = Err(TransferError::Incomplete {
                eods,
                expected: expected.unwrap_or(0),
            });
            break;
        }
        tokio::select! {
            c = conns.recv(), if channel_open => match c {
                Some(conn) => {
                    accepted += 1;
                    if accepted > MAX_STREAMS {
                        result = Err(TransferError::Limit("too many MODE E data connections"));
                        break;
                    }
                    let w = FileWriter::new(engine, Arc::clone(&file), Arc::clone(progress.counters()), inner.clone())
                        .on_written(range_hook(&progress, &overflow));
                    let ov = Arc::clone(&overflow);
                    let protect = protect.clone();
                    tasks.spawn(async move {
                        let wire = match protect {
                            None => Wire::Plain(conn),
                            Some(handshake) => Wire::Tls(Box::new(
                                handshake(conn).await.map_err(TransferError::Connection)?,
                            )),
                        };
                        read_stream(wire, w, base, &ov).await
                    });
                }
                None => channel_open = false,
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => match joined {
                Ok(Ok(StreamEnd::Unused)) => {}
                Ok(Ok(StreamEnd::Eod { bytes: n, eof_count, kept: k })) => {
                    streams += 1;
                    eods += 1;
                    bytes += n;
                    kept.extend(k);
                    if let Some(n) = eof_count {
                        // More EODs than we would ever accept streams for: wait no longer.
                        if n > MAX_STREAMS as u64 {
                            result = Err(TransferError::Limit("MODE E EOF announces too many streams"));
                            break;
                        }
                        expected = Some(n);
                    }
                }
                Ok(Err(e)) => {
                    result = Err(e);
                    break;
                }
                Err(_) => {
                    result = Err(TransferError::Setup("receiver task failed"));
                    break;
                }
            },
            _ = cancel.cancelled() => {
                result = Err(TransferError::Cancelled);
                break;
            }
            // Every stream has ended and the EODs fall short: wait for
            // another connection only as long as a stream may sit idle
            // (kept connections the sender closed unused, or a sender that
            // announced more streams than it opens, must not hang the session).
            _ = tokio::time::sleep(idle), if tasks.is_empty() && channel_open => {
                result = Err(TransferError::Incomplete {
                    eods,
                    expected: expected.unwrap_or(0),
                });
                break;
            }
        }
    }
    inner.cancel();
    tasks.shutdown().await;
    result?;
    Ok(ReceiveSummary {
        bytes,
        streams,
        ranges: progress.ranges(),
        kept,
    })
}

/// Reads one MODE E stream to its EOD (or CLOSE), writing every block at
/// `base` + its header offset.
///
/// Framing is the ftp crate's sans-I/O [`StreamDecoder`] (the one the
/// client and the fuzz target use): headers are read 17 bytes at a time
/// and fed to it; payload is read by the [`FileWriter`] straight from the
/// socket into its buffers where the decoder's `pending_payload` says,
/// then reported back with `consume_payload`, so no byte is copied twice.
async fn read_stream(
    mut conn: Wire,
    mut w: FileWriter,
    base: u64,
    overflow: &AtomicBool,
) -> Result<StreamEnd, TransferError> {
    let mut dec = StreamDecoder::new();
    let mut eof_count = None;
    let mut close = false;
    let mut first = true;
    while !dec.is_ended() {
        if let Some(p) = dec.pending_payload() {
            let at = base
                .checked_add(p.offset)
                .filter(|o| o.checked_add(p.remaining).is_some_and(|e| e <= MAX_OFFSET))
                .ok_or(ModeEError::OffsetOverflow)?;
            conn.copy_exact(&mut w, at, p.remaining).await?;
            dec.consume_payload(p.remaining)
                .ok_or(TransferError::Setup("MODE E payload out of step"))?;
            if overflow.load(Ordering::Relaxed) {
                return Err(TransferError::Limit("too many disjoint MODE E ranges"));
            }
            continue;
        }
        let mut hdr = [0u8; HEADER_LEN];
        if conn.read_exact(&mut w, &mut hdr).await? == ReadStatus::Eof {
            if first {
                return Ok(StreamEnd::Unused);
            }
            // The connection closed without EOD: data may be missing.
            return Err(TransferError::Connection(
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        if first && hdr[0] == Descriptor::CLOSE && hdr[1..9] == [0u8; 8] {
            // Globus closes a cached connection with a lone CLOSE header.
            return Ok(StreamEnd::Unused);
        }
        first = false;
        let mut input: &[u8] = &hdr;
        loop {
            let (used, event) = dec.handle_input(input)?;
            input = &input[used..];
            match event {
                Some(Event::Eof { eod_count }) => eof_count = Some(eod_count),
                Some(Event::Close) => close = true,
                Some(Event::Eod) | Some(Event::Data { .. }) => {}
                None if input.is_empty() => break,
                None => {}
            }
        }
    }
    w.finish().await?;
    Ok(StreamEnd::Eod {
        bytes: dec.payload_bytes(),
        eof_count,
        kept: conn.after_eod(close).await,
    })
}

#[cfg(test)]
pub(crate) mod tests;
