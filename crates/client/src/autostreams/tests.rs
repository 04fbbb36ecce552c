//! The controller on simulated paths, on a virtual clock.

use super::*;

const TICK: Duration = Duration::from_millis(100);
const MB: f64 = 1e6;

/// A path seen by one transfer: its rate and loss at `n` streams.
struct Path<F: Fn(u32) -> (f64, f64)> {
    at: Duration,
    bytes: f64,
    lost: f64,
    shape: F,
}

impl<F: Fn(u32) -> (f64, f64)> Path<F> {
    fn new(shape: F) -> Self {
        Path {
            at: Duration::ZERO,
            bytes: 0.0,
            lost: 0.0,
            shape,
        }
    }

    /// Runs `c` for `secs` on the path; returns the stream count at
    /// every tick.
    fn run(&mut self, c: &mut Controller, secs: u64) -> Vec<u32> {
        let mut trace = Vec::new();
        let end = self.at + Duration::from_secs(secs);
        while self.at < end {
            let (rate, loss) = (self.shape)(c.streams());
            self.at += TICK;
            self.bytes += rate * TICK.as_secs_f64();
            self.lost += rate * TICK.as_secs_f64() / SEGMENT * loss;
            c.on_sample(Sample {
                at: self.at,
                bytes: self.bytes as u64,
                lost: self.lost as u64,
                rtt: Duration::from_millis(50),
            });
            trace.push(c.streams());
        }
        trace
    }
}

/// Each stream moves `per` bytes/s (its window over the RTT) until the
/// bottleneck's `cap` is full; past the knee the queue overflows and
/// loss grows with every extra stream.
fn knee(per: f64, cap: f64) -> impl Fn(u32) -> (f64, f64) {
    move |n| {
        let want = per * n as f64;
        if want <= cap {
            (want, 0.0)
        } else {
            (cap, 0.0002 * (want / cap))
        }
    }
}

fn settled(trace: &[u32], last: usize) -> (u32, u32) {
    let tail = &trace[trace.len() - last..];
    (*tail.iter().min().unwrap(), *tail.iter().max().unwrap())
}

#[test]
fn starts_at_one_and_climbs_while_throughput_scales() {
    let mut c = Controller::new(64);
    assert_eq!(c.streams(), 1);
    // 10 MB/s a stream up to 160 MB/s: the knee is at 16.
    let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
    let trace = p.run(&mut c, 30);
    // Doubling reaches 16 in a few seconds.
    let t16 = trace.iter().position(|&n| n >= 16).unwrap();
    assert!(t16 * 100 <= 6_000, "16 streams only after {t16} ticks");
    let (lo, hi) = settled(&trace, 100);
    assert!((14..=18).contains(&lo) && hi <= 18, "{lo}..{hi}: {trace:?}");
}

#[test]
fn stops_at_the_knee() {
    // Five streams fill the path; more only add loss.
    let mut c = Controller::new(64);
    let mut p = Path::new(knee(20.0 * MB, 100.0 * MB));
    let trace = p.run(&mut c, 40);
    let (lo, hi) = settled(&trace, 150);
    assert!(lo >= 4 && hi <= 7, "{lo}..{hi}: {trace:?}");
    // Never far past the knee for long: doubling overshoots once.
    assert!(trace.iter().all(|&n| n <= 16), "{trace:?}");
}

#[test]
fn a_path_that_one_stream_fills_stays_at_one() {
    let mut c = Controller::new(64);
    let mut p = Path::new(knee(100.0 * MB, 100.0 * MB));
    let trace = p.run(&mut c, 30);
    let (lo, hi) = settled(&trace, 150);
    assert!(lo == 1 && hi <= 2, "{lo}..{hi}: {trace:?}");
}

#[test]
fn a_path_whose_queue_fills_is_never_probed_with_more_streams() {
    // One stream fills a 40 MB/s bottleneck; once it does, the
    // drop-tail queue triples the round trip (50 -> 150 ms), and slow
    // start's overshoot lost a packet. Another stream could bring
    // nothing, so none is tried.
    let mut c = Controller::new(64);
    let (mut at, mut bytes) = (Duration::ZERO, 0u64);
    while at < Duration::from_secs(60) {
        at += TICK;
        bytes += (40.0 * MB * TICK.as_secs_f64()) as u64;
        let full = at >= Duration::from_millis(500);
        let n = c.on_sample(Sample {
            at,
            bytes,
            lost: u64::from(full),
            rtt: Duration::from_millis(if full { 150 } else { 50 }),
        });
        assert_eq!(n, 1, "at {at:?}: {:?}", c.history());
    }
    assert!(c.history().len() > 10);
}

