//! The engine's disk thread pool: a bounded queue of blocking file jobs run
//! by a few threads, so the event loop never waits on the disk.
//!
//! The queue is the engine's own (not tokio's blocking pool) so later work can
//! add scheduling, a delay queue and cancellation policy in one place. A job
//! whose submitter is gone (task dropped) or whose token is cancelled is
//! skipped without touching the disk.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use crate::cancel::Cancel;
use crate::error::EngineError;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of blocking disk threads fed through a bounded queue.
#[derive(Debug)]
pub(crate) struct DiskPool {
    tx: mpsc::Sender<Job>,
}

impl DiskPool {
    /// Starts `threads` disk threads with a queue of `depth` jobs.
    pub(crate) fn new(threads: usize, depth: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>(depth.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("sluice-disk-{i}"))
                .spawn(move || loop {
                    // Holding the lock while blocked is fine: the other threads are idle too.
                    let job = match rx.lock() {
                        Ok(mut r) => r.blocking_recv(),
                        Err(_) => None,
                    };
                    match job {
                        Some(job) => job(),
                        None => return, // engine dropped: queue closed
                    }
                })?;
        }
        Ok(DiskPool { tx })
    }

    /// Queues `f` (waiting while the queue is full) and returns a ticket
    /// that resolves to its result. `f` is skipped if `cancel` fires or the
    /// ticket is dropped before a thread picks it up.
    pub(crate) async fn submit<T, F>(&self, cancel: &Cancel, f: F) -> Result<Ticket<T>, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (rtx, rrx) = oneshot::channel();
        let token = cancel.clone();
        let job: Job = Box::new(move || {
            if rtx.is_closed() || token.is_cancelled() {
                return;
            }
            let _ = rtx.send(f());
        });
        tokio::select! {
            r = self.tx.send(job) => r.map_err(|_| EngineError::PoolClosed)?,
            _ = cancel.cancelled() => return Err(EngineError::Cancelled),
        }
        Ok(Ticket {
            rx: rrx,
            cancel: cancel.clone(),
        })
    }

    /// Queues `f` and waits for its result.
    pub(crate) async fn run<T, F>(&self, cancel: &Cancel, f: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.submit(cancel, f).await?.await
    }
}

/// The pending result of one disk job.
#[derive(Debug)]
pub(crate) struct Ticket<T> {
    rx: oneshot::Receiver<T>,
    cancel: Cancel,
}

impl<T> Future for Ticket<T> {
    type Output = Result<T, EngineError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(v)) => Poll::Ready(Ok(v)),
            // The job was skipped (cancelled) or its thread died.
            Poll::Ready(Err(_)) if self.cancel.is_cancelled() => {
                Poll::Ready(Err(EngineError::Cancelled))
            }
            Poll::Ready(Err(_)) => Poll::Ready(Err(EngineError::PoolClosed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_off_the_loop_and_cancelled_jobs_are_skipped() {
        let pool = DiskPool::new(1, 4).unwrap();
        let c = Cancel::new();
        let name = pool
            .run(&c, || std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("sluice-disk-0"));
        // Block the only thread, queue a job, cancel: the queued job must not run.
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let first = pool
            .submit(&c, move || gate_rx.recv().is_ok())
            .await
            .unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran2 = Arc::clone(&ran);
        let c2 = Cancel::new();
        let second = pool
            .submit(&c2, move || {
                ran2.store(true, std::sync::atomic::Ordering::SeqCst)
            })
            .await
            .unwrap();
        c2.cancel();
        gate_tx.send(()).unwrap();
        assert!(first.await.unwrap());
        assert!(matches!(second.await, Err(EngineError::Cancelled)));
        // A later job proves the skipped one was dequeued.
        pool.run(&c, || ()).await.unwrap();
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
