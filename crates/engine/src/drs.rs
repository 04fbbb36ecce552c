//! Dynamic right-sizing (DRS): the socket buffer a path needs, estimated
//! from `TCP_INFO` during the transfer (Weigle and Feng's drsFTP, in the
//! project's papers folder). Sans-I/O: samples and their time in, the
//! buffer size to set out; the caller reads the socket and calls
//! `setsockopt` (`DataConn` on the server, the client's drain).
//!
//! The rule is the paper's: keep the buffer near `factor` x the path's
//! bandwidth-delay product (BDP), with `factor` = 2 by default. Sizes are
//! in the kernel's units (what `getsockopt(SO_SNDBUF/SO_RCVBUF)` returns).
//! - Bandwidth: the highest rate seen over the last `rate_window` (a
//!   windowed max, as BBR keeps it), from `tcpi_delivery_rate` at the
//!   sender and from bytes received per interval at the receiver.
//! - Delay: the lowest smoothed RTT over the last `rtt_window`
//!   (`tcpi_rtt` at the sender, `tcpi_rcv_rtt` at the receiver). Not the
//!   kernel's `tcpi_min_rtt`: that is a minimum over five minutes, so a
//!   path whose delay grows (20 -> 150 ms) would be sized for the old one.
//! - A buffer that limits the connection (the sender's
//!   `tcpi_sndbuf_limited` grew, or the receiver got a full window per
//!   round trip) measures only itself: then the buffer at least doubles,
//!   as the paper does while TCP may still be in slow start.
//! - Never below what kernel autotuning would give the socket (`floor`,
//!   computed by the caller with [`sender_autotune`] / [`receiver_autotune`]),
//!   never above `max` (the caller's limit: the sysctl ceiling, or more
//!   with `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`).
//! - Hysteresis: grow at once (a small buffer costs throughput now), by at
//!   least a quarter; shrink only when the need stayed below half the
//!   buffer for `shrink_hold`, and then to the largest need seen in that
//!   time (a shrinking buffer costs nothing but memory, and thrashing it
//!   costs system calls).

use std::collections::VecDeque;
use std::time::Duration;

/// Tuning of the estimator.
#[derive(Debug, Clone, PartialEq)]
pub struct DrsConfig {
    /// Buffer = `factor` x BDP.
    pub factor: f64,
    /// Least buffer ever asked for, bytes.
    pub min: u64,
    /// Most buffer ever asked for, bytes (the caller's ceiling).
    pub max: u64,
    /// How long the highest rate is remembered.
    pub rate_window: Duration,
    /// How long the lowest RTT is remembered.
    pub rtt_window: Duration,
    /// How long the need must stay below half the buffer before it shrinks.
    pub shrink_hold: Duration,
}

impl Default for DrsConfig {
    fn default() -> Self {
        DrsConfig {
            factor: 2.0,
            min: 64 << 10,
            max: 256 << 20,
            // Several probe cycles of BBR (8 RTTs each) on a 100 ms path.
            rate_window: Duration::from_secs(3),
            // Long enough to see through a queue's swings, short enough
            // that a path whose delay fell is sized down within seconds.
            rtt_window: Duration::from_secs(5),
            shrink_hold: Duration::from_secs(3),
        }
    }
}

/// One sender-side reading (`TCP_INFO` of a socket we write to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendSample {
    /// `tcpi_delivery_rate`, bytes per second.
    pub delivery_rate: u64,
    /// The kernel marked that rate application-limited (a lower bound).
    pub app_limited: bool,
    /// `tcpi_rtt`: smoothed round trip.
    pub rtt: Duration,
    /// `tcpi_snd_cwnd` x `tcpi_snd_mss`, bytes.
    pub cwnd_bytes: u64,
    /// `tcpi_notsent_bytes`.
    pub notsent: u64,
    /// `tcpi_sndbuf_limited`: time limited by the send buffer, cumulative.
    pub sndbuf_limited: Duration,
    /// `tcpi_busy_time`, cumulative.
    pub busy: Duration,
    /// The buffer in force now (`SO_SNDBUF` read back).
    pub buffer: u64,
    /// What autotuning would give this socket now ([`sender_autotune`]).
    pub floor: u64,
}

