//! The Circus selector on a virtual clock: readers of one file as
//! simulated streams of given rates, disk reads of a fixed latency
//! (the model is in circus_sim.rs).

use super::sim::*;
use super::*;

#[test]
fn n_readers_starting_together_read_the_file_about_once() {
    let size = 200_000; // 200 blocks
    let mut s = Sim::new(cfg(16), size);
    for id in 0..8 {
        s.add(id, &[(0, size)], 2, 100);
    }
    s.run_until_done(100_000);
    s.check_exactly_once();
    let c = s.c.counters();
    assert!(c.bytes_read <= size + size / 10, "{c:?}");
    assert_eq!(c.bytes_queued, 8 * size);
}

#[test]
fn readers_of_different_rates_share_while_the_region_holds_them() {
    // 1, 2, 3 and 4 streams of one rate: the fast lead, the slow take the
    // oldest blocks and fall out of a small region; still far below one
    // read per reader.
    let size = 200_000;
    let mut s = Sim::new(cfg(16), size);
    for id in 0..8 {
        s.add(id, &[(0, size)], 1 + (id as usize % 4), 100);
    }
    s.run_until_done(1_000_000);
    s.check_exactly_once();
    let c = s.c.counters();
    assert!(c.bytes_read <= 2 * size, "{c:?}");
}

#[test]
fn late_joiners_share_the_region_and_wrap_around() {
    let size = 100_000;
    let mut s = Sim::new(cfg(8), size);
    s.add(0, &[(0, size)], 2, 100);
    for _ in 0..30 {
        s.tick();
    }
    s.add(1, &[(0, size)], 2, 100);
    for _ in 0..30 {
        s.tick();
    }
    s.add(2, &[(0, size)], 1, 200);
    s.run_until_done(100_000);
    s.check_exactly_once();
    let c = s.c.counters();
    // Without sharing: 3x. Joiners ride the head to the end, then read
    // the start they missed (together where both missed it).
    assert!(c.bytes_read <= size * 5 / 4, "{c:?}");
}

#[test]
fn mixed_rates_partial_ranges_and_odd_sizes_are_each_delivered_once() {
    let size = 123_457;
    let mut s = Sim::new(cfg(6), size);
    s.add(0, &[(0, size)], 4, 300);
    s.add(1, &[(1_234, 50_000), (60_001, 1)], 1, 20);
    s.add(2, &[(99_999, 100_000)], 2, 50); // clipped to the file
    s.add(3, &[(5, 0)], 1, 50); // nothing
    for _ in 0..50 {
        s.tick();
    }
    s.add(4, &[(777, 122_000)], 3, 7);
    s.run_until_done(1_000_000);
    for r in s.readers.values_mut() {
        for d in r.demand.iter_mut() {
            d.1 = (d.0 + d.1).min(size) - d.0.min(size);
        }
    }
    s.check_exactly_once();
    // Everything dropped in the end: nobody needs anything.
    s.batch();
    assert!(s.in_memory.is_empty(), "{:?}", s.in_memory);
}

#[test]
fn memory_never_exceeds_the_region() {
    let size = 300_000;
    let region = 5;
    let mut s = Sim::new(cfg(region), size);
    for id in 0..6 {
        s.add(id, &[(id * 40_000, size - id * 40_000)], 2, 10 + 40 * id);
    }
    for _ in 0..200_000 {
        assert!(s.in_memory.len() + s.reads.len() <= region);
        if s.readers.keys().all(|id| s.finished(id.0)) {
            break;
        }
        s.tick();
    }
    s.check_exactly_once();
}