#[test]
fn a_paced_stream_whose_round_trip_grows_without_loss_still_climbs() {
    // The sender paces each connection to 8 MB/s: the receiver's
    // round-trip estimate grows with the pacing, but nothing was
    // lost, so no queue overflowed: a second stream is tried and kept.
    let mut c = Controller::new(64);
    let (mut at, mut bytes) = (Duration::ZERO, 0f64);
    let mut peak = 1;
    while at < Duration::from_secs(30) {
        at += TICK;
        bytes += 8.0 * MB * f64::from(c.streams()) * TICK.as_secs_f64();
        let rtt = if at < Duration::from_millis(300) {
            1
        } else {
            15
        };
        peak = peak.max(c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt: Duration::from_millis(rtt),
        }));
    }
    assert!(peak >= 4, "{:?}", c.history());
}

#[test]
fn a_loss_limited_path_with_no_queue_still_climbs() {
    // 0.1 % random loss holds each stream to 4 MB/s and the queue
    // stays empty (round trip flat): streams are added.
    let mut c = Controller::new(64);
    let mut p = Path::new(|n| ((4.0 * MB * n as f64).min(100.0 * MB), 0.0));
    let trace = p.run(&mut c, 30);
    assert!(*trace.iter().max().unwrap() >= 8, "{trace:?}");
}

#[test]
fn a_ramp_after_each_change_is_not_taken_for_a_gain() {
    // One stream fills the path, but every change of count costs a
    // second and a half: nothing for half a second (a restart), then
    // a linear climb (slow start). Judged on its first epoch, each
    // count would look better than the last.
    let mut c = Controller::new(64);
    let cap = 50.0 * MB;
    let (mut at, mut bytes) = (Duration::ZERO, 0.0f64);
    let (mut n, mut since) = (c.streams(), Duration::ZERO);
    let mut trace = Vec::new();
    while at < Duration::from_secs(60) {
        at += TICK;
        let t = (at - since).as_secs_f64();
        let rate = cap * ((t - 0.5) / 1.0).clamp(0.0, 1.0);
        bytes += rate * TICK.as_secs_f64();
        let want = c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt: Duration::from_millis(50),
        });
        if want != n {
            n = want;
            since = at;
        }
        trace.push(n);
    }
    // Never climbs away; mostly at one or two, probing a step around.
    assert!(trace.iter().all(|&n| n <= 4), "{trace:?}");
    let tail = &trace[trace.len() - 200..];
    let mean = tail.iter().sum::<u32>() as f64 / tail.len() as f64;
    assert!(mean <= 2.5, "{mean}: {trace:?}");
}

/// `n` streams on a path of `cap` bytes/s (`per` a stream), `t`
/// seconds after they started: each in slow start from 20 kB/s,
/// doubling every 50 ms round trip.
fn slow_start(t: f64, per: f64, n: u32, cap: f64) -> f64 {
    ((20e3 * 2f64.powf(t / 0.05)).min(per) * n as f64).min(cap)
}

/// Runs `c` for `secs` on a path whose streams all start over (as in
/// [`slow_start`]) at each change of count; returns the count at every
/// tick and the bytes moved.
fn ramped(c: &mut Controller, per: f64, cap: f64, loss: f64, secs: u64) -> (Vec<u32>, f64) {
    let (mut at, mut bytes, mut lost) = (Duration::ZERO, 0.0f64, 0.0f64);
    let (mut n, mut since) = (c.streams(), Duration::ZERO);
    let mut trace = Vec::new();
    while at < Duration::from_secs(secs) {
        at += TICK;
        let rate = slow_start((at - since).as_secs_f64(), per, n, cap);
        bytes += rate * TICK.as_secs_f64();
        lost += rate * TICK.as_secs_f64() / SEGMENT * loss;
        let want = c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: lost as u64,
            rtt: Duration::from_millis(50),
        });
        if want != n {
            n = want;
            since = at;
        }
        trace.push(n);
    }
    (trace, bytes)
}

