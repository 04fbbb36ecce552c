//! Uploads (STOR/APPE/ESTO): the file prepared under its temporary name, the
//! data connection(s) received into it, committed or kept partial by the
//! policy.

use super::*;

/// [`Upload::prepare`] off the loop, waiting out a busy partial for up to
/// [`BUSY_WAIT`] (with backoff; ABOR or a closed session ends the wait).
pub(super) async fn prepare_upload(
    job: &Job,
    path: &VirtualPath,
    kind: StoreKind,
) -> Result<Upload, OpError> {
    let deadline = Instant::now() + BUSY_WAIT;
    let mut pause = Duration::from_millis(5);
    let mut said = false;
    loop {
        let (root, p, policy) = (Arc::clone(&job.root), path.clone(), job.partials);
        match blocking(job, move || Upload::prepare(&root, &p, kind, &policy)).await? {
            Err(OpError::Busy) if Instant::now() + pause < deadline => {
                if !said {
                    tracing::info!(target: LOG_TARGET, path = %path, "upload waits for another upload of this name to let go");
                    said = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = job.cancel.cancelled() => return Err(OpError::Busy),
                }
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            r => return r,
        }
    }
}

pub(super) async fn stor(
    job: &Job,
    path: &VirtualPath,
    kind: StoreKind,
    data: &DataSpec,
    events: &mpsc::UnboundedSender<Event>,
    cached: Vec<TcpStream>,
    progress: &Arc<Progress>,
) -> Result<u64, OpError> {
    let upload = prepare_upload(job, path, kind).await?;
    let _ = events.send(Event::Started(None));
    let file = upload.file();
    let result: Result<u64, OpError> = async {
        if data.mode == TransferMode::Stream {
            let mut conns = open_data(job, data, 1).await?;
            let conn = conns.pop().ok_or(OpError::DataConnection)?;
            if data.protected {
                let mut tls = handshake_data(job, conn, data).await?;
                return transfer(job, progress)
                    .receive_stream_tls(&job.engine, file, upload.start, &mut tls)
                    .await
                    .map_err(|e| transfer_error(&e, &job.cancel));
            }
            job.engine.prepare_socket_sized(&conn, asked_buffer(data));
            let t = transfer(job, progress);
            let fut = t.receive_stream(&job.engine, file, upload.start, conn);
            with_markers(fut, data, progress, true, events)
                .await
                .map_err(|e| transfer_error(&e, &job.cancel))
        } else {
            // ESTO A k and APPE (= ESTO at the current size) number their
            // blocks from the start of the region; STOR and REST keep file
            // offsets.
            let base = match kind {
                StoreKind::Adjusted(_) | StoreKind::Append => upload.start,
                StoreKind::Replace | StoreKind::Restart(_) | StoreKind::RestartRanges(_) => 0,
            };
            let protect = if data.protected {
                Some(protect_data(job)?)
            } else {
                None
            };
            let (tx, rx) = mpsc::channel(8);
            let acceptor = accept_all(job, data, tx, cached).await?;
            let t = transfer(job, progress);
            let fut = t.receive_mode_e(&job.engine, file, base, rx, protect);
            let r = with_markers(fut, data, progress, true, events).await;
            acceptor.abort();
            let summary = r.map_err(|e| transfer_error(&e, &job.cancel))?;
            if !summary.kept.is_empty() && !job.cancel.is_cancelled() {
                let _ = events.send(Event::Kept(data.channel, summary.kept, Direction::Incoming));
            }
            Ok(summary.bytes)
        }
    }
    .await;
    // The control connection closed (or ABOR came) while the data
    // connection ended: do not present what arrived as complete.
    let result = result.and_then(|n| {
        if job.cancel.is_cancelled() {
            Err(OpError::Aborted)
        } else {
            Ok(n)
        }
    });
    let mut synced = false;
    let result = match result {
        Ok(n) if data.mode == TransferMode::Stream => {
            // The commit's fsync starts now, while we look at the control
            // connection, so the look costs no time when the disk is slow.
            let f = upload.file();
            let engine = job.engine.clone();
            let sync = tokio::spawn(async move { engine.sync_data(&f).await });
            let dead = control_closes_within(job, CONTROL_CLOSE_GRACE).await;
            // That sync is the commit's: it need not sync again.
            synced = matches!(sync.await, Ok(Ok(())));
            if dead || job.cancel.is_cancelled() {
                Err(OpError::Aborted)
            } else {
                Ok(n)
            }
        }
        r => r,
    };
    let root = Arc::clone(&job.root);
    let failed = result.as_ref().err().copied();
    let finished = blocking(job, move || match failed {
        None if synced => upload.commit_synced(&root),
        None => upload.commit(&root),
        Some(why) => {
            upload.fail(&root, why);
            Ok(())
        }
    })
    .await;
    match (result, finished) {
        (Ok(n), Ok(Ok(()))) => Ok(n),
        (Ok(_), Ok(Err(e))) | (Ok(_), Err(e)) => Err(e),
        (Err(e), _) => Err(e),
    }
}
