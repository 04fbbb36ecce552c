//! Fair shares on a virtual clock, against a modelled bottleneck: flows
//! whose demand is the lower of their pacing and a limit elsewhere share
//! a link of fixed capacity in proportion to a per-flow "aggressiveness"
//! (what a drop-tail queue does to flows with different RTTs or cwnd
//! histories), and each flow's rate follows its allocation with a 20 ms
//! lag (TCP's response). Rates are measured from the bytes delivered.

use super::super::{jain, Cue, CueConfig, CueId, CueSpec};
use super::*;
use std::collections::BTreeMap;

const MS: Duration = Duration::from_millis(1);
/// 100 Mbit/s.
const LINK: f64 = 12_500_000.0;

struct Flow {
    aggr: f64,
    elsewhere: Option<f64>,
    rate: f64,
    per_sec: Vec<f64>,
}

struct Net {
    c: Cue,
    now: Duration,
    link: f64,
    flows: BTreeMap<u64, Flow>,
}

impl Net {
    fn new(fair: bool) -> Net {
        Net {
            c: Cue::new(CueConfig {
                idle_after: Duration::from_secs(1),
                fair: fair.then(FairConfig::default),
                ..CueConfig::default()
            }),
            now: Duration::ZERO,
            link: LINK,
            flows: BTreeMap::new(),
        }
    }

    fn add(&mut self, id: u64, aggr: f64, elsewhere: Option<f64>) {
        self.c.register(self.now, CueId(id), CueSpec::default());
        self.flows.insert(
            id,
            Flow {
                aggr,
                elsewhere,
                rate: 0.0,
                per_sec: Vec::new(),
            },
        );
    }

    fn leave(&mut self, id: u64) {
        self.flows.remove(&id);
        self.c.gone(self.now, CueId(id));
    }

    /// Aggressiveness-weighted water-filling of the link over demands.
    fn share(&self) -> BTreeMap<u64, f64> {
        let mut out = BTreeMap::new();
        let mut open: Vec<(u64, f64, f64)> = self
            .flows
            .iter()
            .map(|(&id, f)| {
                let pace = self.c.rate(CueId(id)).map_or(f64::INFINITY, |r| r as f64);
                (id, f.aggr, pace.min(f.elsewhere.unwrap_or(f64::INFINITY)))
            })
            .collect();
        let mut left = self.link;
        while !open.is_empty() {
            let a: f64 = open.iter().map(|x| x.1).sum();
            let per = left / a;
            let (done, rest): (Vec<_>, Vec<_>) = open.iter().partition(|x| x.2 <= x.1 * per);
            if done.is_empty() {
                for (id, ag, _) in rest {
                    out.insert(id, ag * per);
                }
                break;
            }
            for (id, _, d) in done {
                out.insert(id, d);
                left -= d;
            }
            open = rest;
        }
        out
    }

    fn run(&mut self, until: Duration) {
        while self.now < until {
            let share = self.share();
            let sec = self.now.as_secs() as usize;
            for (&id, f) in self.flows.iter_mut() {
                // TCP follows its allocation within a few RTTs.
                f.rate += (share[&id] - f.rate) * 0.05;
                let bytes = f.rate / 1000.0;
                if f.per_sec.len() <= sec {
                    f.per_sec.resize(sec + 1, 0.0);
                }
                f.per_sec[sec] += bytes;
                self.c.sent(self.now, CueId(id), bytes as u64, true);
            }
            self.now += MS;
            if self.c.fair_due(self.now) {
                self.c.fair_window(self.now, &|_| None);
            }
        }
    }

    fn rates(&self, ids: &[u64], sec: usize) -> Vec<f64> {
        ids.iter().map(|id| self.flows[id].per_sec[sec]).collect()
    }

    fn total(&self, sec: usize) -> f64 {
        self.flows.values().map(|f| f.per_sec[sec]).sum()
    }
}

/// Aggressiveness from 1 to 4, spread over `n` flows.
fn spread(n: u64) -> Vec<f64> {
    (0..n)
        .map(|i| 1.0 + 3.0 * i as f64 / (n - 1).max(1) as f64)
        .collect()
}

