//! Which byte ranges an automatic-streams HTTP download has out on which
//! connection (sans-I/O). A new stream gets a range queued earlier (what
//! a stopped stream left), else the second half of what the live range
//! with the most left still has to read: its end is moved down to the
//! middle and the new connection asks for the rest. A stream that is
//! stopped has its end moved down to where it is; what it had left is
//! queued when it has finished. The union of live and queued ranges is
//! always what is still missing, so the writer's gap check at the end
//! holds whatever the count did on the way.

use std::collections::BTreeMap;
use std::ops::Range;

/// Ranges are split on this boundary (whole pages, tidy writes).
const ALIGN: u64 = 64 << 10;

/// Where one live range's connection has got to: the next byte it reads,
/// and one past the last byte it will read.
pub trait Progress {
    /// (next, end) of range `id`.
    fn at(&self, id: u64) -> (u64, u64);
}

impl<F: Fn(u64) -> (u64, u64)> Progress for F {
    fn at(&self, id: u64) -> (u64, u64) {
        self(id)
    }
}

/// The ranges of one download.
#[derive(Debug, Default)]
pub struct RangePlan {
    /// Live ranges by id, with whether they are being stopped.
    live: BTreeMap<u64, bool>,
    queued: Vec<Range<u64>>,
    next_id: u64,
    /// A split leaves each half at least this long.
    min_piece: u64,
}

impl RangePlan {
    /// A plan whose splits leave at least `min_piece` bytes to each side.
    pub fn new(min_piece: u64) -> RangePlan {
        RangePlan {
            min_piece: min_piece.max(1),
            ..RangePlan::default()
        }
    }

