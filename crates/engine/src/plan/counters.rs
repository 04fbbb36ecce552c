//! What prefetch planning and disk scheduling did, as plain numbers, per
//! connection and in total (the caller exports them; nothing here is atomic).

use std::ops::AddAssign;

/// Counters produced by the planner and the disk scheduler. Each part fills
/// in its own fields; add the two together for the full picture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpfCounters {
    /// Reads the planner issued (planner).
    pub reads_issued: u64,
    /// Bytes those reads asked for (planner).
    pub bytes_planned: u64,
    /// Read-ahead bytes evicted before they were sent: each one is a budget
    /// violation and a second disk read (planner, told by the cache).
    pub bytes_evicted_unused: u64,
    /// Reads dropped from the queue or cancelled in the kernel (scheduler).
    pub reads_cancelled: u64,
    /// Bytes of those reads (scheduler).
    pub bytes_cancelled: u64,
    /// Reads moved to the delay queue after a cwnd cut (scheduler).
    pub reads_delayed: u64,
    /// Reads that reached the disk after their connection had closed or
    /// been reset (already submitted and not cancelled in time): the
    /// tpf-abort target is fewer than one per aborted connection.
    pub reads_after_close: u64,
    /// Bytes those reads brought in, thrown away.
    pub bytes_after_close: u64,
}

impl AddAssign for TpfCounters {
    fn add_assign(&mut self, o: TpfCounters) {
        self.reads_issued += o.reads_issued;
        self.bytes_planned += o.bytes_planned;
        self.bytes_evicted_unused += o.bytes_evicted_unused;
        self.reads_cancelled += o.reads_cancelled;
        self.bytes_cancelled += o.bytes_cancelled;
        self.reads_delayed += o.reads_delayed;
        self.reads_after_close += o.reads_after_close;
        self.bytes_after_close += o.bytes_after_close;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_counters_adds_every_field() {
        let one = TpfCounters {
            reads_issued: 1,
            bytes_planned: 2,
            bytes_evicted_unused: 3,
            reads_cancelled: 4,
            bytes_cancelled: 5,
            reads_delayed: 6,
            reads_after_close: 7,
            bytes_after_close: 8,
        };
        let mut sum = one;
        sum += one;
        assert_eq!(sum.reads_issued, 2);
        assert_eq!(sum.bytes_planned, 4);
        assert_eq!(sum.bytes_evicted_unused, 6);
        assert_eq!(sum.reads_cancelled, 8);
        assert_eq!(sum.bytes_cancelled, 10);
        assert_eq!(sum.reads_delayed, 12);
        assert_eq!(sum.reads_after_close, 14);
        assert_eq!(sum.bytes_after_close, 16);
    }
}
