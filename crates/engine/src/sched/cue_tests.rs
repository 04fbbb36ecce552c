//! Cue on a virtual clock: transfers with endless data, a CPU that moves
//! a fixed number of bytes per millisecond, sockets that are writable
//! unless a test pauses them. Rates come out of the scheduler's turns
//! (token buckets for capped transfers), never out of a real clock.

use super::*;

const MS: Duration = Duration::from_millis(1);
const MBIT: u64 = 125_000;

struct Sim {
    c: Cue,
    now: Duration,
    /// Transfers whose sockets are writable.
    live: BTreeMap<u64, ()>,
    /// Bytes sent per transfer, per whole second of virtual time.
    per_sec: BTreeMap<u64, Vec<u64>>,
    /// The turn being used across steps: (id, bytes left).
    cur: Option<(CueId, u64)>,
    /// Bytes the CPU moves per millisecond.
    cpu_per_ms: u64,
}

impl Sim {
    fn new(cfg: CueConfig, cpu_per_ms: u64) -> Sim {
        Sim {
            c: Cue::new(cfg),
            now: Duration::ZERO,
            live: BTreeMap::new(),
            per_sec: BTreeMap::new(),
            cur: None,
            cpu_per_ms,
        }
    }

    fn add(&mut self, id: u64, class: &str, cap: Option<u64>) {
        self.add_spec(
            id,
            CueSpec {
                class: class.into(),
                cap,
                ..CueSpec::default()
            },
        );
    }

    fn add_spec(&mut self, id: u64, spec: CueSpec) {
        self.c.register(self.now, CueId(id), spec);
        self.c.writable(self.now, CueId(id));
        self.live.insert(id, ());
        self.per_sec.entry(id).or_default();
    }

    /// The socket stops taking data (the client stopped reading).
    fn pause(&mut self, id: u64) {
        self.live.remove(&id);
        self.c.sent(self.now, CueId(id), 0, false);
        if self.cur.is_some_and(|(c, _)| c == CueId(id)) {
            self.cur = None;
        }
    }

    fn leave(&mut self, id: u64) {
        self.live.remove(&id);
        self.c.gone(self.now, CueId(id));
        if self.cur.is_some_and(|(c, _)| c == CueId(id)) {
            self.cur = None;
        }
    }

    fn record(&mut self, id: u64, n: u64) {
        let sec = self.now.as_secs() as usize;
        let v = self.per_sec.get_mut(&id).unwrap();
        if v.len() <= sec {
            v.resize(sec + 1, 0);
        }
        v[sec] += n;
    }

    /// Runs until `until`, one millisecond at a time.
    fn run(&mut self, until: Duration) {
        while self.now < until {
            let mut budget = self.cpu_per_ms;
            while budget > 0 {
                let (id, left) = match self.cur.take() {
                    Some(t) => t,
                    None => match self.c.next_turn(self.now) {
                        Some(g) => (g.id, g.bytes),
                        None => break,
                    },
                };
                let n = left.min(budget);
                budget -= n;
                self.record(id.0, n);
                self.c.sent(self.now, id, n, true);
                if n < left {
                    self.cur = Some((id, left - n));
                }
            }
            self.now += MS;
            self.c.advance(self.now);
        }
    }

    /// Bytes/s of `id` over whole seconds [from, to).
    fn rate(&self, id: u64, from: usize, to: usize) -> f64 {
        let v = &self.per_sec[&id];
        let sum: u64 = (from..to).map(|s| v.get(s).copied().unwrap_or(0)).sum();
        sum as f64 / (to - from) as f64
    }
}

fn cfg() -> CueConfig {
    CueConfig {
        quantum: 1 << 20,
        idle_after: Duration::from_secs(1),
        ..CueConfig::default()
    }
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= want * tol
}

#[test]
fn equal_transfers_get_equal_bytes_every_second() {
    // CPU-bound: 1 GB/s shared by 8 transfers with nothing else to stop
    // them; only the turns keep them even.
    let mut s = Sim::new(cfg(), 1_000_000);
    for id in 0..8 {
        s.add(id, "", None);
    }
    s.run(Duration::from_secs(10));
    for sec in 0..10 {
        let xs: Vec<f64> = (0..8).map(|id| s.rate(id, sec, sec + 1)).collect();
        let j = jain(&xs);
        assert!(j >= 0.99, "second {sec}: Jain {j:.4} over {xs:?}");
    }
    assert!(s.c.rate(CueId(0)).is_none(), "no cap: unpaced");
}

