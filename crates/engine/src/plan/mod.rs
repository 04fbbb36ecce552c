//! TCP-aware prefetch planning (the TDAP half of the tpf paper), sans-I/O.
//!
//! Brief overview: a [`Sampler`] per connection turns raw `TCP_INFO` readings
//! ([`FlowSample`]) into a [`FlowState`]: a smoothed delivery rate `B_n`, the
//! bytes still queued in the socket, and edge events (cwnd cut, loss, close,
//! reset). The [`Planner`] owns one sampler per connection and decides which
//! file bytes to read next: it keeps each connection's time to starvation
//! `T_n = (pending + cached + in flight) / B_n` near a target buffering time
//! `T_D` derived from the disk's measured service time, shares the read-ahead
//! memory budget in proportion to rates, and caps one read at `H_max`. It
//! emits [`ReadRequest`]s; the disk scheduler (`crate::sched`) queues,
//! delays and cancels them. Nothing here reads a clock or touches a file:
//! time is passed in as a [`Duration`] since an arbitrary epoch.
//!
//! This module depends only on `std`; the engine drives it from
//! `prefetch.rs` behind `--prefetch tcp|fixed|kernel`.

mod counters;
mod miss;
mod planner;
mod sampler;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use counters::TpfCounters;
pub use miss::{read_cost_is_disk, FileJudge, MissVerdict};
pub use planner::{PlanConfig, Planner, DUE_STEP};
pub use sampler::{CaState, FlowEvents, FlowSample, FlowState, Sampler};

/// One data connection (one TCP stream of one transfer). Ids are never
/// reused while the planner or scheduler may still hold state for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A read the planner wants done: `len` bytes of the connection's file from
/// `offset`, needed by `deadline` (the moment the connection would starve).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Connection the bytes are for.
    pub conn: ConnId,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes to read (never more than `H_max`).
    pub len: u64,
    /// When the connection runs dry if this read is not done; the scheduler
    /// serves earliest deadline first.
    pub deadline: Duration,
    /// When the planner issued it (to measure end-to-end read latency).
    pub issued_at: Duration,
    /// Which opening of `conn` it is for: a completion that arrives after
    /// the id was closed and opened again must not land in the new budget.
    pub epoch: u64,
}

/// Who decides read-ahead (`--prefetch`). The default is the engine's
/// (`EngineConfig::default().prefetch`, where the measurement behind it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefetchMode {
    /// Rate- and send-buffer-aware read-ahead under a memory budget (TDAP).
    Tcp,
    /// A fixed read-ahead window per connection, blind to rate and budget
    /// (what a conventional file system does; the baseline).
    Fixed,
    /// The planner issues nothing: `sendfile` plus the kernel's read-ahead.
    Kernel,
    /// Chosen per send by what is in memory: the kernel's path while the
    /// range is in the page cache, the `tcp` planner from the first range
    /// that is not (a miss) to the end of that send.
    #[default]
    Auto,
}

impl PrefetchMode {
    /// The policy the planner runs for this mode (`auto` plans as `tcp`).
    pub fn planner_policy(self) -> PrefetchMode {
        match self {
            PrefetchMode::Auto => PrefetchMode::Tcp,
            m => m,
        }
    }
}

/// A `--prefetch` value that is not "tcp", "fixed" or "kernel".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePrefetchModeError(pub String);

impl fmt::Display for ParsePrefetchModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown prefetch mode {:?} (expected auto, tcp, fixed or kernel)",
            self.0
        )
    }
}

impl std::error::Error for ParsePrefetchModeError {}

impl FromStr for PrefetchMode {
    type Err = ParsePrefetchModeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(PrefetchMode::Tcp),
            "fixed" => Ok(PrefetchMode::Fixed),
            "kernel" => Ok(PrefetchMode::Kernel),
            "auto" => Ok(PrefetchMode::Auto),
            other => Err(ParsePrefetchModeError(other.to_string())),
        }
    }
}

impl fmt::Display for PrefetchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrefetchMode::Tcp => "tcp",
            PrefetchMode::Fixed => "fixed",
            PrefetchMode::Kernel => "kernel",
            PrefetchMode::Auto => "auto",
        })
    }
}
