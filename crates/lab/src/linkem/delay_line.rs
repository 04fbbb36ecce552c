//! The sans-I/O heart of the link emulator: packets go in with the time they
//! arrived, come out when they are due. Loss, the drop-tail bottleneck queue,
//! serialization at the configured rate, propagation delay and jitter are all
//! decided here, so they can be tested without devices or clocks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::params::LinkParams;

/// Upper bound on packets held in the delay line, whatever the delay: protects
/// memory if a huge delay is configured at a high rate.
pub const MAX_PACKETS_IN_FLIGHT: usize = 1 << 20;

/// What happened to a packet handed to [`DelayLine::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Held; it will come out of `poll_due` at its due time.
    Queued,
    /// Dropped by the random loss process.
    Lost,
    /// Dropped because the bottleneck queue was full (drop-tail).
    QueueFull,
}

/// Counters of one direction.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LineStats {
    /// Packets handed in.
    pub packets_in: u64,
    /// Bytes handed in.
    pub bytes_in: u64,
    /// Packets delivered.
    pub packets_out: u64,
    /// Bytes delivered.
    pub bytes_out: u64,
    /// Packets dropped by random loss.
    pub dropped_loss: u64,
    /// Packets dropped at the full queue.
    pub dropped_queue: u64,
    /// Largest bottleneck backlog seen, in bytes.
    pub max_backlog_bytes: u64,
    /// Packets currently held.
    pub held: u64,
}

struct Held<P> {
    due: Instant,
    seq: u64,
    len: usize,
    pkt: P,
}

impl<P> PartialEq for Held<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl<P> Eq for Held<P> {}
impl<P> PartialOrd for Held<P> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Held<P> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// One direction of an emulated link.
pub struct DelayLine<P> {
    params: LinkParams,
    rng: StdRng,
    /// In-order packets (no reordering): due times never decrease.
    fifo: VecDeque<Held<P>>,
    /// Packets that may overtake each other (jitter with reordering on).
    heap: BinaryHeap<Reverse<Held<P>>>,
    /// When the bottleneck finishes serializing what it has accepted.
    busy_until: Option<Instant>,
    /// Latest due time handed out, to keep order without reordering.
    last_due: Option<Instant>,
    seq: u64,
    stats: LineStats,
}

impl<P> DelayLine<P> {
    /// A line with the given parameters; `seed` makes loss and jitter repeatable.
    pub fn new(params: LinkParams, seed: u64) -> Self {
        DelayLine {
            params,
            rng: StdRng::seed_from_u64(seed),
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            busy_until: None,
            last_due: None,
            seq: 0,
            stats: LineStats::default(),
        }
    }

    /// Current parameters.
    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Changes parameters; packets already held keep their due times.
    pub fn set_params(&mut self, params: LinkParams) {
        self.params = params;
    }

    /// Counters so far.
    pub fn stats(&self) -> LineStats {
        let mut s = self.stats.clone();
        s.held = (self.fifo.len() + self.heap.len()) as u64;
        s
    }