#[test]
fn a_reader_that_leaves_frees_its_blocks_at_once() {
    let size = 50_000;
    let mut s = Sim::new(cfg(32), size);
    s.add(0, &[(0, 20_000)], 1, 1);
    s.add(1, &[(30_000, 20_000)], 1, 1);
    for _ in 0..100 {
        s.tick();
    }
    assert!(s.in_memory.iter().any(|b| *b >= 30), "{:?}", s.in_memory);
    // Reader 1 goes with pieces still queued and on the wire.
    assert!(
        !s.readers[&ReaderId(1)].queue.is_empty() || s.readers[&ReaderId(1)].streams[0].is_some()
    );
    s.remove(1);
    assert!(s.in_memory.iter().all(|b| *b < 20), "{:?}", s.in_memory);
    assert_eq!(s.c.readers(), 1);
    // No read for it is issued any more.
    let before = s.read_log.len();
    s.run_until_done(1_000_000);
    assert!(s.read_log[before..].iter().all(|b| *b < 20));
    s.check_exactly_once();
}

#[test]
fn an_independent_reads_its_own_blocks_outside_the_region() {
    // Reader 0 gets 80 % of the file alone (head near block 80), then a
    // reader of blocks 85..90 arrives and moves the head there. Independent,
    // 0 reads its own next blocks (82, 83, 84) beside the newcomer's; not
    // independent, it follows the head to the end and wraps round to them.
    let run = |share: f64| {
        let size = 100_000;
        let mut s = Sim::new(
            CircusConfig {
                independent_share: share,
                ..cfg(64)
            },
            size,
        );
        s.add(0, &[(0, size)], 1, 1000);
        while s.c.counters().bytes_queued < 80_000 {
            s.tick();
        }
        let from = s.read_log.len();
        s.add(1, &[(85_000, 5_000)], 1, 1000);
        s.run_until_done(1_000_000);
        s.check_exactly_once();
        (s.read_log[from..].to_vec(), s.c.counters())
    };
    let (log, c) = run(0.75);
    assert!(c.independent_reads > 0, "{c:?}");
    let at = |b: u64| log.iter().position(|x| *x == b).unwrap();
    assert!(at(84) < at(95), "independent: its own order too, {log:?}");
    let (log, c) = run(1.0);
    assert_eq!(c.independent_reads, 0, "{c:?}");
    let at = |b: u64| log.iter().position(|x| *x == b).unwrap();
    assert!(at(95) < at(84), "follower: the head's order, {log:?}");
    // Either way each block is read once.
    let mut sorted = log.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), log.len());
}

#[test]
fn a_slow_reader_behind_a_small_region_gets_evicted_blocks_again() {
    let size = 100_000;
    let mut s = Sim::new(cfg(4), size);
    s.add(0, &[(0, size)], 1, 1000);
    s.add(1, &[(0, size)], 1, 5);
    s.run_until_done(10_000_000);
    s.check_exactly_once();
    let c = s.c.counters();
    assert!(c.bytes_read >= size && c.bytes_read <= 2 * size, "{c:?}");
}

#[test]
fn sent_twice_or_for_an_unknown_reader_changes_nothing() {
    let mut c = Circus::new(cfg(4), 10_000);
    c.register(ReaderId(1), &[(0, 10_000)], 1, 0);
    let reads: Vec<Action> = c.poll();
    assert!(matches!(reads[0], Action::Read { block: 0, .. }));
    c.read_done(0);
    let q = c.poll();
    let Action::Queue { piece, .. } = q[0] else {
        panic!("{q:?}")
    };
    c.sent(ReaderId(1), piece, MS);
    c.sent(ReaderId(1), piece, 2 * MS);
    c.sent(ReaderId(9), piece, 2 * MS);
    assert!(!c.handed_all(ReaderId(1)));
    assert!(c.handed_all(ReaderId(9)));
}

#[test]
fn two_in_order_readers_ten_blocks_apart_read_the_file_about_once() {
    let size = 200_000; // 200 blocks
    let mut s = Sim::new(cfg(16), size);
    s.add_in_order(0, &[(0, size)], 100);
    while s.readers[&ReaderId(0)].got.len() < 10 {
        s.tick();
    }
    s.add_in_order(1, &[(0, size)], 100);
    s.run_bounded(1_000_000);
    s.check_exactly_once();
    s.check_in_order(0);
    s.check_in_order(1);
    let c = s.c.counters();
    // Alone each would read the file: 2x without sharing.
    assert!(c.bytes_read <= size + size / 10, "{c:?}");
    assert_eq!(c.bytes_queued, 2 * size);
    assert_eq!(c.evicted_needed, 0, "{c:?}");
}

