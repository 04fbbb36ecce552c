//! Counting a sender's wake-ups honestly, whatever it waited for.
//!
//! A sender task sleeps on socket readiness, on a disk job (copy path, the
//! prefetch planner's reads), on a timer (the planner's starvation naps) or
//! on whatever its caller selects beside it (a watchdog). Counting at each
//! wait site misses some and counts waits that never slept (readiness
//! already cached). Instead [`counted`] wraps the whole send: every poll
//! after the send returned `Pending` is one resume of the task, i.e. one
//! wake-up, except a resume after the sender's own [`yield_turn`] (counted
//! as `yields`, and no sleep: the task goes straight back on the run queue).

use std::cell::Cell;
use std::future::Future;
use std::task::Poll;

use crate::counters::Tally;

thread_local! {
    /// Set by [`yield_turn`] inside the poll that yields; read and cleared
    /// by [`counted`] when that same poll (same thread, same call stack)
    /// returns `Pending`.
    static YIELDING: Cell<bool> = const { Cell::new(false) };
}

/// Gives the event loop to other tasks (after a quantum); not a wake-up.
pub(crate) async fn yield_turn(t: Tally<'_>) {
    t.yields(1);
    YIELDING.with(|y| y.set(true));
    tokio::task::yield_now().await;
}

/// Runs `fut`, counting in `t.wakeups` each time it resumes after waiting.
pub(crate) async fn counted<F: Future>(fut: F, t: Tally<'_>) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    // Whether the last poll returned Pending, and whether that was a yield.
    let mut waiting = false;
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if waiting && !yielded {
            t.wakeups(1);
        }
        YIELDING.with(|y| y.set(false));
        match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(v),
            Poll::Pending => {
                waiting = true;
                yielded = YIELDING.with(|y| y.replace(false));
                Poll::Pending
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Counters;
    use std::time::Duration;

    #[tokio::test]
    async fn sleeps_count_and_yields_do_not() {
        let g = Counters::new();
        let l = Counters::new();
        let t = Tally {
            global: &g,
            local: &l,
        };
        counted(
            async {
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                for _ in 0..5 {
                    yield_turn(t).await;
                }
            },
            t,
        )
        .await;
        let s = l.snapshot();
        assert_eq!(s.wakeups, 3);
        assert_eq!(s.yields, 5);
        assert_eq!(g.snapshot().wakeups, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_path_counts_wakeups_and_live_totals() {
        use crate::send::tests::{engine_with, pair, pattern, temp_file};
        use crate::{Cancel, DataPath, PrefetchMode};
        use std::sync::Arc;
        use tokio::io::AsyncReadExt;
        let len = 32u64 << 20;
        let data = pattern(len as usize);
        for (path, mode) in [
            (DataPath::Sendfile, PrefetchMode::Kernel),
            (DataPath::Copy, PrefetchMode::Kernel),
            (DataPath::Sendfile, PrefetchMode::Fixed),
            (DataPath::Blocking, PrefetchMode::Kernel),
        ] {
            let e = engine_with(path, mode);
            let file = temp_file(&data);
            let (tx, mut rx) = pair().await;
            e.prepare_socket(&tx);
            let (open_tx, open_rx) = tokio::sync::oneshot::channel::<()>();
            // The reader waits for the gate, so the sender fills the
            // buffers and has to wait for room at least once.
            let reader = tokio::spawn(async move {
                let _ = open_rx.await;
                let mut got = Vec::new();
                rx.read_to_end(&mut got).await.unwrap();
                got.len() as u64
            });
            let counters = Arc::new(Counters::new());
            let (k, e2) = (Arc::clone(&counters), e.clone());
            let sender = tokio::spawn(async move {
                let r = e2
                    .send_file(&tx, &file, 0, len, &[], &k, &Cancel::new())
                    .await;
                drop(tx);
                r
            });
            while counters.snapshot().eagains == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Live: the engine's totals already have this transfer's bytes.
            let mid = e.counters();
            assert!(
                mid.bytes_sent > 0 && mid.bytes_sent < len,
                "{path}/{mode}: {mid:?}"
            );
            open_tx.send(()).unwrap();
            assert_eq!(sender.await.unwrap().unwrap(), len, "{path}/{mode}");
            assert_eq!(reader.await.unwrap(), len, "{path}/{mode}");
            let s = counters.snapshot();
            assert!(s.wakeups >= 1, "{path}/{mode}: {s:?}");
            assert_eq!(e.counters().wakeups, s.wakeups, "{path}/{mode}");
            assert_eq!(e.counters().bytes_sent, len, "{path}/{mode}");
        }
    }

    #[tokio::test]
    async fn a_future_ready_at_once_has_no_wakeup() {
        let g = Counters::new();
        let t = Tally {
            global: &g,
            local: &g,
        };
        assert_eq!(counted(async { 7 }, t).await, 7);
        assert_eq!(g.snapshot().wakeups, 0);
    }
}
