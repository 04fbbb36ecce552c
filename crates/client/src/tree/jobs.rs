//! Runs the files of a tree on `--files N` workers. Each worker keeps one
//! logged-in connection for all its files (no login per file) and opens a
//! new one only after a network failure. A failed file is retried with
//! backoff (resuming where it stopped: the per-file step is told which
//! attempt this is); the other files go on, and the summary lists the ones
//! that failed for good.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{ClientError, Result};

/// Attempts per file (the first one included).
pub const ATTEMPTS: u32 = 6;

/// Default number of files in flight: enough to hide a round trip per
/// file behind other files' data (lftp and rclone default to 4-8), few
/// enough that a server with a per-client session limit (vsftpd's
/// `max_per_ip`, often 5-10) does not refuse us.
pub const DEFAULT_FILES: usize = 4;

/// Most workers the automatic count grows to. A 64 KiB file costs about
/// five round trips on a fresh MODE S data connection (the 229, the
/// handshake, slow start), so a 100 Mbit/s path of 50 ms took 32 in
/// flight to pass 50 files/s (measured: 4 gave 13, 16 gave 39, 32 gave
/// 57); Sluice's default session limit is 256, and the ramp stops at a
/// server's refusal.
pub const MAX_AUTO_FILES: usize = 32;

/// How long the ramp lets new workers settle, and then measures.
const RAMP_WINDOW: Duration = Duration::from_millis(400);

/// How many files are in flight: `--files N` fixes it; by default it
/// starts at [`DEFAULT_FILES`] and doubles while that pays ([`Ramp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workers {
    /// Workers at the start.
    pub initial: usize,
    /// Most workers.
    pub max: usize,
}

impl Workers {
    /// From `--files` (`None`: automatic).
    pub fn from_flag(files: Option<u64>) -> Workers {
        match files {
            Some(n) => Workers {
                initial: n as usize,
                max: n as usize,
            },
            None => Workers {
                initial: DEFAULT_FILES,
                max: MAX_AUTO_FILES,
            },
        }
    }
}

/// The ramp's decisions (sans-I/O): given the bytes moved in each
/// measuring window, how many workers to add. Doubles while the rate
/// grows by at least a fifth per doubling; stops at the first doubling
/// that did not pay, or at the maximum.
#[derive(Debug)]
pub struct Ramp {
    n: usize,
    max: usize,
    last: Option<f64>,
}

impl Ramp {
    /// A ramp from `initial` workers up to `max`.
    pub fn new(initial: usize, max: usize) -> Ramp {
        Ramp {
            n: initial,
            max,
            last: None,
        }
    }

    /// The rate of the last window: workers to add, or `None` to stop.
    pub fn next(&mut self, rate: f64) -> Option<usize> {
        if self.last.is_some_and(|l| rate < l * 1.2) || self.n >= self.max {
            return None;
        }
        self.last = Some(rate);
        let more = self.n.min(self.max - self.n);
        self.n += more;
        Some(more)
    }
}

/// Worker connections opened in the background while the caller still
/// lists the tree: the workers' logins (4-6 round trips each: connect,
/// greeting, USER, PASS, TYPE, FEAT) overlap the listing's instead of
/// following it. A worker takes one with [`Preopen::take`], and opens its
/// own when none is left.
pub struct Preopen<C> {
    handles: Mutex<Vec<std::thread::JoinHandle<Result<C>>>>,
}

impl<C: Send + 'static> Preopen<C> {
    /// Starts `n` logins, each on its own thread.
    pub fn start<O>(n: usize, open: O) -> Preopen<C>
    where
        O: Fn() -> Result<C> + Send + Clone + 'static,
    {
        let handles = (0..n)
            .map(|_| {
                let open = open.clone();
                std::thread::spawn(open)
            })
            .collect();
        Preopen {
            handles: Mutex::new(handles),
        }
    }

    /// A connection opened ahead (waiting for its login to end), or
    /// `None` when all are taken.
    pub fn take(&self) -> Option<Result<C>> {
        let h = self.handles.lock().unwrap().pop()?;
        Some(
            h.join()
                .unwrap_or_else(|_| Err(ClientError::Bug("a login thread panicked".into()))),
        )
    }
}

/// One file that failed for good.
#[derive(Debug)]
pub struct Failure {
    /// Path relative to the tree.
    pub rel: String,
    /// The last error.
    pub error: ClientError,
}

/// What a whole job did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Files moved.
    pub done: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Retries made (all files).
    pub retries: u64,
    /// Files that failed for good, in the order they failed.
    pub failed: Vec<Failure>,
    /// Files not tried because the job stopped (a refused login would be
    /// refused for every file).
    pub untried: u64,
    /// Every file that arrived: path, bytes, time of its last attempt,
    /// attempts (for `--stats`).
    pub files: Vec<(String, u64, Duration, u32)>,
    /// When the workers started (the listing had ended), each worker's
    /// connection was ready, and each file arrived (`--stats`: where a
    /// job's time goes).
    pub timeline: Timeline,
}

