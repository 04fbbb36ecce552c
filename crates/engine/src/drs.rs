//! Dynamic right-sizing (DRS): the socket buffer a path needs, estimated
//! from `TCP_INFO` during the transfer (Weigle and Feng's drsFTP, in the
//! project's papers folder). Sans-I/O: samples and their time in, the
//! buffer size to set out; the caller reads the socket and calls
//! `setsockopt` (`DataConn` on the server, the client's drain).
//!
//! The rule is the paper's, sized to what each end must hold. Sizes are
//! in the kernel's units (what `getsockopt(SO_SNDBUF/SO_RCVBUF)` returns).
//! - Bandwidth: the highest rate seen over the last `rate_window` (a
//!   windowed max, as BBR keeps it), from `tcpi_delivery_rate` at the
//!   sender and from bytes received per interval at the receiver.
//! - Delay: at the sender the path's RTT, `tcpi_min_rtt` unless the lowest
//!   smoothed RTT over `rtt_window` is 2.5 times it (the
//!   delay grew: the kernel's minimum remembers minutes); at the receiver
//!   the lowest `tcpi_rcv_rtt` of the last second.
//! - Sender: a buffer of `factor` (1.25) BDPs in flight plus the not-sent
//!   mark. One the kernel reports as the limit (`tcpi_sndbuf_limited`
//!   grew) at least doubles, as the paper does while TCP may still be in
//!   slow start, but only when that costs rate (no queue, or the rate
//!   fell and stayed down for a few round trips, not BBR's ProbeRTT dip):
//!   a buffer that only holds back the sender's own queue stays.
//! - Never below what kernel autotuning would give the socket (`floor`,
//!   computed by the caller with [`sender_autotune`] / [`receiver_autotune`]),
//!   never above `max` (the caller's limit: the sysctl ceiling, or more
//!   with `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`).
//! - Hysteresis: grow at once (a small buffer costs throughput now), by at
//!   least a quarter; shrink only when the need stayed below 3/4 of the
//!   buffer for `shrink_hold`, and then to the largest need seen in that
//!   time (thrashing it costs system calls).
//!
//! The receiver sizes its *window* (`TCP_WINDOW_CLAMP`), not only its
//! buffer: the window is what the sender may have in flight, so it is the
//! memory of both ends (the sender holds what is unacknowledged, the
//! receiver at most a window of data after a loss or a late read). The
//! paper's rule, a window of 2x the bytes received per round trip, while
//! full windows keep coming (slow start: it doubles per round trip), then
//! `recv_window_factor` x BDP with the BDP from the lowest round trip of
//! the last second, not from one inflated by the queue the window itself
//! builds (kernel autotuning sizes from `rcv_space`, bytes per *smoothed*
//! receiver RTT, which grows with the queue: lab/results/drs-wan, s12). The
//! buffer stays a ceiling `RECV_BUFFER_PER_WINDOW` times the window and
//! never below autotuning's: a buffer costs nothing until data waits in it.

use std::time::Duration;

mod kernel;
mod windowed;
use kernel::rate_mark;
pub use kernel::{notsent_mark, receiver_autotune, sender_autotune, CONN_SEND_MEM};
use windowed::WindowedMax;

/// Tuning of the estimator.
#[derive(Debug, Clone, PartialEq)]
pub struct DrsConfig {
    /// Sender: the buffer holds `factor` x BDP in flight, plus the unsent
    /// data of [`notsent_mark`], in the kernel's units.
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
    /// Receiver: the window once the rate has stopped growing, x BDP.
    pub recv_window_factor: f64,
}

