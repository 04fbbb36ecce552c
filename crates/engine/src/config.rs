//! Engine configuration: which data path, chunk and buffer sizes, socket tuning.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::plan::PrefetchMode;

/// How file bytes get from the page cache into a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// `sendfile(2)` straight from the page cache; no user-space copy.
    Sendfile,
    /// `pread` into pooled buffers off the event loop, then `send`/`writev`.
    Copy,
    /// `splice(2)` from the page cache through a 1 MiB pipe of the
    /// transfer's own into the socket: `sendfile` with bigger steps
    /// (see `splice_pump.rs`).
    Splice,
    /// A baseline, not a contender: each transfer on an OS thread of its
    /// own that sleeps until its socket is writable and `sendfile`s, with
    /// no event loop and no `TCP_NOTSENT_LOWAT` (vsftpd-style).
    Blocking,
    /// `Copy` for a peer on this host (loopback, or our own address) and
    /// for small sends, `Sendfile` for everything else (`send.rs`).
    Auto,
}

impl FromStr for DataPath {
    type Err = ParseDataPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sendfile" => Ok(DataPath::Sendfile),
            "copy" => Ok(DataPath::Copy),
            "splice" => Ok(DataPath::Splice),
            "blocking" => Ok(DataPath::Blocking),
            "auto" => Ok(DataPath::Auto),
            _ => Err(ParseDataPathError(s.to_string())),
        }
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataPath::Sendfile => "sendfile",
            DataPath::Copy => "copy",
            DataPath::Splice => "splice",
            DataPath::Blocking => "blocking",
            DataPath::Auto => "auto",
        })
    }
}

/// A data-path string that is not one of the names above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDataPathError(pub String);

impl fmt::Display for ParseDataPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown data path {:?} (expected \"auto\", \"copy\", \"sendfile\", \"splice\" or \"blocking\")",
            self.0
        )
    }
}

impl std::error::Error for ParseDataPathError {}

/// Whether readers of one file share the blocks read for them (Circus).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharingMode {
    /// Every download reads for itself.
    Off,
    /// Downloads of one file share one selector (`sched::circus`) and the
    /// blocks it holds in memory: MODE E takes them in any order, HTTP
    /// bodies and MODE S in file order (in-order readers).
    Circus,
    /// Circus for a download that starts while another download of the
    /// same file is in flight and whose range is mostly not in the page
    /// cache (`sharing::auto_shares`); a lone reader, or a reader of a
    /// file in memory (fast or slow, few or many), reads for itself. Sharing
    /// costs a lone reader ~15 % of its rate and ~20 % more CPU per GiB on
    /// loopback (bench/dlcost.py, case 4s) and saves nothing for it.
    Auto,
}

impl FromStr for SharingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(SharingMode::Off),
            "circus" => Ok(SharingMode::Circus),
            "auto" => Ok(SharingMode::Auto),
            _ => Err(format!(
                "unknown sharing mode {s:?} (expected \"auto\", \"circus\" or \"off\")"
            )),
        }
    }
}

impl fmt::Display for SharingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SharingMode::Off => "off",
            SharingMode::Circus => "circus",
            SharingMode::Auto => "auto",
        })
    }
}

/// Where Circus keeps the blocks it shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircusHold {
    /// Engine-owned buffers: one `pread` per block, one `writev` per
    /// reader; the memory is the engine's and cannot be taken back.
    Buffers,
    /// The page cache: one `pread` per block makes it resident, each
    /// reader `sendfile`s it; the kernel may evict it before the last send
    /// (then it is read again, unseen by the counters).
    PageCache,
    /// The page cache for a block that was already cached when read (the
    /// read that found it cost no disk; its readers `sendfile` it), an
    /// engine buffer for one that came from the disk. The copy into the
    /// socket per reader's `writev` was the server's largest cost with
    /// 1000 readers of a cached file (lab send-wakeups, session 11 profile:
    /// `_copy_from_iter` 21 % of its CPU).
    Auto,
}

