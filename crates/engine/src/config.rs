//! Engine configuration: which data path, chunk and buffer sizes, socket tuning.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How file bytes get from the page cache into a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// `sendfile(2)` straight from the page cache; no user-space copy.
    Sendfile,
    /// `pread` into pooled buffers off the event loop, then `send`/`writev`.
    Copy,
}

impl FromStr for DataPath {
    type Err = ParseDataPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sendfile" => Ok(DataPath::Sendfile),
            "copy" => Ok(DataPath::Copy),
            _ => Err(ParseDataPathError(s.to_string())),
        }
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataPath::Sendfile => "sendfile",
            DataPath::Copy => "copy",
        })
    }
}

/// A data-path string that is neither "sendfile" nor "copy".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDataPathError(pub String);

impl fmt::Display for ParseDataPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown data path {:?} (expected \"sendfile\" or \"copy\")",
            self.0
        )
    }
}

impl std::error::Error for ParseDataPathError {}

/// Everything the engine can be tuned by. `Default` holds measured defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Data path for downloads.
    pub data_path: DataPath,
    /// Largest number of bytes handed to one `sendfile` call (sendfile path).
    pub chunk_size: usize,
    /// Size of one pooled read buffer (copy path and uploads).
    pub read_buffer_size: usize,
    /// `TCP_NOTSENT_LOWAT` for data sockets; `None` leaves the kernel default.
    pub notsent_lowat: Option<u32>,
    /// `SO_SNDBUF` for data sockets; `None` keeps kernel autotuning.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF` for data sockets; `None` keeps kernel autotuning.
    pub recv_buffer: Option<usize>,
    /// `SO_MAX_PACING_RATE` per data socket in bytes/s; `None` = no cap.
    pub max_pacing_rate: Option<u64>,
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
    /// Bytes ahead of `sendfile` to bring into the page cache off the loop.
    pub sendfile_prefetch: usize,
    /// Copy path: read cached pages inline with `RWF_NOWAIT` (never waits for
    /// the disk) and use a disk thread only on a miss; `false` always hops.
    pub inline_cached_reads: bool,
    /// Bytes one sender may push before it yields the event loop to other
    /// connections, even if its socket still accepts data (a quantum per
    /// turn, for fairness between transfers on one thread).
    pub send_quantum: usize,
    /// Longest wait for a data socket to become readable/writable before
    /// the transfer fails (a stalled peer must not pin a transfer forever).
    pub idle_timeout: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            // Chosen by measurement on the lab VM (crates/engine/README.md): the
            // copy loop beat sendfile over loopback.
            data_path: DataPath::Copy,
            chunk_size: 4 << 20,
            read_buffer_size: 1 << 20,
            // 1 MiB, measured (README): the mark also caps what one send may
            // queue, so 256 KiB doubled send calls and wake-ups per GiB over
            // loopback, while 1 MiB matched the kernel default's counts and
            // still keeps unsent data per connection at ~1 MiB instead of a
            // whole send buffer. One wake-up refills ~1 ms of a 10 Gbit/s
            // stream, far above scheduling latency, so the kernel never starves.
            notsent_lowat: Some(1 << 20),
            send_buffer: None,
            recv_buffer: None,
            max_pacing_rate: None,
            congestion: None,
            disk_threads: 2,
            disk_queue_depth: 64,
            buffer_pool_max: 64,
            upload_buffers_per_stream: 4,
            sendfile_prefetch: 8 << 20,
            inline_cached_reads: true,
            // 4 MiB: about 1 ms of a loopback stream; large enough that the
            // extra turn costs nothing measurable, small enough to keep turns short.
            send_quantum: 4 << 20,
            idle_timeout: Duration::from_secs(300),
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
        assert_eq!(
            DataPath::Sendfile.to_string().parse::<DataPath>().unwrap(),
            DataPath::Sendfile
        );
    }
}