#[test]
fn an_in_order_reader_too_far_behind_reads_for_itself() {
    // 60 blocks apart with room for 16: the trailer finds the 16 blocks
    // nearest to it kept (the furthest go first) and reads the rest.
    let size = 200_000;
    let mut s = Sim::new(cfg(16), size);
    s.add_in_order(0, &[(0, size)], 100);
    while s.readers[&ReaderId(0)].got.len() < 60 {
        s.tick();
    }
    s.add_in_order(1, &[(0, size)], 100);
    s.run_bounded(1_000_000);
    s.check_exactly_once();
    s.check_in_order(1);
    let c = s.c.counters();
    assert!(c.bytes_read >= size * 3 / 2, "{c:?}");
    assert!(c.bytes_read <= 2 * size, "{c:?}");
    assert!(c.in_order_reads > 0, "{c:?}");
}

#[test]
fn a_block_stays_for_a_fast_trailing_reader_and_goes_for_a_slow_one() {
    // A leader and a fast trailer 10 blocks (100 ms) behind it, and a slow
    // reader in their way (one block per 500 ms). When memory is full,
    // the slow reader's next blocks are nearer in blocks but further in
    // time than the trailer's: Belady in time lets the slow reader's go
    // and the trailer reads nothing itself (next use in blocks: it read
    // 31 of the leader's 190 blocks again).
    let size = 200_000;
    let mut s = Sim::new(cfg(20), size);
    s.add_in_order(0, &[(0, size)], 100);
    s.add_in_order(2, &[(40_000, size - 40_000)], 2);
    while s.readers[&ReaderId(0)].got.len() < 10 {
        s.tick();
    }
    s.add_in_order(1, &[(0, size)], 100);
    for _ in 0..100_000 {
        if s.finished(1) {
            break;
        }
        s.tick();
    }
    assert!(s.finished(1));
    s.check_in_order(1);
    // Blocks the leader had before the trailer came were let go (nobody
    // needed them): the trailer reads those 10 again, and no other.
    let mut times: HashMap<u64, usize> = HashMap::new();
    for b in s.read_log.iter().filter(|b| **b >= 10) {
        *times.entry(*b).or_default() += 1;
    }
    let again: usize = times.values().map(|n| n - 1).sum();
    assert!(
        again <= 1,
        "{again} blocks read again: {:?}",
        s.c.counters()
    );
    // The slow reader is still served, in order.
    s.run_bounded(1_000_000);
    s.check_exactly_once();
    s.check_in_order(2);
}

#[test]
fn a_slow_in_order_reader_keeps_what_it_will_reach_and_memory_stays_bounded() {
    // A fast reader passes a slow one; the slow one's next blocks stay
    // while it will reach them within the region, never more than that.
    let size = 150_000;
    let mut s = Sim::new(cfg(8), size);
    s.add_in_order(0, &[(0, size)], 400);
    s.add_in_order(1, &[(0, size)], 20);
    s.add_in_order(2, &[(10_500, 70_000)], 50);
    s.run_bounded(10_000_000);
    s.check_exactly_once();
    for id in 0..3 {
        s.check_in_order(id);
    }
    let c = s.c.counters();
    assert!(c.bytes_read < 3 * size, "{c:?}");
    s.batch();
    assert!(s.in_memory.is_empty(), "{:?}", s.in_memory);
}

#[test]
fn in_order_and_any_order_readers_of_one_file_share_its_blocks() {
    let size = 200_000;
    let mut s = Sim::new(cfg(16), size);
    s.add(0, &[(0, size)], 2, 100);
    s.add(1, &[(0, size)], 4, 100);
    for _ in 0..20 {
        s.tick();
    }
    s.add_in_order(2, &[(0, size)], 150);
    s.add_in_order(3, &[(0, size)], 150);
    s.run_bounded(1_000_000);
    s.check_exactly_once();
    s.check_in_order(2);
    s.check_in_order(3);
    let c = s.c.counters();
    assert!(c.bytes_read <= 2 * size, "{c:?}");
}

