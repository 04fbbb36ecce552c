//! One HTTP connection: read a request head under its deadline, resolve
//! the path on a disk thread, send the plan, log it, and go round again
//! while the connection is kept alive. Pipelined requests are simply the
//! bytes left in the buffer after a head; they are answered in order.
//!
//! Deadlines (all from [`HttpSettings`](super::HttpSettings)):
//! - header: a complete head must arrive within `header_timeout` of its
//!   first byte (of accept, for the first request); else 408 and close.
//!   This bounds slow-loris clients without bounding honest slow bodies.
//! - keep-alive: between requests the connection may sit idle for
//!   `keepalive_timeout`; then it is closed silently (as nginx does).
//! - send: see [`super::send`] (the transfer's stall policy).
//!
//! A response is a `sluice_transfer::Transfer` (progress, counters,
//! cancellation, stall policy shared with FTP); when it fails,
//! [`super::failure`] decides from whose fault it was whether a status
//! still goes out or the connection just closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluice_engine::Cancel;
use sluice_http::digest;
use sluice_http::request::peek_request_line;
use sluice_http::{
    parse_request, respond, respond_error, respond_status, AccessEntry, Method, Options, Plan,
    Request, Resource, Status,
};
use tokio::net::TcpStream;
use tokio::time::Instant;

use sluice_transfer::{Framing, Transfer, TransferError};

use super::failure::{self, Failure};
use super::resolve::{resolve, Found, HttpListing};
use super::send::{response_transfer, send_plan};
use super::HttpContext;
use crate::listing::Lister;
use crate::transport::Conn;

/// Bytes asked of the socket per read while a head is incomplete.
const READ_CHUNK: usize = 8 << 10;
/// After an answer that closes the connection, how long unread request
/// bytes are drained before the socket is closed, and at most how many:
/// closing with unread data makes the kernel send RST, which can destroy
/// the answer before the client reads it (RFC 9112 9.6, "lingering close").
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 << 10;

/// What reading a head came to.
enum Head {
    /// A complete head; `buf[..used]` held it.
    Request(Box<Request>, usize),
    /// A head that cannot be answered normally.
    Invalid(sluice_http::RequestError),
    /// The header deadline passed with part of a head received.
    TimedOut,
    /// The peer closed, an I/O error, or the keep-alive wait ended.
    Gone,
}

/// Serves one connection until it closes.
pub async fn serve(ctx: Arc<HttpContext>, stream: TcpStream, peer: SocketAddr, id: u64) {
    // The engine's connection object for the connection's whole life
    // (socket settings once, data path and quantum across requests).
    let mut conn: Conn = match &ctx.tls {
        None => ctx
            .engine
            .data_conn_in(stream, None, ctx.cue.clone())
            .into(),
        Some(acceptor) => match acceptor
            .accept_conn(&ctx.engine, stream, ctx.cue.clone())
            .await
        {
            Ok(conn) => conn,
            Err(e) => {
                // Garbage, a client that stopped halfway, a certificate the
                // client refused: only this connection ends.
                tracing::info!(%peer, error = %e, "TLS handshake failed");
                return;
            }
        },
    };
    let opts = Options {
        boundary_seed: id,
        ..Options::default()
    };
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut first = true;
    loop {
        let head = read_head(&ctx, &mut conn, &mut buf, first).await;
        first = false;
        let (req, used) = match head {
            Head::Request(req, used) => (req, used),
            Head::Invalid(e) => {
                tracing::debug!(error = %e, "bad request head");
                let line = peek_request_line(&buf);
                let plan = respond_error(e, SystemTime::now(), &opts);
                finish_with(&ctx, &mut conn, peer, &plan, &line).await;
                return;
            }
            Head::TimedOut => {
                tracing::debug!("request head deadline passed");
                let line = peek_request_line(&buf);
                let plan = respond_status(Status::RequestTimeout, SystemTime::now(), &opts);
                finish_with(&ctx, &mut conn, peer, &plan, &line).await;
                return;
            }
            Head::Gone => return,
        };
        buf.drain(..used);
        let time = SystemTime::now();
        let Found {
            resource,
            file,
            dir,
        } = find(&ctx, &req).await;
        let mut plan = respond(&req, resource, time, &opts);
        add_digests(&ctx, &req, &mut plan, file.as_ref()).await;
        let transfer = response_transfer(ctx.settings.send_timeout);
        let mut sent = send_plan(&mut conn, &plan, file.as_ref(), &transfer)
            .await
            .map(drop);
        if let (Ok(()), Some(dir), Status::Ok, false) =
            (&sent, dir, plan.status, req.method == Method::Head)
        {
            sent = send_listing(&ctx, &mut conn, &req, dir, &transfer).await;
        }
        let out = transfer.progress().counters().snapshot().bytes_sent;
        let body_bytes = match &sent {
            Ok(()) if !plan.body.is_empty() => plan.body_len(),
            _ => out.saturating_sub(plan.head.len() as u64),
        };
        if let Err(e) = sent {
            let failed = Failed {
                time,
                plan: &plan,
                body_bytes,
                out,
            };
            after_failure(&ctx, &mut conn, peer, &req, failed, &e, &opts).await;
            return;
        }
        log_access(peer, time, &req.request_line, &plan, body_bytes, Some(&req));
        // A stopping server answers what it was asked, then closes.
        if !plan.keep_alive || ctx.shutdown.is_draining() {
            linger_close(&mut conn).await;
            return;
        }
    }
}

