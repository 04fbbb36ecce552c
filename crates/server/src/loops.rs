//! The event loops of `--runtime per-core` seen from an accept loop:
//! each accepted connection is served, to its end, on the next loop in
//! turn (loop 0, the acceptor's own, included). Both front doors hand
//! their connections out through the same [`Loops`], so FTP sessions and
//! HTTP connections share one round-robin.
//!
//! Why a handover instead of one listener per loop: see `runtime.rs`.
//! Why round-robin: the loop that wakes first on a shared listener would
//! take a whole burst of connections. The cost is one cross-thread
//! wake-up per connection, none per request or per block.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Result;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Work run on another loop's thread (it spawns the connection's task
/// there, so the task and its socket stay on that loop).
type Job = Box<dyn FnOnce() + Send>;

/// Loop 0 (the caller's) and the inboxes of the others.
#[derive(Clone, Debug, Default)]
pub struct Loops {
    others: Arc<Vec<mpsc::UnboundedSender<Job>>>,
    turn: Arc<AtomicUsize>,
}

impl Loops {
    /// Only the caller's loop: every connection stays where it was
    /// accepted (`shared`, or `per-core` with one loop).
    pub fn here() -> Loops {
        Loops::default()
    }

    /// Starts `n - 1` more single-threaded loops, each on its own thread.
    pub fn start(n: usize, event_interval: Option<u32>) -> Result<Loops> {
        let mut others = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 1..n.max(1) {
            let (tx, rx) = mpsc::unbounded_channel::<Job>();
            others.push(tx);
            inboxes.push(Some(rx));
        }
        if !inboxes.is_empty() {
            let inboxes = Arc::new(std::sync::Mutex::new(inboxes));
            crate::runtime::spawn_loops(n, event_interval, move |i| {
                let rx = inboxes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(i - 1)
                    .and_then(Option::take);
                run_jobs(rx)
            })?;
        }
        Ok(Loops {
            others: Arc::new(others),
            turn: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// How many loops take connections.
    pub fn len(&self) -> usize {
        self.others.len() + 1
    }

    /// Calls `serve` with `stream` on the next loop in turn; `serve`
    /// spawns the connection's task (on the loop it runs on). A stream
    /// that cannot move (it cannot leave this loop's reactor, or the
    /// other loop is gone) is logged and dropped: the client sees a
    /// closed connection, the server goes on.
    pub fn spread<F>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) + Send + 'static,
    {
        let k = self.turn.fetch_add(1, Ordering::Relaxed) % self.len();
        let Some(tx) = k.checked_sub(1).and_then(|i| self.others.get(i)) else {
            return serve(stream);
        };
        let std = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand a connection to another loop");
                return;
            }
        };
        let job: Job = Box::new(move || match TcpStream::from_std(std) {
            Ok(s) => serve(s),
            Err(e) => tracing::warn!(error = %e, "cannot take over a connection"),
        });
        if tx.send(job).is_err() {
            tracing::warn!("event loop gone; connection dropped");
        }
    }
}

/// A loop's body: run handed jobs until the acceptors are gone.
async fn run_jobs(rx: Option<mpsc::UnboundedReceiver<Job>>) {
    let Some(mut rx) = rx else { return };
    while let Some(job) = rx.recv().await {
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Connections alternate between loop 0 and a second loop's thread,
    /// and both loops serve theirs.
    #[tokio::test]
    async fn connections_alternate_between_loops_and_are_served() {
        let loops = Loops::start(2, None).unwrap();
        assert_eq!(loops.len(), 2);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let here = std::thread::current().id();
        let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let seen = seen_tx.clone();
                loops.spread(s, move |mut s| {
                    tokio::spawn(async move {
                        let _ = seen.send(std::thread::current().id());
                        s.write_all(b"hi").await.unwrap();
                    });
                });
            }
        });
        let mut threads = Vec::new();
        for _ in 0..4 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let mut out = Vec::new();
            c.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, b"hi");
            threads.push(seen_rx.recv().await.unwrap());
        }
        let on_loop0 = threads.iter().filter(|t| **t == here).count();
        assert_eq!(on_loop0, 2, "{threads:?}");
    }
}