/// 16 files, each read by three readers of different rates, drawing on one
/// budget of 32 blocks (each file's own region is 16): the blocks in memory
/// or being read, all files together, never pass the budget, and every
/// reader still gets its demand exactly once.
#[test]
fn sixteen_files_of_readers_never_exceed_the_engine_budget() {
    let budget = Arc::new(Mutex::new(Budget::new(32)));
    let size = 40_000; // 40 blocks
    let mut files: Vec<Sim> = (0..16)
        .map(|_| Sim::with(Circus::in_budget(cfg(16), size, Arc::clone(&budget))))
        .collect();
    for (f, s) in files.iter_mut().enumerate() {
        let f = f as u64;
        s.add(f * 10, &[(0, size)], 2, 100);
        s.add(f * 10 + 1, &[(0, size)], 1, 20);
        s.add(f * 10 + 2, &[(5_000 * (f % 4), 20_000)], 4, 5);
    }
    let held = |files: &[Sim]| -> usize {
        files
            .iter()
            .map(|s| s.in_memory.len() + s.reads.len())
            .sum()
    };
    for _ in 0..200_000 {
        assert!(held(&files) <= 32, "{} blocks held", held(&files));
        assert!(budget.lock().unwrap().total() <= 32);
        if files
            .iter()
            .all(|s| s.readers.keys().all(|id| s.finished(id.0)))
        {
            break;
        }
        for s in files.iter_mut() {
            s.tick();
        }
    }
    for s in &files {
        assert!(
            s.readers.keys().all(|id| s.finished(id.0)),
            "{:?}",
            s.c.counters()
        );
        s.check_exactly_once();
    }
    let b = budget.lock().unwrap();
    assert!(b.peak() <= 32 && b.peak() >= 16, "peak {}", b.peak());
    drop(b);
    drop(files);
    assert_eq!(
        budget.lock().unwrap().total(),
        0,
        "gone files give their blocks back"
    );
}

/// A file alone may use the whole budget; when a second file comes it
/// gets its share: the first gives blocks back at its next batches.
#[test]
fn a_second_file_gets_its_share_of_a_budget_the_first_filled() {
    let budget = Arc::new(Mutex::new(Budget::new(16)));
    let size = 100_000;
    let mut a = Sim::with(Circus::in_budget(cfg(16), size, Arc::clone(&budget)));
    // Slow readers far apart: each keeps blocks the others will want.
    for id in 0..8 {
        a.add(id, &[(id * 12_500, 12_500)], 1, 1);
    }
    for _ in 0..200 {
        a.tick();
    }
    let alone = budget.lock().unwrap().held(a.c.slot());
    assert!(alone > 8, "a alone uses more than its later share: {alone}");
    let mut b = Sim::with(Circus::in_budget(cfg(16), size, Arc::clone(&budget)));
    b.add(9, &[(0, size)], 2, 100);
    let mut b_most = 0;
    for _ in 0..3_000 {
        a.tick();
        b.tick();
        assert!(a.in_memory.len() + a.reads.len() + b.in_memory.len() + b.reads.len() <= 16);
        b_most = b_most.max(budget.lock().unwrap().held(b.c.slot()));
    }
    assert!(
        b.finished(9),
        "the newcomer was served: {:?}",
        b.c.counters()
    );
    b.check_exactly_once();
    // Its queue (4 pieces) and the reads behind it: a gave that much back.
    assert!(b_most >= 3, "the newcomer held at most {b_most} blocks");
}