    /// Registers a live range; returns its id.
    pub fn add(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, false);
        id
    }

    /// Live ranges not being stopped.
    pub fn running(&self) -> usize {
        self.live.values().filter(|stopping| !**stopping).count()
    }

    /// Nothing live and nothing queued: every byte is in.
    pub fn is_done(&self) -> bool {
        self.live.is_empty() && self.queued.is_empty()
    }

    /// A range left by a stopped stream, for a new connection.
    pub fn take_queued(&mut self) -> Option<Range<u64>> {
        // The lowest first: the file fills from the front.
        let i = (0..self.queued.len()).min_by_key(|&i| self.queued[i].start)?;
        Some(self.queued.swap_remove(i))
    }

    /// Where to split for one more stream: the live range with the most
    /// left, and the offset its second half starts at; `None` when no
    /// range has twice `min_piece` left.
    pub fn pick_split(&self, p: &impl Progress) -> Option<(u64, u64)> {
        let (id, next, end) = self
            .live
            .iter()
            .filter(|(_, stopping)| !**stopping)
            .map(|(&id, _)| {
                let (next, end) = p.at(id);
                (id, next, end)
            })
            .max_by_key(|&(_, next, end)| end.saturating_sub(next))?;
        let left = end.saturating_sub(next);
        if left < 2 * self.min_piece {
            return None;
        }
        let mid = (next + left / 2) / ALIGN * ALIGN;
        let mid = if mid <= next { next + left / 2 } else { mid };
        Some((id, mid))
    }

    /// The newest live range, to stop (never the last one running): its
    /// connection has the least window built up, and what it leaves is
    /// queued for the next connection.
    pub fn pick_stop(&self) -> Option<u64> {
        if self.running() <= 1 {
            return None;
        }
        self.live
            .iter()
            .filter(|(_, stopping)| !**stopping)
            .map(|(&id, _)| id)
            .max()
    }

    /// Range `id` is being stopped (its end was moved to where it was).
    pub fn stopping(&mut self, id: u64) {
        if let Some(s) = self.live.get_mut(&id) {
            *s = true;
        }
    }

    /// Range `id`'s connection is done, having read up to `reached`
    /// (exclusive) of a range that ended at `end`; the rest is queued.
    pub fn finished(&mut self, id: u64, reached: u64, end: u64) {
        self.live.remove(&id);
        if reached < end {
            self.queued.push(reached..end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    const MIB: u64 = 1 << 20;

    /// A fake of the connections: (next, end) per id.
    struct Conns(RefCell<HashMap<u64, (u64, u64)>>);

    impl Progress for Conns {
        fn at(&self, id: u64) -> (u64, u64) {
            self.0.borrow()[&id]
        }
    }

    impl Conns {
        fn set(&self, id: u64, next: u64, end: u64) {
            self.0.borrow_mut().insert(id, (next, end));
        }
    }

    #[test]
    fn a_new_stream_takes_the_second_half_of_the_longest_range() {
        let mut plan = RangePlan::new(MIB);
        let c = Conns(RefCell::new(HashMap::new()));
        let a = plan.add();
        c.set(a, 10 * MIB, 100 * MIB);
        let (victim, mid) = plan.pick_split(&c).unwrap();
        assert_eq!((victim, mid), (a, 55 * MIB));
        c.set(a, 10 * MIB, mid);
        let b = plan.add();
        c.set(b, mid, 100 * MIB);
        // The next split takes the longer of the two.
        c.set(a, 50 * MIB, mid);
        let (victim, mid2) = plan.pick_split(&c).unwrap();
        assert_eq!(victim, b);
        assert_eq!(mid2 % ALIGN, 0);
        assert!(mid2 > 55 * MIB && mid2 < 100 * MIB);
        assert_eq!(plan.running(), 2);
    }

    #[test]
    fn nothing_is_split_below_twice_the_minimum() {
        let mut plan = RangePlan::new(MIB);
        let c = Conns(RefCell::new(HashMap::new()));
        let a = plan.add();
        c.set(a, 0, 2 * MIB - 1);
        assert_eq!(plan.pick_split(&c), None);
        c.set(a, 0, 2 * MIB);
        assert_eq!(plan.pick_split(&c), Some((a, MIB)));
    }

    #[test]
    fn a_stopped_stream_leaves_its_rest_queued_for_the_next() {
        let mut plan = RangePlan::new(MIB);
        let c = Conns(RefCell::new(HashMap::new()));
        let a = plan.add();
        let b = plan.add();
        c.set(a, 0, 40 * MIB);
        c.set(b, 40 * MIB, 100 * MIB);
        let stop = plan.pick_stop().unwrap();
        assert_eq!(stop, b);
        plan.stopping(b);
        assert_eq!(plan.running(), 1);
        // The last one running is never stopped.
        assert_eq!(plan.pick_stop(), None);
        // It read a little past where it was cut.
        plan.finished(b, 41 * MIB, 100 * MIB);
        assert_eq!(plan.take_queued(), Some(41 * MIB..100 * MIB));
        assert_eq!(plan.take_queued(), None);
        plan.finished(a, 40 * MIB, 40 * MIB);
        assert!(plan.is_done());
    }

    #[test]
    fn live_and_queued_ranges_always_cover_what_is_missing() {
        // A random walk of splits, stops, reads and finishes over a
        // 256 MiB file, 64 KiB at a time: nothing is read twice and nothing is
        // left out. `asked` is what each range owes: its end after
        // splits, before a stop moved it.
        // Reads come in units of the split alignment.
        const U: u64 = ALIGN;
        let size = 256 * MIB;
        let mut plan = RangePlan::new(MIB);
        let c = Conns(RefCell::new(HashMap::new()));
        let mut asked: HashMap<u64, u64> = HashMap::new();
        let first = plan.add();
        c.set(first, 0, size);
        asked.insert(first, size);
        let mut have = vec![false; (size / U) as usize];
        let mut seed = 7u64;
        let mut rnd = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let open = |plan: &mut RangePlan, asked: &mut HashMap<u64, u64>, r: Range<u64>| {
            let n = plan.add();
            c.set(n, r.start, r.end);
            asked.insert(n, r.end);
        };
        let mut steps = 0;
        while !plan.is_done() {
            steps += 1;
            assert!(steps < 100_000);
            if plan.live.is_empty() {
                let r = plan.take_queued().unwrap();
                open(&mut plan, &mut asked, r);
            }
            let ids: Vec<u64> = plan.live.keys().copied().collect();
            match rnd(6) {
                0 if steps < 2000 => {
                    if let Some(r) = plan.take_queued() {
                        open(&mut plan, &mut asked, r);
                    } else if let Some((v, mid)) = plan.pick_split(&c) {
                        let (next, end) = c.at(v);
                        assert!(next < mid && mid < end);
                        c.set(v, next, mid);
                        asked.insert(v, mid);
                        open(&mut plan, &mut asked, mid..end);
                    }
                }
                1 if steps < 2000 => {
                    if let Some(s) = plan.pick_stop() {
                        let (next, end) = c.at(s);
                        plan.stopping(s);
                        // Seen by the connection a MiB late.
                        c.set(s, next, (next + U).min(end));
                    }
                }
                _ => {
                    let id = ids[rnd(ids.len() as u64) as usize];
                    let (next, end) = c.at(id);
                    if next < end {
                        assert!(!have[(next / U) as usize], "read twice at {next}");
                        have[(next / U) as usize] = true;
                        c.set(id, next + U, end);
                    } else {
                        // What the connection asked for past where it
                        // stopped is owed again.
                        let tail_end = if plan.live[&id] { asked[&id] } else { end };
                        plan.finished(id, next, tail_end);
                    }
                }
            }
        }
        assert!(have.iter().all(|&h| h), "a piece was never read");
    }
}
