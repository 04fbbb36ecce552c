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
    workers: usize,
    done: &AtomicU64,
    open: O,
    step: S,
) -> Outcome
where
    J: Send,
    O: Fn() -> Result<C> + Sync,
    S: Fn(&mut C, &str, &J, u32) -> Result<u64> + Sync,
{
    run_ahead(jobs, workers, false, done, open, |c, rel, job, attempt, _| {
        step(c, rel, job, attempt)
    })
}

/// [`run`] whose step also sees the file its worker moves next (with
/// `lookahead`: each worker takes its next file from the queue before it
/// starts the current one), so it can send that file's commands before
/// the current one's final reply (FTP pipelining: no round trip between
/// files). The next file stays with this worker.
pub fn run_ahead<J, C, O, S>(
    jobs: Vec<(String, J)>,
    workers: usize,
    lookahead: bool,
    done: &AtomicU64,
    open: O,
    step: S,
) -> Outcome
where
    J: Send,
    O: Fn() -> Result<C> + Sync,
    S: Fn(&mut C, &str, &J, u32, Option<(&str, &J)>) -> Result<u64> + Sync,
{
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
    let files = Mutex::new(Vec::new());
    let bytes = AtomicU64::new(0);
    let retries = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let workers = workers.max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut conn: Option<C> = None;
                let mut ahead: Option<(String, J)> = None;
                loop {
                    if stop.load(Relaxed) {
                        if let Some(j) = ahead.take() {
                            queue.lock().unwrap().push_front(j);
                        }
                        return;
                    }
                    let Some((rel, job)) = ahead
                        .take()
                        .or_else(|| queue.lock().unwrap().pop_front())
                    else {
                        return;
                    };
                    if lookahead {
                        ahead = queue.lock().unwrap().pop_front();
                    }
                    let mut attempt = 0;
                    loop {
                        let t = std::time::Instant::now();
                        let next = ahead.as_ref().map(|(r, j)| (r.as_str(), j));
                        let r = match conn.as_mut() {
                            Some(c) => step(c, &rel, &job, attempt, next),
                            None => open().and_then(|mut c| {
                                let r = step(&mut c, &rel, &job, attempt, next);
                                conn = Some(c);
                                r
                            }),
                        };
                        match r {
                            Ok(n) => {
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
            });
        }
    });
    Outcome {
        untried: queue.into_inner().unwrap().len() as u64,
        done: done.load(Relaxed),
        files: files.into_inner().unwrap(),
        bytes: bytes.into_inner(),
        retries: retries.into_inner(),
        failed: failed.into_inner().unwrap(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn net() -> ClientError {
        ClientError::net("x", io::Error::from(io::ErrorKind::ConnectionReset))
    }

    #[test]
    fn retries_transient_errors_and_reports_permanent_ones() {
        let calls = Mutex::new(Vec::new());
        let opens = AtomicU64::new(0);
        let jobs = vec![
            ("ok".to_string(), 0u32),
            ("flaky".to_string(), 1),
            ("gone".to_string(), 2),
        ];
        let done = AtomicU64::new(0);
        let out = run(
            jobs,
            1,
            &done,
            || {
                opens.fetch_add(1, Relaxed);
                Ok(())
            },
            |_, rel, &kind, attempt| {
                calls.lock().unwrap().push((rel.to_string(), attempt));
                match (kind, attempt) {
                    (0, _) => Ok(10),
                    (1, 0) => Err(net()),
                    (1, _) => Ok(5),
                    _ => Err(ClientError::Refused {
                        what: "RETR".into(),
                        reply: "550 no such file".into(),
                    }),
                }
            },
        );
        assert_eq!((out.done, out.bytes, out.retries), (2, 15, 1));
        assert_eq!(out.failed.len(), 1);
        assert_eq!(out.failed[0].rel, "gone");
        // One login, one more after the network error; the 550 kept it.
        assert_eq!(opens.load(Relaxed), 2);
        assert_eq!(calls.lock().unwrap()[2], ("flaky".to_string(), 1));
    }

    #[test]
    fn a_refused_login_stops_the_job() {
        let done = AtomicU64::new(0);
        let jobs = (0..50).map(|i| (format!("f{i}"), ())).collect();
        let tries = AtomicU64::new(0);
        let out = run(
            jobs,
            2,
            &done,
            || -> Result<()> {
                tries.fetch_add(1, Relaxed);
                Err(ClientError::Login {
                    reply: "530 no".into(),
                })
            },
            |_, _, _, _| Ok(1),
        );
        assert_eq!(out.done, 0);
        assert!(out.failed.len() <= 2, "{:?}", out.failed);
        assert_eq!(out.failed.len() as u64 + out.untried, 50);
        assert!(tries.load(Relaxed) <= 2);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(20), Duration::from_secs(8));
        assert!(retryable(&ClientError::Refused {
            what: "x".into(),
            reply: "421 busy".into()
        }));
        assert!(!retryable(&ClientError::Usage("x".into())));
        let http = |reply: &str| ClientError::Refused {
            what: "GET".into(),
            reply: reply.into(),
        };
        assert!(!retryable(&http("404 Not Found")));
        assert!(!retryable(&http("403 Forbidden")));
        assert!(retryable(&http("503 Service Unavailable")));
        assert!(retryable(&http("429 Too Many Requests")));
    }
}
