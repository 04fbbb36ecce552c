//! A cancellation token (ABOR, session closed): cheap to clone, can be
//! awaited, and checked from disk threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Cancels every operation that holds a clone. Cancelling is permanent.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    flag: AtomicBool,
    tx: watch::Sender<bool>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(false);
        Cancel {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                tx,
            }),
        }
    }

    /// Cancels; every waiter in [`Cancel::cancelled`] wakes.
    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::Release);
        self.inner.tx.send_replace(true);
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::Acquire)
    }

    /// Completes when cancelled (at once if already).
    pub async fn cancelled(&self) {
        let mut rx = self.inner.tx.subscribe();
        // The sender lives in `self`, so wait_for only returns Ok.
        let _ = rx.wait_for(|v| *v).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_on_cancel() {
        let c = Cancel::new();
        let c2 = c.clone();
        let h = tokio::spawn(async move { c2.cancelled().await });
        tokio::task::yield_now().await;
        assert!(!c.is_cancelled());
        c.cancel();
        h.await.unwrap();
        assert!(c.is_cancelled());
        c.cancelled().await;
    }
}
