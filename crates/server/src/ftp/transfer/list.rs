//! Listings as transfers: LIST/NLST/MLSD produced off the event loop and sent
//! on the data connection, then the connection closed the way the client
//! expects.

use super::*;

pub(super) async fn list(
    job: &Job,
    path: &VirtualPath,
    format: ListFormat,
    data: &DataSpec,
    matching: Option<ListMatch>,
    events: &mpsc::UnboundedSender<Event>,
    cached: Vec<TcpStream>,
) -> Result<u64, OpError> {
    let (root, p, w) = (Arc::clone(&job.root), path.clone(), job.writable);
    let source = blocking(job, move || open_listing(&root, &p, format, w, matching)).await??;
    let reusing = !cached.is_empty();
    let _ = events.send(match reusing {
        true => Event::StartedReusing(None),
        false => Event::Started(None),
    });
    // A MODE E receiver waits for as many connections as it asked for
    // with OPTS RETR Parallelism (globus-url-copy -p N -fast lists this
    // way); the first carries the listing, every one ends with EOD and
    // the first also with EOF = connection count.
    let n = if data.mode == TransferMode::ExtendedBlock {
        data.parallelism.max(1)
    } else {
        1
    };
    let conns = match reusing {
        true => {
            tracing::debug!(target: LOG_TARGET, streams = cached.len(), "reusing kept data connections");
            cached
        }
        false => open_data(job, data, n).await?,
    };
    let count = conns.len() as u64;
    let mode_e = data.mode == TransferMode::ExtendedBlock;
    // MODE E listings keep their clear connections open as downloads do
    // (`sluice get -r` pipelines a level's MLSDs on one connection).
    let keep = mode_e && !data.protected;
    let mut kept = Vec::new();
    let mut secured = Vec::with_capacity(conns.len());
    for c in conns {
        secured.push(if data.protected {
            Conn::from(handshake_data(job, c, data).await?)
        } else {
            Conn::from(
                job.engine
                    .data_conn_in(c, asked_buffer(data), job.cue.clone()),
            )
        });
    }
    // A directory is read, rendered and sent a batch at a time
    // (crate::listing): memory per LIST is one batch, whatever its size.
    let (mut lister, mut whole) = match source {
        ListSource::Bytes(b) => (None, Some(b)),
        ListSource::Dir(reader, meta) => (
            Some(Lister::new(
                Arc::clone(&job.root),
                reader,
                Box::new(FtpLines::new(format, job.writable, meta)),
            )),
            None,
        ),
        ListSource::Matching(reader, m) => (
            Some(Lister::new(
                Arc::clone(&job.root),
                reader,
                Box::new(FtpLines::matching(format, job.writable, m)),
            )),
            None,
        ),
    };
    let mut sent = 0u64;
    // Listing bytes are a transfer too: the engine's counters,
    // cancellation and stalled-reader timeout apply, errors are typed.
    let t = Transfer::new(Progress::new(), job.cancel.clone());
    let write_all = async {
        let mut conns = secured.into_iter();
        if let Some(mut conn) = conns.next() {
            // MODE E: the last piece is held back to go out with the EOD
            // in one write (a small listing is then one segment, not three).
            let mut held: Option<(Vec<u8>, u64)> = None;
            loop {
                let piece = match (&mut lister, whole.take()) {
                    (_, Some(b)) => b,
                    (Some(l), None) => match l.next(&job.engine, &job.cancel).await {
                        Ok(Some(p)) => p.bytes,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(target: LOG_TARGET, error = %e, "listing stopped");
                            return Err(OpError::Local);
                        }
                    },
                    (None, None) => break,
                };
                if piece.is_empty() {
                    continue;
                }
                let len = piece.len() as u64;
                if mode_e {
                    if let Some((before, offset)) = held.replace((piece, sent)) {
                        t.send_piece(&mut conn, &before, Framing::Block { offset })
                            .await
                            .map_err(|e| transfer_error(&e, &job.cancel))?;
                    }
                } else {
                    t.send_piece(&mut conn, &piece, Framing::Raw)
                        .await
                        .map_err(|e| transfer_error(&e, &job.cancel))?;
                }
                sent += len;
            }
            let last = held.as_ref().map(|(b, o)| (b.as_slice(), *o));
            kept.extend(finish_list_conn(&t, conn, mode_e, keep, last, Some(count)).await?);
        }
        for conn in conns {
            kept.extend(finish_list_conn(&t, conn, mode_e, keep, None, None).await?);
        }
        Ok::<(), OpError>(())
    };
    tokio::select! {
        r = write_all => r?,
        _ = job.cancel.cancelled() => return Err(OpError::Aborted),
    }
    if !kept.is_empty() {
        let _ = events.send(Event::Kept(data.channel, kept, Direction::Outgoing));
    }
    Ok(sent)
}

/// Ends one listing data connection: MODE E's `last` block (bytes,
/// offset) and EOD (with EOF on the first) in one write, then close; with
/// `keep`, a clear MODE E connection stays open (no CLOSE) and comes back.
pub(super) async fn finish_list_conn(
    t: &Transfer,
    mut conn: Conn,
    mode_e: bool,
    keep: bool,
    last: Option<(&[u8], u64)>,
    eof: Option<u64>,
) -> Result<Option<TcpStream>, OpError> {
    let fail = |e: TransferError| transfer_error(&e, t.cancel());
    match conn {
        Conn::Plain(c) if mode_e && keep => {
            let mut conn = Conn::Plain(c);
            t.end_blocks_open(&mut conn, last, eof)
                .await
                .map_err(fail)?;
            match conn {
                Conn::Plain(c) => Ok(Some(c.into_stream())),
                _ => Ok(None),
            }
        }
        _ if mode_e => {
            t.end_blocks(&mut conn, last, eof).await.map_err(fail)?;
            Ok(None)
        }
        _ => {
            let _ = conn.shutdown().await;
            Ok(None)
        }
    }
}
