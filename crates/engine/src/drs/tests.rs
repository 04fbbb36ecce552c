//! Virtual-clock tests of the DRS estimator.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// A sender on a path of `rate` bytes/s and base round trip `rtt`, whose
/// buffer is whatever the estimator last set, driven by a congestion
/// control that wants up to 2.9 BDPs in flight (BBR's startup, where the
/// lab's flows stayed). What is in flight is what the buffer holds (in
/// the kernel's units, [`SEND_TRUESIZE`] per byte); beyond a BDP it waits
/// in the bottleneck's queue and lengthens the smoothed RTT; the buffer
/// reports itself the limit whenever the sender wanted more in flight.
pub(super) struct Path {
    rate: u64,
    rtt: Duration,
    pub(super) buffer: u64,
    limited: Duration,
    min_rtt: Duration,
}

impl Path {
    pub(super) fn new(rate: u64, rtt: Duration, buffer: u64) -> Path {
        Path {
            rate,
            rtt,
            buffer,
            limited: Duration::ZERO,
            min_rtt: rtt,
        }
    }

    fn in_flight(&self) -> f64 {
        (self.buffer as f64 / SEND_TRUESIZE).min(2.9 * bdp(self.rate, self.rtt) as f64)
    }

    pub(super) fn sample(&mut self, dt: Duration) -> SendSample {
        let bdp = bdp(self.rate, self.rtt) as f64;
        let flight = self.in_flight();
        let got = (flight / self.rtt.as_secs_f64()).min(self.rate as f64) as u64;
        if (self.buffer as f64 / SEND_TRUESIZE) < 2.9 * bdp {
            self.limited += dt;
        }
        let srtt = self.rtt + Duration::from_secs_f64((flight - bdp).max(0.0) / self.rate as f64);
        self.min_rtt = self.min_rtt.min(srtt);
        SendSample {
            delivery_rate: got,
            rtt: srtt,
            min_rtt: self.min_rtt,
            cwnd_bytes: flight as u64,
            sndbuf_limited: self.limited,
            buffer: self.buffer,
            floor: 64 << 10,
            ..SendSample::default()
        }
    }

    fn delivers(&self) -> u64 {
        (self.in_flight() / self.rtt.as_secs_f64()).min(self.rate as f64) as u64
    }
}

/// Runs the sender for `secs` of virtual time; returns the clock.
pub(super) fn run(d: &mut Drs, p: &mut Path, start: Duration, secs: u64) -> (Duration, usize) {
    let mut now = start;
    let mut changes = 0;
    let end = start + Duration::from_secs(secs);
    let mut dt = 10 * MS;
    while now < end {
        now += dt;
        let s = p.sample(dt);
        let dec = d.on_send_sample(now, &s);
        if let Some(b) = dec.set {
            p.buffer = b;
            changes += 1;
        }
        dt = dec.next_sample;
    }
    (now, changes)
}

fn bdp(rate: u64, rtt: Duration) -> u64 {
    (rate as f64 * rtt.as_secs_f64()) as u64
}

#[test]
fn a_steady_path_settles_near_its_bdp_and_the_mark_and_stays() {
    // 100 Mbit/s, 50 ms: BDP 625 kB.
    let rate = 12_500_000;
    let rtt = 50 * MS;
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, rtt, 128 << 10);
    let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
    // 1.25 BDP in flight and the not-sent mark, in the kernel's units.
    let b = bdp(rate, rtt);
    assert!(p.buffer >= b * 5 / 4, "{} < 1.25 x {b}", p.buffer);
    assert!(p.buffer <= b * 5 / 2, "{} > 2.5 x {b}", p.buffer);
    assert_eq!(p.delivers(), rate);
    assert_eq!(d.bdp(), bdp(rate, rtt));
    // Steady: no more changes, and samples spaced out.
    let (_, changes) = run(&mut d, &mut p, now, 30);
    assert_eq!(changes, 0, "thrashing on a steady path");
    let s = p.sample(Duration::from_secs(1));
    let dec = d.on_send_sample(now + Duration::from_secs(41), &s);
    assert!(dec.next_sample >= 200 * MS, "{:?}", dec.next_sample);
}