#[test]
fn the_first_stream_is_not_probed_before_its_slow_start_is_over() {
    // A loss-limited stream (4 MB/s, 0.1 %) ramps for ~0.4 s; each
    // stream more adds 4 MB/s. The second stream may only come once
    // the first one's rate has been flat for FIRST_FLAT epochs.
    let mut c = Controller::new(64);
    let (trace, _) = ramped(&mut c, 4.0 * MB, 400.0 * MB, 0.0, 20);
    let first = trace.iter().position(|&n| n > 1).expect("never probed");
    let flat_from = 0.4; // 20 kB/s * 2^(t/50 ms) reaches 4 MB/s
    let epochs = c.history();
    assert!(
        first as f64 * 0.1 >= flat_from + 0.3 * FIRST_FLAT as f64,
        "probed at {first} ticks: {epochs:?}"
    );
    // Every epoch at one stream before the probe: the last FIRST_FLAT
    // of them held still.
    let at_one: Vec<_> = epochs.iter().filter(|e| e.streams == 1).collect();
    let k = at_one.len();
    assert!(k > FIRST_FLAT as usize, "{epochs:?}");
    for w in at_one[k - FIRST_FLAT as usize - 1..].windows(2) {
        assert!(w[1].rate <= w[0].rate * (1.0 + SETTLED), "{epochs:?}");
    }
    // And the search still finds the streams the path pays for.
    assert!(*trace.iter().max().unwrap() >= 8, "{trace:?}");
}

#[test]
fn a_download_done_in_a_few_seconds_is_never_probed() {
    // 200 MB at the 40 MB/s one stream gets on a clean 400 Mbit/s
    // path: 5 s in all, so never enough left to pay for a probe (a
    // second stream would bring nothing on this full path anyway).
    let mut c = Controller::new(64).with_todo(200_000_000, MIN_LEFT_TIME);
    let (trace, _) = ramped(&mut c, 40.0 * MB, 40.0 * MB, 0.0, 6);
    assert!(trace.iter().all(|&n| n == 1), "{trace:?}");
    // The same file over a lossy path (2 MB/s a stream) takes
    // minutes: streams are added.
    let mut c = Controller::new(64).with_todo(200_000_000, MIN_LEFT_TIME);
    let (trace, _) = ramped(&mut c, 2.0 * MB, 40.0 * MB, 0.0, 20);
    assert!(*trace.iter().max().unwrap() >= 8, "{trace:?}");
}

#[test]
fn a_slow_epoch_does_not_open_the_time_gate() {
    // 200 MB at 40 MB/s, but every third epoch reads half the rate (a
    // probe cycle, a dip after a loss): judged at the dip, the rest would
    // look long enough for a probe; at the best rate seen it is not.
    let mut c = Controller::new(64).with_todo(200_000_000, MIN_LEFT_TIME);
    let (mut at, mut bytes, mut k) = (Duration::ZERO, 0.0f64, 0u32);
    while bytes < 200e6 {
        at += TICK;
        k += 1;
        let rate = if (k / 3) % 3 == 2 {
            20.0 * MB
        } else {
            40.0 * MB
        };
        bytes += rate * TICK.as_secs_f64();
        let n = c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt: Duration::from_millis(50),
        });
        assert_eq!(n, 1, "at {at:?}: {:?}", c.history());
    }
}

#[test]
fn no_count_goes_up_near_the_end_of_a_transfer() {
    // A path that pays for 16 streams (10 MB/s each), but the file is
    // 100 MB: one doubling has time to pay (9 s left at 10 MB/s), the
    // next would not (under MIN_LEFT_TIME at 20 MB/s).
    let todo = 100_000_000u64;
    let mut c = Controller::new(64).with_todo(todo, MIN_LEFT_TIME);
    let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
    let mut trace = Vec::new();
    while p.bytes < todo as f64 {
        trace.extend(p.run(&mut c, 1));
    }
    assert_eq!(*trace.iter().max().unwrap(), 2, "{trace:?}");
    // Without the file's end in sight it would have gone on.
    let mut c = Controller::new(64);
    let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
    assert!(*p.run(&mut c, 8).iter().max().unwrap() >= 8);
}

#[test]
fn backs_off_under_loss() {
    // Throughput keeps scaling, but past 6 streams the path drops 3 %.
    let mut c = Controller::new(64);
    let mut p = Path::new(|n: u32| (10.0 * MB * n as f64, if n > 6 { 0.03 } else { 0.0 }));
    let trace = p.run(&mut c, 40);
    let (lo, hi) = settled(&trace, 100);
    assert!(hi <= 7 && lo >= 3, "{lo}..{hi}: {trace:?}");
}