/// One receiver-side reading (`TCP_INFO` of a socket we read from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvSample {
    /// `tcpi_rcv_rtt`: the receiver's round-trip estimate (zero until known).
    pub rcv_rtt: Duration,
    /// `tcpi_rcv_space`: bytes the application read in one round trip
    /// (the kernel's autotuning measure).
    pub rcv_space: u64,
    /// `tcpi_bytes_received`, cumulative.
    pub bytes_received: u64,
    /// The buffer in force now (`SO_RCVBUF` read back).
    pub buffer: u64,
    /// What autotuning would give this socket now ([`receiver_autotune`]).
    pub floor: u64,
}

/// What to do after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrsDecision {
    /// Set the buffer to this many bytes (`None`: leave it).
    pub set: Option<u64>,
    /// The path wants more than `max`: the caller says so (once).
    pub capped: bool,
    /// When to take the next sample.
    pub next_sample: Duration,
}

/// Shortest and longest time between samples: about one round trip while
/// the buffer is changing (slow start doubles per round trip), a few once
/// it is steady (one `getsockopt` each).
const SAMPLE_MIN: Duration = Duration::from_millis(10);
const SAMPLE_STEADY_MAX: Duration = Duration::from_secs(1);
/// A rise of the send-buffer-limited time by this share of the interval
/// means the buffer held the connection back.
const LIMITED_SHARE: f64 = 0.1;
/// The receiver counts as window-limited when it got this share of the
/// window it offers (half the buffer) in one round trip.
const RECV_FULL_SHARE: f64 = 0.8;
/// A limited buffer is doubled only while it holds fewer than this many
/// BDPs: a buffer many times the path's BDP that still reports itself the
/// limit is not what holds the connection back (loopback, where the
/// receiver's CPU is: doubling there grew buffers to the maximum and cost
/// ~15 % of a 1 GiB loopback download's rate).
const LIMITED_MAX_BDPS: u64 = 4;
/// Growth is at least this factor (fewer `setsockopt`s).
const GROW_MIN: f64 = 1.25;
/// Shrink only when the need is below this share of the buffer.
const SHRINK_BELOW: f64 = 0.5;

/// A windowed max (or min, by negation) over `(time, value)` samples:
/// a monotone deque, O(1) amortised.
#[derive(Debug, Clone, Default)]
struct WindowedMax {
    q: VecDeque<(Duration, u64)>,
}

impl WindowedMax {
    fn push(&mut self, now: Duration, v: u64, window: Duration) -> u64 {
        while self.q.back().is_some_and(|&(_, b)| b <= v) {
            self.q.pop_back();
        }
        self.q.push_back((now, v));
        while self
            .q
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > window)
        {
            self.q.pop_front();
        }
        self.get()
    }

    fn get(&self) -> u64 {
        self.q.front().map_or(0, |&(_, v)| v)
    }
}

/// The estimator of one connection (one side).
#[derive(Debug, Clone)]
pub struct Drs {
    cfg: DrsConfig,
    rate: WindowedMax,
    /// Windowed min of the RTT in µs, kept as a max of `u64::MAX - rtt`.
    rtt: WindowedMax,
    /// Previous sample: time, cumulative sndbuf-limited time (sender) or
    /// bytes received (receiver).
    prev: Option<(Duration, u64)>,
    /// The buffer we last set (0: none yet, the kernel's).
    set: u64,
    /// Since when the need has been below the shrink line, and the largest
    /// need seen since.
    low_since: Option<(Duration, u64)>,
    /// Last BDP estimate, bytes.
    bdp: u64,
    /// A change was made at the last sample (sample again soon).
    changing: bool,
}

impl Drs {
    /// An estimator that has seen nothing yet.
    pub fn new(cfg: DrsConfig) -> Drs {
        Drs {
            cfg,
            rate: WindowedMax::default(),
            rtt: WindowedMax::default(),
            prev: None,
            set: 0,
            low_since: None,
            bdp: 0,
            changing: true,
        }
    }

