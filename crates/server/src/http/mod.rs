//! The HTTP/1.1 front door: a listener, one tokio task per connection
//! ([`conn`]), path resolution beneath the root through the shared
//! [`Store`](crate::store::Store) ([`resolve`]) and the sending of a
//! [`sluice_http::Plan`] as a layer-2 `Transfer` ([`send`]; failures:
//! [`failure`]).
//!
//! ```text
//!  TcpListener ──accept──▶ max-connections gate ──▶ conn task (buffer + parse_request)
//!                                 │ full: 503            │ Request
//!                                                        ├─▶ Store: open-file cache hit, or
//!                                                        │     resolve (engine disk thread):
//!                                                        │     openat2 RESOLVE_BENEATH, fstat, readdir
//!                                                        ├─▶ respond(..) -> Plan
//!                                                        └─▶ send: head + parts as a Transfer over
//!                                                              the connection's DataConn (sendfile|copy)
//! ```
//!
//! The protocol decisions are all in `sluice_http`; this module owns
//! sockets, clocks (the three deadlines below) and the access log.

pub mod conn;
pub mod digests;
pub mod failure;
pub mod resolve;
pub mod send;
pub mod settings;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use sluice_engine::Engine;
use sluice_http::{respond_status, Status};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use settings::HttpSettings;

use crate::config::ServeConfig;
use crate::listener::Door;
use crate::loops::Loops;
use crate::store::Store;

/// What every HTTP connection shares.
#[derive(Debug)]
pub struct HttpContext {
    /// The served root, shared with the FTP door and the other HTTP door:
    /// resolution beneath it, hidden names, the open-file cache
    /// (`--http-open-cache`).
    pub store: Arc<Store>,
    /// Deadlines and bounds.
    pub settings: HttpSettings,
    /// The data-delivery engine shared with the FTP front door.
    pub engine: Engine,
    /// Per-connection seeds for multipart boundaries.
    next_conn: AtomicU64,
    /// The connection limit, shared by every event loop's accept loop.
    gate: Arc<Semaphore>,
    /// File digests asked for with Want-Repr-Digest / Want-Digest.
    pub digests: digests::Digests,
    /// The HTTPS door's TLS configuration; `None` for plain HTTP.
    pub tls: Option<Arc<crate::tls::Acceptor>>,
    /// The server's stop (crate::shutdown): idle keep-alive connections
    /// close when it drains; a response still being sent when it cuts is
    /// cut short.
    pub shutdown: crate::shutdown::Shutdown,
    /// The door's class under Cue (`None`: off).
    pub cue: Option<sluice_engine::sched::cue::CueSpec>,
}

impl HttpContext {
    /// A context serving `store`.
    pub fn new(store: Arc<Store>, settings: HttpSettings, engine: Engine) -> HttpContext {
        HttpContext {
            store,
            gate: Arc::new(Semaphore::new(settings.max_connections)),
            settings,
            engine,
            next_conn: AtomicU64::new(1),
            digests: digests::Digests::default(),
            tls: None,
            shutdown: crate::shutdown::Shutdown::never(),
            cue: None,
        }
    }

    /// The same, serving HTTPS with `tls` (its keys handed to the kernel
    /// after each handshake when `ktls`).
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>, ktls: bool) -> HttpContext {
        self.tls = Some(Arc::new(if ktls {
            crate::tls::Acceptor::with_ktls(tls)
        } else {
            crate::tls::Acceptor::new(tls)
        }));
        self
    }
}

/// Binds the HTTP listener (so port 0 is resolved before anything prints).
pub async fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    crate::listener::bind(addr, backlog)
}

/// Starts the HTTP front door next to FTP, if configured: binds, prints
/// `http listening on ADDR` on stdout (tests parse it when given port 0)
/// and spawns the accept loop on this runtime, which hands accepted
/// connections round-robin to `loops` (`--runtime per-core`; see
/// `crate::loops`). When the *default* address is taken (say,
/// by another `sluice serve` started without `--http`), it warns and
/// runs without HTTP; an address given explicitly must bind. Both doors
/// serve one [`Store`] (one root descriptor, one open-file cache and its
/// sweep timer), opened once the first of them has bound.
pub async fn start(
    cfg: &ServeConfig,
    engine: &Engine,
    loops: &Loops,
    shutdown: &crate::shutdown::Shutdown,
    current: &crate::reload::Current,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let mut store = None;
    let http = start_plain(cfg, engine, loops, shutdown, current, &mut store).await?;
    let https = start_https(cfg, engine, loops, shutdown, current, &mut store).await?;
    if let Some(s) = &store {
        if let Some(every) = s.files().sweep_every() {
            tokio::spawn(crate::store::sweep_open_files(
                Arc::downgrade(s),
                engine.clone(),
                every,
            ));
        }
    }
    Ok(match (http, https) {
        (Some(a), Some(b)) => Some(tokio::spawn(async move {
            // Either door ending (a panic) ends the front door as one.
            tokio::select! {
                r = a => if let Err(e) = r { tracing::error!(error = %e, "http front door stopped") },
                r = b => if let Err(e) = r { tracing::error!(error = %e, "https front door stopped") },
            }
        })),
        (a, b) => a.or(b),
    })
}