/// Queues sized in time: half a second of a 1 kB/s reader is under one
/// block, so it holds one, cut into a piece per stream; a 100 kB/s reader
/// holds the most (`queue_len` blocks per stream, whole). Rates as
/// measured from its sends.
#[test]
fn a_slow_readers_queue_is_short_and_a_fast_readers_long() {
    let c = CircusConfig {
        queue_time: Duration::from_millis(500),
        queue_len: 4,
        ..cfg(64)
    };
    let size = 200_000;
    let mut s = Sim::new(c, size);
    // Registered with no rate known: both start at one block, a piece per
    // stream.
    s.c.register(ReaderId(1), &[(0, size)], 2, 0);
    s.c.register(ReaderId(2), &[(0, size)], 2, 0);
    for (id, per_ms) in [(1, 1), (2, 100)] {
        s.readers.insert(
            ReaderId(id),
            SimReader {
                streams: vec![None; 2],
                per_ms,
                demand: vec![(0, size)],
                ..SimReader::default()
            },
        );
    }
    assert_eq!(
        (s.c.queue_cap(ReaderId(1)), s.c.queue_cap(ReaderId(2))),
        (2, 2)
    );
    for _ in 0..3_000 {
        s.tick();
        let slow = &s.readers[&ReaderId(1)];
        let on_wire = slow.streams.iter().flatten().count();
        assert!(slow.queue.len() + on_wire <= 8);
    }
    assert_eq!(s.c.queue_cap(ReaderId(1)), 2, "slow: one block in 2 pieces");
    assert_eq!(s.c.queue_cap(ReaderId(2)), 8, "fast: queue_len per stream");
    s.run_until_done(400_000);
    s.check_exactly_once();
}

/// The gap of lab circus-files at 16 files (MODE E at 58 % of the offered
/// load, its 45 Mbit/s class at 49 %) on the virtual clock: the same mix
/// (30 slow, 6 middle, 3 fast readers of 4 streams, round robin over 16
/// files, 25 ms reads) on a budget of 64 blocks (the default 64 MiB: 4
/// blocks a file). With a floor of one block per stream the slow readers'
/// queues held every block the budget had and the middle and fast readers
/// got the slow ones' bytes (slow 76000, middle 80000, fast 80000); with
/// a floor of one block per reader, cut into a piece per stream, a slow
/// reader keeps its rate on a quarter of the blocks and the fast run at
/// theirs, as they did on twice the budget.
#[test]
fn sixteen_files_on_a_budget_under_their_readers_streams_keep_every_reader_at_its_rate() {
    for budget_blocks in [64usize, 128] {
        let budget = Arc::new(Mutex::new(Budget::new(budget_blocks)));
        let c = CircusConfig {
            block_size: 1000,
            region_blocks: 64,
            queue_len: 4,
            queue_time: Duration::from_millis(500),
            independent_share: 0.75,
            read_depth: 2,
        };
        let size = 512_000;
        let mut files: Vec<Sim> = (0..16)
            .map(|_| Sim::with(Circus::in_budget(c, size, Arc::clone(&budget))))
            .collect();
        for k in 0..39u64 {
            let per_ms = if k < 30 {
                1
            } else if k < 36 {
                3
            } else {
                12
            };
            files[(k % 16) as usize].add(k, &[(0, size)], 4, per_ms);
        }
        for s in files.iter_mut() {
            s.read_latency = 25 * MS;
        }
        let ms = 20_000u64;
        for _ in 0..ms {
            for s in files.iter_mut() {
                s.tick();
            }
            assert!(budget.lock().unwrap().total() <= budget_blocks);
        }
        let mut by: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for s in &files {
            for r in s.readers.values() {
                let e = by.entry(r.per_ms).or_default();
                e.0 += r.got.iter().map(|p| p.len).sum::<u64>();
                e.1 += 1;
            }
        }
        let mean = |k: u64| by[&k].0 / by[&k].1;
        eprintln!(
            "budget {budget_blocks}: mean bytes slow {} middle {} fast {}",
            mean(1),
            mean(3),
            mean(12)
        );
        // Each class at 90 % of its 4 streams' rate at least, or done.
        for per_ms in [1, 3, 12] {
            let can = (4 * per_ms * ms).min(size);
            assert!(
                mean(per_ms) * 10 >= can * 9,
                "budget {budget_blocks}: {per_ms}/ms readers got {} of {can}",
                mean(per_ms)
            );
        }
    }
}
