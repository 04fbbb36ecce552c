//! The FTP front door: the listener, one task per control connection
//! ([`session`]), and the data transfers those sessions start
//! ([`transfer`]).
//!
//! ```text
//!  TcpListener ──accept──▶ max-sessions gate ──▶ session task (Session + socket)
//!                                 │ full: 421      │ actions
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
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::auth::Users;
use crate::config::ServeConfig;
use crate::loops::Loops;

/// What every FTP session shares.
#[derive(Debug)]
pub struct FtpContext {
    /// Merged configuration.
    pub config: ServeConfig,
    /// Login table.
    pub users: Users,
    /// The data-delivery engine.
    pub engine: Engine,
}

/// Binds the FTP listener (so port 0 is resolved before anything prints).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Accepts control connections forever; each session (and its data
/// transfers) is served on the next of `loops` in turn.
pub async fn run(ctx: Arc<FtpContext>, listener: TcpListener, loops: Loops) {
    let gate = Arc::new(Semaphore::new(ctx.config.max_sessions));
    let next_id = AtomicU64::new(1);
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: log, breathe, go on serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("session", id, %peer);
        match Arc::clone(&gate).try_acquire_owned() {
            Ok(permit) => {
                let ctx = Arc::clone(&ctx);
                loops.spread(conn, move |conn| {
                    tokio::spawn(
                        async move {
                            session::serve(ctx, conn).await;
                            drop(permit);
                        }
                        .instrument(span),
                    );
                });
            }
            Err(_) => {
                tokio::spawn(
                    async move {
                        tracing::info!("refused: max sessions reached");
                        let mut conn = conn;
                        if let (Ok(local_addr), Ok(peer_addr)) =
                            (conn.local_addr(), conn.peer_addr())
                        {
                            let config = SessionConfig {
                                local_addr,
                                peer_addr,
                                idle_timeout: std::time::Duration::ZERO,
                                greeting: String::new(),
                            };
                            let mut s =
                                Session::refuse(config, "Too many sessions, try again later.");
                            let mut out = Vec::new();
                            s.poll_output(&mut out);
                            let _ = conn.write_all(&out).await;
                        }
                        let _ = conn.shutdown().await;
                    }
                    .instrument(span),
                );
            }
        }
    }
}