#[test]
fn a_limiting_buffer_grows_by_doubling_within_a_few_round_trips() {
    // 1 Gbit/s, 100 ms: BDP 12.5 MB, from a 4 MiB buffer.
    let rate = 125_000_000;
    let rtt = 100 * MS;
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, rtt, 4 << 20);
    run(&mut d, &mut p, Duration::ZERO, 2);
    assert!(p.buffer >= bdp(rate, rtt) * 5 / 4, "{}", p.buffer);
    assert_eq!(p.delivers(), rate);
}

#[test]
fn a_buffer_far_above_the_bdp_is_not_doubled_for_being_limited() {
    // Loopback-like: 1 GB/s, 50 us, an 8 MiB buffer that the kernel
    // still reports as limiting (the receiver's CPU is the limit).
    let mut d = Drs::new(DrsConfig::default());
    let mut limited = Duration::ZERO;
    for i in 1..100u32 {
        limited += 10 * MS;
        let s = SendSample {
            delivery_rate: 1_000_000_000,
            rtt: Duration::from_micros(50),
            sndbuf_limited: limited,
            buffer: 8 << 20,
            floor: 8 << 20,
            ..SendSample::default()
        };
        assert_eq!(d.on_send_sample(10 * MS * i, &s).set, None, "sample {i}");
    }
}

#[test]
fn rtt_change_20_150_50_grows_then_shrinks() {
    let rate = 12_500_000;
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, 20 * MS, 64 << 10);
    let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
    assert_eq!(p.delivers(), rate);
    p.rtt = 150 * MS;
    let (now, _) = run(&mut d, &mut p, now, 10);
    let at150 = p.buffer;
    assert_eq!(p.delivers(), rate, "{at150}");
    assert!(at150 <= 3 * bdp(rate, 150 * MS), "{at150}");
    p.rtt = 50 * MS;
    // The old RTT is remembered for rtt_window, then the buffer waits
    // shrink_hold before it shrinks.
    let (_, _) = run(&mut d, &mut p, now, 20);
    let at50 = p.buffer;
    assert!(at50 < at150 / 2, "{at50} vs {at150}");
    assert_eq!(p.delivers(), rate, "{at50}");
}

#[test]
fn a_buffer_that_only_limits_the_senders_own_queue_is_not_grown() {
    // 400 Mbit/s, 100 ms (BDP 5 MB), from the server's 8 MiB floor: BBR's
    // startup wants 2.9 BDPs in flight, the buffer holds ~1.5 and reports
    // itself the limit every interval, at the full rate, the RTT up by
    // the queue. Growing it (the old rule) held 19 MiB of send memory at
    // the same rate (lab/results/drs-wan/s12).
    let (rate, rtt) = (50_000_000u64, 100 * MS);
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, rtt, 8 << 20);
    run(&mut d, &mut p, Duration::ZERO, 30);
    assert_eq!(p.delivers(), rate);
    let b = bdp(rate, rtt);
    assert!(p.buffer <= b * 2, "{} > 2 x {b}", p.buffer);
}