/// Times of a job's run, for `--stats`.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The workers started.
    pub started: Option<std::time::Instant>,
    /// A worker's connection was ready (logged in).
    pub logins: Vec<std::time::Instant>,
    /// A file arrived.
    pub ends: Vec<std::time::Instant>,
    /// Steps before the workers started (connected, logged in, a level
    /// listed), set by the caller.
    pub marks: Vec<(&'static str, std::time::Instant)>,
}

/// Whether an error may go away when tried again: the network, a
/// protocol hiccup, or a 4xx ("transient negative") reply. A 5xx reply
/// (no such file, permission) or a local error will not.
pub fn retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Network { .. } | ClientError::Protocol(_) => true,
        // HTTP's 4xx is the client's fault (404 stays 404): only a
        // timeout, a rate limit and the server's temporary 5xx pass.
        ClientError::Refused { what, reply } if what == "GET" || what == "HEAD" => matches!(
            reply.get(..3),
            Some("408" | "429" | "500" | "502" | "503" | "504")
        ),
        ClientError::Refused { reply, .. } => reply.starts_with('4'),
        _ => false,
    }
}

/// Whether the connection is still usable after `e` (a refusal leaves it
/// in a known state; anything else may not).
fn keeps_connection(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { .. } | ClientError::Local { .. })
}

/// Delay before attempt `n` (1-based retry count): 0.5 s doubling, at
/// most 8 s.
pub fn backoff(n: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << n.saturating_sub(1).min(4)))
}

/// Runs `jobs` on `workers` threads. `open` makes a worker's connection;
/// `step(conn, job, attempt)` moves one file and returns its bytes;
/// `done` counts finished files as they finish (for the progress display).
pub fn run<J, C, O, S>(
    jobs: Vec<(String, J)>,
    workers: Workers,
    done: &AtomicU64,
    open: O,
    step: S,
) -> Outcome
where
    J: Send,
    O: Fn() -> Result<C> + Sync,
    S: Fn(&mut C, &str, &J, u32) -> Result<u64> + Sync,
{
    run_ahead(
        jobs,
        workers,
        Lookahead::NONE,
        |_| 0,
        done,
        open,
        |c, rel, job, attempt, _| step(c, rel, job, attempt),
    )
}

/// How many next files a worker takes from the queue before it starts
/// the current one (their commands go out early: FTP pipelining).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookahead {
    /// Most files taken ahead.
    pub files: usize,
    /// Most bytes (the files' sizes) taken ahead: a worker that takes
    /// large files ahead keeps them from the idle workers (4 x 32 MiB
    /// went down one connection, one after the other, while three
    /// workers never started), and a few files of a round trip's bytes
    /// are all the pipe needs.
    pub bytes: u64,
}

impl Lookahead {
    /// No files ahead.
    pub const NONE: Lookahead = Lookahead { files: 0, bytes: 0 };

    /// Up to `files` files of at most [`AHEAD_BYTES`] in all.
    pub const fn files(files: usize) -> Lookahead {
        Lookahead {
            files,
            bytes: AHEAD_BYTES,
        }
    }
}

/// Bytes of files a worker takes ahead: about a bandwidth-delay product
/// of 100 Mbit/s at 50 ms (625 KB), the order of the paths trees cross.
pub const AHEAD_BYTES: u64 = 1 << 20;

