//! `sluice`: the server (`sluice serve`) and the client subcommands
//! (`sluice get | put | ls`) in one binary.
//!
//! Brief overview: [`config`] merges flags and the TOML file into a
//! `ServeConfig`; [`auth`] checks logins; [`ftp`] is the FTP front door
//! (listener, session tasks driving `sluice_ftp::session::Session`, data
//! transfers through `sluice_transfer`); [`ops`] and [`upload`] are the
//! file-system side, always through `sluice_platform::fs::ServedRoot`;
//! [`data`] opens data connections; [`xferlog`] writes one line per
//! transfer. Each front door is its own module with its own listener, so
//! another (HTTP) is one more module and one more `tokio::spawn` in
//! [`serve`].
#![forbid(unsafe_code)]

mod auth;
mod config;
mod data;
mod ftp;
mod http;
mod metrics;
mod ops;
mod upload;
mod xferlog;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use sluice_engine::{Engine, EngineConfig};

/// Sluice: bulk data transfer over FTP/GridFTP (and HTTP).
#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: bulk data transfer over FTP with the GridFTP extensions",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve a directory over FTP (anonymous, read-only by default).
    ///
    /// Logs go to stderr (RUST_LOG=debug for more; RUST_LOG=xferlog=info
    /// for transfer lines only). The bound address is printed on stdout as
    /// `ftp listening on ADDR`.
    Serve(config::ServeArgs),
    /// Print an argon2 hash of a password (read from stdin) for a
    /// `[[user]]` entry's `password_hash` in the config file.
    HashPassword,
    /// Download a file.
    Get(sluice_client::cli::GetArgs),
    /// Upload a file.
    Put(sluice_client::cli::PutArgs),
    /// List a directory.
    Ls(sluice_client::cli::LsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Serve(args) => report(serve(args)),
        Cmd::HashPassword => report(hash_password()),
        Cmd::Get(a) => sluice_client::cli::run_get(a),
        Cmd::Put(a) => sluice_client::cli::run_put(a),
        Cmd::Ls(a) => sluice_client::cli::run_ls(a),
    }
}

fn report(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn serve(args: config::ServeArgs) -> Result<()> {
    let cfg = config::ServeConfig::load(&args)?;
    init_logging();
    // Fail now, not at the first login, if the root cannot be served.
    sluice_platform::fs::ServedRoot::open(&cfg.root)
        .with_context(|| format!("cannot serve {}", cfg.root.display()))?;
    let rt = build_runtime()?;
    rt.block_on(async move {
        let engine = Engine::try_new(EngineConfig {
            data_path: cfg.data_path,
            prefetch: cfg.prefetch,
            cancel: cfg.cancel,
            // SLUICE_NOTSENT_LOWAT, SLUICE_CHUNK_SIZE, ... (engine tuning.rs).
            ..EngineConfig::default().with_env_overrides()
        })
            .context("cannot start the engine")?;
        if let Some(addr) = cfg.metrics {
            metrics::start(addr, engine.clone()).await?;
        }
        // HTTP front door (crate::http) on the same engine; --no-ftp serves it alone.
        let http_task = http::start(&cfg, &engine).await?;
        if !cfg.ftp_enabled {
            return http::serve_alone(http_task).await;
        }
        let listener = ftp::bind(cfg.ftp).await.with_context(|| format!("cannot listen on {}", cfg.ftp))?;
        let addr = listener.local_addr()?;
        tracing::info!(
            root = %cfg.root.display(),
            writable = cfg.writable,
            data_path = %engine.config().data_path,
            max_sessions = cfg.max_sessions,
            "serving"
        );
        {
            // Tests parse this line to learn the port when given port 0.
            let mut out = std::io::stdout().lock();
            writeln!(out, "ftp listening on {addr}")?;
            out.flush()?;
        }
        let ctx = Arc::new(ftp::FtpContext { users: auth::Users::new(&cfg), config: cfg, engine });
        let ftp_task = tokio::spawn(ftp::run(ctx, listener));
        tokio::select! {
            _ = ftp_task => {}
            _ = http::finished(http_task) => {}
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
        }
        Ok(())
    })
}

/// The tokio runtime that runs every session. `SLUICE_RUNTIME` picks it:
/// `multi` (default; work stealing) or `current` (one event-loop thread;
/// disk reads stay on the engine's own threads). `SLUICE_WORKERS` sets the
/// multi-thread worker count, by default half the cores (at least one);
/// `SLUICE_EVENT_INTERVAL` how many tasks a worker polls between checks of
/// the I/O driver (tokio's default 61).
///
/// Why half the cores, measured (bench/dlcost.py, 2 cores, warm 2 GiB over
/// loopback, sendfile): a sender spends its time in the kernel's TCP work,
/// and each peer (and the kernel's network processing) needs a core too; a
/// worker per core then mostly adds cross-thread wake-ups and steals. One
/// worker instead of two cut server context switches per GiB from ~775 to
/// ~440 for one stream and ~410 to ~330 for 16 concurrent downloads, with
/// the same MB/s. Only measured on 2 cores: revisit on larger hosts.
fn build_runtime() -> Result<tokio::runtime::Runtime> {
    let kind = std::env::var("SLUICE_RUNTIME").unwrap_or_default();
    let mut b = match kind.trim() {
        "" | "multi" => tokio::runtime::Builder::new_multi_thread(),
        "current" => tokio::runtime::Builder::new_current_thread(),
        other => anyhow::bail!("SLUICE_RUNTIME={other:?}: expected multi or current"),
    };
    if kind.trim() != "current" {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = env_number("SLUICE_WORKERS")?.unwrap_or(cores / 2);
        b.worker_threads(workers.max(1));
    }
    if let Some(n) = env_number("SLUICE_EVENT_INTERVAL")? {
        b.event_interval(n.max(1) as u32);
    }
    b.enable_all().thread_name("sluice").build().context("cannot start the runtime")
}

fn env_number(key: &str) -> Result<Option<usize>> {
    match std::env::var(key) {
        Ok(v) => v.trim().parse().map(Some).with_context(|| format!("{key}={v:?}: not a number")),
        Err(_) => Ok(None),
    }
}

fn hash_password() -> Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("cannot read the password from stdin")?;
    let pass = line.trim_end_matches(['\r', '\n']);
    if pass.is_empty() {
        anyhow::bail!("empty password");
    }
    println!("{}", auth::hash_password(pass)?);
    Ok(())
}