    /// The last bandwidth-delay product estimate, bytes.
    pub fn bdp(&self) -> u64 {
        self.bdp
    }

    /// The buffer last asked for (0 before the first change).
    pub fn buffer(&self) -> u64 {
        self.set
    }

    /// Folds in a sender-side sample.
    pub fn on_send_sample(&mut self, now: Duration, s: &SendSample) -> DrsDecision {
        let limited_us = s.sndbuf_limited.as_micros() as u64;
        let limited = match self.prev {
            Some((t, before)) if now > t => {
                let dt = now.saturating_sub(t).as_micros() as f64;
                limited_us.saturating_sub(before) as f64 > dt * LIMITED_SHARE
            }
            _ => false,
        };
        self.prev = Some((now, limited_us));
        // An app-limited rate is a lower bound: it may raise the max, and
        // a windowed max is never lowered by one sample anyway.
        let bw = self.rate.push(now, s.delivery_rate, self.cfg.rate_window);
        let rtt = self.push_rtt(now, s.rtt);
        self.decide(now, bw, rtt, limited, s.buffer, s.floor)
    }

    /// Folds in a receiver-side sample.
    pub fn on_recv_sample(&mut self, now: Duration, s: &RecvSample) -> DrsDecision {
        let rate = match self.prev {
            Some((t, before)) if now > t => {
                let dt = now.saturating_sub(t).as_secs_f64();
                (s.bytes_received.saturating_sub(before) as f64 / dt) as u64
            }
            _ => 0,
        };
        self.prev = Some((now, s.bytes_received));
        let bw = self.rate.push(now, rate, self.cfg.rate_window);
        let rtt = self.push_rtt(now, s.rcv_rtt);
        // The window offered is about half the buffer (the rest is the
        // kernel's overhead, tcp_adv_win_scale); a round trip that
        // brought nearly all of it says the window is what limits.
        let per_rtt = rtt.map_or(0, |r| (rate as f64 * r.as_secs_f64()) as u64);
        let window = s.buffer / 2;
        let limited = window > 0 && per_rtt as f64 >= window as f64 * RECV_FULL_SHARE;
        // The receiver's memory is about twice its window: size the
        // window to factor x BDP, the buffer to twice that.
        let d = self.decide(now, bw.saturating_mul(2), rtt, limited, s.buffer, s.floor);
        self.bdp /= 2;
        d
    }

    /// The windowed-min RTT after this sample, `None` while none is known
    /// (a receiver's `tcpi_rcv_rtt` stays 0 until a window has come in).
    fn push_rtt(&mut self, now: Duration, rtt: Duration) -> Option<Duration> {
        if rtt.is_zero() {
            return (self.rtt.get() > 0).then(|| Duration::from_micros(u64::MAX - self.rtt.get()));
        }
        let us = rtt.as_micros().min(u128::from(u64::MAX - 1)) as u64;
        let inv = self.rtt.push(now, u64::MAX - us, self.cfg.rtt_window);
        Some(Duration::from_micros(u64::MAX - inv))
    }