#[test]
fn bbrs_probe_rtt_dip_does_not_grow_a_settled_buffer() {
    // 400 Mbit/s, 100 ms. Every 10 s BBR holds 4 packets in flight for
    // 200 ms and a round trip: the rate samples of the dip and of the
    // round trips after it read a few percent of the best, the queue is
    // gone, and the buffer still reports itself the limit (lab drs-wan
    // s12-final: one such dip doubled a settled buffer to 10.9 MiB).
    let (rate, rtt) = (50_000_000u64, 100 * MS);
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, rtt, 8 << 20);
    let (mut now, _) = run(&mut d, &mut p, Duration::ZERO, 20);
    let settled = p.buffer;
    for cycle in 0..3 {
        // The dip: from `now`, 300 ms of low rate at the path's RTT,
        // then two round trips at the full rate before the queue is back.
        let dip_end = now + 300 * MS;
        let mut dt = 10 * MS;
        while now < dip_end + Duration::from_secs(10) {
            now += dt;
            let mut s = p.sample(dt);
            if now <= dip_end {
                s.delivery_rate = rate / 20;
                s.rtt = rtt;
            } else if now <= dip_end + 2 * rtt {
                // The window is back, the queue not yet.
                s.rtt = rtt;
            }
            let dec = d.on_send_sample(now, &s);
            assert_eq!(
                dec.set.filter(|&b| b > settled),
                None,
                "cycle {cycle} at {now:?}"
            );
            dt = dec.next_sample;
        }
    }
    assert_eq!(p.delivers(), rate);
}

#[test]
fn a_rate_that_stays_down_still_grows_the_buffer() {
    // The delay doubles (50 -> 100 ms) and the buffer holds the old BDP:
    // the rate halves and stays halved until the buffer grows.
    let rate = 50_000_000u64;
    let mut d = Drs::new(DrsConfig::default());
    let mut p = Path::new(rate, 50 * MS, 64 << 10);
    let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
    assert_eq!(p.delivers(), rate);
    p.rtt = 100 * MS;
    run(&mut d, &mut p, now, 5);
    assert_eq!(p.delivers(), rate, "{}", p.buffer);
}

#[test]
fn a_configured_floor_holds_on_short_paths_and_gives_way_on_long_ones() {
    // The server's 8 MiB (`send_buffer_max`): kept at 100 Mbit/s 50 ms
    // (BDP 625 kB) and on loopback-like paths, where it saves wake-ups;
    // at 400 Mbit/s 50 ms (BDP 2.5 MB) DRS sizes the buffer itself.
    for (rate, rtt, kept) in [
        (12_500_000u64, 50 * MS, true),
        (1_000_000_000, Duration::from_micros(100), true),
        (50_000_000, 50 * MS, false),
    ] {
        let mut d = Drs::new(DrsConfig::default());
        let mut p = Path::new(rate, rtt, 8 << 20);
        let mut now = Duration::ZERO;
        let mut dt = 10 * MS;
        while now < Duration::from_secs(20) {
            now += dt;
            let mut s = p.sample(dt);
            s.fixed = 8 << 20;
            let dec = d.on_send_sample(now, &s);
            if let Some(b) = dec.set {
                p.buffer = b;
            }
            dt = dec.next_sample;
        }
        assert_eq!(
            p.buffer >= 8 << 20,
            kept,
            "{rate} B/s, {rtt:?}: {}",
            p.buffer
        );
        assert_eq!(p.delivers(), rate, "{rate} B/s, {rtt:?}: {}", p.buffer);
    }
}

#[test]
fn rate_change_moves_the_buffer_both_ways() {
    let mut d = Drs::new(DrsConfig::default());
    let rtt = 50 * MS;
    let mut p = Path::new(12_500_000, rtt, 64 << 10);
    let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
    let slow = p.buffer;
    p.rate = 50_000_000;
    let (now, _) = run(&mut d, &mut p, now, 10);
    let fast = p.buffer;
    assert_eq!(p.delivers(), p.rate, "{fast}");
    assert!(fast > 3 * slow);
    p.rate = 5_000_000;
    run(&mut d, &mut p, now, 20);
    assert!(p.buffer < fast / 4, "{} vs {fast}", p.buffer);
    assert_eq!(p.delivers(), p.rate);
}

