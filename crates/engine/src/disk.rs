//! The engine's disk subsystem: every blocking file operation of the
//! server (transfer reads and writes, the planner's read-ahead, opens,
//! stats, listings, fsyncs, checksums) runs here, on a few threads of the
//! engine's own, so the event loop never waits on the disk.
//!
//! - **Classes.** Queued work is taken in class order: [`IoClass::Transfer`]
//!   (bytes a client is waiting for), then [`IoClass::Meta`] (open, stat,
//!   listing batches, an upload's fsync), then [`IoClass::Background`]
//!   (checksums over whole files, retention sweeps). Background work never
//!   holds every thread: one is always left for the other classes, so a
//!   CKSM of a 100 GB file does not stop downloads.
//! - **Bounded queues.** Each class holds at most `depth` queued jobs;
//!   submitters wait for room (cancellably), so memory stays bounded.
//! - **Cancellation.** A job whose submitter is gone (ticket dropped) or
//!   whose token is cancelled is skipped without touching the disk.
//! - **Panics.** A job that panics is reported to its submitter as
//!   [`EngineError::DiskJobPanicked`]; the thread lives on (a panicking job
//!   used to kill its thread for good, and the pool shrank silently).
//!
//! The backend is a thread pool: io_uring was measured in round 1 and
//! bought nothing over `RWF_NOWAIT` reads inline plus threads for misses on
//! this workload (crates/engine/README.md), so the dependency is gone.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::sync::{oneshot, Semaphore};

use crate::cancel::Cancel;
use crate::error::EngineError;

/// What a disk job is for, which decides when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// Reads and writes a transfer is waiting for.
    Transfer,
    /// Opens, stats, listings, fsyncs: short, a client waits.
    Meta,
    /// Long jobs nobody streams from (whole-file checksums, sweeps).
    Background,
}

const CLASSES: usize = 3;

impl IoClass {
    fn index(self) -> usize {
        match self {
            IoClass::Transfer => 0,
            IoClass::Meta => 1,
            IoClass::Background => 2,
        }
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queues {
    queued: [VecDeque<Job>; CLASSES],
    /// Background jobs running now.
    background: usize,
    closed: bool,
}

struct Shared {
    queues: Mutex<Queues>,
    ready: Condvar,
    /// Room per class: a permit per job that may still be queued.
    room: [Semaphore; CLASSES],
    threads: usize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskPool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        // A job never runs under the lock, so a poisoned lock only means a
        // panic in this file's few lines: the queues are still consistent.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next job a thread may run, by class; `None` when closed and
    /// drained. Blocks while there is nothing to do.
    fn next(&self) -> Option<(Job, IoClass)> {
        let mut q = self.lock();
        loop {
            let background_room = q.background + 1 < self.threads || self.threads == 1;
            for class in [IoClass::Transfer, IoClass::Meta, IoClass::Background] {
                if class == IoClass::Background && !background_room {
                    continue;
                }
                if let Some(job) = q.queued[class.index()].pop_front() {
                    if class == IoClass::Background {
                        q.background += 1;
                    }
                    self.room[class.index()].add_permits(1);
                    return Some((job, class));
                }
            }
            if q.closed && q.queued.iter().all(VecDeque::is_empty) {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn done(&self, class: IoClass) {
        if class == IoClass::Background {
            self.lock().background -= 1;
            // A queued background job may run now.
            self.ready.notify_one();
        }
    }
}

/// The disk threads and their class queues.
#[derive(Debug)]
pub(crate) struct DiskPool {
    shared: Arc<Shared>,
}

impl DiskPool {
    /// Starts `threads` disk threads, each class queueing at most `depth`.
    pub(crate) fn new(threads: usize, depth: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let depth = depth.max(1);
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues::default()),
            ready: Condvar::new(),
            room: std::array::from_fn(|_| Semaphore::new(depth)),
            threads,
        });
        for i in 0..threads {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("sluice-disk-{i}"))
                .spawn(move || {
                    while let Some((job, class)) = s.next() {
                        job();
                        s.done(class);
                    }
                })?;
        }
        Ok(DiskPool { shared })
    }

    /// Threads in the pool.
    pub(crate) fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Queues `f` in `class` (waiting while that queue is full) and returns
    /// a ticket that resolves to its result. `f` is skipped if `cancel`
    /// fires or the ticket is dropped before a thread picks it up.
    pub(crate) async fn submit<T, F>(
        &self,
        class: IoClass,
        cancel: &Cancel,
        f: F,
    ) -> Result<Ticket<T>, EngineError>
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
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
                tracing::error!("a disk job panicked; its transfer fails, the thread lives on");
            });
            let _ = rtx.send(r);
        });
        let room = &self.shared.room[class.index()];
        let permit = tokio::select! {
            p = room.acquire() => p.map_err(|_| EngineError::PoolClosed)?,
            _ = cancel.cancelled() => return Err(EngineError::Cancelled),
        };
        // Given back by the thread that takes the job off the queue.
        permit.forget();
        {
            let mut q = self.shared.lock();
            if q.closed {
                return Err(EngineError::PoolClosed);
            }
            q.queued[class.index()].push_back(job);
        }
        self.shared.ready.notify_one();
        Ok(Ticket {
            rx: rrx,
            cancel: cancel.clone(),
        })
    }

    /// Queues `f` in `class` and waits for its result.
    pub(crate) async fn run<T, F>(
        &self,
        class: IoClass,
        cancel: &Cancel,
        f: F,
    ) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.submit(class, cancel, f).await?.await
    }
}