    fn decide(
        &mut self,
        now: Duration,
        bw: u64,
        rtt: Option<Duration>,
        limited: bool,
        current: u64,
        floor: u64,
    ) -> DrsDecision {
        let cfg = &self.cfg;
        self.bdp = rtt.map_or(0, |r| (bw as f64 * r.as_secs_f64()) as u64);
        let have = if self.set > 0 { self.set } else { current };
        let mut need = (self.bdp as f64 * cfg.factor) as u64;
        if limited && have < self.bdp.saturating_mul(LIMITED_MAX_BDPS) {
            need = need.max(have.saturating_mul(2));
        }
        let capped = need > cfg.max;
        let lo = floor.max(cfg.min).min(cfg.max);
        let need = need.clamp(lo, cfg.max);
        let mut set = None;
        if need > have {
            self.low_since = None;
            let grown = ((have as f64 * GROW_MIN) as u64).max(need).min(cfg.max);
            set = Some(grown);
        } else if (need as f64) < have as f64 * SHRINK_BELOW {
            let (since, peak) = match self.low_since {
                Some((t, p)) => (t, p.max(need)),
                None => (now, need),
            };
            if now.saturating_sub(since) >= cfg.shrink_hold {
                self.low_since = None;
                set = Some(peak);
            } else {
                self.low_since = Some((since, peak));
            }
        } else {
            self.low_since = None;
        }
        if let Some(b) = set {
            self.set = b;
        }
        // A limit that changed nothing (a buffer far above the BDP) is steady.
        let changing = set.is_some() || self.low_since.is_some();
        self.changing = changing;
        let base = rtt.unwrap_or(SAMPLE_MIN).max(SAMPLE_MIN);
        let next_sample = if changing {
            base.min(SAMPLE_STEADY_MAX / 4)
        } else {
            (base * 4).clamp(SAMPLE_MIN, SAMPLE_STEADY_MAX)
        };
        DrsDecision {
            set,
            capped,
            next_sample,
        }
    }
}

/// The send buffer Linux's autotuning (`tcp_sndbuf_expand`) gives a
/// socket with this congestion window: two windows of segments, each
/// costing a power-of-two data block plus the skb, at most `tcp_wmem[2]`.
pub fn sender_autotune(cwnd: u32, mss: u32, tcp_wmem_max: u64) -> u64 {
    // MAX_TCP_HEADER (~320) and skb_shared_info (~320) on x86_64, the
    // sk_buff itself 256: the kernel's constants, close enough for a floor.
    let per_mss = (u64::from(mss.max(536)) + 320 + 320).next_power_of_two() + 256;
    let segs = u64::from(cwnd.max(10));
    (2 * segs * per_mss).min(tcp_wmem_max)
}

