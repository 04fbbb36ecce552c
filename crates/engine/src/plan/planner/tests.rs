//! The planner's own basics: a first read within the budget, what counts
//! as cached, nothing planned in `kernel` mode (the rate, budget and
//! pressure rules are tested through the crate's tests/plan.rs).

use super::*;

fn cfg(mode: PrefetchMode) -> PlanConfig {
    PlanConfig {
        mode,
        budget: 8 << 20,
        ..PlanConfig::default()
    }
}

#[test]
fn a_new_connection_gets_a_first_read_within_budget() {
    let mut p = Planner::new(cfg(PrefetchMode::Tcp));
    p.handle_open(Duration::ZERO, ConnId(1), 0, 100 << 20);
    let r = p.poll_read(Duration::ZERO).expect("first read");
    assert_eq!(r.offset, 0);
    assert!(r.len > 0 && r.len <= p.config().h_max);
    assert_eq!(p.used(), r.len);
    assert_eq!(p.used(), p.used_recomputed());
}

#[test]
fn cached_counts_read_and_unsent_bytes_only() {
    let mut p = Planner::new(cfg(PrefetchMode::Tcp));
    let t = Duration::ZERO;
    p.handle_open(t, ConnId(1), 0, 100 << 20);
    let r = p.poll_read(t).expect("first read");
    assert_eq!(p.cached(), 0, "queued, not read yet");
    p.handle_read_done(t, &r, r.len, Duration::from_millis(5));
    assert_eq!(p.cached(), r.len);
    p.handle_sent(ConnId(1), 4096);
    assert_eq!(p.cached(), r.len - 4096);
    assert_eq!(p.socket_held(), 4096, "sent bytes move to the socket");
    p.handle_close(ConnId(1));
    assert_eq!((p.cached(), p.socket_held()), (0, 0));
}

#[test]
fn kernel_mode_plans_nothing() {
    let mut p = Planner::new(cfg(PrefetchMode::Kernel));
    p.handle_open(Duration::ZERO, ConnId(1), 0, 1 << 20);
    assert_eq!(p.poll_read(Duration::ZERO), None);
}