#[test]
fn never_below_autotuning_or_min_never_above_max() {
    let cfg = DrsConfig {
        max: 8 << 20,
        ..DrsConfig::default()
    };
    let mut d = Drs::new(cfg);
    let tiny = SendSample {
        delivery_rate: 1000,
        rtt: MS,
        buffer: 1 << 20,
        floor: 3 << 20,
        ..SendSample::default()
    };
    let dec = d.on_send_sample(MS, &tiny);
    assert_eq!(dec.set, Some(3 << 20), "raised to the autotuning floor");
    let huge = SendSample {
        delivery_rate: 1 << 33,
        buffer: 3 << 20,
        ..tiny
    };
    let dec = d.on_send_sample(20 * MS, &huge);
    assert_eq!(dec.set, Some(8 << 20));
    assert!(dec.capped);
    // And a need far below the floor never shrinks past it.
    for i in 0..100 {
        let dec = d.on_send_sample(Duration::from_secs(i), &tiny);
        if let Some(b) = dec.set {
            assert!(b >= 3 << 20);
        }
    }
    assert_eq!(d.buffer(), 3 << 20);
}

/// A receiver on a path of `rate` bytes/s and base round trip `rtt`,
/// fed by a BBR-like sender: in slow start it doubles what it has in
/// flight every round trip, after that it keeps a BDP in flight except
/// for one round trip in eight at 1.25 (its probe) and the next at 0.75
/// (draining the probe's queue); in flight is at most the receiver's window. In flight
/// beyond the BDP waits in the bottleneck's queue and lengthens the round
/// trip the receiver measures.
struct RecvPath {
    rate: u64,
    rtt: Duration,
    cwnd: f64,
    window: u64,
    buffer: u64,
    received: u64,
    /// Virtual time, for the probe cycle.
    t: Duration,
}

impl RecvPath {
    fn new(rate: u64, rtt: Duration) -> RecvPath {
        RecvPath {
            rate,
            rtt,
            cwnd: 14_480.0,
            window: RECV_START_WINDOW,
            buffer: RECV_START_WINDOW * RECV_BUFFER_PER_WINDOW,
            received: 0,
            t: Duration::ZERO,
        }
    }

    /// Advances `dt`; returns the delivery rate over it.
    fn step(&mut self, dt: Duration) -> u64 {
        let bdp = bdp(self.rate, self.rtt) as f64;
        self.t += dt;
        self.cwnd =
            (self.cwnd * 2f64.powf(dt.as_secs_f64() / self.rtt.as_secs_f64())).min(1.25 * bdp);
        let inflight = self.inflight();
        let got = (inflight / self.rtt.as_secs_f64()).min(self.rate as f64);
        self.received += (got * dt.as_secs_f64()) as u64;
        got as u64
    }

    fn inflight(&self) -> f64 {
        let bdp = bdp(self.rate, self.rtt) as f64;
        let gain = match (self.t.as_secs_f64() / self.rtt.as_secs_f64()) as u64 % 8 {
            0 => 1.25,
            1 => 0.75,
            _ => 1.0,
        };
        self.cwnd.min(gain * bdp).min(self.window as f64)
    }

    fn measured_rtt(&self) -> Duration {
        let inflight = self.inflight();
        let queue = (inflight - bdp(self.rate, self.rtt) as f64).max(0.0);
        self.rtt + Duration::from_secs_f64(queue / self.rate as f64)
    }
}

/// Runs the receiver for `secs`; returns the clock, the largest window,
/// and when the delivery rate first reached 95 % of the path's.
fn run_recv(
    d: &mut Drs,
    p: &mut RecvPath,
    start: Duration,
    secs: f64,
) -> (Duration, u64, Option<Duration>) {
    let mut now = start;
    let mut dt = 10 * MS;
    let mut peak = p.window;
    let mut at95 = None;
    while now < start + Duration::from_secs_f64(secs) {
        now += dt;
        let got = p.step(dt);
        if at95.is_none() && got as f64 >= 0.95 * p.rate as f64 {
            at95 = Some(now - start);
        }
        let s = RecvSample {
            rcv_rtt: p.measured_rtt(),
            rcv_space: 0,
            bytes_received: p.received,
            buffer: p.buffer,
            floor: 128 << 10,
            window: p.window,
        };
        let dec = d.on_recv_sample(now, &s);
        if let Some(w) = dec.window {
            p.window = w;
            peak = peak.max(w);
        }
        if let Some(b) = dec.set {
            p.buffer = b;
        }
        dt = dec.next_sample;
    }
    (now, peak, at95)
}

