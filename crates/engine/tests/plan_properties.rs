//! Prefetch planner and disk scheduler under random input: proptest
//! sequences of arrivals, samples, resets, cuts and completions (every
//! prefetch mode), checking the invariants at every step. The scenario
//! tests are in `plan.rs`.

use sluice_engine::{plan, sched};

use std::time::Duration;

use plan::{CaState, ConnId, FlowSample, PlanConfig, Planner, PrefetchMode, ReadRequest};
use sched::{SchedConfig, Scheduler};

// ---- Property tests over random input sequences -------------------------
// proptest picks the seed (and shrinks it on failure); a seeded xorshift
// drives the 400 steps of one case, so a case is reproducible from its seed.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Tells the scheduler `conn` is gone and checks that exactly its queued
/// and delayed requests were dropped (submitted ones end via completion).
fn gone(
    s: &mut Scheduler,
    outstanding: &mut std::collections::HashMap<sched::ReqId, ReadRequest>,
    in_kernel: &[sched::ReqId],
    conn: ConnId,
) {
    let before = outstanding.len();
    outstanding.retain(|id, r| r.conn != conn || in_kernel.contains(id));
    let d = s.handle_conn_gone(conn);
    assert_eq!(
        d.queued as usize,
        before - outstanding.len(),
        "dropped count"
    );
}

fn random_sequence(seed: u64, mode: PrefetchMode) {
    let mut rng = Rng(seed | 1);
    let budget = (1 + rng.below(32)) << 20;
    let mut p = Planner::new(PlanConfig {
        mode,
        budget,
        h_max: (64 + rng.below(1024)) << 10,
        ..PlanConfig::default()
    });
    let k = 1 + rng.below(6) as usize;
    let mut s = Scheduler::new(SchedConfig {
        queue_depth: k,
        max_merge: rng.below(2) << 20,
        batch_min: 1,
    });
    let conns = 1 + rng.below(12);
    let mut open = vec![false; conns as usize];
    let mut now = Duration::ZERO;
    // Every request handed to the scheduler, and how it ended.
    let mut outstanding: std::collections::HashMap<sched::ReqId, ReadRequest> = Default::default();
    let mut in_kernel: Vec<sched::ReqId> = Vec::new();
    let mut cached: Vec<u64> = vec![0; conns as usize];
    for step in 0..400 {
        now += Duration::from_millis(rng.below(200));
        let c = rng.below(conns);
        let conn = ConnId(c);
        match rng.below(9) {
            0 => {
                p.handle_open(now, conn, 0, rng.below(64 << 20));
                gone(&mut s, &mut outstanding, &in_kernel, conn);
                cached[c as usize] = 0;
                open[c as usize] = true;
            }
            1 | 2 => {
                let mut smp = FlowSample {
                    delivery_rate: rng.below(2_000_000),
                    cwnd: 10,
                    ..FlowSample::default()
                };
                smp.app_limited = rng.below(3) == 0;
                smp.cwnd = 1 + rng.below(40) as u32;
                smp.notsent_bytes = rng.below(256 << 10);
                smp.ca_state = CaState::from_raw(rng.below(5) as u8);
                smp.reset = rng.below(20) == 0;
                smp.closed = rng.below(30) == 0;
                let st = p.handle_sample(now, conn, &smp);
                if st.events.is_gone() {
                    gone(&mut s, &mut outstanding, &in_kernel, conn);
                    open[c as usize] = false;
                    cached[c as usize] = 0;
                } else if st.events.cwnd_cut {
                    s.handle_cwnd_cut(now, conn, p.target() / 2);
                }
            }
            3 => {
                let n = rng.below(512 << 10).min(cached[c as usize]);
                p.handle_sent(conn, n);
                cached[c as usize] -= n;
            }
            4 | 5 if !in_kernel.is_empty() => {
                let i = rng.below(in_kernel.len() as u64) as usize;
                let id = in_kernel.swap_remove(i);
                let done = s.handle_complete(now, id).expect("submitted id completes");
                outstanding.remove(&id);
                let got = if rng.below(10) == 0 {
                    rng.below(done.req.len + 1)
                } else {
                    done.req.len
                };
                let was_open = p.is_open(done.req.conn);
                p.handle_read_done(now, &done.req, got, done.service_time);
                if !done.cancelled && was_open {
                    cached[done.req.conn.0 as usize] += got;
                }
            }
            6 => {
                if p.is_open(conn) && cached[c as usize] > 0 && rng.below(4) == 0 {
                    let n = rng.below(cached[c as usize]) + 1;
                    p.handle_evicted(conn, 0, n);
                    cached[c as usize] -= n;
                }
            }
            _ => {
                let closed = p.handle_close(conn).is_some();
                if closed {
                    gone(&mut s, &mut outstanding, &in_kernel, conn);
                }
                open[c as usize] = false;
                cached[c as usize] = 0;
            }
        }
        while let Some(r) = p.poll_read(now) {
            assert!(
                open[r.conn.0 as usize],
                "seed {seed} step {step}: read for a closed connection"
            );
            assert!(r.len > 0 && (mode == PrefetchMode::Fixed || r.len <= p.config().h_max));
            let id = s.handle_request(now, r);
            outstanding.insert(id, r);
        }
        if mode == PrefetchMode::Kernel {
            assert!(outstanding.is_empty(), "kernel mode planned a read");
        }
        while let Some(id) = s.poll_cancel() {
            // Half the cancels succeed in the kernel at once.
            if rng.below(2) == 0 {
                in_kernel.retain(|&x| x != id);
                s.handle_complete(now, id)
                    .expect("cancel of a submitted id");
                outstanding.remove(&id);
            }
        }
        while let Some(sub) = s.poll_submit(now) {
            assert!(s.submitted() <= k);
            in_kernel.push(sub.id);
        }
        // Invariants after every step.
        assert_eq!(
            p.used(),
            p.used_recomputed(),
            "seed {seed} step {step}: accounting"
        );
        if mode == PrefetchMode::Tcp {
            assert!(p.used() <= budget, "seed {seed} step {step}: budget");
        }
        for (i, &o) in open.iter().enumerate() {
            if !o {
                assert!(
                    !s.holds(ConnId(i as u64)),
                    "seed {seed} step {step}: reads kept for closed conn"
                );
                assert!(!p.is_open(ConnId(i as u64)));
            }
        }
    }
    // Drain: with time moving on and the kernel completing, every request is
    // eventually submitted (and completed) or cancelled.
    for _ in 0..100_000 {
        now += Duration::from_millis(50);
        for id in std::mem::take(&mut in_kernel) {
            let done = s.handle_complete(now, id).expect("completes");
            outstanding.remove(&id);
            p.handle_read_done(now, &done.req, done.req.len, done.service_time);
        }
        let _ = s.poll_cancel();
        while let Some(sub) = s.poll_submit(now) {
            in_kernel.push(sub.id);
        }
        if in_kernel.is_empty() {
            break;
        }
    }
    assert_eq!(
        (s.queued(), s.delayed(), s.submitted()),
        (0, 0, 0),
        "seed {seed}: requests stuck"
    );
    assert!(
        outstanding.is_empty(),
        "seed {seed}: {} requests never ended",
        outstanding.len()
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    #[test]
    fn random_sequences_keep_the_invariants(seed in proptest::prelude::any::<u64>(), m in 0u8..3) {
        let mode = match m {
            0 => PrefetchMode::Tcp,
            1 => PrefetchMode::Fixed,
            _ => PrefetchMode::Kernel,
        };
        random_sequence(seed, mode);
    }
}
