//! One listener for both front doors: binding with a large backlog, the
//! accept loop, the connection limit and its refusal (FTP 421, HTTP 503),
//! and running out of file descriptors.
//!
//! ```text
//!  bind(backlog) ──accept──▶ gate (max sessions/connections) ──▶ serve on the next loop
//!        │           │            └ full: `full` bytes, close
//!        └ shutdown draining: the loop ends and the listening socket
//!          closes, so new connects are refused (crate::shutdown)
//!                    └ EMFILE/ENFILE: free the reserve fd, accept one queued
//!                      connection, send `exhausted` bytes, close, take the
//!                      reserve again; back off; one log line per interval
//! ```
//!
//! Out of descriptors, a plain accept loop can neither take a connection
//! nor make the kernel drop it: queued clients hang without a greeting
//! while the loop spins on EMFILE. nginx keeps no reserve and just waits;
//! this loop keeps one descriptor in reserve (as libuv and HAProxy do) so
//! each queued client is told "try later" and closed.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::loops::Loops;
use crate::shutdown::{LiveGuard, Shutdown};

/// Listen backlog when none is configured: nginx's (the kernel caps it at
/// `net.core.somaxconn`, 4096 on current kernels). 128, the old default,
/// left clients of a burst of connects waiting for a SYN retransmit.
pub const DEFAULT_BACKLOG: u32 = 511;

/// How long a refused connection may take to receive its answer.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(5);

/// At most one "out of descriptors" / "accept failed" line per this long.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Longest pause after a failed accept (doubling from `FIRST_BACKOFF`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// Descriptors a session or connection may hold besides its socket (a
/// served root, a file, a data connection and its listener), for the
/// start-up budget check.
const FDS_PER_CLIENT: u64 = 3;

/// Descriptors the server holds for itself (engine, log, listeners...).
const FDS_BASE: u64 = 64;

/// Binds a listener on `addr` with `backlog` (SO_REUSEADDR, as tokio's
/// `TcpListener::bind`).
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    TcpListener::from_std(sock.into())
}

