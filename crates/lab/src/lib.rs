//! The Sluice lab: a user-space link emulator (`linkem`), namespace topologies,
//! cgroup v1 server shaping, a workload generator and the experiment runner
//! behind `sluice-lab`.
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod cmd;
pub mod experiment;
pub mod linkem;
pub mod load;
pub mod load_mode_e;
pub mod pagetrace;
pub mod prereq;
pub mod probe;
pub mod report;
pub mod run_many;
pub mod run_streams;
pub mod run_transfers;
pub mod run_validation;
pub mod runner;
pub mod servers;
pub mod sockets;
pub mod streams;
pub mod topology;
pub mod units;
