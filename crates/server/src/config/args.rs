//! The flags of `sluice serve`: one field per setting, each with its TOML key
//! of the same name (see the parent module's doc).

use super::*;

/// `sluice serve` flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Directory to serve (default: the current directory).
    pub dir: Option<PathBuf>,
    /// FTP listen address [default: 127.0.0.1:2121], e.g. [::1]:2121, 0.0.0.0:21.
    /// Port 0 picks a free port; the bound address is printed on stdout
    /// as `ftp listening on ADDR`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub ftp: Option<SocketAddr>,
    /// Allow uploads and changes (STOR APPE ESTO DELE MKD RMD RNFR/RNTO)
    /// for anonymous users. Off by default: the server is read-only.
    #[arg(long)]
    pub writable: bool,
    /// TOML configuration file; every flag has a key of the same name.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the configuration (flags and --config file) and the
    /// directories it names, print the result and exit: 0 when it is
    /// good, 2 with the errors. Nothing is bound or served. (A flag
    /// only, no file key.)
    #[arg(long)]
    pub check_config: bool,
    /// Most concurrent FTP sessions; further connections get 421
    /// [default: 256].
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// Listen backlog of the FTP and HTTP listeners (the kernel caps it
    /// at net.core.somaxconn) [default: 511, as nginx].
    #[arg(long, value_name = "N")]
    pub listen_backlog: Option<u32>,
    /// Seconds a control connection may sit idle (no command, no
    /// transfer) before it is closed with 421 [default: 300].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Port range for passive data listeners, e.g. 50000-50100
    /// (default: any free port).
    #[arg(long, value_name = "LOW-HIGH")]
    pub pasv_ports: Option<String>,
    /// IPv4 address PASV announces instead of the control connection's
    /// local address (for NAT). Listeners still bind the local address.
    #[arg(long, value_name = "ADDR")]
    pub pasv_address: Option<IpAddr>,
    /// How file data reaches the socket: `auto` (`copy` for a client on
    /// this host and for sends up to 256 KiB, `sendfile` otherwise), `copy`
    /// (pread + send), `sendfile` (zero copy), `splice` (zero copy through a
    /// 1 MiB pipe of the transfer's own: bigger steps than sendfile's 64 KiB),
    /// or `blocking` (a baseline: one OS thread per transfer doing sendfile,
    /// no event loop, no NOTSENT_LOWAT), to measure one against the other
    /// [default: the engine's, `auto`: over loopback `copy` measured faster
    /// than `sendfile` at less CPU per GiB, while for many slow remote
    /// clients it held two read buffers each (README, Benchmarks)].
    #[arg(long, value_name = "auto|copy|sendfile|splice|blocking")]
    pub data_path: Option<String>,
    /// TCP_NOTSENT_LOWAT of data sockets: a size (`8M`, `131072`) or `off`
    /// [default: the engine's, 8M] (docs/TUNING.md).
    #[arg(long, value_name = "BYTES|off")]
    pub notsent_lowat: Option<String>,
    /// SO_SNDBUF of data sockets: a size, `auto` (kernel autotuning) or
    /// `max` (net.core.wmem_max when that is at least autotuning's ceiling)
    /// [default: the engine's, max].
    #[arg(long, value_name = "BYTES|auto|max")]
    pub send_buffer: Option<String>,
    /// Size each data connection's TCP_NOTSENT_LOWAT from its measured
    /// rate so one wake-up of its sender refills about SECS seconds of
    /// data (`--notsent-lowat` is then the ceiling), or `off` for a fixed
    /// mark [default: the engine's, 4].
    #[arg(long, value_name = "SECS|off")]
    pub refill_time: Option<String>,
    /// Allow PORT/EPRT to hosts other than the control peer (GridFTP
    /// third-party transfers). Off by default: it enables FTP bounce.
    #[arg(long)]
    pub allow_foreign_data_host: bool,
    /// Who decides download read-ahead: `auto` (the kernel's while the
    /// range is in the page cache, the `tcp` planner from the first miss),
    /// `tcp` (planner driven by each connection's TCP_INFO under a memory
    /// budget), `fixed` (a fixed window per connection) or `kernel` (the
    /// kernel's read-ahead) [default: auto].
    #[arg(long, value_name = "auto|tcp|fixed|kernel")]
    pub prefetch: Option<String>,
    /// Cancel a finished or reset connection's pending prefetch reads
    /// at once (`on`) or let started ones run (`off`) [default: on].
    #[arg(long, value_name = "on|off")]
    pub cancel: Option<String>,
    /// Shared reads: `circus` (downloads of one file share the blocks
    /// read for them, each block read once and sent to every reader: MODE
    /// E in any order, HTTP bodies and MODE S in file order), `auto`
    /// (circus for a download that starts while another of the same file
    /// is in flight and its range is not in memory; a lone reader, or a
    /// reader of a file in memory, reads for itself, where sharing would
    /// only cost it) or `off` [default: auto].
    #[arg(long, value_name = "auto|circus|off")]
    pub sharing: Option<String>,
    /// Serve the engine's counters in Prometheus text format on
    /// `GET /metrics` at this address (off by default). The bound address
    /// is printed on stdout as `metrics listening on ADDR`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Event loops: `per-core` (one single-threaded loop per worker
    /// thread; FTP sessions and HTTP connections are spread over them) or
    /// `shared` (one multi-thread work-stealing runtime) [default: per-core].
    #[arg(long, value_name = "per-core|shared")]
    pub runtime: Option<String>,
    /// Event-loop threads (`per-core`) or runtime workers (`shared`)
    /// [default: half the cores, at least one].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Seconds an interrupted upload's partial is kept for a resume; then
    /// it is removed when an upload starts in its directory. 0: forever
    /// [default: 604800, a week]. docs/SECURITY.md, "Partial uploads".
    #[arg(long, value_name = "SECS")]
    pub partial_max_age: Option<u64>,
    /// Most bytes of kept partials per directory (the oldest go first);
    /// 0: no limit [default: 0].
    #[arg(long, value_name = "BYTES")]
    pub partial_max_bytes: Option<u64>,
    /// Seconds SIGTERM or SIGINT lets running transfers finish before it
    /// ends them (new connections are refused at once; an upload ended
    /// then is kept as a resumable partial); 0: end them at once
    /// [default: 30]. A second signal ends them at once too.
    #[arg(long, value_name = "SECS")]
    pub shutdown_timeout: Option<u64>,
    /// What to log: a level (`info`, `debug`) or tracing filter directives
    /// (`info,xferlog=off`) [default: RUST_LOG if set, else info]. SIGHUP
    /// applies a changed `log_level` key.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Write the log to FILE (appending) instead of stderr; SIGUSR1 (and
    /// SIGHUP) reopen it, for logrotate.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Started as root: bind the listeners, then run as this user (its
    /// groups, gid and uid) for good. crate::privileges, docs/SECURITY.md.
    #[arg(long, visible_alias = "user", value_name = "NAME")]
    pub run_as: Option<String>,
    /// Serve as root without --run-as even on a public address (refused
    /// otherwise; on loopback and private addresses it is only warned of).
    #[arg(long)]
    pub allow_root: bool,
    /// HTTP front door flags (crate::http::settings).
    #[command(flatten)]
    pub http: crate::http::settings::HttpArgs,
    /// Engine tuning flags (keys of the file's `[engine]` table).
    #[command(flatten)]
    pub tuning: TuningArgs,
    /// TLS flags (crate::tls).
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    /// Fairness, rate caps and classes (config/cue.rs).
    #[command(flatten)]
    pub cue: CueArgs,
}