/// Adds the Repr-Digest / Digest fields a request asked for to a 200 or
/// 206 of a file (hashed on a disk thread, cached: see [`super::digests`]).
/// A request that asks for none costs nothing here.
async fn add_digests(
    ctx: &Arc<HttpContext>,
    req: &Request,
    plan: &mut Plan,
    file: Option<&Arc<std::fs::File>>,
) {
    let wanted = digest::wanted(req.want_repr_digest.as_deref(), req.want_digest.as_deref());
    let Some(file) = file else {
        return;
    };
    if wanted.is_empty() || !digest::applies(plan.status) {
        return;
    }
    let mut got = Vec::new();
    for alg in wanted.algorithms() {
        if let Some(d) = ctx.digests.get(&ctx.engine, file, alg).await {
            got.push((alg, d));
        }
    }
    let fields = digest::fields(wanted, |a| {
        got.iter().find(|(x, _)| *x == a).map(|(_, d)| d.clone())
    });
    digest::add_fields(plan, &fields);
}

/// Sends a directory listing after its head, a batch at a time
/// (crate::listing): each piece goes out, under the send timeout, before
/// the next is read, so a client that stops reading stops the listing.
async fn send_listing(
    ctx: &Arc<HttpContext>,
    conn: &mut Conn,
    req: &Request,
    dir: sluice_platform::fs::DirReader,
    transfer: &Transfer,
) -> Result<(), TransferError> {
    let render = Box::new(HttpListing::new(req));
    let mut lister = Lister::new(Arc::clone(ctx.store.root()), dir, render);
    loop {
        let piece = match lister.next(&ctx.engine, transfer.cancel()).await {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            // The head is out: all that is left is to cut the body short
            // (the connection closes).
            Err(e) => {
                tracing::warn!(error = %e, "listing stopped");
                return Err(TransferError::Disk(std::io::Error::other(e.to_string())));
            }
        };
        transfer
            .send_piece(conn, &piece.bytes, Framing::Raw)
            .await?;
    }
}

/// Reads until `buf` starts with a complete head (or fails to).
async fn read_head(ctx: &HttpContext, stream: &mut Conn, buf: &mut Vec<u8>, first: bool) -> Head {
    let s = &ctx.settings;
    let start = Instant::now();
    // The head deadline runs from accept for the first request and from
    // the first byte for later ones; before that byte, the idle deadline.
    let mut head_deadline = (first || !buf.is_empty()).then(|| start + s.header_timeout);
    let idle_deadline = start + s.keepalive_timeout;
    loop {
        if !buf.is_empty() {
            match parse_request(buf) {
                Ok(Some((req, used))) => return Head::Request(Box::new(req), used),
                Ok(None) => {}
                Err(e) => return Head::Invalid(e),
            }
            head_deadline.get_or_insert_with(|| Instant::now() + s.header_timeout);
        }
        let deadline = head_deadline.unwrap_or(idle_deadline);
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            r = tokio::time::timeout_at(deadline, stream.read_buf(buf)) => r,
            // Stopping: a connection waiting for (the rest of) a head is
            // closed; nothing of it has been answered or started.
            _ = ctx.shutdown.draining() => return Head::Gone,
        };
        match read {
            Err(_) if head_deadline.is_some() && !buf.is_empty() => return Head::TimedOut,
            Err(_) => return Head::Gone,
            Ok(Ok(0)) | Ok(Err(_)) => return Head::Gone,
            Ok(Ok(_)) => {}
        }
    }
}