#[test]
fn a_receiver_window_doubles_through_slow_start_then_holds_one_and_a_half_bdp() {
    // 400 Mbit/s, 100 ms: BDP 5 MB.
    let (rate, rtt) = (50_000_000u64, 100 * MS);
    let b = bdp(rate, rtt);
    let mut d = Drs::new(DrsConfig::default());
    let mut p = RecvPath::new(rate, rtt);
    let (now, peak, at95) = run_recv(&mut d, &mut p, Duration::ZERO, 20.0);
    // Slow start alone takes log2(5 MB / 14.5 kB) = 8.4 round trips.
    let at95 = at95.expect("never reached 95 % of the path");
    assert!(at95 <= Duration::from_millis(1500), "{at95:?}");
    // At most one doubling past what the sender wanted in flight.
    assert!(peak <= b * 26 / 10, "peak window {peak} vs BDP {b}");
    // Then 1.5 BDP (enough for BBR's 1.25 probe), within the shrink
    // hysteresis (a window shrinks once the need is below 0.8 of it).
    assert!(
        p.window >= b * 14 / 10 && p.window <= b * 19 / 10,
        "window {} vs BDP {b}",
        p.window
    );
    assert_eq!(p.buffer, p.window * RECV_BUFFER_PER_WINDOW);
    // Steady: the window stays and the path stays full.
    let (_, _, at95) = run_recv(&mut d, &mut p, now, 10.0);
    assert!(at95.is_some_and(|t| t < Duration::from_secs(1)));
    assert!(
        p.window >= b * 14 / 10 && p.window <= b * 19 / 10,
        "window {} vs BDP {b}",
        p.window
    );
}

#[test]
fn a_receiver_follows_the_delay_20_150_50_within_seconds() {
    // 100 Mbit/s.
    let rate = 12_500_000u64;
    let mut d = Drs::new(DrsConfig::default());
    let mut p = RecvPath::new(rate, 20 * MS);
    let (now, _, _) = run_recv(&mut d, &mut p, Duration::ZERO, 10.0);
    assert!(p.window <= bdp(rate, 20 * MS) * 19 / 10, "{}", p.window);
    // The delay grows 7.5x: the window must follow at once, not after the
    // old minimum ages out.
    p.rtt = 150 * MS;
    let (now, _, at95) = run_recv(&mut d, &mut p, now, 10.0);
    let at95 = at95.expect("never refilled the 150 ms path");
    assert!(at95 <= Duration::from_secs(2), "{at95:?}");
    assert!(p.window >= bdp(rate, 150 * MS) * 14 / 10, "{}", p.window);
    // And down again once the delay falls.
    p.rtt = 50 * MS;
    run_recv(&mut d, &mut p, now, 15.0);
    assert!(p.window <= bdp(rate, 50 * MS) * 16 / 10, "{}", p.window);
    assert!(p.window >= bdp(rate, 50 * MS) * 14 / 10, "{}", p.window);
}

