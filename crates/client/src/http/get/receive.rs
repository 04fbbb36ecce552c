//! Receiving a download's body: each piece's connection handed to a drain
//! thread (length- or close-delimited bodies) or read here (chunked), into the
//! one writer, and the end checked (nothing missing, the writer's error first).

use super::*;

/// Drains every piece into the writer; checks nothing is missing.
#[allow(clippy::too_many_arguments)]
pub(super) fn receive(
    a: &GetArgs,
    u: &HttpUrl,
    auto: bool,
    fetch: Fetch,
    sink: Sink,
    prefix_file: Option<PathBuf>,
    stats: &Arc<Stats>,
    timeout: Duration,
) -> Result<()> {
    // Written buffers go back to a single drain for reuse (fresh pages
    // are zeroed and faulted in: measured as memset in a profile of a
    // one-stream download); several drains each allocate their own.
    let (recycle_tx, recycle_rx) = mpsc::sync_channel(writer::RECYCLE_SLOTS);
    let mut recycle_rx = Some(recycle_rx);
    let single = fetch.pieces.len() == 1;
    let w = Writer::start(
        WriterConfig {
            sink,
            already: fetch.already,
            size: fetch.size,
            mem_cap: a.opts.mem_cap,
            prefix_file,
            recycle: single.then_some(recycle_tx),
        },
        stats.clone(),
    )?;
    let progress = Progress::start(
        stats.clone(),
        fetch.size.map(|s| s - fetch.already),
        fetch.already,
        a.opts.quiet,
    );
    let splittable = auto
        && fetch.splittable
        && fetch.pieces.len() == 1
        && fetch.pieces[0].len.is_some()
        && fetch.pieces[0].x.head.framing(Method::Get) != BodyFraming::Chunked;
    Stats::add(&stats.streams_peak, fetch.pieces.len() as u64);
    let mut drains = Vec::new();
    let mut chunked = Vec::new();
    let mut failed = None;
    if let (true, Some(size)) = (splittable, fetch.size) {
        let etag = fetch.etag.clone();
        if let Some(first) = fetch.pieces.into_iter().next() {
            let r = crate::http::auto::receive(
                crate::http::auto::Job {
                    a,
                    u,
                    size,
                    etag: etag.as_deref(),
                    timeout,
                },
                first,
                &w,
                recycle_rx.take(),
                stats,
            );
            if let Err(e) = r {
                failed = Some(e);
            }
        }
        return finish(progress, w, failed);
    }
    for p in fetch.pieces {
        let Piece { x, start, len } = p;
        if x.head.framing(Method::Get) == BodyFraming::Chunked {
            let out = w.input();
            let st = stats.clone();
            let spawned = std::thread::Builder::new()
                .name("sluice-chunked".into())
                .spawn(move || read_chunked(x, start, len, &out, &st));
            match spawned {
                Ok(t) => chunked.push(t),
                Err(e) => {
                    failed = Some(ClientError::local("start reader thread", e));
                    break;
                }
            }
            continue;
        }
        let recycled = recycle_rx.take().filter(|_| single);
        match start_drain(
            a,
            Piece { x, start, len },
            &w,
            recycled,
            stats,
            timeout,
            None,
        ) {
            Ok(Some(d)) => drains.push(d),
            Ok(None) => break, // the writer stopped; its error says why
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    for d in drains {
        if let Err(e) = d.join() {
            failed.get_or_insert(e);
        }
    }
    for t in chunked {
        let r = t
            .join()
            .unwrap_or_else(|_| Err(ClientError::Bug("chunked reader panicked".into())));
        if let Err(e) = r {
            failed.get_or_insert(e);
        }
    }
    finish(progress, w, failed)
}

/// Ends the receiving: the writer's error first, then a drain's, then any
/// range that never arrived.
pub(super) fn finish(progress: Progress, w: Writer, failed: Option<ClientError>) -> Result<()> {
    progress.finish();
    let wrote = w.finish()?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !wrote.gaps.is_empty() {
        return Err(ClientError::Protocol(format!(
            "connection closed early: {} range(s) missing, first {:?}",
            wrote.gaps.len(),
            wrote.gaps[0]
        )));
    }
    Ok(())
}

/// Hands a piece's early body bytes to the writer and starts a drain
/// thread on its connection (its end cut short through `span`, if any).
/// `Ok(None)`: the writer has stopped.
pub(in crate::http) fn start_drain(
    a: &GetArgs,
    p: Piece,
    w: &Writer,
    recycled: Option<mpsc::Receiver<Vec<u8>>>,
    stats: &Arc<Stats>,
    timeout: Duration,
    span: Option<Arc<crate::drain::Span>>,
) -> Result<Option<Drain>> {
    let Piece { x, start, len } = p;
    let mut early_bytes = x.early;
    if let Some(l) = len {
        // Bytes past the announced body are not part of this response.
        early_bytes.truncate(usize::try_from(l).unwrap_or(usize::MAX));
    }
    let early = early_bytes.len() as u64;
    if early > 0 {
        Stats::add(&stats.bytes, early);
        if !w.input().send(
            Block {
                offset: start,
                data: early_bytes,
            },
            stats,
        ) {
            return Ok(None);
        }
    }
    if let Some(s) = &span {
        s.reached(start + early);
    }
    Drain::start(
        DrainConfig {
            framing: match len {
                Some(l) => Framing::Bounded {
                    base: start + early,
                    end: start.saturating_add(l),
                },
                None => Framing::Stream {
                    base: start + early,
                },
            },
            idle_timeout: timeout,
            raise_priority: a.drain_priority,
            drs: a.opts.drs,
            span,
        },
        Source::Connected(x.sock),
        w.input(),
        recycled.unwrap_or_else(|| mpsc::sync_channel(0).1),
        stats.clone(),
    )
    .map(Some)
}

/// Reads a `Transfer-Encoding: chunked` body (the drain thread reads
/// only length- or close-delimited bodies) and hands the payload to the
/// writer from file offset `start`. The socket has the transfer timeout
/// as its read timeout. A body that ends before its last chunk is an
/// error: nothing else says it was cut short.
pub(super) fn read_chunked(
    x: Exchange,
    start: u64,
    len: Option<u64>,
    out: &WriterInput,
    stats: &Stats,
) -> Result<()> {
    let Exchange {
        early, mut sock, ..
    } = x;
    let mut dec = ChunkedDecoder::new();
    let mut at = start;
    decode_into(&mut dec, &early, &mut at, len, out, stats)?;
    let mut buf = vec![0u8; READ_CHUNK];
    while !dec.is_done() {
        let n = match sock.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ClientError::net("read chunked body", e)),
        };
        if n == 0 {
            return Err(ClientError::Protocol(format!(
                "connection closed inside the chunked body (after {} bytes)",
                dec.payload_len()
            )));
        }
        decode_into(&mut dec, &buf[..n], &mut at, len, out, stats)?;
    }
    Ok(())
}

/// Decodes `input` and hands its payload to the writer at `*at`; stops
/// at the end of the body (bytes after it are not ours).
pub(super) fn decode_into(
    dec: &mut ChunkedDecoder,
    input: &[u8],
    at: &mut u64,
    len: Option<u64>,
    out: &WriterInput,
    stats: &Stats,
) -> Result<()> {
    let mut i = 0;
    while i < input.len() && !dec.is_done() {
        let (used, data) = dec
            .decode(&input[i..])
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if let Some(r) = data {
            if len.is_some_and(|l| dec.payload_len() > l) {
                return Err(ClientError::Protocol(format!(
                    "chunked body longer than the {} bytes of its Content-Range",
                    len.unwrap_or(0)
                )));
            }
            let bytes = input[i..][r].to_vec();
            let n = bytes.len() as u64;
            Stats::add(&stats.bytes, n);
            if !out.send(
                Block {
                    offset: *at,
                    data: bytes,
                },
                stats,
            ) {
                return Err(ClientError::Bug("writer stopped".into()));
            }
            *at += n;
        }
        i += used;
    }
    Ok(())
}
