//! The planner's settings (`PlanConfig`) and the engine's defaults for them.

use std::time::Duration;

use crate::plan::PrefetchMode;

/// Planner tuning. `Default` is the engine's default.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanConfig {
    /// Who plans read-ahead.
    pub mode: PrefetchMode,
    /// Read-ahead memory for all connections together, bytes.
    pub budget: u64,
    /// Largest single read (`H_max`): larger requests get split by the
    /// device anyway, and one huge read delays everyone behind it.
    pub h_max: u64,
    /// Smallest read worth a disk request (unless it finishes the range or
    /// the connection is about to starve).
    pub min_read: u64,
    /// Read size and window of `Fixed` mode.
    pub fixed_window: u64,
    /// Reads the scheduler keeps submitted at once (`K`): service times
    /// measured from submission overlap by this factor.
    pub queue_depth: usize,
    /// `T_D` until the first read has been timed.
    pub initial_target: Duration,
    /// Bounds on the disk-derived target `T_D`.
    pub min_target: Duration,
    /// Bounds on the disk-derived target `T_D`.
    pub max_target: Duration,
    /// Rate assumed for a connection before its first sample, bytes/s.
    pub initial_rate: u64,
    /// Reads are whole multiples of this (page size), except a range's tail.
    pub page: u64,
    /// A connection gets a read when `T_n <= trigger * T` (the paper: 1/2).
    pub trigger: f64,
    /// Device-friendly read size: a connection's window is at least this
    /// many bytes, so a slow connection's reads are few and large (a read
    /// smaller than the disk's bandwidth / IOPS costs a whole I/O slot for
    /// little data). Its budget share is raised to this too. 0: off.
    pub device_read: u64,
    /// Count the bytes waiting in each connection's socket (unsent and
    /// unacknowledged, from its last sample) against the budget: with
    /// `sendfile` they are page-cache pages pinned by the socket.
    pub count_socket: bool,
    /// Between samples, take each socket to drain at the connection's
    /// smoothed rate (`drain.rs`): its time to starvation falls with the
    /// clock and [`Planner::next_due`] says when the next read falls due.
    /// Off (the default): the socket's bytes change only at samples. Off
    /// by measurement: on, reads came earlier than the samples would have
    /// brought them and the memory cgroup filled (lab tpf-mixed-rates
    /// s15-naps-A: 48 MB of read-ahead evicted unsent, the 1 Mbit/s class
    /// at 79 %; off, s15-naps-D: none, 100 %).
    pub drain_at_rate: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            mode: PrefetchMode::Tcp,
            budget: 256 << 20,
            h_max: 1 << 20,
            min_read: 16 << 10,
            fixed_window: 128 << 10,
            queue_depth: 4,
            initial_target: Duration::from_secs(2),
            min_target: Duration::from_millis(500),
            max_target: Duration::from_secs(30),
            initial_rate: 125_000,
            page: 4096,
            trigger: 0.5,
            device_read: 0,
            count_socket: false,
            drain_at_rate: false,
        }
    }
}
