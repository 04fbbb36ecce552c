//! Server configuration: command-line flags, the TOML file, and the merged
//! [`ServeConfig`] the listeners run with.
//!
//! Every flag has a key of the same name (dashes become underscores) in the
//! file; a flag given on the command line wins over the file. Unknown keys
//! are an error (`deny_unknown_fields`), so a typo never silently leaves a
//! default in force. The server starts fine with no file at all.
//!
//! ```toml
//! root = "/srv/data"            # [DIR]
//! ftp = "0.0.0.0:2121"          # --ftp
//! http = "0.0.0.0:8080"         # --http; no_http, no_ftp and http_* keys: see http::settings
//! writable = false              # --writable (anonymous and users without `writable`)
//! anonymous = true              # accept USER anonymous / ftp
//! max_sessions = 256            # --max-sessions
//! listen_backlog = 511          # --listen-backlog (both doors)
//! idle_timeout = 300            # --idle-timeout, seconds
//! pasv_ports = "50000-50100"    # --pasv-ports
//! pasv_address = "203.0.113.7"  # --pasv-address (what PASV announces)
//! data_path = "auto"            # --data-path auto|copy|sendfile|splice|blocking (default: the engine's)
//! notsent_lowat = "8M"          # --notsent-lowat BYTES|off (TCP_NOTSENT_LOWAT of data sockets)
//! send_buffer = "max"           # --send-buffer BYTES|auto|max (SO_SNDBUF of data sockets)
//! refill_time = 4               # --refill-time SECS|off (rate-sized NOTSENT_LOWAT; off: fixed)
//! allow_foreign_data_host = false
//! prefetch = "auto"             # --prefetch auto|tcp|fixed|kernel (default: the engine's)
//! cancel = true                 # --cancel on|off (eager cancellation of prefetch reads)
//! sharing = "auto"              # --sharing auto|circus|off (readers of a file share its blocks)
//! metrics = "127.0.0.1:9464"    # --metrics: Prometheus text on GET /metrics (off by default)
//! runtime = "per-core"          # --runtime per-core|shared (event loops; crate::runtime)
//! workers = 1                   # --workers N (loops or workers; default: half the cores)
//! partial_max_age = 604800       # --partial-max-age SECS (0: keep interrupted uploads forever)
//! partial_max_bytes = 0          # --partial-max-bytes BYTES per directory (0: no limit)
//! https = "0.0.0.0:8443"         # --https; tls_cert, tls_key, ftps, require_tls: see crate::tls
//! shutdown_timeout = 30          # --shutdown-timeout SECS (SIGTERM: transfers' grace; 0: none)
//! log_level = "info"             # --log-level FILTER (default: RUST_LOG, else info)
//! log_file = "/var/log/sluice/sluice.log"  # --log-file (default: stderr; SIGUSR1 reopens)
//! run_as = "sluice"              # --run-as NAME (alias --user): bind as root, then run as NAME
//! allow_root = false             # --allow-root: serve as root on public addresses
//! cue = "auto"                   # --cue on|off|auto|fair; server_rate_cap, http_class, ftp_class, [classes]: see config/cue.rs
//!
//! [[user]]
//! name = "alice"
//! password_hash = "$argon2id$v=19$..."   # from `sluice hash-password`
//! root = "/srv/alice"                     # optional, default: the served root
//! writable = true
//! require_tls = true                      # optional, default: the global require_tls
//! rate_cap = "10M"                        # optional: bytes/s (or "80mbit") for all the user's transfers
//! class = "bulk"                          # optional: the user's Cue class (default: ftp_class)
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// Default FTP listen address.
pub const DEFAULT_FTP: &str = "127.0.0.1:2121";
/// Default session limit.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Default idle timeout, seconds (vsftpd uses 300).
pub const DEFAULT_IDLE_SECS: u64 = 300;
/// Default `--shutdown-timeout`, seconds: systemd's TimeoutStopSec
/// default is 90, so a unit's stop never has to SIGKILL first.
pub const DEFAULT_SHUTDOWN_SECS: u64 = 30;
/// Largest config file we read: a config is a few hundred bytes; this
/// bounds memory if someone points --config at a large file by mistake.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

pub use sluice_engine::DataPath;

mod args;
pub use args::ServeArgs;
mod tuning;
pub use tuning::TuningArgs;
pub mod cue;
pub use cue::{CueArgs, CueSettings};

