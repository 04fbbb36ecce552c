//! The server's start and stop, in phases every connection task watches:
//!
//! ```text
//!  Starting: listeners are bound but accept nothing yet (so nothing is
//!            served as root before `--run-as` has switched users)
//!  Control::serve ──▶ Serving
//!  SIGTERM/SIGINT ──▶ Draining: both doors stop accepting (their listening
//!                     sockets close: new connects are refused); idle FTP
//!                     sessions get 421 and close; idle HTTP keep-alive
//!                     connections close; running transfers go on, and each
//!                     session closes (421) once its transfer is done
//!  --shutdown-timeout
//!  or a 2nd signal ──▶ Cutting: running transfers are cancelled; an upload
//!                     keeps what arrived as its resumable partial
//!                     (crate::upload), never under the final name; each
//!                     cut transfer is logged
//!  every connection ended (or CUT_GRACE after the cut) ──▶ exit
//! ```
//!
//! [`Shutdown`] is the handle connection tasks hold; [`Control`] is the
//! one `main` drives. Live connections and transfers are counted by
//! [`LiveGuard`]s, so `main` knows when nothing is left to wait for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// How long the server waits, after cutting, for cut transfers to put
/// their partials away (an fdatasync each) before it exits regardless.
/// An upload's bytes are under the partial's name from its first byte on,
/// so even an exit before that loses nothing but the sync.
pub const CUT_GRACE: Duration = Duration::from_secs(10);

/// Where the server is in its stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Bound, not yet accepting.
    Starting,
    /// Accepting and serving.
    Serving,
    /// Not accepting; running transfers finish.
    Draining,
    /// Running transfers are being ended.
    Cutting,
}

#[derive(Debug, Default)]
struct Live {
    count: AtomicUsize,
    zero: Notify,
}

/// The handle connection tasks watch (cheap to clone).
#[derive(Clone, Debug)]
pub struct Shutdown {
    phase: watch::Receiver<Phase>,
    live: Arc<Live>,
}

/// The handle that moves the phases (held by `main`).
#[derive(Debug)]
pub struct Control {
    phase: watch::Sender<Phase>,
    live: Arc<Live>,
}

/// Counts one connection or transfer as live until dropped.
#[derive(Debug)]
pub struct LiveGuard {
    live: Arc<Live>,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.live.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.live.zero.notify_waiters();
        }
    }
}

impl Shutdown {
    /// A new sequence, in the `Starting` phase.
    pub fn new() -> (Control, Shutdown) {
        Shutdown::at(Phase::Starting)
    }

    fn at(phase: Phase) -> (Control, Shutdown) {
        let (tx, rx) = watch::channel(phase);
        let live = Arc::new(Live::default());
        (
            Control {
                phase: tx,
                live: Arc::clone(&live),
            },
            Shutdown { phase: rx, live },
        )
    }

    /// A handle that is `Serving` and never leaves it (unit tests).
    pub fn never() -> Shutdown {
        Shutdown::at(Phase::Serving).1
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// True from `Draining` on.
    pub fn is_draining(&self) -> bool {
        self.phase() >= Phase::Draining
    }

    /// True once transfers are being cut.
    pub fn is_cutting(&self) -> bool {
        self.phase() >= Phase::Cutting
    }

    /// Resolves once connections may be accepted (or the stop began).
    pub async fn serving(&self) {
        self.reached(Phase::Serving).await
    }

    /// Resolves when the stop has begun (never, for [`Shutdown::never`]).
    pub async fn draining(&self) {
        self.reached(Phase::Draining).await
    }

    /// Resolves when running transfers are to be ended.
    pub async fn cutting(&self) {
        self.reached(Phase::Cutting).await
    }

    async fn reached(&self, phase: Phase) {
        let mut rx = self.phase.clone();
        if rx.wait_for(|p| *p >= phase).await.is_err() {
            // The controller is gone without reaching `phase`.
            std::future::pending::<()>().await;
        }
    }

    /// Counts a connection or transfer as live until the guard drops.
    pub fn guard(&self) -> LiveGuard {
        self.live.count.fetch_add(1, Ordering::AcqRel);
        LiveGuard {
            live: Arc::clone(&self.live),
        }
    }
}

impl Control {
    /// Start accepting (everything is bound, privileges are dropped).
    pub fn serve(&self) {
        self.advance(Phase::Serving);
    }

    /// Stop accepting; let running transfers finish.
    pub fn drain(&self) {
        self.advance(Phase::Draining);
    }

    /// End running transfers.
    pub fn cut(&self) {
        self.advance(Phase::Cutting);
    }

    fn advance(&self, to: Phase) {
        self.phase.send_if_modified(|p| {
            let moved = *p < to;
            if moved {
                *p = to;
            }
            moved
        });
    }

    /// Live connections and transfers.
    pub fn live(&self) -> usize {
        self.live.count.load(Ordering::Acquire)
    }

    /// Resolves when no connection or transfer is live.
    pub async fn all_ended(&self) {
        loop {
            let zero = self.live.zero.notified();
            tokio::pin!(zero);
            zero.as_mut().enable();
            if self.live() == 0 {
                return;
            }
            zero.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn phases_advance_once_and_guards_count() {
        let (control, s) = Shutdown::new();
        assert_eq!(s.phase(), Phase::Starting);
        control.serve();
        assert_eq!(s.phase(), Phase::Serving);
        let g1 = s.guard();
        let g2 = s.clone().guard();
        assert_eq!(control.live(), 2);
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move {
                s.draining().await;
                s.cutting().await;
            })
        };
        control.drain();
        assert!(s.is_draining() && !s.is_cutting());
        control.cut();
        control.drain(); // never goes back
        assert!(s.is_cutting());
        waiter.await.unwrap();
        let ended = tokio::spawn(async move { control.all_ended().await });
        drop(g1);
        assert!(!ended.is_finished());
        drop(g2);
        ended.await.unwrap();
    }

    #[tokio::test]
    async fn never_stays_serving() {
        let s = Shutdown::never();
        assert!(!s.is_draining());
        let r = tokio::time::timeout(Duration::from_millis(10), s.draining()).await;
        assert!(r.is_err());
    }
}