fn shared(n: u64, fair: bool) -> Net {
    let mut net = Net::new(fair);
    for (id, a) in spread(n).into_iter().enumerate() {
        net.add(id as u64, a, None);
    }
    net.run(Duration::from_secs(20));
    net
}

#[test]
fn unpaced_flows_split_a_shared_bottleneck_unequally() {
    // The model's premise (what the lab saw on linkem): no pacing, no
    // fairness, whatever the server's turns.
    let net = shared(4, false);
    let ids: Vec<u64> = (0..4).collect();
    let j = jain(&net.rates(&ids, 10));
    assert!(j < 0.9, "Jain {j}");
}

#[test]
fn paced_flows_converge_to_equal_shares_within_seconds() {
    for n in [2, 4, 16, 64] {
        let net = shared(n, true);
        let ids: Vec<u64> = (0..n).collect();
        for sec in 3..20 {
            let xs = net.rates(&ids, sec);
            let j = jain(&xs);
            assert!(j >= 0.99, "n {n} second {sec}: Jain {j:.4} {xs:?}");
            let t = net.total(sec);
            assert!(t >= 0.97 * LINK, "n {n} second {sec}: aggregate {t}");
        }
    }
}

#[test]
fn a_flow_limited_elsewhere_keeps_its_rate_and_the_others_split_the_rest() {
    // Four flows; one has a 1 MB/s path of its own (a quarter of its
    // equal share). Unpaced the aggregate is the link; paced it must stay
    // within a few % of that, and the slow one must not lower the others.
    let mut net = Net::new(true);
    for (id, a) in spread(4).into_iter().enumerate() {
        net.add(id as u64, a, (id == 0).then_some(1_000_000.0));
    }
    net.run(Duration::from_secs(20));
    for sec in 5..20 {
        let slow = net.flows[&0].per_sec[sec];
        assert!(slow >= 0.97e6, "second {sec}: the slow flow has {slow}");
        let t = net.total(sec);
        assert!(t >= 0.95 * LINK, "second {sec}: aggregate {t}");
        let xs = net.rates(&[1, 2, 3], sec);
        assert!(jain(&xs) >= 0.99, "second {sec}: {xs:?}");
    }
}

#[test]
fn a_flow_that_leaves_frees_its_share_in_the_same_call() {
    let mut net = shared(4, true);
    let before = net.c.rate(CueId(1)).unwrap() as f64;
    net.leave(0);
    // No time passes: the three left are paced at a third each.
    let after = net.c.rate(CueId(1)).unwrap() as f64;
    assert!(after >= before * 1.3, "{before} -> {after}");
    net.run(Duration::from_secs(25));
    let ids = [1, 2, 3];
    for sec in 21..25 {
        assert!(jain(&net.rates(&ids, sec)) >= 0.99);
        assert!(
            net.total(sec) >= 0.97 * LINK,
            "second {sec}: {}",
            net.total(sec)
        );
    }
}

#[test]
fn the_aggregate_follows_a_bottleneck_that_grows() {
    // Paced at shares of 100 Mbit/s, the link becomes 400 Mbit/s: the
    // multiplicative raise finds it within a few seconds.
    let mut net = shared(4, true);
    net.link = 4.0 * LINK;
    net.run(Duration::from_secs(30));
    let ids: Vec<u64> = (0..4).collect();
    for sec in 25..30 {
        let t = net.total(sec);
        assert!(t >= 0.95 * 4.0 * LINK, "second {sec}: aggregate {t}");
        assert!(jain(&net.rates(&ids, sec)) >= 0.99);
    }
}

#[test]
fn a_transfer_alone_is_not_paced_and_a_second_one_is_shared_with_at_once() {
    let mut net = Net::new(true);
    net.add(0, 1.0, None);
    net.run(Duration::from_secs(3));
    assert_eq!(net.c.rate(CueId(0)), None, "alone: unpaced");
    assert!(net.total(2) >= 0.99 * LINK);
    net.add(1, 3.0, None);
    // The level measured alone, shared by two from the join on.
    let r0 = net.c.rate(CueId(0)).expect("paced once there are two") as f64;
    assert!((r0 / (LINK / 2.0) - 1.0).abs() < 0.05, "{r0}");
    net.run(Duration::from_secs(8));
    assert!(jain(&net.rates(&[0, 1], 7)) >= 0.99);
}