    fn held(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Bytes waiting for the bottleneck at `now`.
    pub fn backlog_bytes(&self, now: Instant) -> u64 {
        match (self.busy_until, self.params.rate_bps) {
            (Some(b), rate) if rate > 0 && b > now => {
                ((b - now).as_secs_f64() * rate as f64 / 8.0) as u64
            }
            _ => 0,
        }
    }

    /// A packet of `len` bytes arrived at `now`.
    pub fn handle_packet(&mut self, now: Instant, len: usize, pkt: P) -> Verdict {
        self.stats.packets_in += 1;
        self.stats.bytes_in += len as u64;
        if self.params.loss > 0.0 && self.rng.gen::<f64>() < self.params.loss {
            self.stats.dropped_loss += 1;
            return Verdict::Lost;
        }
        if self.held() >= MAX_PACKETS_IN_FLIGHT {
            self.stats.dropped_queue += 1;
            return Verdict::QueueFull;
        }
        // Serialization at the bottleneck: the packet leaves when the link is free
        // and its bits have been clocked out.
        let leaves = if self.params.rate_bps > 0 {
            let backlog = self.backlog_bytes(now);
            if backlog + len as u64 > self.params.queue_limit_bytes && backlog > 0 {
                self.stats.dropped_queue += 1;
                return Verdict::QueueFull;
            }
            self.stats.max_backlog_bytes = self.stats.max_backlog_bytes.max(backlog + len as u64);
            let start = match self.busy_until {
                Some(b) if b > now => b,
                _ => now,
            };
            let tx = Duration::from_secs_f64(len as f64 * 8.0 / self.params.rate_bps as f64);
            self.busy_until = Some(start + tx);
            start + tx
        } else {
            now
        };
        let mut delay = self.params.delay;
        if !self.params.jitter.is_zero() {
            let j = self.params.jitter.as_secs_f64();
            let d = (delay.as_secs_f64() + self.rng.gen_range(-j..=j)).max(0.0);
            delay = Duration::from_secs_f64(d);
        }
        let mut due = leaves + delay;
        self.seq += 1;
        if self.params.reorder {
            self.heap.push(Reverse(Held {
                due,
                seq: self.seq,
                len,
                pkt,
            }));
        } else {
            if let Some(last) = self.last_due {
                due = due.max(last);
            }
            self.last_due = Some(due);
            self.fifo.push_back(Held {
                due,
                seq: self.seq,
                len,
                pkt,
            });
        }
        Verdict::Queued
    }

    /// The earliest time a held packet is due.
    pub fn next_due(&self) -> Option<Instant> {
        let a = self.fifo.front().map(|h| h.due);
        let b = self.heap.peek().map(|Reverse(h)| h.due);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes out one packet due at or before `now`, earliest first.
    pub fn poll_due(&mut self, now: Instant) -> Option<P> {
        let fa = self.fifo.front().map(|h| (h.due, h.seq));
        let hb = self.heap.peek().map(|Reverse(h)| (h.due, h.seq));
        let from_fifo = match (fa, hb) {
            (Some(a), Some(b)) => a <= b,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let due = if from_fifo {
            fa.map(|x| x.0)
        } else {
            hb.map(|x| x.0)
        }?;
        if due > now {
            return None;
        }
        let h = if from_fifo {
            self.fifo.pop_front()?
        } else {
            self.heap.pop()?.0
        };
        self.stats.packets_out += 1;
        self.stats.bytes_out += h.len as u64;
        Some(h.pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> DelayLine<u32> {
        let mut p = LinkParams::default();
        p.apply(s).unwrap();
        DelayLine::new(p, 7)
    }

    #[test]
    fn delays_by_the_configured_amount() {
        let mut l = line("delay=10ms");
        let t0 = Instant::now();
        assert_eq!(l.handle_packet(t0, 100, 1), Verdict::Queued);
        assert_eq!(l.poll_due(t0 + Duration::from_millis(9)), None);
        assert_eq!(l.next_due(), Some(t0 + Duration::from_millis(10)));
        assert_eq!(l.poll_due(t0 + Duration::from_millis(10)), Some(1));
        assert_eq!(l.poll_due(t0 + Duration::from_secs(1)), None);
    }

    #[test]
    fn serializes_at_the_rate() {
        // 1500 bytes at 12 Mbit/s take 1 ms each.
        let mut l = line("rate=12mbit limit=10");
        let t0 = Instant::now();
        for i in 0..3 {
            l.handle_packet(t0, 1500, i);
        }
        assert_eq!(l.next_due(), Some(t0 + Duration::from_millis(1)));
        assert_eq!(l.poll_due(t0 + Duration::from_micros(2999)), Some(0));
        assert_eq!(l.poll_due(t0 + Duration::from_micros(2999)), Some(1));
        assert_eq!(l.poll_due(t0 + Duration::from_micros(2999)), None);
        assert_eq!(l.poll_due(t0 + Duration::from_millis(3)), Some(2));
    }

    #[test]
    fn drops_tail_when_the_queue_is_full() {
        let mut l = line("rate=12mbit limit=3000B");
        let t0 = Instant::now();
        let v: Vec<_> = (0..4).map(|i| l.handle_packet(t0, 1500, i)).collect();
        assert_eq!(
            v,
            [
                Verdict::Queued,
                Verdict::Queued,
                Verdict::QueueFull,
                Verdict::QueueFull
            ]
        );
        // After 1 ms one packet has left the queue: room for one more.
        assert_eq!(
            l.handle_packet(t0 + Duration::from_millis(1), 1500, 9),
            Verdict::Queued
        );
        assert_eq!(l.stats().dropped_queue, 2);
    }

    #[test]
    fn loses_about_the_configured_fraction() {
        let mut l = line("loss=10%");
        let t0 = Instant::now();
        let lost = (0..20_000)
            .filter(|&i| l.handle_packet(t0, 100, i) == Verdict::Lost)
            .count();
        assert!((1700..2300).contains(&lost), "lost {lost}");
    }

    #[test]
    fn jitter_without_reorder_keeps_order() {
        let mut l = line("delay=10ms jitter=5ms");
        let t0 = Instant::now();
        for i in 0..1000u32 {
            l.handle_packet(t0 + Duration::from_micros(i as u64 * 10), 100, i);
        }
        let out: Vec<u32> =
            std::iter::from_fn(|| l.poll_due(t0 + Duration::from_secs(1))).collect();
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn jitter_with_reorder_reorders_but_stays_in_bounds() {
        let mut l = line("delay=10ms jitter=5ms reorder=on");
        let t0 = Instant::now();
        for i in 0..1000u32 {
            l.handle_packet(t0 + Duration::from_micros(i as u64 * 10), 100, i);
        }
        assert!(l.poll_due(t0 + Duration::from_micros(4999)).is_none());
        let out: Vec<u32> =
            std::iter::from_fn(|| l.poll_due(t0 + Duration::from_secs(1))).collect();
        assert_eq!(out.len(), 1000);
        assert_ne!(out, (0..1000).collect::<Vec<_>>());
    }
}
