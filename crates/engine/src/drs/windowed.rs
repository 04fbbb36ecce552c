//! A windowed max over time, as BBR keeps its bandwidth estimate.

use std::collections::VecDeque;
use std::time::Duration;

/// A windowed max (or min, by negation) over `(time, value)` samples:
/// a monotone deque, O(1) amortised.
#[derive(Debug, Clone, Default)]
pub(super) struct WindowedMax {
    q: VecDeque<(Duration, u64)>,
}

impl WindowedMax {
    pub(super) fn push(&mut self, now: Duration, v: u64, window: Duration) -> u64 {
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

    pub(super) fn get(&self) -> u64 {
        self.q.front().map_or(0, |&(_, v)| v)
    }
}
