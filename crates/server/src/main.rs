//! `sluice`: the server (`sluice serve`) and the client subcommands
//! (`sluice get | put | ls`) in one binary. The server's modules live in
//! the `sluice_server` library (src/lib.rs), so fuzz targets and tests can
//! reach its parsers (the configuration file) without a process.
#![forbid(unsafe_code)]

use sluice_server::shutdown::{self, Shutdown};
use sluice_server::signals::{SignalEvent, Signals};
use sluice_server::{auth, config, ftp, http, listener, logbuf, loops, metrics, reload, runtime};

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
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
    /// Serve a directory over FTP and HTTP (anonymous, read-only by default).
    ///
    /// Logs go to stderr or --log-file (--log-level debug for more;
    /// xferlog=info for transfer lines only). The bound addresses are
    /// printed on stdout as `ftp listening on ADDR` and `http listening on
    /// ADDR`.
    ///
    /// Signals: SIGTERM or SIGINT stops (new connections refused, running
    /// transfers get --shutdown-timeout, then are cut; a cut upload stays a
    /// resumable partial; a second signal cuts at once). SIGHUP reloads the
    /// configuration (users, limits, log level; a bad file is refused and
    /// the running one stays). SIGUSR1 reopens the log file.
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
    /// Print a man page (roff) made from these options: `sluice man | man -l -`,
    /// or `sluice man serve` for `sluice-serve(1)`.
    Man {
        /// The subcommand whose page to print (default: sluice(1)).
        command: Option<String>,
    },
    /// Print a shell completion script made from these options, e.g.
    /// `sluice completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
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
        Cmd::Man { command } => report(man(command.as_deref())),
        Cmd::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "sluice", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    }
}

/// `sluice man [COMMAND]`: the page of `sluice` or of one subcommand
/// (named `sluice-COMMAND`, as git and cargo name theirs).
fn man(command: Option<&str>) -> Result<()> {
    let top = Cli::command();
    let page = match command {
        None => top,
        Some(name) => {
            let sub = top
                .find_subcommand(name)
                .with_context(|| format!("no subcommand {name:?}"))?
                .clone();
            // clap names are &'static str (without its `string` feature);
            // one small string, once, in a process about to exit.
            let full: &'static str = Box::leak(format!("sluice-{name}").into_boxed_str());
            sub.name(full).bin_name(full)
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::io::stdout().write_all(&out)?;
    Ok(())
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

/// Swaps the log filter in force (a SIGHUP with a new `log_level`).
type SetFilter = Arc<dyn Fn(tracing_subscriber::EnvFilter) + Send + Sync>;

/// The filter `log_level` asks for (`None`: RUST_LOG, else info).
fn log_filter(level: Option<&str>) -> Result<tracing_subscriber::EnvFilter> {
    match level {
        Some(l) => tracing_subscriber::EnvFilter::builder()
            .parse(l)
            .map_err(|e| anyhow::anyhow!("log_level {l:?}: {e}")),
        None => Ok(tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))),
    }
}

fn init_logging(cfg: &config::ServeConfig) -> Result<SetFilter> {
    if let Some(path) = &cfg.log_file {
        logbuf::log_to_file(path)
            .with_context(|| format!("cannot open the log file {}", path.display()))?;
    }
    let to_terminal = cfg.log_file.is_none() && std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter(cfg.log_level.as_deref())?)
        .with_ansi(to_terminal)
        .with_writer(logbuf::LogWriter)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    let _ = builder.try_init();
    logbuf::install_panic_flush();
    Ok(Arc::new(move |f| {
        if let Err(e) = handle.reload(f) {
            tracing::warn!(error = %e, "cannot change the log filter");
        }
    }))
}

fn serve(args: config::ServeArgs) -> Result<()> {
    // Large blocks (read buffers, argon2's memory) go back to the kernel
    // when freed (platform::memory says why).
    sluice_platform::memory::return_large_allocations(LARGE_ALLOCATION);
    if args.check_config {
        return check_config(&args);
    }
    let cfg = config::ServeConfig::load(&args)?;
    let set_filter = init_logging(&cfg)?;
    sluice_server::privileges::check(&cfg)?;
    // Fail now, not at the first login, if the root cannot be served.
    sluice_platform::fs::ServedRoot::open(&cfg.root)
        .with_context(|| format!("cannot serve {}", cfg.root.display()))?;
    let kind = cfg.runtime;
    let workers = runtime::workers(cfg.workers)?;
    let rt = runtime::build_main(kind, workers, cfg.event_interval)?;
    let r = rt.block_on(serve_on(cfg, args, set_filter, kind, workers));
    // Whatever access and transfer lines are still gathered.
    logbuf::flush();
    r
}