#[test]
fn a_receiver_behind_a_standing_queue_keeps_its_share() {
    // 400 Mbit/s, 50 ms, alone for 10 s; then a loss-based competitor
    // keeps a queue of 3 BDP (200 ms round trips for every packet) and
    // takes half the link. A window sized from the round trip seen before
    // the queue would cut this flow's rate, and then the window from the
    // lower rate, for as long as that round trip is remembered.
    let (rate, base) = (50_000_000u64, 50 * MS);
    let mut d = Drs::new(DrsConfig::default());
    let mut window = RECV_START_WINDOW;
    let mut received = 0u64;
    let mut now = Duration::ZERO;
    let mut dt = 10 * MS;
    let (mut moved, mut span) = (0.0, 0.0);
    while now < Duration::from_secs(30) {
        now += dt;
        let crowded = now > Duration::from_secs(10);
        let (share, rtt) = if crowded {
            (rate / 2, 4 * base)
        } else {
            (rate, base)
        };
        let got = (window as f64 / rtt.as_secs_f64()).min(share as f64);
        received += (got * dt.as_secs_f64()) as u64;
        if now > Duration::from_secs(12) && now < Duration::from_secs(17) {
            moved += got * dt.as_secs_f64();
            span += dt.as_secs_f64();
        }
        let s = RecvSample {
            rcv_rtt: rtt,
            bytes_received: received,
            buffer: window * RECV_BUFFER_PER_WINDOW,
            floor: 128 << 10,
            window,
            ..RecvSample::default()
        };
        let dec = d.on_recv_sample(now, &s);
        if let Some(w) = dec.window {
            window = w;
        }
        dt = dec.next_sample;
    }
    let mean = moved / span;
    assert!(
        mean >= 0.95 * (rate / 2) as f64,
        "{mean} of {}, window {window}",
        rate / 2
    );
}

#[test]
fn a_fast_local_receiver_keeps_at_least_20_ms_of_its_rate() {
    // Loopback: 2 GB/s, 50 us: the BDP is 100 kB, a reader late by a tick
    // would stop the sender.
    let (rate, rtt) = (2_000_000_000u64, Duration::from_micros(50));
    let mut d = Drs::new(DrsConfig::default());
    let mut p = RecvPath::new(rate, rtt);
    run_recv(&mut d, &mut p, Duration::ZERO, 5.0);
    assert!(p.window >= rate / 50, "{}", p.window);
}

#[test]
fn a_receiver_buffer_is_never_below_autotunings() {
    let mut d = Drs::new(DrsConfig::default());
    let mut now = Duration::ZERO;
    let mut received = 0;
    let mut buffer = 1 << 20;
    for _ in 0..100 {
        now += 50 * MS;
        received += 100_000;
        let s = RecvSample {
            rcv_rtt: 50 * MS,
            rcv_space: 2 << 20,
            bytes_received: received,
            buffer,
            floor: 8 << 20,
            window: RECV_START_WINDOW,
        };
        if let Some(b) = d.on_recv_sample(now, &s).set {
            buffer = b;
        }
        assert!(buffer >= 8 << 20 || now <= 50 * MS);
    }
}

#[test]
fn a_receiver_without_an_rtt_yet_keeps_the_floor() {
    let mut d = Drs::new(DrsConfig::default());
    for i in 1..50u64 {
        let s = RecvSample {
            bytes_received: i * (1 << 20),
            buffer: 128 << 10,
            floor: 128 << 10,
            window: RECV_START_WINDOW,
            ..RecvSample::default()
        };
        let dec = d.on_recv_sample(10 * MS * i as u32, &s);
        assert_eq!(dec.set, None, "sample {i}");
    }
    assert_eq!(d.bdp(), 0);
}

#[test]
fn autotuning_floors_follow_the_kernel() {
    // mss 1448: 1448 + 640 -> 4096, + 256 = 4352 per segment.
    assert_eq!(sender_autotune(10, 1448, 4 << 20), 2 * 10 * 4352);
    assert_eq!(sender_autotune(1000, 1448, 4 << 20), 4 << 20);
    assert_eq!(sender_autotune(0, 0, 4 << 20), 2 * 10 * (2048 + 256));
    assert_eq!(receiver_autotune(0, 131072, 6 << 20), 131072);
    assert_eq!(receiver_autotune(1 << 20, 131072, 6 << 20), 4 << 20);
    assert_eq!(receiver_autotune(4 << 20, 131072, 6 << 20), 6 << 20);
}