/// A login other than anonymous, from `[[user]]` in the config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Argon2 PHC string (`$argon2id$...`), from `sluice hash-password`.
    pub password_hash: String,
    /// The user's own root; default: the served directory.
    pub root: Option<PathBuf>,
    /// May this user change files?
    #[serde(default)]
    pub writable: bool,
    /// Must this user log in over TLS (AUTH TLS first)? Default: the
    /// global `require_tls`.
    #[serde(default)]
    pub require_tls: Option<bool>,
    /// Cap on all this user's data connections together, bytes/s (`10M`)
    /// or bits/s (`80mbit`) (config/cue.rs).
    #[serde(default)]
    pub rate_cap: Option<String>,
    /// The user's Cue class; default: `ftp_class`.
    #[serde(default)]
    pub class: Option<String>,
}

/// The config file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    root: Option<PathBuf>,
    ftp: Option<String>,
    writable: Option<bool>,
    anonymous: Option<bool>,
    max_sessions: Option<usize>,
    listen_backlog: Option<u32>,
    idle_timeout: Option<u64>,
    pasv_ports: Option<String>,
    pasv_address: Option<String>,
    data_path: Option<String>,
    notsent_lowat: Option<SizeKey>,
    send_buffer: Option<SizeKey>,
    refill_time: Option<SizeKey>,
    allow_foreign_data_host: Option<bool>,
    prefetch: Option<String>,
    cancel: Option<bool>,
    sharing: Option<String>,
    metrics: Option<SocketAddr>,
    // HTTP front door keys (see crate::http::settings).
    http: Option<String>,
    no_http: Option<bool>,
    no_ftp: Option<bool>,
    http_header_timeout: Option<u64>,
    http_keepalive_timeout: Option<u64>,
    http_send_timeout: Option<u64>,
    http_max_connections: Option<usize>,
    http_open_cache: Option<u64>,
    runtime: Option<String>,
    workers: Option<u16>,
    partial_max_age: Option<u64>,
    partial_max_bytes: Option<u64>,
    // TLS keys (see crate::tls).
    https: Option<String>,
    ftps: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    require_tls: Option<bool>,
    ktls: Option<String>,
    shutdown_timeout: Option<u64>,
    log_level: Option<String>,
    log_file: Option<PathBuf>,
    run_as: Option<String>,
    allow_root: Option<bool>,
    // Cue keys (config/cue.rs).
    cue: Option<String>,
    server_rate_cap: Option<String>,
    #[serde(default)]
    classes: std::collections::BTreeMap<String, f64>,
    http_class: Option<String>,
    ftp_class: Option<String>,
    /// `[engine]`: the tuning keys (config/tuning.rs).
    engine: Option<TuningArgs>,
    #[serde(default, rename = "user")]
    users: Vec<UserConfig>,
}

/// A size or time key in the file: `notsent_lowat = 131072`, `= "128K"`,
/// `= "off"`, `refill_time = 0.5`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeKey {
    Bytes(u64),
    // `refill_time = 0.5`.
    Seconds(f64),
    Text(String),
}

impl SizeKey {
    fn text(self) -> String {
        match self {
            SizeKey::Bytes(n) => n.to_string(),
            SizeKey::Seconds(x) => x.to_string(),
            SizeKey::Text(s) => s,
        }
    }
}

