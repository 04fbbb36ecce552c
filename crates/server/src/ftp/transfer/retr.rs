//! RETR/ERET: a download as a transfer, from the ranges the client still
//! needs to the 226 (MODE S waits for the client's close first).

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) async fn retr(
    job: &Job,
    path: &VirtualPath,
    offset: u64,
    len: Option<u64>,
    skip: &[std::ops::Range<u64>],
    data: &DataSpec,
    events: &mpsc::UnboundedSender<Event>,
    cached: Vec<TcpStream>,
    progress: &Arc<Progress>,
) -> Result<u64, OpError> {
    let started = Instant::now();
    let (store, p) = (Arc::clone(&job.store), path.clone());
    let file = blocking(job, move || {
        check_names_dir(store.root(), &p)?;
        store.open_read(p.as_str()).map_err(op_error)
    })
    .await??;
    let size = file.metadata().map_err(|e| op_error(e.into()))?.len();
    if offset > size {
        return Err(OpError::OffsetBeyondEof);
    }
    let len_given = len.is_some();
    let len = match len {
        // ERET past the end: send what exists (Globus servers do the same).
        Some(l) => l.min(size - offset),
        None => size - offset,
    };
    let mode = transfer_mode(data);
    let ranges = gaps(offset, offset + len, skip);
    let total: u64 = ranges.iter().map(|r| r.len).sum();
    let spec = SendSpec {
        file: Arc::new(file),
        ranges,
        mode,
    };
    let n = if data.mode == TransferMode::ExtendedBlock {
        data.parallelism
    } else {
        1
    };
    // The session hands over kept connections only for a clear MODE E
    // download with as many streams as they are.
    let reusing = !cached.is_empty();
    let mut conns = if reusing {
        tracing::debug!(streams = cached.len(), "reusing kept data connections");
        let _ = events.send(Event::StartedReusing(Some(total)));
        cached
    } else {
        let _ = events.send(Event::Started(Some(total)));
        open_data(job, data, n).await?
    };
    // MODE S: keep a second handle on the socket to see the client close.
    let watch = match data.mode {
        TransferMode::Stream => conns.first().and_then(watch_handle),
        TransferMode::ExtendedBlock => None,
    };
    let n = if data.protected {
        // PROT P: every data connection is TLS, in MODE S and MODE E.
        let base = if len_given { offset } else { 0 };
        let mut secured = Vec::with_capacity(conns.len());
        for c in conns.drain(..) {
            secured.push(handshake_data(job, c, data).await?);
        }
        let t = transfer(job, progress);
        let fut = t.send_tls(spec, base, secured);
        with_markers(fut, data, progress, false, events)
            .await
            .map_err(|e| transfer_error(&e, &job.cancel))?
    } else {
        // ERET P k len in MODE E numbers its blocks from k (GFD.20, and what
        // globus-gridftp-server sends); REST n + RETR keeps file offsets.
        let base = if len_given { offset } else { 0 };
        let conns: Vec<_> = conns
            .into_iter()
            .map(|c| {
                job.engine
                    .data_conn_in(c, asked_buffer(data), job.cue.clone())
            })
            .collect();
        let t = transfer(job, progress);
        if data.mode == TransferMode::ExtendedBlock {
            // Every stream ends with EOD without CLOSE and stays open for
            // the next RETR on this channel: a small file then costs the
            // client one round trip, not a connection setup and a slow
            // start (the session drops them on PORT/PASV/MODE).
            let fut = t.send_keeping(&job.engine, spec, base, conns);
            let (n, kept) = with_markers(fut, data, progress, false, events)
                .await
                .map_err(|e| transfer_error(&e, &job.cancel))?;
            if !kept.is_empty() && !job.cancel.is_cancelled() {
                let _ = events.send(Event::Kept(data.channel, kept, Direction::Outgoing));
            }
            n
        } else {
            let fut = t.send(&job.engine, spec, base, conns);
            let r = with_markers(fut, data, progress, false, events).await;
            r.map_err(|e| transfer_error(&e, &job.cancel))?
        }
    };
    if let Some(w) = watch {
        // Send 226 once the client has closed its end (it has read to our
        // FIN), or after CLIENT_CLOSE_WAIT. A fast 1-byte transfer could
        // otherwise put 150 and 226 in one segment, and aria2c 1.36 reads
        // both but acts on the 150 only, then waits 60 s for a 226 it
        // already has. vsftpd's slower 226 hides the same race (it sends
        // 226 after a lingering close(): once our FIN is acknowledged,
        // about a round trip after the last byte).
        //
        // A client that has already sent its next command during this
        // transfer (`sluice get -r` sends the next file's EPSV and RETR
        // after the 150) reads replies in order, not the aria2c way:
        // its 226, and the 229 right behind it, go out as soon as the
        // data is sent and the socket shut down. Waiting for its close
        // would cost every file of a tree a round trip.
        if !client_pipelined(job, started) {
            let _ = tokio::time::timeout(CLIENT_CLOSE_WAIT, wait_eof(&w)).await;
        }
    }
    Ok(n)
}

/// Whether the client sent control bytes since `since` (the transfer's
/// start): read by the session task already, or still unread on the
/// socket (peeked without waiting).
fn client_pipelined(job: &Job, since: Instant) -> bool {
    if job.control_input.borrow().is_some_and(|t| t >= since) {
        return true;
    }
    let Some(c) = &job.control else { return false };
    // The socket is non-blocking (tokio's): no bytes is WouldBlock.
    let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    matches!(socket2::SockRef::from(c).peek(&mut b), Ok(n) if n > 0)
}

/// How long a finished MODE S download waits for the client to close its
/// end before 226 goes out anyway.
const CLIENT_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Waits until the peer has closed its end (read returns 0) or errors.
async fn wait_eof(conn: &TcpStream) {
    let mut sink = [0u8; 512];
    loop {
        if conn.readable().await.is_err() {
            return;
        }
        match conn.try_read(&mut sink) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    }
}

/// The parts of `start..end` not covered by `skip` (sorted, disjoint).
pub(super) fn gaps(start: u64, end: u64, skip: &[std::ops::Range<u64>]) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let mut pos = start;
    for r in skip {
        if r.end <= pos {
            continue;
        }
        if r.start >= end {
            break;
        }
        if r.start > pos {
            out.push(ByteRange::new(pos, r.start - pos));
        }
        pos = pos.max(r.end);
    }
    if pos < end {
        out.push(ByteRange::new(pos, end - pos));
    }
    out
}

fn transfer_mode(data: &DataSpec) -> Mode {
    match data.mode {
        TransferMode::Stream => Mode::Stream,
        TransferMode::ExtendedBlock => Mode::extended(),
    }
}