/// The HTTPS door (`--https`): the HTTP door's code and settings behind a
/// TLS handshake; prints `https listening on ADDR`.
async fn start_https(
    cfg: &ServeConfig,
    engine: &Engine,
    loops: &Loops,
    shutdown: &crate::shutdown::Shutdown,
    current: &crate::reload::Current,
    store: &mut Option<Arc<Store>>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let (Some(settings), Some(server)) = (cfg.https.clone(), cfg.tls.server.as_ref()) else {
        return Ok(None);
    };
    let listener = bind(settings.addr, cfg.listen_backlog)
        .await
        .with_context(|| format!("cannot listen on {}", settings.addr))?;
    let addr = listener.local_addr()?;
    let store = open_store(cfg, &settings, store)?;
    tracing::info!(%addr, max_connections = settings.max_connections, "https serving");
    crate::tls::log_data_path(cfg.tls.ktls.as_ref());
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "https listening on {addr}")?;
        out.flush()?;
    }
    let mut ctx = HttpContext::new(store, settings, engine.clone())
        .with_tls(Arc::clone(&server.https), cfg.tls.ktls.is_some());
    ctx.shutdown = shutdown.clone();
    ctx.cue = cfg.cue.http_spec();
    // SIGHUP may bring new certificates (crate::reload).
    if let Some(a) = &ctx.tls {
        current.set_https_acceptor(Arc::clone(a));
    }
    let ctx = Arc::new(ctx);
    Ok(Some(tokio::spawn(run_spread(ctx, listener, loops.clone()))))
}

/// The plain HTTP door.
async fn start_plain(
    cfg: &ServeConfig,
    engine: &Engine,
    loops: &Loops,
    shutdown: &crate::shutdown::Shutdown,
    current: &crate::reload::Current,
    store: &mut Option<Arc<Store>>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(settings) = cfg.http.clone() else {
        return Ok(None);
    };
    let listener = match bind(settings.addr, cfg.listen_backlog).await {
        Ok(l) => l,
        Err(e) if !settings.explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(addr = %settings.addr, "default HTTP address in use; serving without HTTP (give --http ADDR:PORT or --no-http)");
            return Ok(None);
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot listen on {}", settings.addr)))
        }
    };
    let addr = listener.local_addr()?;
    let store = open_store(cfg, &settings, store)?;
    tracing::info!(
        %addr,
        header_timeout = ?settings.header_timeout,
        keepalive_timeout = ?settings.keepalive_timeout,
        send_timeout = ?settings.send_timeout,
        max_connections = settings.max_connections,
        "http serving"
    );
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "http listening on {addr}")?;
        out.flush()?;
    }
    let mut ctx = HttpContext::new(store, settings, engine.clone());
    ctx.shutdown = shutdown.clone();
    ctx.cue = cfg.cue.http_spec();
    // SIGHUP may change `http_max_connections` (crate::reload).
    current.set_http_gate(Arc::clone(&ctx.gate), ctx.settings.max_connections);
    let ctx = Arc::new(ctx);
    Ok(Some(tokio::spawn(run_spread(ctx, listener, loops.clone()))))
}

/// The HTTP doors' store: opened by the first door that binds (its
/// `open_cache` sizes the cache), shared by the second.
fn open_store(
    cfg: &ServeConfig,
    settings: &HttpSettings,
    store: &mut Option<Arc<Store>>,
) -> anyhow::Result<Arc<Store>> {
    if let Some(s) = store {
        return Ok(Arc::clone(s));
    }
    let s = Store::open(&cfg.root, settings.open_cache)
        .with_context(|| format!("cannot serve {}", cfg.root.display()))?;
    Ok(Arc::clone(store.insert(Arc::new(s))))
}

/// Resolves when the HTTP accept loop ends (a stop, or a panic); pending
/// forever when HTTP is off, so it can sit in a `select!`.
pub async fn finished(task: Option<JoinHandle<()>>) {
    match task {
        Some(t) => {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "http front door stopped");
            }
        }
        None => std::future::pending().await,
    }
}

/// Accepts connections until a stop; each gets its own task, so a slow client
/// only ever holds its own task, never a worker thread. (The server
/// starts [`run_spread`] through [`start`]; tests call this.)
#[cfg(test)]
pub async fn run(ctx: Arc<HttpContext>, listener: TcpListener) {
    run_spread(ctx, listener, Loops::here()).await
}

/// The accept loop (crate::listener): each connection is served on the
/// next of `loops` in turn.
pub async fn run_spread(ctx: Arc<HttpContext>, listener: TcpListener, loops: Loops) {
    let door = Door {
        name: if ctx.tls.is_some() { "https" } else { "http" },
        gate: Arc::clone(&ctx.gate),
        limit: ctx.settings.max_connections,
        full: || status_bytes(Status::ServiceUnavailable),
        exhausted: || status_bytes(Status::ServiceUnavailable),
    };
    let stop = ctx.shutdown.clone();
    crate::listener::run(listener, door, loops, stop, move |stream, peer, permit| {
        let id = ctx.next_conn.fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!("http", id, %peer);
        let ctx = Arc::clone(&ctx);
        tokio::spawn(
            async move {
                let shutdown = ctx.shutdown.clone();
                tokio::select! {
                    _ = conn::serve(ctx, stream, peer, id) => {}
                    _ = shutdown.cutting() => {
                        tracing::warn!(%peer, "http response cut by shutdown");
                    }
                }
                drop(permit);
            }
            .instrument(span),
        );
    })
    .await
}

/// A short response with `status` and nothing else (the refusals).
fn status_bytes(status: Status) -> Vec<u8> {
    let plan = respond_status(status, SystemTime::now(), &sluice_http::Options::default());
    let mut bytes = plan.head;
    for seg in plan.body {
        if let sluice_http::Segment::Bytes(b) = seg {
            bytes.extend_from_slice(&b);
        }
    }
    bytes
}