impl Drop for DiskPool {
    fn drop(&mut self) {
        // Threads finish what is queued, then end.
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

/// The pending result of one disk job.
#[derive(Debug)]
pub(crate) struct Ticket<T> {
    rx: oneshot::Receiver<Result<T, ()>>,
    cancel: Cancel,
}

impl<T> Future for Ticket<T> {
    type Output = Result<T, EngineError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(Ok(v))) => Poll::Ready(Ok(v)),
            Poll::Ready(Ok(Err(()))) => Poll::Ready(Err(EngineError::DiskJobPanicked)),
            // The job was skipped (cancelled) or the pool is gone.
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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    /// Occupies one thread of `pool` until the returned sender is used.
    async fn hold_a_thread(pool: &DiskPool, class: IoClass) -> (mpsc::Sender<()>, Ticket<bool>) {
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = oneshot::channel();
        let t = pool
            .submit(class, &Cancel::new(), move || {
                let _ = started_tx.send(());
                gate_rx.recv().is_ok()
            })
            .await
            .unwrap();
        started_rx.await.unwrap();
        (gate_tx, t)
    }

    #[tokio::test]
    async fn jobs_run_off_the_loop_and_cancelled_jobs_are_skipped() {
        let pool = DiskPool::new(1, 4).unwrap();
        let c = Cancel::new();
        let name = pool
            .run(IoClass::Meta, &c, || {
                std::thread::current().name().map(str::to_string)
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("sluice-disk-0"));
        // Block the only thread, queue a job, cancel: the queued job must not run.
        let (gate, first) = hold_a_thread(&pool, IoClass::Transfer).await;
        let ran = Arc::new(AtomicBool::new(false));
        let ran2 = Arc::clone(&ran);
        let c2 = Cancel::new();
        let second = pool
            .submit(IoClass::Transfer, &c2, move || {
                ran2.store(true, Ordering::SeqCst)
            })
            .await
            .unwrap();
        c2.cancel();
        gate.send(()).unwrap();
        assert!(first.await.unwrap());
        assert!(matches!(second.await, Err(EngineError::Cancelled)));
        // A later job proves the skipped one was dequeued.
        pool.run(IoClass::Transfer, &c, || ()).await.unwrap();
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_thread_lives_on() {
        let pool = DiskPool::new(1, 4).unwrap();
        let c = Cancel::new();
        let r: Result<(), _> = pool
            .run(IoClass::Transfer, &c, || panic!("a bug in a disk job"))
            .await;
        assert!(matches!(r, Err(EngineError::DiskJobPanicked)), "{r:?}");
        // The only thread still serves.
        assert_eq!(pool.run(IoClass::Meta, &c, || 7).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn queued_work_is_taken_by_class() {
        let pool = DiskPool::new(1, 8).unwrap();
        let (gate, held) = hold_a_thread(&pool, IoClass::Meta).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tickets = Vec::new();
        for class in [IoClass::Background, IoClass::Meta, IoClass::Transfer] {
            let o = Arc::clone(&order);
            tickets.push(
                pool.submit(class, &Cancel::new(), move || o.lock().unwrap().push(class))
                    .await
                    .unwrap(),
            );
        }
        gate.send(()).unwrap();
        held.await.unwrap();
        for t in tickets {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            [IoClass::Transfer, IoClass::Meta, IoClass::Background]
        );
    }

    #[tokio::test]
    async fn background_work_leaves_a_thread_for_the_rest() {
        let pool = DiskPool::new(2, 8).unwrap();
        // A long checksum holds one thread; a second one must wait, and a
        // transfer read queued after it runs first on the free thread.
        let (gate, held) = hold_a_thread(&pool, IoClass::Background).await;
        let second_ran = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&second_ran);
        let second = pool
            .submit(IoClass::Background, &Cancel::new(), move || {
                s.store(true, Ordering::SeqCst)
            })
            .await
            .unwrap();
        let read = pool
            .run(IoClass::Transfer, &Cancel::new(), move || 1)
            .await
            .unwrap();
        assert_eq!(read, 1);
        assert!(
            !second_ran.load(Ordering::SeqCst),
            "a second background job took the last thread"
        );
        gate.send(()).unwrap();
        held.await.unwrap();
        second.await.unwrap();
        assert!(second_ran.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_full_class_queue_makes_submitters_wait_not_other_classes() {
        let pool = DiskPool::new(1, 1).unwrap();
        let (gate, held) = hold_a_thread(&pool, IoClass::Meta).await;
        let queued = pool
            .submit(IoClass::Background, &Cancel::new(), || ())
            .await
            .unwrap();
        // Background is full: a third submit waits until cancelled.
        let c = Cancel::new();
        c.cancel();
        assert!(matches!(
            pool.submit(IoClass::Background, &c, || ()).await,
            Err(EngineError::Cancelled)
        ));
        // Another class still has room.
        let t = pool
            .submit(IoClass::Transfer, &Cancel::new(), || 3)
            .await
            .unwrap();
        gate.send(()).unwrap();
        held.await.unwrap();
        assert_eq!(t.await.unwrap(), 3);
        queued.await.unwrap();
    }
}
