//! `sluice`: the server (`sluice serve`) and the client subcommands
//! (`sluice get | put | ls`) in one binary. The server's modules live in
//! the `sluice_server` library (src/lib.rs), so fuzz targets and tests can
//! reach its parsers (the configuration file) without a process.
#![forbid(unsafe_code)]

use sluice_server::{auth, config, ftp, http, listener, logbuf, loops, metrics, runtime};

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
// Parsed once at start-up: the size of the biggest variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
    /// Copy between URLs and local paths (two ftp:// URLs: server to server).
    Cp(sluice_client::cli::CpArgs),
}

/// Allocations from this size on get their own mapping (see `serve`).
const LARGE_ALLOCATION: usize = 256 << 10;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Serve(args) => report(serve(args)),
        Cmd::HashPassword => report(hash_password()),
        Cmd::Get(a) => sluice_client::cli::run_get(a),
        Cmd::Put(a) => sluice_client::cli::run_put(a),
        Cmd::Ls(a) => sluice_client::cli::run_ls(a),
        Cmd::Cp(a) => sluice_client::cli::run_cp(a),
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
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(logbuf::LogWriter)
        .try_init();
    logbuf::install_panic_flush();
}

fn serve(args: config::ServeArgs) -> Result<()> {
    // Large blocks (read buffers, argon2's memory) go back to the kernel
    // when freed (platform::memory says why).
    sluice_platform::memory::return_large_allocations(LARGE_ALLOCATION);
    let cfg = config::ServeConfig::load(&args)?;
    init_logging();
    // Fail now, not at the first login, if the root cannot be served.
    sluice_platform::fs::ServedRoot::open(&cfg.root)
        .with_context(|| format!("cannot serve {}", cfg.root.display()))?;
    let kind = cfg.runtime;
    let workers = runtime::workers(cfg.workers)?;
    let rt = runtime::build_main(kind, workers, cfg.event_interval)?;
    let r = rt.block_on(serve_on(cfg, kind, workers));
    // Whatever access and transfer lines are still gathered.
    logbuf::flush();
    r
}

/// Everything `serve` runs, on the main runtime (loop 0 for `per-core`).
async fn serve_on(
    cfg: config::ServeConfig,
    kind: runtime::RuntimeKind,
    workers: usize,
) -> Result<()> {
    let engine = Engine::try_new(cfg.engine_config(EngineConfig::default()))
        .context("cannot start the engine")?;
    if let Some(addr) = cfg.metrics {
        metrics::start(addr, engine.clone()).await?;
    }
    // With `per-core` both front doors spread their connections over all
    // the loops (crate::loops).
    let loops = if kind == runtime::RuntimeKind::PerCore {
        loops::Loops::start(workers, cfg.event_interval)?
    } else {
        loops::Loops::here()
    };
    listener::check_fd_budget(
        cfg.max_sessions * usize::from(cfg.ftp_enabled)
            + cfg.http.as_ref().map_or(0, |h| h.max_connections),
    );
    let http_task = http::start(&cfg, &engine, &loops).await?;
    if !cfg.ftp_enabled {
        return http::serve_alone(http_task, stop_signal()).await;
    }
    let listener = ftp::bind(cfg.ftp, cfg.listen_backlog)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.ftp))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        root = %cfg.root.display(),
        writable = cfg.writable,
        data_path = %engine.config().data_path,
        max_sessions = cfg.max_sessions,
        runtime = kind.as_str(),
        workers,
        "serving"
    );
    {
        // Tests parse this line to learn the port when given port 0.
        let mut out = std::io::stdout().lock();
        writeln!(out, "ftp listening on {addr}")?;
        out.flush()?;
    }
    let ctx = Arc::new(ftp::FtpContext {
        served_root: Default::default(),
        users: auth::Users::new(&cfg),
        config: cfg,
        engine,
    });
    ftp::start_implicit(&ctx, &loops).await?;
    let ftp_task = tokio::spawn(ftp::run(ctx, listener, loops));
    tokio::select! {
        _ = ftp_task => {}
        _ = http::finished(http_task) => {}
        _ = stop_signal() => {}
    }
    Ok(())
}

/// Ctrl-C or SIGTERM: stop serving (the caller writes out the gathered
/// log lines before the process ends). SIGHUP, whose default action would
/// end the process (and every transfer with it) when an operator or a
/// logrotate script sends the conventional "reload", is logged and
/// otherwise ignored until configuration reload exists.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let ignore_hangups = async {
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                while hup.recv().await.is_some() {
                    tracing::warn!("SIGHUP ignored: configuration reload is not supported yet; restart to apply changes");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot watch SIGHUP; it will stop the server"),
        }
        std::future::pending::<()>().await
    };
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
            _ = term.recv() => tracing::info!("terminated; stopping"),
            _ = ignore_hangups => {}
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("interrupted; stopping");
        }
    }
}

fn hash_password() -> Result<()> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    let pass = line.trim_end_matches(['\r', '\n']);
    if pass.is_empty() {
        anyhow::bail!("empty password");
    }
    println!("{}", auth::hash_password(pass)?);
    Ok(())
}
