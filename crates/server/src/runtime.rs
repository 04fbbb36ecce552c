//! How `sluice serve` lays out its event loops (`--runtime`, key
//! `runtime`; the flag wins over the key):
//!
//! - `per-core`: N single-threaded tokio runtimes on N threads, nginx
//!   style. Loop 0 runs on the main thread: it accepts FTP and HTTP
//!   connections and hands them round-robin to all loops (itself
//!   included, see `loops.rs`), and each connection (an FTP session with
//!   its data transfers) is served to its end on its loop's thread: no
//!   work stealing, no cross-thread wake-up per request or block. Loop 0
//!   also holds the metrics listener and the signal handling.
//! - `shared`: one multi-thread work-stealing runtime with N workers
//!   for everything (the layout before `per-core`).
//!
//! N is `--workers` (key `workers`), by default half the cores (at least
//! one): see [`default_workers`]. `--event-interval` (key
//! `[engine] event_interval`) sets how many tasks a loop polls between
//! checks of the I/O driver (tokio's default 61).
//!
//! Why not one `SO_REUSEPORT` listener per loop: sockets with that option
//! share a port with any other socket of the same user that sets it, so
//! a second `sluice serve` on the default port would silently take half
//! of this one's connections instead of failing with "address in use".
//! Why not every loop waiting on one shared listening socket: the loop
//! that wakes first takes a whole burst of connections (wrk's 256 at
//! start) and the other loops idle.
//!
//! Every loop's thread writes the gathered log lines before it sleeps
//! (`logbuf::flush` as `on_thread_park`).

use anyhow::{bail, Context, Result};

/// The event-loop layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// One single-threaded loop per worker thread.
    PerCore,
    /// One multi-thread work-stealing runtime.
    Shared,
}

/// The layout when nothing chooses one: `per-core`. Measured on the
/// 2-core machine (one loop or worker: the default there), 2026-11-22,
/// loopback, warm cache, 3 runs each, side by side:
/// - FTP (bench/dlcost.py): one 2 GiB stream 4162 MB/s, 0.241 server CPU
///   s/GiB, 36 context switches/GiB against `shared`'s 3856, 0.265, 35;
///   16 concurrent 256 MiB downloads 3905 MB/s, 0.244, 96 against 3656,
///   0.253, 120. A `shared` runtime runs its one worker beside the main
///   thread that blocks on the runtime; a `per-core` loop runs tasks and
///   polls the I/O driver on one thread.
/// - HTTP (bench/http.sh): a tie (2 GiB 4343 against 4281 MB/s; 64 KiB
///   over 256 keep-alive connections 48320 against 47948 req/s, p99 10.8
///   against 10.5 ms).
///
/// Earlier, with two workers and only HTTP spread over the loops, one run
/// of three had `per-core` with the worse p99 in every round (94-184 ms
/// against 23-90): a loop descheduled on a loaded machine stalls all of
/// its connections, where work stealing moves them. `--runtime shared`
/// is there for hosts where that matters more.
pub const DEFAULT_RUNTIME: RuntimeKind = RuntimeKind::PerCore;

impl RuntimeKind {
    /// Flag over file key over [`DEFAULT_RUNTIME`].
    pub fn choose(flag: Option<&str>, key: Option<&str>) -> Result<RuntimeKind> {
        if let Some(v) = flag.or(key) {
            return match v.trim() {
                "per-core" => Ok(RuntimeKind::PerCore),
                "shared" => Ok(RuntimeKind::Shared),
                other => bail!("runtime {other:?}: expected per-core or shared"),
            };
        }
        Ok(DEFAULT_RUNTIME)
    }

    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::PerCore => "per-core",
            RuntimeKind::Shared => "shared",
        }
    }
}

/// How many loops (`per-core`) or workers (`shared`): `--workers` (or
/// the key), else [`default_workers`].
///
/// Why half the cores by default, measured (bench/dlcost.py, 2 cores,
/// warm 2 GiB over loopback, sendfile): a sender spends its time in the
/// kernel's TCP work, and each peer (and the kernel's network processing)
/// needs a core too; a worker per core then mostly adds cross-thread
/// wake-ups and steals. One worker instead of two cut server context
/// switches per GiB from ~775 to ~440 for one stream and ~410 to ~330 for
/// 16 concurrent downloads, with the same MB/s. Only measured on 2 cores:
/// revisit on larger hosts.
pub fn workers(configured: Option<usize>) -> Result<usize> {
    if let Some(n) = configured {
        return Ok(n.max(1));
    }
    Ok(default_workers())
}

/// Half the cores, at least one.
pub fn default_workers() -> usize {
    (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1)
}

/// The runtime the main thread runs: the whole multi-thread runtime
/// (`shared`) or loop 0 (`per-core`).
pub fn build_main(
    kind: RuntimeKind,
    workers: usize,
    event_interval: Option<u32>,
) -> Result<tokio::runtime::Runtime> {
    match kind {
        RuntimeKind::Shared => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(workers.max(1));
            finish(b, event_interval)
        }
        RuntimeKind::PerCore => build_loop(event_interval),
    }
}

/// One single-threaded loop (`per-core`).
pub fn build_loop(event_interval: Option<u32>) -> Result<tokio::runtime::Runtime> {
    finish(
        tokio::runtime::Builder::new_current_thread(),
        event_interval,
    )
}

fn finish(
    mut b: tokio::runtime::Builder,
    event_interval: Option<u32>,
) -> Result<tokio::runtime::Runtime> {
    if let Some(n) = event_interval {
        b.event_interval(n.max(1));
    }
    b.enable_all()
        .thread_name("sluice")
        .on_thread_park(crate::logbuf::flush)
        .build()
        .context("cannot start the runtime")
}

/// Starts loops 1..n on their own threads, each running `body(i)` to its
/// end (for the HTTP accept loop: forever).
pub fn spawn_loops<F, Fut>(n: usize, event_interval: Option<u32>, body: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    for i in 1..n {
        let rt = build_loop(event_interval)?;
        let body = body.clone();
        std::thread::Builder::new()
            .name(format!("sluice-loop-{i}"))
            .spawn(move || rt.block_on(body(i)))
            .context("cannot start an event-loop thread")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_then_key() {
        assert_eq!(
            RuntimeKind::choose(Some("shared"), Some("per-core")).unwrap(),
            RuntimeKind::Shared
        );
        assert_eq!(
            RuntimeKind::choose(None, Some("per-core")).unwrap(),
            RuntimeKind::PerCore
        );
        assert!(RuntimeKind::choose(Some("threads"), None).is_err());
        for k in [RuntimeKind::PerCore, RuntimeKind::Shared] {
            assert_eq!(RuntimeKind::choose(Some(k.as_str()), None).unwrap(), k);
        }
    }

    #[test]
    fn extra_loops_run_their_bodies() {
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_loops(3, None, move |i| {
            let tx = tx.clone();
            async move {
                tokio::task::yield_now().await;
                tx.send(i).unwrap();
            }
        })
        .unwrap();
        let mut got: Vec<usize> = (0..2).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, [1, 2]);
    }
}