#[test]
fn a_transfer_with_no_quantum_takes_everything() {
    // The same run with one huge turn each: the first transfer in the
    // ring holds the CPU (what sending until the socket is full does on a
    // fast path), and the index shows it.
    let mut s = Sim::new(
        CueConfig {
            quantum: 1 << 40,
            ..cfg()
        },
        1_000_000,
    );
    for id in 0..8 {
        s.add(id, "", None);
    }
    s.run(Duration::from_secs(2));
    let xs: Vec<f64> = (0..8).map(|id| s.rate(id, 0, 2)).collect();
    assert!(jain(&xs) < 0.2, "{xs:?}");
}

#[test]
fn weights_3_to_1_share_the_cpu_75_25() {
    let mut s = Sim::new(
        CueConfig {
            classes: vec![("interactive".into(), 3.0), ("bulk".into(), 1.0)],
            ..cfg()
        },
        1_000_000,
    );
    // Unequal numbers per class: the class shares still follow weights.
    for id in 0..2 {
        s.add(id, "interactive", None);
    }
    for id in 2..7 {
        s.add(id, "bulk", None);
    }
    s.run(Duration::from_secs(10));
    let a: f64 = (0..2).map(|id| s.rate(id, 0, 10)).sum();
    let b: f64 = (2..7).map(|id| s.rate(id, 0, 10)).sum();
    let share = a / (a + b);
    assert!(within(share, 0.75, 0.05), "interactive share {share:.4}");
}

#[test]
fn caps_hold_within_2_percent_over_10_s() {
    // 20 transfers capped 1, 10 and 100 Mbit/s on a CPU that could give
    // each far more.
    let caps = [MBIT, 10 * MBIT, 100 * MBIT];
    let mut s = Sim::new(cfg(), 10_000_000);
    for id in 0..20u64 {
        s.add(id, "", Some(caps[id as usize % 3]));
    }
    let mut paced = BTreeMap::new();
    while let Some(p) = s.c.poll_pace() {
        paced.insert(p.id.0, p.rate);
    }
    s.run(Duration::from_secs(11));
    for id in 0..20u64 {
        let cap = caps[id as usize % 3];
        assert_eq!(paced[&id], Some(cap), "socket {id} paced at its cap");
        let r = s.rate(id, 1, 11);
        assert!(
            within(r, cap as f64, 0.02),
            "transfer {id}: {r} B/s, cap {cap}"
        );
    }
}

#[test]
fn a_server_cap_is_shared_equally_and_held() {
    let mut s = Sim::new(
        CueConfig {
            server_cap: Some(100 * MBIT),
            ..cfg()
        },
        10_000_000,
    );
    for id in 0..20 {
        s.add(id, "", None);
    }
    s.run(Duration::from_secs(11));
    let xs: Vec<f64> = (0..20).map(|id| s.rate(id, 1, 11)).collect();
    let total: f64 = xs.iter().sum();
    assert!(within(total, (100 * MBIT) as f64, 0.02), "total {total}");
    assert!(jain(&xs) >= 0.99, "{xs:?}");
}

#[test]
fn water_filling_gives_unused_cap_room_to_the_others() {
    // Server 10 MB/s; one transfer capped at 1 MB/s leaves 9 to the two
    // others; a user capped at 2 MB/s shares it between its transfers.
    let mut c = Cue::new(CueConfig {
        server_cap: Some(10_000_000),
        ..cfg()
    });
    let t = Duration::ZERO;
    c.register(
        t,
        CueId(1),
        CueSpec {
            cap: Some(1_000_000),
            ..Default::default()
        },
    );
    c.register(t, CueId(2), CueSpec::default());
    c.register(t, CueId(3), CueSpec::default());
    assert_eq!(c.rate(CueId(1)), Some(1_000_000));
    assert_eq!(c.rate(CueId(2)), Some(4_500_000));
    assert_eq!(c.rate(CueId(3)), Some(4_500_000));
    for id in [4, 5] {
        c.register(
            t,
            CueId(id),
            CueSpec {
                user: Some("alice".into()),
                user_cap: Some(2_000_000),
                ..Default::default()
            },
        );
    }
    // 1 + 2 (alice) leaves 7 for transfers 2 and 3.
    assert_eq!(c.rate(CueId(4)), Some(1_000_000));
    assert_eq!(c.rate(CueId(5)), Some(1_000_000));
    assert_eq!(c.rate(CueId(2)), Some(3_500_000));
}

#[test]
fn classes_3_to_1_under_a_server_cap() {
    let mut s = Sim::new(
        CueConfig {
            server_cap: Some(80 * MBIT),
            classes: vec![("interactive".into(), 3.0), ("bulk".into(), 1.0)],
            ..cfg()
        },
        10_000_000,
    );
    for id in 0..10 {
        s.add(id, if id < 4 { "interactive" } else { "bulk" }, None);
    }
    s.run(Duration::from_secs(11));
    let a: f64 = (0..4).map(|id| s.rate(id, 1, 11)).sum();
    let b: f64 = (4..10).map(|id| s.rate(id, 1, 11)).sum();
    assert!(within(a / (a + b), 0.75, 0.05), "share {}", a / (a + b));
    assert!(within(a + b, (80 * MBIT) as f64, 0.02), "total {}", a + b);
    let st = s.c.classes();
    let i = st.iter().find(|c| c.name == "interactive").unwrap();
    assert_eq!((i.transfers, i.active, i.weight), (4, 4, 3.0));
    assert!(within(i.rate.unwrap() as f64, (60 * MBIT) as f64, 0.001));
}

