//! Sluice data-delivery engine (layer 3): moves file bytes to and from TCP
//! sockets with the least CPU, memory and waiting.
//!
//! Brief overview: an [`Engine`] is built from an [`EngineConfig`] and shared
//! by all transfers. It owns a disk thread pool (so the tokio event loop never
//! waits on the disk), a [`BufferPool`], the probed kernel [`Features`] and the
//! global [`Counters`]. Downloads go through [`Engine::send_file`] (one range,
//! optionally behind a framing prefix such as a MODE E header) on the
//! configured [`DataPath`]; uploads go through a [`FileWriter`] that reads a
//! socket into pooled buffers and writes them at file offsets off the loop.
//! Every operation takes a [`Cancel`] token and per-transfer [`Counters`].
//!
//! Read-ahead for downloads is chosen by [`EngineConfig::prefetch`]: `kernel`
//! leaves it to the kernel (plain `sendfile`, or the copy path's own double
//! buffering), while `tcp` and `fixed` hand every range to the tpf planner
//! and disk scheduler ([`plan`], [`sched`], driven from `prefetch.rs`): reads
//! sized from each connection's `TCP_INFO` under a memory budget, at most
//! `K` on the disk threads, delayed after a cwnd cut, dropped or cancelled
//! the moment their connection ends.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod auto_prefetch;
mod buffers;
mod cancel;
mod config;
mod conn;
mod counters;
mod cue_hub;
mod disk;
pub mod drs;
mod drs_socket;
mod error;
mod flow;
mod ktls;
pub mod plan;
mod prefetch;
mod recv;
mod refill;
pub mod sched;
mod send;
mod send_blocking;
mod send_sendfile;
mod sharing;
mod socket;
mod splice_pump;
mod tls;
mod tuning;
pub mod verdict;
mod wake;

use std::fs::File;
use std::sync::Arc;

pub use buffers::{BufferPool, PoolBuf};
pub use cancel::Cancel;
pub use config::{
    parse_switch, CircusHold, DataPath, EngineConfig, ParseDataPathError, SharingMode,
};
pub use conn::{DataConn, IntoDataConn};
pub use counters::{Counters, CountersSnapshot};
pub use drs_socket::DrsSocket;
pub use error::EngineError;
pub use ktls::KtlsConn;
pub use plan::{ParsePrefetchModeError, PrefetchMode, TpfCounters};
pub use recv::{FileWriter, ReadStatus, WrittenFn, MAX_SEGMENTS};
pub use sharing::{Readers, ReadingAlone, SharedPiece, SharedRead};
pub use sluice_platform::features::{Features, Support};
pub use socket::SocketSettings;
pub use tls::{TlsConn, TLS_BUFFER_LIMIT, TLS_CHUNK};
/// The rustls stack the TLS connections are built on (one version for
/// every crate).
pub use tokio_rustls;
pub use tuning::{parse_notsent_lowat, parse_refill_time, parse_size, SendBufferChoice};

use counters::Tally;
use disk::DiskPool;
pub use disk::IoClass;
use prefetch::Hub;

/// The shared data-delivery engine; cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: EngineConfig,
    features: Features,
    counters: Counters,
    buffers: Arc<BufferPool>,
    disk: DiskPool,
    /// The tpf planner and scheduler; `None` in `kernel` prefetch mode.
    prefetch: Option<Hub>,
    /// Connections sending with rate-sized marks (`refill.rs`).
    senders: refill::Senders,
    /// What limited finished downloads, summed (`verdict.rs`, `/metrics`).
    limits: verdict::LimitTotals,
    /// Circus: readers of one file share its blocks; `None` when off.
    sharing: Option<sharing::Sharing>,
    /// Cue: fairness and pacing across connections; `None` when off.
    cue: Option<std::sync::Arc<cue_hub::CueHub>>,
    /// `--prefetch auto` and `--sharing auto`: what reads of each file cost.
    read_costs: auto_prefetch::ReadCosts,
}

impl Engine {
    /// Builds an engine, probing kernel features and starting the disk threads.
    /// Panics only if the OS refuses to start a thread at all (start-up only).
    pub fn new(config: EngineConfig) -> Engine {
        match Self::try_new(config) {
            Ok(e) => e,
            Err(e) => panic!("sluice engine: cannot start disk threads: {e}"),
        }
    }