/// [`run`] whose step also sees the files its worker moves next (each
/// worker takes up to `lookahead` next files, by count and by `size`,
/// from the queue before it starts the current one), so it can send their
/// commands before the current one's final reply (FTP pipelining: no
/// round trip between files). Those files stay with this worker.
pub fn run_ahead<J, C, O, S, Z>(
    jobs: Vec<(String, J)>,
    workers: Workers,
    lookahead: Lookahead,
    size: Z,
    done: &AtomicU64,
    open: O,
    step: S,
) -> Outcome
where
    J: Send,
    Z: Fn(&J) -> u64 + Sync,
    O: Fn() -> Result<C> + Sync,
    S: Fn(&mut C, &str, &J, u32, &[(&str, &J)]) -> Result<u64> + Sync,
{
    let started = std::time::Instant::now();
    let logins = Mutex::new(Vec::new());
    let ends = Mutex::new(Vec::new());
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
    let files = Mutex::new(Vec::new());
    let bytes = AtomicU64::new(0);
    let retries = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    // A worker added by the ramp that cannot log in (a server's session
    // limit) stops the ramp, not the job.
    let no_more = std::sync::atomic::AtomicBool::new(false);
    let active = std::sync::atomic::AtomicUsize::new(0);
    let (initial, max) = (
        workers.initial.max(1),
        workers.max.max(workers.initial.max(1)),
    );
    let work = |extra: bool| {
        let mut conn: Option<C> = None;
        if extra {
            match open() {
                Ok(c) => {
                    logins.lock().unwrap().push(std::time::Instant::now());
                    conn = Some(c)
                }
                Err(e) => {
                    tracing::info!("no more connections for this job: {e}");
                    no_more.store(true, Relaxed);
                    active.fetch_sub(1, Relaxed);
                    return;
                }
            }
        }
        let mut ahead: VecDeque<(String, J)> = VecDeque::new();
        loop {
            if stop.load(Relaxed) {
                let mut q = queue.lock().unwrap();
                while let Some(j) = ahead.pop_back() {
                    q.push_front(j);
                }
                break;
            }
            let Some((rel, job)) = ahead
                .pop_front()
                .or_else(|| queue.lock().unwrap().pop_front())
            else {
                break;
            };
            {
                let mut q = queue.lock().unwrap();
                let mut bytes = ahead
                    .iter()
                    .fold(0u64, |b, (_, j)| b.saturating_add(size(j)));
                // No more than this worker's share of what is left: a few
                // files go one to a worker, not all to the first.
                let share = q.len() / active.load(Relaxed).max(1);
                while ahead.len() < lookahead.files.min(share) {
                    match q.front() {
                        Some((_, j)) if bytes.saturating_add(size(j)) <= lookahead.bytes => {
                            bytes = bytes.saturating_add(size(j));
                            ahead.extend(q.pop_front());
                        }
                        _ => break,
                    }
                }
            }
            let mut attempt = 0;
            loop {
                let t = std::time::Instant::now();
                let next: Vec<(&str, &J)> = ahead.iter().map(|(r, j)| (r.as_str(), j)).collect();
                let next = &next[..];
                let r = match conn.as_mut() {
                    Some(c) => step(c, &rel, &job, attempt, next),
                    None => open().and_then(|mut c| {
                        logins.lock().unwrap().push(std::time::Instant::now());
                        let r = step(&mut c, &rel, &job, attempt, next);
                        conn = Some(c);
                        r
                    }),
                };
                match r {
                    Ok(n) => {
                        ends.lock().unwrap().push(std::time::Instant::now());
                        done.fetch_add(1, Relaxed);
                        bytes.fetch_add(n, Relaxed);
                        files
                            .lock()
                            .unwrap()
                            .push((rel, n, t.elapsed(), attempt + 1));
                        break;
                    }
                    Err(e) => {
                        if !keeps_connection(&e) {
                            conn = None;
                        }
                        attempt += 1;
                        if matches!(e, ClientError::Login { .. } | ClientError::Usage(_)) {
                            stop.store(true, Relaxed);
                        }
                        if !retryable(&e) || attempt >= ATTEMPTS {
                            failed.lock().unwrap().push(Failure { rel, error: e });
                            break;
                        }
                        retries.fetch_add(1, Relaxed);
                        eprintln!(
                            "sluice: {}: {e}; retry {attempt} in {:?}",
                            super::plan::shown(&rel),
                            backoff(attempt)
                        );
                        std::thread::sleep(backoff(attempt));
                    }
                }
            }
        }
        active.fetch_sub(1, Relaxed);
    };
    std::thread::scope(|s| {
        for _ in 0..initial {
            active.fetch_add(1, Relaxed);
            s.spawn(|| work(false));
        }
        // The ramp: while the queue is long, double the workers as long
        // as that raises the rate by a fifth (a long path: files/s grows
        // with files in flight; a busy CPU or disk: it does not).
        let mut n = initial;
        let mut ramp = Ramp::new(initial, max);
        let waited = |d: Duration| {
            let until = std::time::Instant::now() + d;
            while std::time::Instant::now() < until {
                if active.load(Relaxed) == 0 {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            true
        };
        while n < max {
            // One window for the new workers to log in, one to measure.
            if !waited(RAMP_WINDOW) {
                break;
            }
            let b0 = bytes.load(Relaxed);
            if !waited(RAMP_WINDOW) {
                break;
            }
            let rate = (bytes.load(Relaxed) - b0) as f64;
            if stop.load(Relaxed) || no_more.load(Relaxed) || queue.lock().unwrap().len() < n {
                break;
            }
            let Some(more) = ramp.next(rate) else { break };
            for _ in 0..more {
                active.fetch_add(1, Relaxed);
                s.spawn(|| work(true));
            }
            n += more;
        }
    });
    Outcome {
        untried: queue.into_inner().unwrap().len() as u64,
        done: done.load(Relaxed),
        files: files.into_inner().unwrap(),
        timeline: Timeline {
            started: Some(started),
            logins: logins.into_inner().unwrap(),
            ends: ends.into_inner().unwrap(),
            marks: Vec::new(),
        },
        bytes: bytes.into_inner(),
        retries: retries.into_inner(),
        failed: failed.into_inner().unwrap(),
    }
}

#[cfg(test)]
mod tests;
