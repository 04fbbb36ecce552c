//! The FTP front door: the listener, one task per control connection
//! ([`session`]), and the data transfers those sessions start
//! ([`transfer`]).
//!
//! ```text
//!  crate::listener ──accept──▶ max-sessions gate ──▶ session task (Session + socket)
//!                                 │ full: 421             │ actions
//!                                                  ├─▶ ops (blocking pool): stat, list, mkdir, CKSM
//!                                                  └─▶ transfer task: data conns + sluice_transfer
//! ```

pub mod session;
#[cfg(test)]
mod tests;
pub mod transfer;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_engine::Engine;
use sluice_ftp::session::{Session, SessionConfig};
use sluice_platform::fs::ServedRoot;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::config::ServeConfig;
use crate::listener::Door;
use crate::loops::Loops;
use crate::store::Store;

/// What every FTP session shares.
#[derive(Debug)]
pub struct FtpContext {
    /// Merged configuration, as the server started (root, addresses).
    pub config: ServeConfig,
    /// The configuration and login table in force (SIGHUP replaces them:
    /// crate::reload); sessions read them when they start and log in.
    pub current: Arc<crate::reload::Current>,
    /// The data-delivery engine.
    pub engine: Engine,
    /// The served root, opened at the first login that uses it and shared
    /// by every such session: one descriptor per session (its socket)
    /// instead of two. (Its own descriptor, not the HTTP doors': a login
    /// that cannot open it is told 421, see tests/listener.rs.)
    pub served_root: std::sync::OnceLock<Arc<ServedRoot>>,
    /// The [`Store`] around `served_root` (downloads go through it).
    pub served_store: std::sync::OnceLock<Arc<Store>>,
    /// The server's stop (crate::shutdown), watched by every session.
    pub shutdown: crate::shutdown::Shutdown,
}

impl FtpContext {
    /// The root a login serves: the shared one for the served root, a
    /// fresh descriptor for a user's own root.
    pub fn open_root(&self, root: &std::path::Path) -> std::io::Result<Arc<ServedRoot>> {
        if root != self.config.root {
            return ServedRoot::open(root).map(Arc::new);
        }
        if let Some(r) = self.served_root.get() {
            return Ok(Arc::clone(r));
        }
        let r = Arc::new(ServedRoot::open(root)?);
        Ok(Arc::clone(self.served_root.get_or_init(|| r)))
    }

    /// The store a login's `root` is served through: one shared by every
    /// session of the served root, or for a user's own root a store of
    /// its own. No open-file cache for FTP (crate::store says why).
    pub fn store_for(&self, root: &Arc<ServedRoot>) -> Arc<Store> {
        let plain = || Arc::new(Store::new(Arc::clone(root), std::time::Duration::ZERO));
        match self.served_root.get() {
            Some(served) if Arc::ptr_eq(root, served) => {
                Arc::clone(self.served_store.get_or_init(plain))
            }
            _ => plain(),
        }
    }
}

/// Binds the FTP listener (so port 0 is resolved before anything prints).
pub async fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    crate::listener::bind(addr, backlog)
}

/// The 421 a session gets when the server cannot take it (`text` says
/// why), or when the server stops.
pub(crate) fn refusal(text: &str) -> Vec<u8> {
    let any = SocketAddr::from(([0, 0, 0, 0], 0));
    let config = SessionConfig {
        local_addr: any,
        peer_addr: any,
        idle_timeout: std::time::Duration::ZERO,
        greeting: String::new(),
        tls: Default::default(),
    };
    let mut out = Vec::new();
    Session::refuse(config, text).poll_output(&mut out);
    out
}

/// Starts the implicit FTPS door (`--ftps`, TLS from the first byte) if
/// configured: binds, prints `ftps listening on ADDR` on stdout and spawns
/// its accept loop, whose sessions count against their own
/// `max_sessions`.
pub async fn start_implicit(ctx: &Arc<FtpContext>, loops: &Loops) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let Some(addr) = ctx.config.tls.ftps else {
        return Ok(());
    };
    let listener = bind(addr, ctx.config.listen_backlog)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "ftps (implicit TLS) serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ftps listening on {bound}")?;
        out.flush()?;
    }
    let door = Door {
        name: "ftps",
        gate: Arc::new(Semaphore::new(ctx.current.config().max_sessions)),
        limit: ctx.current.config().max_sessions,
        // In clear: a client that has not started TLS can read it.
        full: || refusal("Too many sessions, try again later."),
        exhausted: || refusal("Out of resources, try again later."),
    };
    let next_id = Arc::new(AtomicU64::new(1));
    let ctx = Arc::clone(ctx);
    tokio::spawn(crate::listener::run(
        listener,
        door,
        loops.clone(),
        ctx.shutdown.clone(),
        move |conn, peer, permit| {
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            let span = tracing::info_span!("ftps", id, %peer);
            let ctx = Arc::clone(&ctx);
            tokio::spawn(
                async move {
                    session::serve_implicit(ctx, conn).await;
                    drop(permit);
                }
                .instrument(span),
            );
        },
    ));
    Ok(())
}

/// Accepts control connections until the server stops (crate::listener);
/// each session (and its data transfers) is served on the next of `loops`
/// in turn.
pub async fn run(ctx: Arc<FtpContext>, listener: TcpListener, loops: Loops) {
    let max_sessions = ctx.current.config().max_sessions;
    let gate = Arc::new(Semaphore::new(max_sessions));
    ctx.current.set_ftp_gate(Arc::clone(&gate), max_sessions);
    let door = Door {
        name: "ftp",
        gate,
        limit: max_sessions,
        full: || refusal("Too many sessions, try again later."),
        exhausted: || refusal("Out of resources, try again later."),
    };
    let next_id = Arc::new(AtomicU64::new(1));
    let stop = ctx.shutdown.clone();
    crate::listener::run(listener, door, loops, stop, move |conn, peer, permit| {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("session", id, %peer);
        let ctx = Arc::clone(&ctx);
        tokio::spawn(
            async move {
                session::serve(ctx, conn).await;
                drop(permit);
            }
            .instrument(span),
        );
    })
    .await
}