/// The receive buffer Linux's autotuning (`tcp_rcv_space_adjust`) gives a
/// socket whose application read `rcv_space` bytes in a round trip: a
/// window of twice that, a buffer of twice the window (default
/// `tcp_adv_win_scale`), at most `tcp_rmem[2]`, at least `start`
/// (`tcp_rmem[1]`, where every socket begins).
pub fn receiver_autotune(rcv_space: u64, start: u64, tcp_rmem_max: u64) -> u64 {
    rcv_space
        .saturating_mul(4)
        .max(start)
        .min(tcp_rmem_max.max(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A sender on a path of `rate` bytes/s and `rtt`, whose buffer is
    /// whatever the estimator last set: the connection delivers at most
    /// what the buffer (half of it in flight) allows per round trip, and
    /// reports send-buffer-limited time when that is below the path.
    struct Path {
        rate: u64,
        rtt: Duration,
        buffer: u64,
        limited: Duration,
    }

    impl Path {
        fn sample(&mut self, dt: Duration) -> SendSample {
            let by_buffer = (self.buffer as f64 / 2.0 / self.rtt.as_secs_f64()) as u64;
            let got = by_buffer.min(self.rate);
            if by_buffer < self.rate {
                self.limited += dt;
            }
            SendSample {
                delivery_rate: got,
                rtt: self.rtt,
                cwnd_bytes: (got as f64 * self.rtt.as_secs_f64()) as u64,
                sndbuf_limited: self.limited,
                buffer: self.buffer,
                floor: 64 << 10,
                ..SendSample::default()
            }
        }
    }

    /// Runs the sender for `secs` of virtual time; returns the clock.
    fn run(d: &mut Drs, p: &mut Path, start: Duration, secs: u64) -> (Duration, usize) {
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
    fn a_steady_path_settles_near_twice_its_bdp_and_stays() {
        // 100 Mbit/s, 50 ms: BDP 625 kB.
        let rate = 12_500_000;
        let rtt = 50 * MS;
        let mut d = Drs::new(DrsConfig::default());
        let mut p = Path {
            rate,
            rtt,
            buffer: 128 << 10,
            limited: Duration::ZERO,
        };
        let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
        let want = 2 * bdp(rate, rtt);
        assert!(p.buffer >= want, "{} < {want}", p.buffer);
        assert!(p.buffer <= want * 3, "{} > 3x{want}", p.buffer);
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
        let mut p = Path {
            rate,
            rtt,
            buffer: 4 << 20,
            limited: Duration::ZERO,
        };
        run(&mut d, &mut p, Duration::ZERO, 2);
        assert!(p.buffer >= 2 * bdp(rate, rtt), "{}", p.buffer);
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
        let mut p = Path {
            rate,
            rtt: 20 * MS,
            buffer: 64 << 10,
            limited: Duration::ZERO,
        };
        let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
        let at20 = p.buffer;
        assert!(at20 >= 2 * bdp(rate, 20 * MS) && at20 <= 6 * bdp(rate, 20 * MS));
        p.rtt = 150 * MS;
        let (now, _) = run(&mut d, &mut p, now, 10);
        let at150 = p.buffer;
        assert!(at150 >= 2 * bdp(rate, 150 * MS), "{at150}");
        assert!(at150 <= 3 * bdp(rate, 150 * MS), "{at150}");
        p.rtt = 50 * MS;
        // The old RTT is remembered for rtt_window, then the buffer waits
        // shrink_hold before it shrinks.
        let (_, _) = run(&mut d, &mut p, now, 20);
        let at50 = p.buffer;
        assert!(at50 < at150 / 2, "{at50} vs {at150}");
        assert!(at50 >= 2 * bdp(rate, 50 * MS), "{at50}");
    }

    #[test]
    fn rate_change_moves_the_buffer_both_ways() {
        let mut d = Drs::new(DrsConfig::default());
        let rtt = 50 * MS;
        let mut p = Path {
            rate: 12_500_000,
            rtt,
            buffer: 64 << 10,
            limited: Duration::ZERO,
        };
        let (now, _) = run(&mut d, &mut p, Duration::ZERO, 10);
        let slow = p.buffer;
        p.rate = 50_000_000;
        let (now, _) = run(&mut d, &mut p, now, 10);
        let fast = p.buffer;
        assert!(fast >= 2 * bdp(50_000_000, rtt), "{fast}");
        assert!(fast > 3 * slow);
        p.rate = 5_000_000;
        run(&mut d, &mut p, now, 20);
        assert!(p.buffer < fast / 4, "{} vs {fast}", p.buffer);
        assert!(p.buffer >= 2 * bdp(5_000_000, rtt));
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

    #[test]
    fn a_receiver_grows_while_it_gets_full_windows() {
        // 400 Mbit/s, 100 ms: BDP 5 MB. The receiver gets at most half its
        // buffer per round trip.
        let rate = 50_000_000u64;
        let rtt = 100 * MS;
        let mut d = Drs::new(DrsConfig::default());
        let mut buffer = 256u64 << 10;
        let mut received = 0u64;
        let mut now = Duration::ZERO;
        let mut dt = 10 * MS;
        for _ in 0..200 {
            now += dt;
            let per_sec = ((buffer / 2) as f64 / rtt.as_secs_f64()) as u64;
            received += (per_sec.min(rate) as f64 * dt.as_secs_f64()) as u64;
            let s = RecvSample {
                rcv_rtt: rtt,
                rcv_space: 0,
                bytes_received: received,
                buffer,
                floor: 128 << 10,
            };
            let dec = d.on_recv_sample(now, &s);
            if let Some(b) = dec.set {
                buffer = b;
            }
            dt = dec.next_sample;
        }
        // Window (half the buffer) at least 2 x BDP.
        assert!(buffer / 2 >= 2 * bdp(rate, rtt), "{buffer}");
        assert!(buffer / 2 <= 4 * bdp(rate, rtt), "{buffer}");
        assert_eq!(d.bdp(), bdp(rate, rtt));
    }

    #[test]
    fn a_receiver_without_an_rtt_yet_keeps_the_floor() {
        let mut d = Drs::new(DrsConfig::default());
        for i in 1..50u64 {
            let s = RecvSample {
                bytes_received: i * (1 << 20),
                buffer: 128 << 10,
                floor: 128 << 10,
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
}
