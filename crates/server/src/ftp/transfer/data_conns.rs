//! Data connections of one transfer: accepted on the passive listener (every
//! stream of MODE E), or connected out (PORT/EPRT), sized before the SYN, and
//! put under TLS when PROT P asks for it.

use super::*;

/// MODE E upload: the client (sender) opens the connections, so every
/// connection to the passive listener goes to the receiver until it has
/// seen the EOF block's EOD count. With PORT/EPRT we connect once.
/// Connections kept from the last upload go first; then no new one is
/// required (the client may send on those alone).
pub(super) async fn accept_all(
    job: &Job,
    data: &DataSpec,
    tx: mpsc::Sender<TcpStream>,
    cached: Vec<TcpStream>,
) -> Result<tokio::task::JoinHandle<()>, OpError> {
    if !cached.is_empty() {
        tracing::debug!(target: LOG_TARGET, streams = cached.len(), "reusing kept data connections");
        let listener = match (data.channel, job.passive.as_ref()) {
            (DataChannel::Passive, Some(p)) => Some(p.clone()),
            _ => None,
        };
        let (engine, buffer) = (job.engine.clone(), data.buffer);
        // In the task: there may be more kept connections than the
        // channel holds before the receiver starts taking them.
        return Ok(tokio::spawn(async move {
            for c in cached {
                if tx.send(c).await.is_err() {
                    return;
                }
            }
            // PORT/EPRT: nobody else will connect; dropping `tx` lets the
            // receiver fail instead of waiting if the kept ones fall short.
            if let Some(l) = listener {
                accept_more(engine, l, buffer, tx).await;
            }
        }));
    }
    match data.channel {
        DataChannel::Active(_) => {
            let conns = open_data(job, data, 1).await?;
            Ok(tokio::spawn(async move {
                for c in conns {
                    if tx.send(c).await.is_err() {
                        break;
                    }
                }
            }))
        }
        DataChannel::Passive => {
            let passive = job.passive.as_ref().ok_or(OpError::DataConnection)?;
            passive.resize(&job.engine, data.buffer);
            // The first connection must come in time; later ones may come
            // whenever, the receiver decides when it has all it needs.
            let first = tokio::select! {
                r = passive.accept_timeout() => r.map_err(|_| OpError::DataConnection)?,
                _ = job.cancel.cancelled() => return Err(OpError::Aborted),
            };
            job.engine.prepare_socket_sized(&first, asked_buffer(data));
            tracing::debug!(target: LOG_TARGET, streams = 1, "data connections made");
            let _ = tx.send(first).await;
            let engine = job.engine.clone();
            Ok(tokio::spawn(accept_more(
                engine,
                passive.clone(),
                data.buffer,
                tx,
            )))
        }
    }
}

/// Hands every further connection to the passive listener to the receiver.
pub(super) async fn accept_more(
    engine: Engine,
    listener: Passive,
    buffer: Option<u64>,
    tx: mpsc::Sender<TcpStream>,
) {
    while let Ok(c) = listener.accept().await {
        engine.prepare_socket_sized(&c, buffer.map(data::clamp_usize));
        tracing::debug!(target: LOG_TARGET, streams = 1, "data connections made");
        if tx.send(c).await.is_err() {
            break;
        }
    }
}

/// PROT P: the server side of a TLS handshake on a data connection (also
/// one we connected for PORT/EPRT, RFC 4217 section 7), resuming the
/// control connection's session when the client offers it.
pub(super) async fn handshake_data(
    job: &Job,
    conn: TcpStream,
    data: &DataSpec,
) -> Result<TlsConn, OpError> {
    let config = job.tls.clone().ok_or(OpError::DataConnection)?;
    // The engine's socket settings (and SBUF) before the handshake, as for
    // a clear data connection.
    job.engine.prepare_socket_sized(&conn, asked_buffer(data));
    let tls = tokio::select! {
        r = crate::tls::handshake(config, conn) => r.map_err(|e| {
            tracing::info!(target: LOG_TARGET, error = %e, "TLS handshake on a data connection failed");
            OpError::DataConnection
        })?,
        _ = job.cancel.cancelled() => return Err(OpError::Aborted),
    };
    tracing::debug!(target: LOG_TARGET, resumed = ?tls.get_ref().1.handshake_kind(), "data connection protected");
    Ok(job.engine.tls_conn_in(tls.into(), job.cue.clone()))
}

/// PROT P for a MODE E upload: the handshake [`handshake_data`] does, run
/// by the receiver on each connection as it arrives (the client opens as
/// many as it likes, so they cannot all be secured up front).
pub(super) fn protect_data(job: &Job) -> Result<Protect, OpError> {
    let config = job.tls.clone().ok_or(OpError::DataConnection)?;
    let engine = job.engine.clone();
    Ok(Arc::new(move |conn: TcpStream| {
        let (config, engine) = (Arc::clone(&config), engine.clone());
        Box::pin(async move {
            let tls = crate::tls::handshake(config, conn).await.inspect_err(|e| {
                tracing::info!(target: LOG_TARGET, error = %e, "TLS handshake on a MODE E data connection failed");
            })?;
            tracing::debug!(target: LOG_TARGET, resumed = ?tls.get_ref().1.handshake_kind(), "data connection protected");
            Ok(engine.tls_conn(tls.into()))
        })
    }))
}

/// Opens `n` data connections as the session arranged.
pub(super) async fn open_data(
    job: &Job,
    data: &DataSpec,
    n: u32,
) -> Result<Vec<TcpStream>, OpError> {
    tokio::select! {
        r = open_data_inner(job, data, n) => r,
        _ = job.cancel.cancelled() => Err(OpError::Aborted),
    }
}

pub(super) async fn open_data_inner(
    job: &Job,
    data: &DataSpec,
    n: u32,
) -> Result<Vec<TcpStream>, OpError> {
    let conns = match data.channel {
        DataChannel::Active(addr) => {
            data::connect(&job.engine, data.buffer, job.local_ip, addr, n).await
        }
        DataChannel::Passive => {
            let passive = job.passive.as_ref().ok_or(OpError::DataConnection)?;
            passive.resize(&job.engine, data.buffer);
            // A passive download takes the connections the client opens;
            // MODE S has one. (globus-url-copy sends MODE E data itself as
            // the active side, see docs.)
            passive.accept_timeout().await.map(|c| vec![c])
        }
    };
    // Each caller applies the engine's settings once, as a `DataConn`
    // (downloads, listings) or before receiving (uploads).
    if let Ok(c) = &conns {
        tracing::debug!(target: LOG_TARGET, streams = c.len(), "data connections made");
    }
    conns.map_err(|e| {
        tracing::debug!(target: LOG_TARGET, error = %e, "data connection failed");
        OpError::DataConnection
    })
}

/// The socket buffer the client asked for (SBUF), for the engine.
pub(super) fn asked_buffer(data: &DataSpec) -> Option<usize> {
    data.buffer.map(data::clamp_usize)
}