#[test]
fn loss_that_appears_later_brings_the_count_down() {
    let mut c = Controller::new(64);
    let mut p = Path::new(knee(10.0 * MB, 160.0 * MB));
    p.run(&mut c, 20);
    assert!(c.streams() >= 14, "{}", c.streams());
    // Someone else's traffic: every stream now sees 2 % loss.
    let mut q = Path {
        at: p.at,
        bytes: p.bytes,
        lost: p.lost,
        shape: |n: u32| ((10.0 * MB * n as f64).min(160.0 * MB), 0.02),
    };
    let trace = q.run(&mut c, 20);
    let (_, hi) = settled(&trace, 50);
    assert!(hi <= 4, "{hi}: {trace:?}");
}

#[test]
fn respects_its_maximum_and_a_cap() {
    let mut c = Controller::new(4);
    let mut p = Path::new(knee(10.0 * MB, 1000.0 * MB));
    let trace = p.run(&mut c, 20);
    assert!(trace.iter().all(|&n| n <= 4));
    // At the maximum but for a probe now and then.
    let at_max = trace[100..].iter().filter(|&&n| n == 4).count();
    assert!(at_max * 10 >= trace[100..].len() * 7, "{trace:?}");
    c.capped_at(2, p.at);
    let trace = p.run(&mut c, 20);
    assert!(trace.iter().all(|&n| n <= 2)); // Kept at one by the caller: it holds there before probing again.
    c.pin(1, p.at);
    assert_eq!(c.streams(), 1);
    let trace = p.run(&mut c, 1);
    assert!(trace.iter().all(|&n| n == 1));
}

/// Two transfers on one bottleneck of `cap` bytes/s whose streams are
/// each window-limited to `per`: below the capacity every stream gets
/// `per`; above it the capacity is shared per stream (TCP's fairness)
/// and the queue's loss grows with the overload.
fn shared(per: f64, cap: f64, n: [u32; 2]) -> [(f64, f64); 2] {
    let total = (n[0] + n[1]) as f64;
    let want = per * total;
    let (each, loss) = if want <= cap {
        (per, 0.0)
    } else {
        (cap / total, 0.0004 * (want / cap).powi(2))
    };
    [(each * n[0] as f64, loss), (each * n[1] as f64, loss)]
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * q)
}

#[test]
fn two_transfers_on_one_bottleneck_converge_to_similar_counts() {
    let (per, cap) = (25.0 * MB, 200.0 * MB);
    let mut c = [Controller::new(64), Controller::new(64)];
    let mut bytes = [0.0f64; 2];
    let mut lost = [0.0f64; 2];
    let mut at = Duration::ZERO;
    // The second starts 10 s after the first.
    let second = Duration::from_secs(10);
    let mut counts = Vec::new();
    let mut rates = Vec::new();
    while at < Duration::from_secs(240) {
        at += TICK;
        let on = [true, at > second];
        let n = [c[0].streams(), if on[1] { c[1].streams() } else { 0 }];
        let r = shared(per, cap, n);
        for i in 0..2 {
            if !on[i] {
                continue;
            }
            bytes[i] += r[i].0 * TICK.as_secs_f64();
            lost[i] += r[i].0 * TICK.as_secs_f64() / SEGMENT * r[i].1;
            c[i].on_sample(Sample {
                at: if i == 0 { at } else { at - second },
                bytes: bytes[i] as u64,
                lost: lost[i] as u64,
                rtt: Duration::from_millis(50),
            });
        }
        counts.push(n);
        rates.push([r[0].0, r[1].0]);
    }
    // Over the last 60 s: similar counts and a fair share of the rate.
    let tail = counts.len() - 600;
    let mean = |i: usize| counts[tail..].iter().map(|n| n[i] as f64).sum::<f64>() / 600.0;
    let (a, b) = (mean(0), mean(1));
    assert!(
        (a - b).abs() <= 0.25 * a.max(b) + 1.0,
        "mean streams {a:.1} and {b:.1}: {:?}",
        &counts[tail..]
    );
    let ra = rates[tail..].iter().map(|r| r[0]).sum::<f64>();
    let rb = rates[tail..].iter().map(|r| r[1]).sum::<f64>();
    assert!(jain(&[ra, rb]) >= 0.95, "rates {ra:.0} {rb:.0}");
    // And together they still fill the path.
    assert!((ra + rb) / 600.0 >= 0.9 * cap);
}