    /// Like [`Engine::new`], returning the thread-spawn error instead of panicking.
    pub fn try_new(config: EngineConfig) -> std::io::Result<Engine> {
        let features = Features::probe();
        let mut config = config;
        if matches!(
            config.data_path,
            DataPath::Sendfile | DataPath::Splice | DataPath::Auto
        ) && !features.sendfile.is_supported()
        {
            tracing::info!("sendfile unsupported here; using the copy data path");
            config.data_path = DataPath::Copy;
        }
        let disk = DiskPool::new(disk_threads_for(&config), config.disk_queue_depth)?;
        let buffers = BufferPool::new(config.read_buffer_size, config.buffer_pool_max);
        let prefetch = Hub::new(&config);
        let sharing = sharing::Sharing::new(&config);
        // Cue's quantum is the engine's one send quantum (defined once).
        if let Some(c) = config.cue.as_mut() {
            c.quantum = config.send_quantum as u64;
        }
        let cue = config.cue.clone().map(cue_hub::CueHub::new);
        Ok(Engine {
            inner: Arc::new(Inner {
                config,
                features,
                counters: Counters::new(),
                buffers,
                disk,
                prefetch,
                senders: refill::Senders::default(),
                limits: verdict::LimitTotals::default(),
                sharing,
                cue,
                read_costs: auto_prefetch::ReadCosts::default(),
            }),
        })
    }

    /// A data socket joins Cue's scheduler (when on) with `spec`, or the
    /// default class with the engine's per-transfer cap.
    pub(crate) fn cue_join(
        &self,
        stream: &tokio::net::TcpStream,
        spec: Option<sched::cue::CueSpec>,
    ) -> Option<cue_hub::CueTicket> {
        use std::os::fd::AsFd;
        let hub = self.inner.cue.as_ref()?;
        let mut spec = spec.unwrap_or_default();
        if spec.cap.is_none() {
            spec.cap = self.inner.config.max_pacing_rate;
        }
        // A descriptor the scheduler owns (module docs of cue_hub).
        let fd = stream.as_fd().try_clone_to_owned().ok();
        Some(hub.join(fd, spec))
    }

    /// Cue's counters per class as Prometheus text (empty when off).
    pub fn cue_prometheus(&self) -> String {
        self.inner
            .cue
            .as_ref()
            .map(|h| h.prometheus())
            .unwrap_or_default()
    }

    /// The configuration in force (after feature fallbacks).
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Kernel features probed at start-up.
    pub fn features(&self) -> &Features {
        &self.inner.features
    }

    /// Snapshot of the engine-wide counters (prefetch totals included).
    pub fn counters(&self) -> CountersSnapshot {
        let mut s = self.inner.counters.snapshot();
        if let Some(hub) = &self.inner.prefetch {
            s.add_tpf(&hub.totals());
        }
        s
    }

    /// What limited finished downloads, summed over their connections.
    pub fn limits(&self) -> &verdict::LimitTotals {
        &self.inner.limits
    }

    /// The engine's buffer pool (read buffers of `read_buffer_size`).
    pub fn buffers(&self) -> &Arc<BufferPool> {
        &self.inner.buffers
    }

    /// Runs a blocking file operation (open, stat, a listing batch) on the
    /// engine's disk threads, as [`IoClass::Meta`].
    pub async fn run_blocking<T, F>(&self, cancel: &Cancel, f: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.inner.disk.run(IoClass::Meta, cancel, f).await
    }

    /// Runs a blocking job of `class` on the engine's disk threads (a
    /// whole-file checksum is [`IoClass::Background`]).
    pub async fn run_blocking_as<T, F>(
        &self,
        class: IoClass,
        cancel: &Cancel,
        f: F,
    ) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.inner.disk.run(class, cancel, f).await
    }

    /// Threads of the disk subsystem.
    pub fn disk_threads(&self) -> usize {
        self.inner.disk.threads()
    }

    /// `fdatasync` the file off the event loop (before an upload's rename).
    pub async fn sync_data(&self, file: &Arc<File>) -> Result<(), EngineError> {
        let f = Arc::clone(file);
        self.inner
            .disk
            .run(IoClass::Meta, &Cancel::new(), move || f.sync_data())
            .await?
            .map_err(EngineError::Disk)
    }

    /// `fsync` the file (data and metadata) off the event loop.
    pub async fn sync_all(&self, file: &Arc<File>) -> Result<(), EngineError> {
        let f = Arc::clone(file);
        self.inner
            .disk
            .run(IoClass::Meta, &Cancel::new(), move || f.sync_all())
            .await?
            .map_err(EngineError::Disk)
    }

    fn tally<'a>(&'a self, local: &'a Counters) -> Tally<'a> {
        Tally {
            global: &self.inner.counters,
            local,
        }
    }
}

/// Disk threads: `disk_threads`, and under a prefetch planner at least its
/// `K` (reads it keeps in the device at once), so its reads never queue
/// behind each other for want of a thread (it had a pool of its own).
fn disk_threads_for(config: &EngineConfig) -> usize {
    let k = match config.prefetch {
        PrefetchMode::Kernel => 0,
        _ => config.prefetch_queue_depth,
    };
    config.disk_threads.max(k).max(1)
}