/// Finds the request's file in the store's open-file cache (one `fstat`
/// here on the loop), else resolves the path through the store on an
/// engine disk thread (which may wait on the disk) and caches a file it
/// opened.
async fn find(ctx: &Arc<HttpContext>, req: &Request) -> Found {
    let rel = req.path.relative();
    if let Some(hit) = ctx.store.cached(rel, std::time::Instant::now()) {
        return Found {
            resource: Resource::File {
                len: hit.len,
                mtime: hit.mtime,
            },
            file: Some(hit.file),
            dir: None,
        };
    }
    let c = Arc::clone(ctx);
    let path = req.path.clone();
    match ctx
        .engine
        .run_blocking(&Cancel::new(), move || resolve(&c.store, &path))
        .await
    {
        Ok(found) => {
            ctx.store
                .remember(rel, found.file.as_ref(), std::time::Instant::now());
            found
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot resolve on a disk thread");
            Found {
                resource: Resource::Unavailable,
                file: None,
                dir: None,
            }
        }
    }
}

/// A response whose transfer failed.
struct Failed<'a> {
    /// When its request was answered.
    time: SystemTime,
    /// What was being sent.
    plan: &'a Plan,
    /// Body bytes that went out.
    body_bytes: u64,
    /// Bytes of the response (head included) that went out.
    out: u64,
}

/// Ends a connection whose response failed with `e` ([`failure::after`]):
/// a status (then close) when nothing of the response went out and the
/// fault is ours, else a plain close; logs what was sent.
async fn after_failure(
    ctx: &HttpContext,
    conn: &mut Conn,
    peer: SocketAddr,
    req: &Request,
    failed: Failed<'_>,
    e: &TransferError,
    opts: &Options,
) {
    match failure::after(e.fault(), failed.out) {
        Failure::Answer(status) => {
            tracing::warn!(error = %e, status = status.code(), "response failed before its head");
            let plan = respond_status(status, SystemTime::now(), opts);
            finish_with(ctx, conn, peer, &plan, &req.request_line).await;
        }
        Failure::Close => {
            let line = &req.request_line;
            log_access(
                peer,
                failed.time,
                line,
                failed.plan,
                failed.body_bytes,
                Some(req),
            );
            tracing::debug!(error = %e, fault = ?e.fault(), "response not completed; closing");
        }
    }
}

/// Sends a closing answer (error, 408), logs it, and closes gracefully.
async fn finish_with(
    ctx: &HttpContext,
    conn: &mut Conn,
    peer: SocketAddr,
    plan: &Plan,
    line: &str,
) {
    let transfer = response_transfer(ctx.settings.send_timeout);
    let time = SystemTime::now();
    let sent = send_plan(conn, plan, None, &transfer).await;
    let bytes = if sent.is_ok() { plan.body_len() } else { 0 };
    log_access(peer, time, line, plan, bytes, None);
    if sent.is_ok() {
        linger_close(conn).await;
    }
}

/// One combined-log line on the `access` tracing target
/// (`RUST_LOG=access=info` for the access log alone).
fn log_access(
    peer: SocketAddr,
    time: SystemTime,
    line: &str,
    plan: &Plan,
    bytes: u64,
    req: Option<&Request>,
) {
    let entry = AccessEntry {
        peer: peer.ip().to_canonical(),
        user: None,
        time,
        request_line: line,
        status: plan.status.code(),
        bytes,
        referer: req.and_then(|r| r.referer.as_deref()),
        user_agent: req.and_then(|r| r.user_agent.as_deref()),
    };
    tracing::info!(target: "access", "{}", entry.combined());
}

/// FIN first, then read and drop what the client still sends for a
/// moment, so our answer is not lost to a RST.
async fn linger_close(stream: &mut Conn) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut scratch = vec![0u8; READ_CHUNK];
    let mut drained = 0usize;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while drained < LINGER_BYTES {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