impl Default for DrsConfig {
    fn default() -> Self {
        DrsConfig {
            factor: SEND_IN_FLIGHT,
            min: 64 << 10,
            max: 256 << 20,
            // Several probe cycles of BBR (8 RTTs each) on a 100 ms path.
            rate_window: Duration::from_secs(3),
            // Long enough to see through a queue's swings, short enough
            // that a path whose delay fell is sized down within seconds.
            rtt_window: Duration::from_secs(5),
            shrink_hold: Duration::from_secs(3),
            // BBR's probing phase sends 1.25x its rate for a round trip;
            // a quarter more covers the receiver's RTT estimate being low.
            recv_window_factor: 1.5,
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
    /// `tcpi_min_rtt`: the lowest round trip the kernel has seen (zero:
    /// unknown).
    pub min_rtt: Duration,
    /// `tcpi_snd_cwnd` x `tcpi_snd_mss`, bytes.
    pub cwnd_bytes: u64,
    /// `tcpi_notsent_bytes`.
    pub notsent: u64,
    /// `tcpi_sndbuf_limited`: time limited by the send buffer, cumulative.
    pub sndbuf_limited: Duration,
    /// `tcpi_busy_time`, cumulative.
    pub busy: Duration,
    /// `tcpi_total_retrans`: segments retransmitted, cumulative.
    pub retrans: u64,
    /// The buffer in force now (`SO_SNDBUF` read back).
    pub buffer: u64,
    /// What autotuning would give this socket now ([`sender_autotune`]).
    pub floor: u64,
    /// A buffer the configuration fixed as a default (the server's
    /// `send_buffer_max`; 0: none): a floor while the path is short
    /// (`FIXED_FLOOR_BDPS`). Sizes asked for (SBUF, `--send-buffer N`)
    /// are in `floor`.
    pub fixed: u64,
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
    /// The window clamp in force (what DRS set last, or at the start).
    pub window: u64,
}

/// What to do after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrsDecision {
    /// Set the buffer to this many bytes (`None`: leave it).
    pub set: Option<u64>,
    /// Receiver: set the window clamp to this many bytes (`None`: leave it).
    pub window: Option<u64>,
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
/// Sender: BDPs in flight the send buffer allows (BBR's probe sends 1.25x
/// its rate for a round trip; more in flight is queue, not rate).
pub const SEND_IN_FLIGHT: f64 = 1.25;
/// Sender: the kernel's memory per byte of data queued (skb and page
/// overhead of TSO-sized skbs; more after SACKs split them).
const SEND_TRUESIZE: f64 = 1.1;
/// Sender: a smoothed RTT below this many path RTTs means no queue.
const SEND_QUEUE_FREE: f64 = 1.15;
/// Sender: the delivery rate fell below this share of the best recent.
/// A path whose delay grew cuts a buffer-limited rate in proportion at
/// once (20 -> 150 ms: to 13 %); a competitor's share grows over seconds
/// (the late cubic flow of compete_tests took 10 s to take 18 % of the
/// first one's rate, and at 0.9 the first one's buffer doubled, which
/// took the share back). Delays that grow by less than a third are left
/// to the windowed minimum of [`Drs::path_rtt`].
const SEND_RATE_FELL: f64 = 0.9;
/// Sender: a buffer must have limited at a cost (no queue, or the rate
/// below [`SEND_RATE_FELL`] of the best) for this many path round trips
/// (and at least [`SEND_COSTLY_HOLD_MIN`]) before it grows. BBR drains its queue every 10 s (ProbeRTT:
/// 4 packets in flight for 200 ms and a round trip), and the rate samples
/// of that dip and of the round trips after it read far below the
/// windowed max while the buffer is, as always, the limit: taken at once,
/// one such dip doubled a settled buffer (lab drs-wan s12-final, 400 Mbit/s
/// 100 ms: 10.9 MiB where 6.3 moved the same). A longer path delay (the
/// case the rule is for) keeps the rate down until the buffer grows.
const SEND_COSTLY_HOLD_RTTS: u32 = 4;
const SEND_COSTLY_HOLD_MIN: Duration = Duration::from_millis(500);
/// Sender: the default fixed buffer (`send_buffer_max`) stays the floor
/// while the path's BDP is below this share of it. It is there for short fast paths
/// (loopback: a wake-up finds twice the room, ~40 % fewer context switches
/// per GiB, `send_buffer_max`), where the BDP is a few packets; on a long
/// path it only lets a loss-based sender keep a standing queue of its
/// own: the first of two cubic transfers at 400 Mbit/s 50 ms held 5.8 MB
/// in flight under the 8 MiB floor (2.4 BDPs, a 66 ms queue) where DRS
/// sizes 1.25 BDPs, and the late one met that queue (compete_tests: Jain
/// 0.62 with the floor, 0.87 without).
const FIXED_FLOOR_BDPS: u64 = 8;
/// Sender: a queue of the connection's own making inflates the RTT by at
/// most this (see [`Drs::path_rtt`]): [`SEND_IN_FLIGHT`] BDPs, doubled
/// once by a growth that overshot (slow start doubles the buffer).
const SEND_OWN_QUEUE: f64 = 2.5;
/// Growth is at least this factor (fewer `setsockopt`s).
const GROW_MIN: f64 = 1.25;
/// Shrink only when the need is below this share of the buffer. A send
/// buffer above the need lets the sender keep a queue of its own, which
/// raises the RTT the need is measured from: at a half, a buffer left at
/// 3 BDPs after the delay fell (150 -> 50 ms) held itself there.
const SHRINK_BELOW: f64 = 0.75;
/// A receive window shrinks when the need is below this share of it (a
/// window is the memory of both ends; lowering it costs one `setsockopt`).
const RECV_SHRINK_BELOW: f64 = 0.8;
/// The receive buffer is this many windows: the kernel offers the buffer
/// times its payload-to-truesize ratio (a half by default, less for small
/// packets), so the buffer must not be what limits the window; it holds
/// no memory until data waits in it, and then at most a window of data.
pub const RECV_BUFFER_PER_WINDOW: u64 = 4;
/// Window a receiver starts with, before a round trip is known.
pub const RECV_START_WINDOW: u64 = 256 << 10;
/// A receiver sizes its window from the lowest round trip of the last
/// second, not of `rtt_window`: a BBR sender empties the queue at least
/// once per probe cycle (8 round trips), so on its own the window sees
/// the path's delay; a queue that stays (a loss-based competitor keeps
/// it full) is part of the round trip every flow through it must cover,
/// and a window sized without it would shrink the connection's rate,
/// then its window from the lower rate, down to nothing. It also
/// follows a path whose delay grew (20 -> 150 ms) within a second.
const RTT_RECENT: Duration = Duration::from_secs(1);
/// Least receive window: this much time of the rate (a reader that is
/// late by a scheduler tick must not stop a fast local sender; on
/// loopback the round trip is microseconds and a BDP-sized window is
/// a few packets) and at least this many bytes.
const RECV_MIN_WINDOW_TIME: f64 = 0.02;
const RECV_MIN_WINDOW: u64 = 64 << 10;

/// The estimator of one connection (one side).
#[derive(Debug, Clone)]
pub struct Drs {
    cfg: DrsConfig,
    rate: WindowedMax,
    /// Windowed min of the RTT in µs, kept as a max of `u64::MAX - rtt`.
    rtt: WindowedMax,
    /// Receiver: the same over the last [`RTT_RECENT`].
    rtt_recent: WindowedMax,
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
    /// Receiver: the window clamp we set (0: none yet).
    window: u64,
    /// Sender: since when the buffer has limited at a cost (`None`: it
    /// does not now).
    costly_since: Option<Duration>,
    /// Sender: `tcpi_total_retrans` at the last sample, and when it last
    /// grew.
    retrans: u64,
    lost_at: Option<Duration>,
    /// Sender: the highest rate of the samples in which the buffer was
    /// the limit, over `rate_window`.
    limited_rate: WindowedMax,
}

impl Drs {
    /// An estimator that has seen nothing yet.
    pub fn new(cfg: DrsConfig) -> Drs {
        Drs {
            cfg,
            rate: WindowedMax::default(),
            rtt: WindowedMax::default(),
            rtt_recent: WindowedMax::default(),
            prev: None,
            set: 0,
            low_since: None,
            bdp: 0,
            window: 0,
            costly_since: None,
            retrans: 0,
            lost_at: None,
            limited_rate: WindowedMax::default(),
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
        let windowed = self.push_rtt(now, s.rtt);
        let rtt = Self::path_rtt(s.min_rtt, windowed);
        // A buffer that limits only the queue the connection keeps (the
        // smoothed RTT well above the path's, the rate at its best) costs
        // nothing: growing it only lets the sender hold more (BBR's
        // startup keeps up to 2.9 BDPs in flight if the buffer lets it).
        // It limits the transfer when the path is not full (no queue) or
        // the rate fell (the delay grew, or less fits in flight).
        // A rate that fell after a loss (within the window the best rate
        // is remembered over) fell because the path is full, not longer:
        // a competitor took its share (the shared queue lengthens the
        // round trip too) or the link's rate fell, and a bigger buffer
        // would only hold more of the queue and take the share back: lab
        // auto-streams s13 `v4c2`, the first transfer's buffer doubled to
        // 11.2 MB when a second arrived (compete_tests: 8.8 -> 17.6 MB). A
        // path whose delay grew loses nothing while its buffer holds the
        // sender back.
        if s.retrans > self.retrans {
            self.lost_at = Some(now);
        }
        self.retrans = s.retrans;
        let congested = self
            .lost_at
            .is_some_and(|t| now.saturating_sub(t) <= self.cfg.rate_window);
        // And the rate must have fallen from one the buffer held too: a
        // rate that fell while the congestion window was the limit fell
        // to a competitor's share, and the buffer only became the limit
        // when the window grew back (compete_tests: the first flow's
        // window held 4.1 MB while the second grew from 4 to 13 MB/s, and
        // its buffer doubled the moment the window passed it).
        let held = if limited {
            self.limited_rate
                .push(now, s.delivery_rate, self.cfg.rate_window)
        } else {
            self.limited_rate.get()
        };
        let fell = (s.delivery_rate as f64) < held as f64 * SEND_RATE_FELL;
        let costs = rtt.is_none_or(|r| s.rtt.as_secs_f64() < r.as_secs_f64() * SEND_QUEUE_FREE)
            || (fell && !congested);
        // It must have cost for a while ([`SEND_COSTLY_HOLD_RTTS`]): BBR's
        // ProbeRTT and the round trips after it read as "no queue" and
        // "the rate fell" while the buffer, as ever, is the limit.
        let hold = rtt
            .map_or(Duration::ZERO, |r| r * SEND_COSTLY_HOLD_RTTS)
            .max(SEND_COSTLY_HOLD_MIN);
        self.costly_since = (limited && costs).then(|| self.costly_since.unwrap_or(now));
        let costs = self
            .costly_since
            .is_some_and(|t| now.saturating_sub(t) >= hold);
        let limited = (limited && costs).then_some(s.rtt);
        // The configured floor, while the path is short (or not known yet).
        let short = self.bdp == 0 || self.bdp.saturating_mul(FIXED_FLOOR_BDPS) < s.fixed;
        let floor = if short { s.floor.max(s.fixed) } else { s.floor };
        self.decide(now, bw, rtt, limited, s.buffer, floor)
    }

    /// Folds in a receiver-side sample: the window to offer, and the
    /// buffer under it.
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
        let rtt = self.push_recent_rtt(now, s.rcv_rtt);
        let have = if self.window > 0 {
            self.window
        } else {
            s.window
        };
        let Some(r) = rtt.filter(|_| have > 0) else {
            // No round trip yet (a receiver's `tcpi_rcv_rtt` stays 0 until
            // a window has come in): nothing to size from; the buffer only
            // keeps up with autotuning's floor.
            let set = (s.floor > s.buffer).then_some(s.floor.min(self.cfg.max));
            return DrsDecision {
                set,
                window: None,
                capped: false,
                next_sample: SAMPLE_MIN * 4,
            };
        };
        self.bdp = (bw as f64 * r.as_secs_f64()) as u64;
        // A round trip that brought nearly the whole window says the
        // window is what limits: double it, as slow start doubles.
        let per_rtt = (rate as f64 * r.as_secs_f64()) as u64;
        let limited = per_rtt as f64 >= have as f64 * RECV_FULL_SHARE;
        let mut need = (self.bdp as f64 * self.cfg.recv_window_factor) as u64;
        if limited {
            need = need.max(have.saturating_mul(2));
        }
        let most = self.cfg.max / 2;
        let capped = need > most;
        let least = ((bw as f64 * RECV_MIN_WINDOW_TIME) as u64).max(RECV_MIN_WINDOW);
        let need = need.max(least).min(most);
        let window = self.hysteresis(now, need, have, RECV_SHRINK_BELOW);
        if let Some(w) = window {
            self.window = w;
        }
        let w = if self.window > 0 { self.window } else { have };
        // The buffer: a ceiling of several windows, never below autotuning's.
        let buffer = w
            .saturating_mul(RECV_BUFFER_PER_WINDOW)
            .max(s.floor)
            .max(self.cfg.min)
            .min(self.cfg.max);
        let set = (buffer != s.buffer && (window.is_some() || buffer > s.buffer)).then_some(buffer);
        if let Some(b) = set {
            self.set = b;
        }
        let changing = window.is_some() || set.is_some() || self.low_since.is_some();
        DrsDecision {
            set,
            window,
            capped,
            next_sample: Self::next_sample(rtt, changing),
        }
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

    /// Receiver: the lowest round trip of the last [`RTT_RECENT`].
    fn push_recent_rtt(&mut self, now: Duration, rtt: Duration) -> Option<Duration> {
        if rtt.is_zero() {
            let v = self.rtt_recent.get();
            return (v > 0).then(|| Duration::from_micros(u64::MAX - v));
        }
        let us = rtt.as_micros().min(u128::from(u64::MAX - 1)) as u64;
        let inv = self.rtt_recent.push(now, u64::MAX - us, RTT_RECENT);
        Some(Duration::from_micros(u64::MAX - inv))
    }

    /// Sender: the path's own round trip. The kernel's `tcpi_min_rtt`
    /// remembers minutes, so a path whose delay grew would be sized for
    /// the old one; the windowed minimum of the smoothed RTT follows a
    /// change but includes the queue the connection itself keeps (a BBR
    /// flow here stayed in startup, 2.9 BDPs in flight, 300 ms round trips
    /// on a 100 ms path: lab/results/drs-wan/s12). A send buffer of
    /// [`SEND_IN_FLIGHT`] BDPs (doubled once at most) inflates the round
    /// trip by at most [`SEND_OWN_QUEUE`], so a windowed minimum beyond
    /// that times the kernel's is the path's delay having grown; a
    /// smaller growth shows as a rate that fell, which grows the buffer.
    fn path_rtt(min_rtt: Duration, windowed: Option<Duration>) -> Option<Duration> {
        match (min_rtt.is_zero(), windowed) {
            (true, w) => w,
            (false, None) => Some(min_rtt),
            (false, Some(w)) => Some(min_rtt.max(w.div_f64(SEND_OWN_QUEUE))),
        }
    }

    fn decide(
        &mut self,
        now: Duration,
        bw: u64,
        rtt: Option<Duration>,
        // The buffer limited the connection at this smoothed RTT.
        limited: Option<Duration>,
        current: u64,
        floor: u64,
    ) -> DrsDecision {
        let cfg = &self.cfg;
        self.bdp = rtt.map_or(0, |r| (bw as f64 * r.as_secs_f64()) as u64);
        let have = if self.set > 0 { self.set } else { current };
        // What must be in flight, what waits unsent for the next wake-up
        // (no more than a BDP of it: on a short fast path, loopback, the
        // mark is tens of MB of wake-up economy that the buffer need not
        // hold), in the kernel's units.
        let need_data = self.bdp as f64 * cfg.factor + rate_mark(bw).min(self.bdp) as f64;
        let mut need = (need_data * SEND_TRUESIZE) as u64;
        // The guard against doubling a buffer far above the path (4 BDPs)
        // counts the BDP at the smoothed RTT too: right after the delay
        // grew, the windowed minimum still holds the old one.
        if let Some(srtt) = limited {
            let bdp_now = self.bdp.max((bw as f64 * srtt.as_secs_f64()) as u64);
            if have < bdp_now.saturating_mul(LIMITED_MAX_BDPS) {
                need = need.max(have.saturating_mul(2));
            }
        }
        let capped = need > cfg.max;
        let lo = floor.max(cfg.min).min(cfg.max);
        let need = need.clamp(lo, cfg.max);
        let set = self.hysteresis(now, need, have, SHRINK_BELOW);
        if let Some(b) = set {
            self.set = b;
        }
        // A limit that changed nothing (a buffer far above the BDP) is steady.
        let changing = set.is_some() || self.low_since.is_some();
        DrsDecision {
            set,
            window: None,
            capped,
            next_sample: Self::next_sample(rtt, changing),
        }
    }

    /// About a round trip while sizes change, a few round trips (at most
    /// a second) once steady.
    fn next_sample(rtt: Option<Duration>, changing: bool) -> Duration {
        let base = rtt.unwrap_or(SAMPLE_MIN).max(SAMPLE_MIN);
        if changing {
            base.min(SAMPLE_STEADY_MAX / 4)
        } else {
            (base * 4).clamp(SAMPLE_MIN, SAMPLE_STEADY_MAX)
        }
    }

    /// Grow to `need` at once (by at least [`GROW_MIN`]); shrink only when
    /// it stayed below `shrink_below` of `have` for `shrink_hold`, then to
    /// the largest need seen meanwhile. The new size, if it changes.
    fn hysteresis(
        &mut self,
        now: Duration,
        need: u64,
        have: u64,
        shrink_below: f64,
    ) -> Option<u64> {
        let cfg = &self.cfg;
        if need > have {
            self.low_since = None;
            return Some(((have as f64 * GROW_MIN) as u64).max(need).min(cfg.max));
        }
        if (need as f64) >= have as f64 * shrink_below {
            self.low_since = None;
            return None;
        }
        let (since, peak) = match self.low_since {
            Some((t, p)) => (t, p.max(need)),
            None => (now, need),
        };
        if now.saturating_sub(since) >= cfg.shrink_hold {
            self.low_since = None;
            Some(peak)
        } else {
            self.low_since = Some((since, peak));
            None
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compete_tests;