impl FromStr for CircusHold {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "buffers" => Ok(CircusHold::Buffers),
            "pagecache" | "page-cache" => Ok(CircusHold::PageCache),
            "auto" => Ok(CircusHold::Auto),
            _ => Err(format!(
                "unknown block holder {s:?} (expected \"auto\", \"buffers\" or \"pagecache\")"
            )),
        }
    }
}

/// Parses an on/off switch as the server's flags spell it (`on`/`off`,
/// `true`/`false`, `yes`/`no`, `1`/`0`), e.g. `--cancel on`.
pub fn parse_switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Some(true),
        "off" | "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// Everything the engine can be tuned by. `Default` holds measured defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Data path for downloads.
    pub data_path: DataPath,
    /// Largest number of bytes handed to one `sendfile` call (sendfile path).
    pub chunk_size: usize,
    /// Size of one pooled read buffer (copy path and uploads).
    pub read_buffer_size: usize,
    /// `TCP_NOTSENT_LOWAT` for data sockets; `None` leaves the kernel default.
    /// With `refill_time` set this is the ceiling of the per-connection mark.
    pub notsent_lowat: Option<u32>,
    /// Size each connection's `TCP_NOTSENT_LOWAT` from its measured rate so
    /// one refill covers about this long (the socket wakes its sender when
    /// unsent data falls below half the mark), within `notsent_lowat` and a
    /// share of the kernel's TCP memory (`refill.rs`). `None`: a fixed mark.
    pub refill_time: Option<Duration>,
    /// `SO_SNDBUF` for data sockets; `None` keeps kernel autotuning (or
    /// `send_buffer_max`).
    pub send_buffer: Option<usize>,
    /// With `send_buffer` unset: ask for `SO_SNDBUF` = `net.core.wmem_max`
    /// when the granted buffer (twice that) is at least autotuning's ceiling
    /// (`tcp_wmem` max), so it is never smaller than autotuning could make
    /// it; otherwise keep autotuning.
    pub send_buffer_max: bool,
    /// `SO_RCVBUF` for data sockets; `None` keeps kernel autotuning.
    pub recv_buffer: Option<usize>,
    /// Dynamic right-sizing of each data connection's send buffer to
    /// about twice its path's bandwidth-delay product, from `TCP_INFO`
    /// samples while it sends (`drs.rs`, `DataConn`); beyond
    /// `net.core.wmem_max` with `SO_SNDBUFFORCE` where allowed.
    pub drs: bool,
    /// `SO_MAX_PACING_RATE` per data socket in bytes/s; `None` = no cap.
    pub max_pacing_rate: Option<u64>,
    /// Cue (`sched/cue.rs`): class weights, the server-wide cap and
    /// pacing of every data connection from one scheduler; `None`: off
    /// (each connection sends as fast as its socket takes data, yielding
    /// after `send_quantum`). Its quantum is `send_quantum`.
    pub cue: Option<crate::sched::cue::CueConfig>,
    /// Congestion control for data sockets ("cubic", "bbr"); `None` = system default.
    pub congestion: Option<String>,
    /// Number of blocking disk threads.
    pub disk_threads: usize,
    /// Most disk jobs queued at once; submitters wait when it is full.
    pub disk_queue_depth: usize,
    /// Most pooled buffers kept idle for reuse.
    pub buffer_pool_max: usize,
    /// Buffers in flight per upload stream (bounds upload memory).
    pub upload_buffers_per_stream: usize,
    /// `fixed` prefetch mode: the read-ahead window (and read size) per
    /// connection, on either data path.
    pub sendfile_prefetch: usize,
    /// Copy path: read cached pages inline with `RWF_NOWAIT` (never waits for
    /// the disk) and use a disk thread only on a miss; `false` always hops.
    pub inline_cached_reads: bool,
    /// Sendfile path in `kernel` prefetch mode: before each `sendfile` call,
    /// ask `cachestat` whether the range is in the page cache, and send a
    /// range that is not through the copy path (read on a disk thread), so a
    /// cold page never makes `sendfile` wait for the disk on the event loop.
    /// `false` is plain `sendfile` (nginx-style; the loop can stall).
    /// Without `cachestat` (kernels before 6.5) there is no check.
    pub sendfile_resident_check: bool,
    /// `--prefetch auto`: a chunk `cachestat` calls missing goes to the
    /// planner only when this connection's last disk-thread read cost what
    /// a disk costs ([`crate::plan::MissJudge`]). `false` trusts `cachestat`
    /// alone (holes still not counted): tests on a fast disk whose cold
    /// reads finish at memory speed use it to see the planner take over.
    pub prefetch_miss_timing: bool,
    /// Bytes one sender may push before it yields the event loop to other
    /// connections, even if its socket still accepts data (a quantum per
    /// turn, for fairness between transfers on one thread).
    pub send_quantum: usize,
    /// Longest wait for a data socket to become readable/writable before
    /// the transfer fails (a stalled peer must not pin a transfer forever).
    pub idle_timeout: Duration,
    /// Who decides download read-ahead: the tpf planner from `TCP_INFO`
    /// (`tcp`), a fixed window of `sendfile_prefetch` bytes per connection
    /// through the same scheduler (`fixed`), or the kernel alone (`kernel`).
    pub prefetch: PrefetchMode,
    /// `tcp` mode: read-ahead memory (page cache or pooled buffers) for all
    /// connections together, bytes.
    pub prefetch_budget: u64,
    /// `tcp` mode: largest single read (`H_max`), bytes.
    pub prefetch_h_max: u64,
    /// Prefetch reads on the disk threads at once (`K`); the rest wait in
    /// the scheduler, where they can still be reordered, delayed or dropped.
    pub prefetch_queue_depth: usize,
    /// While planned reads are on the disk, the next ones are handed out
    /// only once this many of the `K` slots are free, as one batch: one
    /// disk-thread job and one loop wake-up for all of it
    /// (`SchedConfig::batch_min`). 1 hands each read out as a slot frees.
    pub prefetch_batch_min: usize,
    /// The planner takes each socket as draining at its rate between
    /// samples (`PlanConfig::drain_at_rate`); off: measured to fill a
    /// memory-limited cgroup with read-ahead issued into full sockets.
    pub prefetch_drain_estimate: bool,
    /// Eager cancellation: when a connection ends, its reads already handed
    /// to a disk thread are skipped if not started (its queued ones are
    /// always dropped). `false` lets them run, as a baseline.
    pub cancel: bool,
    /// Least time between two `TCP_INFO` samples of one connection taken
    /// when its socket is full (one `getsockopt`; starving connections are
    /// sampled more often, at an eighth of this).
    pub sample_interval: Duration,
    /// `tcp` mode: device-friendly read size, bytes. A connection's
    /// read-ahead window is at least this, so slow connections get few
    /// large reads instead of many small ones (a read below the disk's
    /// bandwidth / IOPS costs a whole I/O). 0 turns the floor off.
    pub prefetch_min_read: u64,
    /// `tcp` mode: drop a file's pages from the page cache once
    /// the peer has acknowledged them (`POSIX_FADV_DONTNEED`), unless
    /// another transfer has the same file open, so the cache holds
    /// read-ahead that is still to be sent rather than data already sent.
    pub prefetch_drop_sent: bool,
    /// `tcp` mode: share (0..=1) of the memory room not held by other
    /// page cache that the budget may use (`prefetch/memory.rs`); `None`
    /// leaves that cache out of the measurement.
    pub prefetch_budget_of_free: Option<f64>,
    /// Shared reads for readers of one file (`--sharing auto|circus|off`).
    pub sharing: SharingMode,
    /// Circus: bytes per shared block (read once, sent to every reader).
    pub circus_block: u64,
    /// Circus: memory for one file's blocks in memory (the active region
    /// plus independents' blocks) at most, bytes; the files together stay
    /// within `circus_budget`.
    pub circus_region: u64,
    /// Circus: most block references queued per stream of a download.
    pub circus_queue: usize,
    /// Circus: memory for every shared file's blocks together, bytes (one
    /// engine-wide budget; a file gets at least its fair share of it).
    /// 0: sized at start from the memory the process may use
    /// (`sharing::auto_budget`).
    pub circus_budget: u64,
    /// Circus: a download's queue holds about this much of its measured
    /// rate (between one and `circus_queue` blocks per stream); zero:
    /// `circus_queue` per stream whatever the rate.
    pub circus_queue_time: Duration,
    /// Circus: share (0-1) of its download after which a reader reads
    /// its own blocks outside the region (independent).
    pub circus_independent: f64,
    /// Circus: where shared blocks are kept (and how they are sent).
    pub circus_hold: CircusHold,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            // Auto, measured: over loopback `copy` beat `sendfile`
            // (bench/dlcost.py, 2026-11-22 12:02-12:13, quiet machine: one
            // stream 3.8-4.4 against 2.6-2.8 GB/s at less server and machine
            // CPU per GiB; 16 streams 3.5-3.7 against 2.9-3.0 GB/s with a sixth
            // of the context switches): a receiver on this host copies out
            // of the sender's skbs, cache-hot after `copy`, cold page-cache
            // pages after `sendfile`. For 1000 readers at 1 Mbit/s over linkem
            // `copy` held ~2 GiB of read buffers (two per connection) and
            // cost 1.6x the CPU per GiB (lab send-wakeups, 12:26); a NIC's
            // DMA reads page-cache pages itself. So `copy` for local peers
            // and small sends, `sendfile` otherwise.
            data_path: DataPath::Auto,
            // Larger than any one call can move (a call ends when the send
            // buffer is full, at most `tcp_wmem` max), so one call per wake-up.
            chunk_size: 4 << 20,
            read_buffer_size: 1 << 20,
            // 8 MiB, measured (bench/dlcost.py): the socket wakes a writer
            // when unsent data falls below half the mark, and a write stops
            // at the mark, so 1 MiB meant ~0.5 MiB per send call and per
            // wake-up: about twice nginx's syscalls and context switches per
            // GiB. 8 MiB is the lab's largest send buffer (`send_buffer_max`),
            // so here it acts as "off" (send-buffer space decides, as for
            // nginx), while on a host with larger buffers it still bounds
            // unsent data per connection.
            notsent_lowat: Some(8 << 20),
            // Rate-sized marks, measured (lab send-wakeups, 300 readers at
            // 1 Mbit/s): a fixed 8 MiB mark and buffer per connection put
            // the host's TCP memory over `tcp_mem` pressure, where a socket
            // reports writable but refuses data: 35-47k wake-ups per GiB.
            refill_time: Some(Duration::from_secs(4)),
            send_buffer: None,
            // On, measured (bench/dlcost.py, 2 GiB warm loopback, one worker):
            // the lab's wmem_max of 4 MiB grants an 8 MiB buffer against 4 MiB
            // for autotuning, so a wake-up finds twice the room: context
            // switches per GiB fell ~40 % (442 -> 292 one stream, 326 -> 239
            // for 16) and CPU per GiB ~15-35 %, with the same MB/s.
            send_buffer_max: true,
            recv_buffer: None,
            // On, measured (lab/results/drs-wan, 2026-11-25, 3 runs, medians):
            // 1 Gbit/s 100 ms, 1 GiB: 97.9 MB/s against 52.6 with a fixed
            // wmem_max buffer and 29.6 with autotuning (4 MiB caps); 100
            // Mbit/s 50 ms: 11.7 for all; loopback: no difference within
            // noise. Grows beyond wmem_max only with CAP_NET_ADMIN.
            drs: true,
            max_pacing_rate: None,
            cue: None,
            congestion: None,
            disk_threads: 2,
            disk_queue_depth: 64,
            buffer_pool_max: 64,
            upload_buffers_per_stream: 4,
            sendfile_prefetch: 8 << 20,
            inline_cached_reads: true,
            sendfile_resident_check: true,
            prefetch_miss_timing: true,
            // 4 MiB: about 1 ms of a loopback stream; large enough that the
            // extra turn costs nothing measurable, small enough to keep turns short.
            send_quantum: 4 << 20,
            idle_timeout: Duration::from_secs(300),
            // `auto`: the kernel's path while a range is in the page cache
            // (warm loopback: the copy loop with RWF_NOWAIT and sendfile are
            // as fast as anything, and `tcp` cost ~28 % there), the planner
            // from the first miss (lab tpf-mixed-rates: 2.6x `kernel`'s
            // total with 480 rate-limited readers of a throttled disk).
            prefetch: PrefetchMode::Auto,
            // (`PrefetchMode::default()` is the same, kept in step by a test.)
            prefetch_budget: 256 << 20,
            prefetch_h_max: 1 << 20,
            // K ~ IOPS x read latency (lab: 150 x ~30 ms); the planner runs
            // K disk threads of its own, one read each, so none waits behind
            // a stale decision in a pool's channel.
            prefetch_queue_depth: 6,
            prefetch_batch_min: 3,
            prefetch_drain_estimate: false,
            cancel: true,
            sample_interval: Duration::from_millis(100),
            // 150 IOPS x 256 KiB = 39 MB/s: the lab disk's bandwidth.
            prefetch_min_read: 256 << 10,
            prefetch_drop_sent: true,
            // Opt-in (memory.rs says why: at full page cache it starves).
            prefetch_budget_of_free: None,
            sharing: SharingMode::Auto,
            // Starting points (the Circus paper's shape: blocks of the
            // transfer's size, a region of a few tens of blocks, a queue of
            // a few blocks per stream, independents from 3/4 of the file);
            // see crates/engine/README.md, "Shared reads".
            circus_block: 1 << 20,
            circus_region: 64 << 20,
            circus_queue: 4,
            // One file alone keeps the region it had when regions were
            // per file (64 MiB); 16 popular files share it (lab
            // circus-files: 16 regions of 64 MiB in a 256 MiB server
            // pushed the page cache out and read 2.4x what was sent).
            // Sized from the memory room at start (auto): in-order readers
            // share only what stays in memory, and on lab circus-steady's
            // readers the least disk 64 MiB allows is 0.77 bytes per byte
            // sent, 160 MiB 0.59 (`sched/circus_bound.rs`).
            circus_budget: 0,
            // Half a second of each reader's rate: a 1.5 Mbit/s reader
            // holds one block per stream (it drains 1 MiB in 5.6 s), a 45
            // Mbit/s one three; loopback readers the full `circus_queue`.
            circus_queue_time: Duration::from_millis(500),
            circus_independent: 0.75,
            circus_hold: CircusHold::Auto,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_path_parses_config_strings() {
        assert_eq!("sendfile".parse::<DataPath>().unwrap(), DataPath::Sendfile);
        assert_eq!(" Copy ".parse::<DataPath>().unwrap(), DataPath::Copy);
        assert!("mmap".parse::<DataPath>().is_err());
        assert_eq!("blocking".parse::<DataPath>().unwrap(), DataPath::Blocking);
        assert_eq!(DataPath::Blocking.to_string(), "blocking");
        assert_eq!(
            DataPath::Sendfile.to_string().parse::<DataPath>().unwrap(),
            DataPath::Sendfile
        );
    }

    #[test]
    fn prefetch_mode_and_switches_parse() {
        for m in ["tcp", "fixed", "kernel", "auto"] {
            assert_eq!(m.parse::<PrefetchMode>().unwrap().to_string(), m);
        }
        assert!("sometimes".parse::<PrefetchMode>().is_err());
        assert_eq!(parse_switch(" ON "), Some(true));
        assert_eq!(parse_switch("off"), Some(false));
        assert_eq!(parse_switch("maybe"), None);
        assert_eq!(PrefetchMode::default(), EngineConfig::default().prefetch);
    }
}