/// `serve --check-config`: everything `serve` checks before it binds
/// (the flags, the file, the served root and every user's root), then a
/// summary on stdout. An error ends `serve` with exit 2 (`report`).
fn check_config(args: &config::ServeArgs) -> Result<()> {
    let cfg = config::ServeConfig::load(args).context("configuration error")?;
    sluice_platform::fs::ServedRoot::open(&cfg.root)
        .with_context(|| format!("configuration error: cannot serve {}", cfg.root.display()))?;
    for u in &cfg.users {
        if let Some(root) = &u.root {
            sluice_platform::fs::ServedRoot::open(root).with_context(|| {
                format!(
                    "configuration error: user {:?}: cannot serve its root {}",
                    u.name,
                    root.display()
                )
            })?;
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "configuration OK{}",
        args.config
            .as_ref()
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default()
    )?;
    writeln!(out, "  root: {}", cfg.root.display())?;
    match cfg.ftp_enabled {
        true => writeln!(out, "  ftp: {}", cfg.ftp)?,
        false => writeln!(out, "  ftp: off")?,
    }
    match &cfg.http {
        Some(h) => writeln!(out, "  http: {}", h.addr)?,
        None => writeln!(out, "  http: off")?,
    }
    writeln!(
        out,
        "  logins: {}{} user(s)",
        if cfg.anonymous { "anonymous and " } else { "" },
        cfg.users.len()
    )?;
    Ok(())
}

/// Everything `serve` runs, on the main runtime (loop 0 for `per-core`).
async fn serve_on(
    cfg: config::ServeConfig,
    args: config::ServeArgs,
    set_filter: SetFilter,
    kind: runtime::RuntimeKind,
    workers: usize,
) -> Result<()> {
    // Caught before anything listens: a signal sent as soon as the
    // `listening` lines are out must find its handler.
    let mut signals = Signals::install().context("cannot install signal handlers")?;
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
    let (control, shutdown) = Shutdown::new();
    let current = Arc::new(reload::Current::new(&cfg));
    let mut reloader = reload::Reloader::new(args, Arc::clone(&current));
    reloader.on_reload(Box::new(move |new: &config::ServeConfig| {
        let filter = log_filter(new.log_level.as_deref())?;
        let set = Arc::clone(&set_filter);
        Ok(Box::new(move || set(filter)))
    }));
    let http_task = http::start(&cfg, &engine, &loops, &shutdown, &current).await?;
    let ftp_task = if cfg.ftp_enabled {
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
            served_store: Default::default(),
            current: Arc::clone(&current),
            config: cfg.clone(),
            engine,
            shutdown: shutdown.clone(),
        });
        // The implicit FTPS door (--ftps) binds here too, before the user
        // switch; it accepts once the server serves, like the others.
        ftp::start_implicit(&ctx, &loops).await?;
        // Every listener is bound: no more need for root.
        sluice_server::privileges::drop_to(&cfg)?;
        Some(tokio::spawn(ftp::run(ctx, listener, loops)))
    } else {
        if http_task.is_none() {
            anyhow::bail!("nothing to serve: FTP is off (--no-ftp) and HTTP is not listening");
        }
        sluice_server::privileges::drop_to(&cfg)?;
        None
    };
    // Every listener is bound and the user switched: accept.
    control.serve();
    let ftp_done = async {
        match ftp_task {
            Some(t) => {
                if let Err(e) = t.await {
                    tracing::error!(error = %e, "ftp front door stopped");
                }
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(ftp_done);
    let http_done = http::finished(http_task);
    tokio::pin!(http_done);
    loop {
        tokio::select! {
            _ = &mut ftp_done => break,
            _ = &mut http_done => break,
            ev = signals.next() => match ev {
                SignalEvent::Stop(name) => {
                    tracing::info!(signal = name, "stopping");
                    break;
                }
                SignalEvent::Reload => {
                    reopen_log("SIGHUP");
                    match reloader.reload() {
                        Ok(out) if out.need_restart.is_empty() => {
                            tracing::info!("SIGHUP: configuration reloaded")
                        }
                        Ok(out) => tracing::warn!(
                            need_restart = ?out.need_restart,
                            "SIGHUP: configuration reloaded, except keys read at start only (kept as they run; restart to apply)"
                        ),
                        Err(e) => tracing::error!(
                            "SIGHUP: new configuration refused, the running one stays: {e:#}"
                        ),
                    }
                }
                SignalEvent::Reopen => reopen_log("SIGUSR1"),
            },
        }
    }
    stop(&control, cfg.shutdown_timeout, &mut signals).await;
    Ok(())
}

/// Reopens the log file (logrotate), and says so in the new file.
fn reopen_log(signal: &str) {
    match logbuf::reopen() {
        Ok(Some(path)) => tracing::info!(signal, path = %path.display(), "log file reopened"),
        Ok(None) => {
            if signal == "SIGUSR1" {
                tracing::info!("SIGUSR1: no log file to reopen (the log goes to stderr)");
            }
        }
        Err(e) => {
            tracing::error!(signal, error = %e, "cannot reopen the log file; still writing the old one")
        }
    }
}

/// The stop (crate::shutdown): refuse new connections, give running
/// transfers `grace` to finish (a second SIGTERM/SIGINT ends it early),
/// then cut them and wait a bounded while for them to put their partials
/// away.
async fn stop(control: &shutdown::Control, grace: Duration, signals: &mut Signals) {
    control.drain();
    tracing::info!(
        live = control.live(),
        shutdown_timeout = grace.as_secs(),
        "new connections refused; running transfers may finish"
    );
    let wait = async {
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = control.all_ended() => return true,
                _ = &mut deadline => {
                    tracing::warn!(live = control.live(), "shutdown timeout over; ending running transfers");
                    return false;
                }
                ev = signals.next() => match ev {
                    SignalEvent::Stop(name) => {
                        tracing::warn!(signal = name, live = control.live(), "second stop signal; ending running transfers now");
                        return false;
                    }
                    _ => tracing::info!("signal ignored while stopping"),
                },
            }
        }
    };
    if wait.await {
        tracing::info!("stopped: every connection finished");
        return;
    }
    control.cut();
    match tokio::time::timeout(shutdown::CUT_GRACE, control.all_ended()).await {
        Ok(()) => tracing::info!("stopped"),
        Err(_) => tracing::warn!(live = control.live(), "stopped with connections still open"),
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