/// Everything the server runs with, flags and file merged and checked.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Served directory (anonymous users and users without their own root).
    pub root: PathBuf,
    /// FTP listen address.
    pub ftp: SocketAddr,
    /// Anonymous users may write.
    pub writable: bool,
    /// USER anonymous / ftp accepted.
    pub anonymous: bool,
    /// Session limit.
    pub max_sessions: usize,
    /// Listen backlog of both front doors.
    pub listen_backlog: u32,
    /// Idle timeout.
    pub idle_timeout: Duration,
    /// Passive port range, inclusive; `None` lets the kernel choose.
    pub pasv_ports: Option<(u16, u16)>,
    /// Address PASV announces.
    pub pasv_address: Option<IpAddr>,
    /// sendfile, copy or blocking.
    pub data_path: DataPath,
    /// `TCP_NOTSENT_LOWAT` for data sockets if given (`Some(None)`: off);
    /// `None` keeps the engine's default.
    pub notsent_lowat: Option<Option<u32>>,
    /// `SO_SNDBUF` choice for data sockets if given; `None`: the engine's.
    pub send_buffer: Option<sluice_engine::SendBufferChoice>,
    /// Rate-sized mark's refill time if given (`Some(None)`: off).
    pub refill_time: Option<Option<Duration>>,
    /// PORT/EPRT may name other hosts.
    pub allow_foreign_data_host: bool,
    /// Download read-ahead mode (engine `prefetch`).
    pub prefetch: sluice_engine::PrefetchMode,
    /// Eager cancellation of prefetch reads (engine `cancel`).
    pub cancel: bool,
    /// Shared reads (engine `sharing`).
    pub sharing: sluice_engine::SharingMode,
    /// Where the Prometheus counters are served, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Configured users.
    pub users: Vec<UserConfig>,
    /// HTTP front door; `None` with --no-http.
    pub http: Option<crate::http::HttpSettings>,
    /// Serve FTP (false with --no-ftp).
    pub ftp_enabled: bool,
    /// Retention of interrupted uploads (`--partial-max-age`, `--partial-max-bytes`).
    pub partials: crate::upload::PartialPolicy,
    /// Event-loop structure (`--runtime`, key `runtime`; crate::runtime).
    pub runtime: crate::runtime::RuntimeKind,
    /// Loops or workers (`--workers`, key `workers`; `None`: the
    /// default, see `crate::runtime::workers`).
    pub workers: Option<usize>,
    /// Engine tuning from flags over the `[engine]` table (checked).
    pub tuning: TuningArgs,
    /// tokio's event_interval for every loop (`--event-interval`).
    pub event_interval: Option<u32>,
    /// TLS: certificate, HTTPS and implicit FTPS doors, `require_tls`.
    pub tls: crate::tls::TlsSettings,
    /// The HTTPS door (the HTTP door's deadlines and limits, at
    /// `tls.https`); `None` without `--https`.
    pub https: Option<crate::http::HttpSettings>,
    /// How long a stop waits for running transfers (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
    /// Log filter (`--log-level`, checked); `None`: RUST_LOG or info.
    pub log_level: Option<String>,
    /// Log file (`--log-file`); `None`: stderr.
    pub log_file: Option<PathBuf>,
    /// The user to run as after binding (`--run-as`).
    pub run_as: Option<String>,
    /// Root allowed on public addresses (`--allow-root`).
    pub allow_root: bool,
    /// Fairness, caps and classes (config/cue.rs).
    pub cue: CueSettings,
}

impl ServeConfig {
    /// Merges `args` over the config file it names (if any) and checks
    /// every value; no side effects (nothing is read from or written to
    /// the process environment).
    pub fn load(args: &ServeArgs) -> Result<ServeConfig> {
        Self::merge(args)
    }

    /// The engine settings from flags and file applied to `base` (the
    /// engine's measured defaults).
    pub fn engine_config(&self, base: sluice_engine::EngineConfig) -> sluice_engine::EngineConfig {
        let mut e = base;
        e.data_path = self.data_path;
        e.prefetch = self.prefetch;
        e.cancel = self.cancel;
        e.sharing = self.sharing;
        e.cue = self.cue.engine.clone();
        if let Some(l) = self.notsent_lowat {
            e.notsent_lowat = l;
        }
        if let Some(b) = self.send_buffer {
            e.set_send_buffer(b);
        }
        if let Some(t) = self.refill_time {
            e.refill_time = t;
        }
        // Checked in `merge`, so this cannot fail here.
        if let Err(err) = self.tuning.apply(&mut e) {
            tracing::error!(error = %err, "engine tuning");
        }
        e
    }

