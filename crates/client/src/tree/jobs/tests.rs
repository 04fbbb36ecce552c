//! Tests of the job runner: retries, refused logins, the ramp, files
//! taken ahead.
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
        Workers::from_flag(Some(1)),
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
        Workers::from_flag(Some(2)),
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
fn the_ramp_doubles_while_it_pays() {
    let mut r = Ramp::new(4, 16);
    assert_eq!(r.next(100.0), Some(4)); // first window: try 8
    assert_eq!(r.next(190.0), Some(8)); // 8 paid: try 16
    assert_eq!(r.next(300.0), None); // at the maximum
    let mut r = Ramp::new(4, 16);
    assert_eq!(r.next(100.0), Some(4));
    assert_eq!(r.next(110.0), None); // 8 did not pay: stay
    let mut r = Ramp::new(4, 6);
    assert_eq!(r.next(1.0), Some(2));
    let fixed = Workers::from_flag(Some(3));
    assert_eq!((fixed.initial, fixed.max), (3, 3));
    assert_eq!(Ramp::new(3, 3).next(1.0), None);
}

#[test]
fn files_are_taken_ahead_up_to_the_byte_limit() {
    // Large files are not taken ahead (each idle worker gets its own);
    // small ones are, as many as fit in AHEAD_BYTES.
    for (size, most) in [(32u64 << 20, 0usize), (300 << 10, 3), (64 << 10, 4)] {
        let jobs = (0..20).map(|i| (format!("f{i}"), size)).collect();
        let done = AtomicU64::new(0);
        let seen = Mutex::new(Vec::new());
        let out = run_ahead(
            jobs,
            Workers::from_flag(Some(4)),
            Lookahead::files(4),
            |&s| s,
            &done,
            || Ok(()),
            |_, _, _, _, next| {
                seen.lock().unwrap().push(next.len());
                Ok(1)
            },
        );
        assert_eq!(out.done, 20);
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.iter().max(), Some(&most), "{size}: {seen:?}");
    }
}

#[test]
fn extra_workers_that_cannot_log_in_lose_no_file() {
    // Logins after the first four fail (a server's session limit):
    // the ramp stops, every file is still moved by the four.
    let opens = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let jobs = (0..400).map(|i| (format!("f{i}"), ())).collect();
    let out = run(
        jobs,
        Workers {
            initial: 4,
            max: 16,
        },
        &done,
        || {
            if opens.fetch_add(1, Relaxed) < 4 {
                Ok(())
            } else {
                Err(ClientError::Login {
                    reply: "421 too many".into(),
                })
            }
        },
        |_, _, _, _| {
            std::thread::sleep(Duration::from_millis(5));
            Ok(1)
        },
    );
    assert_eq!(out.done, 400);
    assert!(out.failed.is_empty() && out.untried == 0, "{out:?}");
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