#[test]
fn a_freed_share_is_reused_after_idle_after() {
    let mut s = Sim::new(
        CueConfig {
            server_cap: Some(10_000_000),
            ..cfg()
        },
        10_000_000,
    );
    s.add(1, "", None);
    s.add(2, "", None);
    s.run(Duration::from_secs(2));
    assert_eq!(s.c.rate(CueId(2)), Some(5_000_000));
    s.pause(1);
    s.run(Duration::from_secs(3) + 200 * MS);
    // Idle for more than a second: its share went to transfer 2.
    assert_eq!(s.c.rate(CueId(2)), Some(10_000_000));
    s.run(Duration::from_secs(14));
    let r = s.rate(2, 4, 14);
    assert!(within(r, 10_000_000.0, 0.02), "{r}");
    // It comes back: the shares are split again on its first send.
    s.c.writable(s.now, CueId(1));
    s.live.insert(1, ());
    s.run(Duration::from_secs(15));
    assert_eq!(s.c.rate(CueId(1)), Some(5_000_000));
    assert_eq!(s.c.rate(CueId(2)), Some(5_000_000));
}

#[test]
fn a_transfer_that_leaves_frees_its_share_at_once() {
    let mut s = Sim::new(
        CueConfig {
            server_cap: Some(9_000_000),
            ..cfg()
        },
        10_000_000,
    );
    for id in 1..=3 {
        s.add(id, "", None);
    }
    s.run(Duration::from_secs(2));
    while s.c.poll_pace().is_some() {}
    s.leave(1);
    // No time passes: the pacing changes are out in the same call.
    let mut paced = BTreeMap::new();
    while let Some(p) = s.c.poll_pace() {
        paced.insert(p.id.0, p.rate);
    }
    assert_eq!(paced.get(&2), Some(&Some(4_500_000)));
    assert_eq!(paced.get(&3), Some(&Some(4_500_000)));
    assert!(!paced.contains_key(&1));
    s.run(Duration::from_secs(12));
    let r = s.rate(2, 3, 12);
    assert!(within(r, 4_500_000.0, 0.02), "{r}");
}

#[test]
fn capped_transfers_get_turns_only_when_they_have_tokens() {
    let mut c = Cue::new(cfg());
    c.register(
        Duration::ZERO,
        CueId(1),
        CueSpec {
            cap: Some(1_000_000),
            ..Default::default()
        },
    );
    c.writable(Duration::ZERO, CueId(1));
    let g = c.next_turn(Duration::from_millis(100)).unwrap();
    assert_eq!(g.bytes, 100_000);
    c.sent(Duration::from_millis(100), CueId(1), g.bytes, true);
    assert_eq!(c.next_turn(Duration::from_millis(100)), None);
    assert_eq!(
        c.next_refill(),
        Some(Duration::from_millis(100) + Duration::from_micros(1))
    );
}

#[test]
fn a_sender_waiting_on_a_draining_socket_keeps_its_share() {
    // Transfer 1 fills a large socket buffer and then reports nothing for
    // longer than idle_after while its socket still delivers: it must
    // keep its share (or 2 would be paced at the whole cap while 1 still
    // sends at its old pace). Once its socket stops delivering too, it
    // goes idle as before.
    let mut c = Cue::new(CueConfig {
        server_cap: Some(10_000_000),
        ..cfg()
    });
    let t = |ms: u64| Duration::from_millis(ms);
    c.register(t(0), CueId(1), CueSpec::default());
    c.register(t(0), CueId(2), CueSpec::default());
    c.sent(t(0), CueId(1), 1 << 20, false);
    let delivered = std::cell::Cell::new(0u64);
    for ms in (0..3000).step_by(10) {
        delivered.set(ms * 5_000);
        c.keep_alive(t(ms), &|id| (id == CueId(1)).then(|| delivered.get()));
        c.sent(t(ms), CueId(2), 50_000, true);
    }
    assert_eq!(c.rate(CueId(2)), Some(5_000_000), "1 still delivers");
    for ms in (3000..5000).step_by(10) {
        c.keep_alive(t(ms), &|id| (id == CueId(1)).then(|| delivered.get()));
        c.sent(t(ms), CueId(2), 50_000, true);
    }
    assert_eq!(c.rate(CueId(2)), Some(10_000_000), "1 stopped: idle");
}