    /// Merges `args` over the config file it names (if any); no side effects.
    pub fn merge(args: &ServeArgs) -> Result<ServeConfig> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Self::merge_file(args, file)
    }

    /// Checks a config file's text as `--config` would, with no flags and
    /// no file system access (the `config_toml` fuzz target's entry point).
    #[doc(hidden)]
    pub fn check_text(text: &str) -> Result<ServeConfig> {
        let args = ServeArgs {
            dir: Some(PathBuf::from("/")),
            ..Default::default()
        };
        Self::merge_file(&args, parse_file(text)?)
    }

    fn merge_file(args: &ServeArgs, file: FileConfig) -> Result<ServeConfig> {
        let root = match args.dir.clone().or(file.root) {
            Some(r) => r,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let ftp = match (args.ftp, file.ftp) {
            (Some(a), _) => a,
            (None, Some(s)) => s
                .parse()
                .with_context(|| format!("config: ftp = {s:?} is not ADDR:PORT"))?,
            (None, None) => DEFAULT_FTP.parse().expect("constant address parses"),
        };
        let pasv_ports = match args.pasv_ports.clone().or(file.pasv_ports) {
            Some(s) => Some(parse_port_range(&s)?),
            None => None,
        };
        let pasv_address =
            match (args.pasv_address, file.pasv_address) {
                (Some(a), _) => Some(a),
                (None, Some(s)) => Some(s.parse().with_context(|| {
                    format!("config: pasv_address = {s:?} is not an IP address")
                })?),
                (None, None) => None,
            };
        let data_path = match args.data_path.clone().or(file.data_path) {
            // One default, the engine's (chosen by measurement there).
            None => sluice_engine::EngineConfig::default().data_path,
            Some(s) => s.parse::<DataPath>().map_err(|e| anyhow::anyhow!("{e}"))?,
        };
        let notsent_lowat = match args
            .notsent_lowat
            .clone()
            .or(file.notsent_lowat.map(SizeKey::text))
        {
            None => None,
            Some(s) => Some(sluice_engine::parse_notsent_lowat(&s).ok_or_else(|| {
                anyhow::anyhow!("notsent_lowat {s:?}: expected a size below 4G (e.g. 8M) or off")
            })?),
        };
        let send_buffer = match args
            .send_buffer
            .clone()
            .or(file.send_buffer.map(SizeKey::text))
        {
            None => None,
            Some(s) => Some(sluice_engine::SendBufferChoice::parse(&s).ok_or_else(|| {
                anyhow::anyhow!("send_buffer {s:?}: expected a size (e.g. 4M), auto or max")
            })?),
        };
        let refill_time = match args
            .refill_time
            .clone()
            .or(file.refill_time.map(SizeKey::text))
        {
            None => None,
            Some(s) => Some(sluice_engine::parse_refill_time(&s).ok_or_else(|| {
                anyhow::anyhow!("refill_time {s:?}: expected seconds (e.g. 4 or 0.5) or off")
            })?),
        };
        let prefetch = match args.prefetch.clone().or(file.prefetch) {
            None => sluice_engine::EngineConfig::default().prefetch,
            Some(s) => s.parse().map_err(|e| anyhow::anyhow!("{e}"))?,
        };
        let cancel = match (&args.cancel, file.cancel) {
            (Some(s), _) => sluice_engine::parse_switch(s)
                .ok_or_else(|| anyhow::anyhow!("--cancel {s:?}: expected on or off"))?,
            (None, Some(b)) => b,
            (None, None) => sluice_engine::EngineConfig::default().cancel,
        };
        let sharing = match args.sharing.clone().or(file.sharing) {
            None => sluice_engine::EngineConfig::default().sharing,
            Some(s) => s.parse().map_err(|e: String| anyhow::anyhow!("{e}"))?,
        };
        let max_sessions = args
            .max_sessions
            .or(file.max_sessions)
            .unwrap_or(DEFAULT_MAX_SESSIONS);
        if max_sessions == 0 {
            bail!("max_sessions must be at least 1");
        }
        let idle = args
            .idle_timeout
            .or(file.idle_timeout)
            .unwrap_or(DEFAULT_IDLE_SECS);
        if idle == 0 {
            bail!("idle_timeout must be at least 1 second");
        }
        let log_level = args.log_level.clone().or(file.log_level);
        if let Some(f) = &log_level {
            tracing_subscriber::EnvFilter::builder()
                .parse(f)
                .map_err(|e| anyhow::anyhow!("log_level {f:?}: {e}"))?;
        }
        let tuning = args.tuning.clone().over(file.engine.unwrap_or_default());
        // Every value checked now, so a typo stops the start with its key.
        tuning.apply(&mut sluice_engine::EngineConfig::default())?;
        let event_interval = tuning.event_interval()?;
        let tls = crate::tls::merge(
            &args.tls,
            &crate::tls::TlsFileKeys {
                https: file.https.clone(),
                ftps: file.ftps.clone(),
                tls_cert: file.tls_cert.clone(),
                tls_key: file.tls_key.clone(),
                require_tls: file.require_tls,
                ktls: file.ktls.clone(),
            },
        )?;
        if tls.server.is_none() {
            if let Some(u) = file.users.iter().find(|u| u.require_tls == Some(true)) {
                bail!(
                    "config: user {:?} has require_tls but no tls_cert/tls_key is configured",
                    u.name
                );
            }
        }
        let http_keys = crate::http::settings::HttpFileKeys {
            http: file.http.clone(),
            no_http: file.no_http,
            http_header_timeout: file.http_header_timeout,
            http_keepalive_timeout: file.http_keepalive_timeout,
            http_send_timeout: file.http_send_timeout,
            http_max_connections: file.http_max_connections,
            http_open_cache: file.http_open_cache,
        };
        // The HTTPS door has the HTTP door's deadlines and limits, even
        // with plain HTTP off.
        let https = match tls.https {
            None => None,
            Some(addr) => crate::http::settings::merge(
                &crate::http::settings::HttpArgs {
                    no_http: false,
                    ..args.http.clone()
                },
                &crate::http::settings::HttpFileKeys {
                    no_http: None,
                    ..http_keys.clone()
                },
            )?
            .map(|s| crate::http::HttpSettings {
                addr,
                explicit: true,
                ..s
            }),
        };
        let mut names = std::collections::HashSet::new();
        for u in &file.users {
            if u.name == "anonymous" || u.name == "ftp" {
                bail!("config: user {:?} is reserved for anonymous login", u.name);
            }
            if !names.insert(u.name.clone()) {
                bail!("config: user {:?} is defined twice", u.name);
            }
            if argon2::PasswordHash::new(&u.password_hash).is_err() {
                bail!(
                    "config: user {:?}: password_hash is not a PHC string (make one with `sluice hash-password`)",
                    u.name
                );
            }
        }
        let user_cue: Vec<_> = file
            .users
            .iter()
            .map(|u| (u.class.as_deref(), u.rate_cap.as_deref()))
            .collect();
        let cue = cue::merge(
            &args.cue,
            &cue::CueFileKeys {
                cue: file.cue.clone(),
                server_rate_cap: file.server_rate_cap.clone(),
                classes: file.classes.clone(),
                http_class: file.http_class.clone(),
                ftp_class: file.ftp_class.clone(),
            },
            &user_cue,
        )?;
        Ok(ServeConfig {
            cue,
            root,
            ftp,
            writable: args.writable || file.writable.unwrap_or(false),
            anonymous: file.anonymous.unwrap_or(true),
            max_sessions,
            listen_backlog: (args.listen_backlog.or(file.listen_backlog))
                .unwrap_or(crate::listener::DEFAULT_BACKLOG)
                .max(1),
            idle_timeout: Duration::from_secs(idle),
            pasv_ports,
            pasv_address,
            data_path,
            notsent_lowat,
            send_buffer,
            refill_time,
            allow_foreign_data_host: args.allow_foreign_data_host
                || file.allow_foreign_data_host.unwrap_or(false),
            prefetch,
            cancel,
            sharing,
            metrics: args.metrics.or(file.metrics),
            http: crate::http::settings::merge(&args.http, &http_keys)?,
            ftp_enabled: !(args.http.no_ftp || file.no_ftp.unwrap_or(false)),
            partials: crate::upload::PartialPolicy {
                max_age: match args.partial_max_age.or(file.partial_max_age) {
                    None => crate::upload::PartialPolicy::default().max_age,
                    Some(0) => None,
                    Some(s) => Some(Duration::from_secs(s)),
                },
                max_bytes: args
                    .partial_max_bytes
                    .or(file.partial_max_bytes)
                    .filter(|&b| b > 0),
            },
            runtime: crate::runtime::RuntimeKind::choose(
                args.runtime.as_deref(),
                file.runtime.as_deref(),
            )?,
            workers: match args.workers.or(file.workers) {
                Some(0) => bail!("workers must be at least 1"),
                w => w.map(usize::from),
            },
            users: file.users,
            tuning,
            event_interval,
            tls,
            https,
            shutdown_timeout: Duration::from_secs(
                args.shutdown_timeout
                    .or(file.shutdown_timeout)
                    .unwrap_or(DEFAULT_SHUTDOWN_SECS),
            ),
            log_level,
            log_file: args.log_file.clone().or(file.log_file),
            run_as: args.run_as.clone().or(file.run_as),
            allow_root: args.allow_root || file.allow_root.unwrap_or(false),
        })
    }
}

fn read_file(path: &Path) -> Result<FileConfig> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    if meta.len() > MAX_CONFIG_BYTES {
        bail!(
            "config file {} is larger than {} bytes",
            path.display(),
            MAX_CONFIG_BYTES
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    parse_file(&text).with_context(|| format!("config file {}", path.display()))
}

fn parse_file(text: &str) -> Result<FileConfig> {
    // toml's message names the unknown key, the expected ones and the line.
    toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Parses `LOW-HIGH` (inclusive, LOW >= 1024 is not required but LOW <= HIGH).
pub fn parse_port_range(s: &str) -> Result<(u16, u16)> {
    let (lo, hi) = s
        .split_once('-')
        .with_context(|| format!("port range {s:?}: expected LOW-HIGH"))?;
    let lo: u16 = lo
        .trim()
        .parse()
        .with_context(|| format!("port range {s:?}: bad low port"))?;
    let hi: u16 = hi
        .trim()
        .parse()
        .with_context(|| format!("port range {s:?}: bad high port"))?;
    if lo == 0 || lo > hi {
        bail!("port range {s:?}: need 1 <= LOW <= HIGH");
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests;
