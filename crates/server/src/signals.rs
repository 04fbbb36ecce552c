//! The signals `sluice serve` acts on, as events for its main loop:
//!
//! | signal | event | what `serve` does |
//! |---|---|---|
//! | SIGTERM, SIGINT | [`SignalEvent::Stop`] | the stop (crate::shutdown); a second one cuts at once |
//! | SIGHUP | [`SignalEvent::Reload`] | reload the configuration (crate::reload) |
//! | SIGUSR1 | [`SignalEvent::Reopen`] | reopen the log file (logrotate) |
//!
//! All four are caught from the start, before anything listens, so none
//! of them can end the process by its default action (SIGHUP's would, and
//! every transfer with it).

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// What a signal asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalEvent {
    /// SIGTERM or SIGINT (the name, for the log).
    Stop(&'static str),
    /// SIGHUP.
    Reload,
    /// SIGUSR1.
    Reopen,
}

/// The installed handlers.
#[derive(Debug)]
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    /// Installs the handlers (on the current runtime).
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> SignalEvent {
        loop {
            let ev = tokio::select! {
                r = self.term.recv() => r.map(|_| SignalEvent::Stop("SIGTERM")),
                r = self.int.recv() => r.map(|_| SignalEvent::Stop("SIGINT")),
                r = self.hup.recv() => r.map(|_| SignalEvent::Reload),
                r = self.usr1.recv() => r.map(|_| SignalEvent::Reopen),
            };
            // `None` only if the runtime's driver is gone; then nothing
            // more will come.
            match ev {
                Some(ev) => return ev,
                None => std::future::pending::<()>().await,
            }
        }
    }
}