/// Raises the descriptor limit to the hard limit and warns when it is
/// still short of what `clients` (FTP sessions plus HTTP connections)
/// may need.
pub fn check_fd_budget(clients: usize) {
    let need = FDS_BASE + clients as u64 * FDS_PER_CLIENT;
    match sluice_platform::sys::raise_nofile_limit() {
        Ok(have) if have < need => tracing::warn!(
            limit = have,
            need,
            "open-file limit (RLIMIT_NOFILE) is below what the session and connection limits may need; \
             raise it (ulimit -n, LimitNOFILE=) or lower --max-sessions / --http-max-connections; \
             clients beyond it get 421/503"
        ),
        Ok(have) => tracing::debug!(limit = have, need, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}

/// What a front door answers, and how many clients it serves at once.
#[derive(Debug)]
pub struct Door {
    /// "ftp" or "http", for the log.
    pub name: &'static str,
    /// The connection limit (may be shared by several accept loops).
    pub gate: Arc<Semaphore>,
    /// The gate's size.
    pub limit: usize,
    /// Sent to a connection over the limit before it is closed (made
    /// afresh each time: an HTTP refusal carries the date).
    pub full: fn() -> Vec<u8>,
    /// Sent to a connection taken while out of descriptors.
    pub exhausted: fn() -> Vec<u8>,
}

/// What an accepted connection holds while it is served: its place under
/// the door's limit, and its count among the live connections a stop
/// waits for. Dropped when the connection's task ends.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    _live: LiveGuard,
}

/// Accepts connections until `stop` begins draining (then the listener is
/// dropped: its socket closes and new connects are refused). Each one
/// within the limit is handed, with its [`Admitted`], to `serve` on the
/// next of `loops` (`serve` spawns its task); the others get the door's
/// refusal.
pub async fn run<F>(listener: TcpListener, door: Door, loops: Loops, stop: Shutdown, serve: F)
where
    F: Fn(TcpStream, SocketAddr, Admitted) + Clone + Send + 'static,
{
    let door = Arc::new(door);
    tokio::spawn(trim_after_bursts(Arc::clone(&door)));
    let mut reserve = open_reserve();
    let mut trouble = Trouble::new(door.name);
    let mut backoff = FIRST_BACKOFF;
    // Nothing is accepted before the server says it may (`--run-as`
    // switches users between binding and serving).
    stop.serving().await;
    let draining = stop.draining();
    tokio::pin!(draining);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut draining => {
                tracing::info!(door = door.name, "stopped accepting");
                return;
            }
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) if sluice_platform::sys::is_out_of_descriptors(&e) => {
                trouble.note(&e);
                if reserve.is_none() {
                    reserve = open_reserve();
                }
                // One descriptor back, one queued client answered and
                // closed, with no await in between so no other task can
                // take the descriptor (a plain non-blocking accept(2): the
                // reactor's readiness is not to be trusted after EMFILE).
                if reserve.take().is_some() {
                    let refused = refuse_one_queued(&listener, &(door.exhausted)());
                    reserve = open_reserve();
                    if refused {
                        continue;
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(e) => {
                // ECONNABORTED and friends: the next accept may well work.
                trouble.note(&e);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = FIRST_BACKOFF;
        if reserve.is_none() {
            reserve = open_reserve();
        }
        match Arc::clone(&door.gate).try_acquire_owned() {
            Ok(permit) => {
                let serve = serve.clone();
                // Counted live from here, not from when its loop starts it,
                // so a stop never misses a connection in the handover.
                let admitted = Admitted {
                    _permit: permit,
                    _live: stop.guard(),
                };
                loops.spread(stream, move |stream| serve(stream, peer, admitted));
            }
            Err(_) => {
                tracing::info!(door = door.name, %peer, "refused: connection limit reached");
                tokio::spawn(refuse(stream, Arc::clone(&door)));
            }
        }
    }
}

/// Accepts one queued connection, if any, sends `bytes` and closes it.
fn refuse_one_queued(listener: &TcpListener, bytes: &[u8]) -> bool {
    match socket2::SockRef::from(listener).accept() {
        Ok((sock, _)) => {
            // A fresh socket's buffer takes a one-line refusal whole.
            let _ = sock.set_nonblocking(true);
            let _ = sock.send(bytes);
            true
        }
        Err(_) => false,
    }
}

/// How often the door checks whether a burst of clients has gone.
const TRIM_CHECK: Duration = Duration::from_secs(5);

/// Clients gone since the last trim that make one worth its cost.
const TRIM_AFTER: usize = 1000;

/// Gives freed memory back after a burst of connections has closed. The
/// allocator keeps what 10,000 sessions used (about 100 MB) for reuse,
/// which is bounded (a second burst reuses it) but looks like a leak and
/// is lost to the page cache; once a thousand clients have gone since the
/// high-water mark, it is returned (`malloc_trim`, on a blocking thread).
async fn trim_after_bursts(door: Arc<Door>) {
    let mut tick = tokio::time::interval(TRIM_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut high = 0usize;
    loop {
        tick.tick().await;
        let in_use = door.limit.saturating_sub(door.gate.available_permits());
        high = high.max(in_use);
        if high - in_use >= TRIM_AFTER {
            high = in_use;
            let trimmed =
                tokio::task::spawn_blocking(sluice_platform::memory::release_free_memory).await;
            tracing::debug!(
                door = door.name,
                ?trimmed,
                "freed memory returned after a burst"
            );
        }
    }
}

/// The descriptor kept for answering clients while out of descriptors.
fn open_reserve() -> Option<File> {
    File::open("/dev/null").ok()
}

/// Sends the door's refusal and closes, within a deadline.
async fn refuse(mut stream: TcpStream, door: Arc<Door>) {
    let bytes = (door.full)();
    let _ = tokio::time::timeout(REFUSAL_DEADLINE, async {
        let _ = stream.write_all(&bytes).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Accept failures, logged once per [`LOG_INTERVAL`] with a count instead
/// of once per failure (a loop out of descriptors fails thousands of
/// times a second).
struct Trouble {
    door: &'static str,
    count: u64,
    last_log: Option<Instant>,
}

impl Trouble {
    fn new(door: &'static str) -> Trouble {
        Trouble {
            door,
            count: 0,
            last_log: None,
        }
    }

    fn note(&mut self, e: &io::Error) {
        self.count += 1;
        let now = Instant::now();
        if self.last_log.is_some_and(|t| now - t < LOG_INTERVAL) {
            return;
        }
        if sluice_platform::sys::is_out_of_descriptors(e) {
            tracing::warn!(
                door = self.door,
                error = %e,
                failures = self.count,
                "accept: out of file descriptors; queued clients are told to try later"
            );
        } else {
            tracing::warn!(door = self.door, error = %e, failures = self.count, "accept failed");
        }
        self.count = 0;
        self.last_log = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The backlog asked for is the one the kernel keeps (capped at
    /// somaxconn): read back from /proc/net/tcp is not portable, so check
    /// through ss-like means: a burst of connects larger than 128 with no
    /// accept all complete the handshake.
    #[tokio::test]
    async fn a_burst_beyond_128_connects_without_accept() {
        let l = bind("127.0.0.1:0".parse().unwrap(), DEFAULT_BACKLOG).unwrap();
        let addr = l.local_addr().unwrap();
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(128);
        let n = 300.min(somaxconn);
        let mut conns = Vec::new();
        for _ in 0..n {
            // A full backlog drops the SYN: connect would then wait for
            // a retransmit (1 s and more); a generous bound tells the two
            // apart without timing anything that matters.
            let c = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(addr))
                .await
                .expect("connect within the backlog")
                .unwrap();
            conns.push(c);
        }
        // Every connection is in the accept queue.
        for _ in 0..n {
            let (s, _) = l.accept().await.unwrap();
            drop(s);
        }
    }

    /// Over the limit: the refusal bytes, then close.
    /// A door admitting `limit` connections, refusing with `421 full`.
    fn test_door(limit: usize) -> Door {
        Door {
            name: "test",
            gate: Arc::new(Semaphore::new(limit)),
            limit,
            full: || b"421 full\r\n".to_vec(),
            exhausted: || b"421 later\r\n".to_vec(),
        }
    }

    #[tokio::test]
    async fn over_the_limit_gets_the_refusal() {
        let l = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = l.local_addr().unwrap();
        let door = test_door(1);
        tokio::spawn(run(
            l,
            door,
            Loops::here(),
            Shutdown::never(),
            |mut s, _, permit| {
                tokio::spawn(async move {
                    let _permit = permit;
                    s.write_all(b"220 hi\r\n").await.unwrap();
                    let mut b = [0u8; 1];
                    let _ = s.read(&mut b).await;
                });
            },
        ));
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 8];
        first.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"220 hi\r\n");
        let mut second = TcpStream::connect(addr).await.unwrap();
        let mut out = Vec::new();
        second.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"421 full\r\n");
    }

    /// Draining ends the accept loop and closes the listening socket: a
    /// new connect is refused, while an admitted connection goes on.
    #[tokio::test]
    async fn draining_closes_the_door_but_not_its_connections() {
        let l = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = l.local_addr().unwrap();
        let door = test_door(4);
        let (control, stop) = Shutdown::new();
        control.serve();
        let accepting = tokio::spawn(run(l, door, Loops::here(), stop, |mut s, _, admitted| {
            tokio::spawn(async move {
                let _admitted = admitted;
                let mut b = [0u8; 1];
                while s.read(&mut b).await.is_ok_and(|n| n > 0) {
                    s.write_all(&b).await.unwrap();
                }
            });
        }));
        let mut first = TcpStream::connect(addr).await.unwrap();
        first.write_all(b"a").await.unwrap();
        let mut b = [0u8; 1];
        first.read_exact(&mut b).await.unwrap();
        assert_eq!(control.live(), 1);
        control.drain();
        accepting.await.unwrap();
        let refused = TcpStream::connect(addr).await;
        assert!(refused.is_err(), "connect after the drain: {refused:?}");
        first.write_all(b"b").await.unwrap();
        first.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"b");
        drop(first);
        control.all_ended().await;
    }

    /// Before `Serving` (between bind and `--run-as`'s switch) nothing is
    /// accepted: a client waits in the backlog and is served after.
    #[tokio::test]
    async fn nothing_is_accepted_before_serving() {
        let l = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = l.local_addr().unwrap();
        let door = test_door(4);
        let (control, stop) = Shutdown::new();
        tokio::spawn(run(l, door, Loops::here(), stop, |mut s, _, admitted| {
            tokio::spawn(async move {
                let _admitted = admitted;
                s.write_all(b"hi").await.unwrap();
            });
        }));
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut b = [0u8; 2];
        let early = tokio::time::timeout(Duration::from_millis(200), c.read_exact(&mut b)).await;
        assert!(early.is_err(), "served before Serving");
        assert_eq!(control.live(), 0);
        control.serve();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hi");
    }
}