#[test]
fn utility_charges_streams_and_loss() {
    assert!(utility(100.0, 0.0, 1) > utility(100.0, 0.0, 2));
    assert!(utility(100.0, 0.0, 8) > utility(100.0, 0.01, 8));
    assert!(utility(100.0, 0.0, 1) < utility(200.0, 0.0, 2));
}

#[test]
fn a_restarting_transfer_probes_only_with_long_enough_left() {
    // FTP at 100 Mbit/s 50 ms: 160 MB at the 12 MB/s one stream gets is
    // 13 s, where a probe that restarts twice costs 10 % (lab drs-wan
    // s12-final): never probed. The time-only gate would have let it.
    let mut c = Controller::new(64)
        .with_todo(160_000_000, MIN_LEFT_TIME)
        .restarting();
    let (trace, _) = ramped(&mut c, 12.0 * MB, 12.0 * MB, 0.0, 14);
    assert!(trace.iter().all(|&n| n == 1), "{trace:?}");
    let mut c = Controller::new(64).with_todo(160_000_000, MIN_LEFT_TIME);
    let (trace, _) = ramped(&mut c, 12.0 * MB, 12.0 * MB, 0.0, 14);
    assert!(trace.iter().any(|&n| n > 1), "{trace:?}");
    // A 2 GB file where one stream gets a third of the path (4 MB/s,
    // loss-limited) still gets its streams.
    let mut c = Controller::new(64)
        .with_todo(2_000_000_000, MIN_LEFT_TIME)
        .restarting();
    let (trace, _) = ramped(&mut c, 4.0 * MB, 12.0 * MB, 0.0, 14);
    assert!(*trace.iter().max().unwrap() >= 3, "{trace:?}");
    // On a short path a restart costs little: 48 MiB at 4 MB/s a stream
    // (paced, 15 ms round trips: tests/client_streams.rs) is probed.
    let mut c = Controller::new(64)
        .with_todo(48 << 20, MIN_LEFT_TIME)
        .restarting();
    let (mut at, mut bytes, mut trace) = (Duration::ZERO, 0f64, Vec::new());
    while bytes < (48 << 20) as f64 {
        at += TICK;
        bytes += 4.0 * MB * f64::from(c.streams()) * TICK.as_secs_f64();
        trace.push(c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt: Duration::from_millis(15),
        }));
    }
    assert!(trace.iter().any(|&n| n > 1), "{trace:?}");
}

#[test]
fn a_first_stream_that_left_slow_start_early_is_probed_while_it_grows() {
    // A transfer started behind another's standing queue (lab
    // auto-streams s13, server cubic): its one connection left slow start
    // at ~250 kB and grows 5 % per 125 ms round trip. Its rate never holds
    // still, but it grows far more slowly than a slow start: a second
    // stream is tried within a few seconds, before a loss closes the room.
    let rtt = Duration::from_millis(125);
    let mut c = Controller::new(64);
    let (mut at, mut bytes) = (Duration::ZERO, 0f64);
    let mut first = None;
    while at < Duration::from_secs(8) {
        at += TICK;
        let t = at.as_secs_f64();
        let per = (2.0 * MB * 1.05f64.powf(t / rtt.as_secs_f64())).min(48.0 * MB);
        bytes += per * f64::from(c.streams()) * TICK.as_secs_f64();
        let n = c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt,
        });
        if n > 1 && first.is_none() {
            first = Some(at);
        }
    }
    let first = first.unwrap_or_else(|| panic!("never probed: {:?}", c.history()));
    assert!(
        first <= Duration::from_secs(4),
        "probed at {first:?}: {:?}",
        c.history()
    );
    // A slow start (doubling per round trip) is still waited out.
    let mut c = Controller::new(64);
    let (mut at, mut bytes) = (Duration::ZERO, 0f64);
    while at < Duration::from_secs(2) {
        at += TICK;
        let t = at.as_secs_f64();
        bytes += (20e3 * 2f64.powf(t / rtt.as_secs_f64())).min(48.0 * MB) * TICK.as_secs_f64();
        let n = c.on_sample(Sample {
            at,
            bytes: bytes as u64,
            lost: 0,
            rtt,
        });
        // 20 kB/s reaches 48 MB/s after 11 round trips (1.4 s).
        assert_eq!(n, 1, "at {at:?}: {:?}", c.history());
    }
}

mod compete;
