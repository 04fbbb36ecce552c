//! SIGHUP: the configuration read again (the same flags over the file as
//! at start), checked whole, and applied without dropping a session. A
//! new configuration that does not load (a TOML error, a bad value, a
//! certificate that does not load) is refused with one log line saying
//! why, and the running one stays.
//!
//! | what | takes effect |
//! |---|---|
//! | `[[user]]`, `anonymous`, `writable` | at the next login (sessions already logged in keep their login) |
//! | `max_sessions`, `http_max_connections` | at once: more room now; fewer, as sessions end |
//! | `idle_timeout`, `pasv_ports`, `pasv_address`, `allow_foreign_data_host`, `partial_max_*` | for sessions that connect after the reload |
//! | `log_level` | at once |
//! | certificates (`tls_cert`, `tls_key`: the files read again), `require_tls` | HTTPS: new handshakes at once; FTPS: sessions that connect after the reload |
//!
//! Everything else (root, listen addresses, `no_ftp`/`no_http`, runtime,
//! workers, the engine and the other HTTP settings, metrics, the log file's path,
//! the shutdown timeout) is read at start only: a reload that changes it
//! says so in the log and keeps the running value.

use std::sync::{Arc, Mutex, OnceLock, RwLock};

use anyhow::Result;
use tokio::sync::Semaphore;

use crate::auth::Users;
use crate::config::{ServeArgs, ServeConfig};

/// The configuration in force, read by sessions (cheap: an `Arc` clone).
#[derive(Debug)]
pub struct Current {
    state: RwLock<(Arc<ServeConfig>, Users)>,
    /// The FTP door's connection limit, registered by `ftp::run`.
    ftp_gate: OnceLock<Gate>,
    /// The HTTP door's, registered by `http::start`.
    http_gate: OnceLock<Gate>,
    /// The HTTPS door's certificate, registered by `http::start`.
    https: OnceLock<Arc<crate::tls::Acceptor>>,
}

impl Current {
    /// The configuration the server started with.
    pub fn new(config: &ServeConfig) -> Current {
        Current {
            state: RwLock::new((Arc::new(config.clone()), Users::new(config))),
            ftp_gate: OnceLock::new(),
            http_gate: OnceLock::new(),
            https: OnceLock::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ServeConfig> {
        Arc::clone(&self.read().0)
    }

    /// The login table in force.
    pub fn users(&self) -> Users {
        self.read().1.clone()
    }

    /// Registers the FTP door's gate (made with `capacity` permits), so a
    /// reload can resize it.
    pub fn set_ftp_gate(&self, gate: Arc<Semaphore>, capacity: usize) {
        let _ = self.ftp_gate.set(Gate::new(gate, capacity));
    }

    /// Registers the HTTP door's gate (`http_max_connections`).
    pub fn set_http_gate(&self, gate: Arc<Semaphore>, capacity: usize) {
        let _ = self.http_gate.set(Gate::new(gate, capacity));
    }

    /// Registers the HTTPS door's acceptor, so a reload can give it new
    /// certificates (FTPS sessions read theirs from the configuration in
    /// force when they connect).
    pub fn set_https_acceptor(&self, acceptor: Arc<crate::tls::Acceptor>) {
        let _ = self.https.set(acceptor);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (Arc<ServeConfig>, Users)> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `new` in force (already merged with what cannot change).
    fn set(&self, new: ServeConfig) {
        let mut st = self.state.write().unwrap_or_else(|p| p.into_inner());
        if let (Some(a), Some(server)) = (self.https.get(), &new.tls.server) {
            a.replace(Arc::clone(&server.https));
        }
        if let Some(gate) = self.ftp_gate.get() {
            gate.resize(new.max_sessions);
        }
        if let (Some(gate), Some(h)) = (self.http_gate.get(), &new.http) {
            gate.resize(h.max_connections);
        }
        let users = st.1.reloaded(&new);
        *st = (Arc::new(new), users);
    }
}

/// A door's connection limit that a reload can change.
#[derive(Debug)]
struct Gate {
    sem: Arc<Semaphore>,
    state: Arc<Mutex<GateState>>,
}

#[derive(Debug)]
struct GateState {
    /// Permits in existence (in use or free) once any shrink is done.
    capacity: usize,
    /// Bumped by every resize; a shrink of an older one gives up.
    generation: u64,
    shrinking: Option<tokio::task::JoinHandle<()>>,
}

impl Gate {
    fn new(sem: Arc<Semaphore>, capacity: usize) -> Gate {
        Gate {
            sem,
            state: Arc::new(Mutex::new(GateState {
                capacity,
                generation: 0,
                shrinking: None,
            })),
        }
    }

    /// Grows the limit at once, or shrinks it by taking permits out as
    /// connections end (a task waits for them and forgets them). A resize
    /// while an older shrink still waits replaces it.
    fn resize(&self, want: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.generation += 1;
        if let Some(h) = st.shrinking.take() {
            h.abort();
        }
        if want >= st.capacity {
            self.sem.add_permits(want - st.capacity);
            st.capacity = want;
            return;
        }
        let n = u32::try_from(st.capacity - want).unwrap_or(u32::MAX);
        let (sem, state, generation) = (
            Arc::clone(&self.sem),
            Arc::clone(&self.state),
            st.generation,
        );
        st.shrinking = Some(tokio::spawn(async move {
            let Ok(permits) = sem.acquire_many_owned(n).await else {
                return;
            };
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            if st.generation == generation {
                permits.forget();
                st.capacity = want;
                st.shrinking = None;
            }
            // Else a newer resize counts from the old capacity: the
            // permits go back as `permits` drops.
        }));
    }
}

/// A check-then-apply step run by every reload: it checks its part of
/// the new configuration and returns what applies it, or an error that
/// refuses the whole reload. (The TLS front doors load new certificates
/// here; nothing is applied unless every step checked out.)
pub type Hook = Box<dyn Fn(&ServeConfig) -> Result<Box<dyn FnOnce() + Send>> + Send + Sync>;

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Keys that changed but need a restart (kept as they run).
    pub need_restart: Vec<&'static str>,
}

/// Reloads on SIGHUP.
pub struct Reloader {
    args: ServeArgs,
    current: Arc<Current>,
    hooks: Vec<Hook>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("current", &self.current)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl Reloader {
    /// Reloads re-read the configuration `args` named at start.
    pub fn new(args: ServeArgs, current: Arc<Current>) -> Reloader {
        Reloader {
            args,
            current,
            hooks: Vec::new(),
        }
    }

    /// Adds a step every reload runs (see [`Hook`]).
    pub fn on_reload(&mut self, hook: Hook) {
        self.hooks.push(hook);
    }

    /// Loads, checks and applies the configuration; on error nothing
    /// changed.
    pub fn reload(&self) -> Result<Outcome> {
        let new = ServeConfig::load(&self.args)?;
        let old = self.current.config();
        let mut apply = Vec::new();
        for hook in &self.hooks {
            apply.push(hook(&new)?);
        }
        let (merged, need_restart) = merge(&old, new);
        self.current.set(merged);
        for a in apply {
            a();
        }
        Ok(Outcome { need_restart })
    }
}

/// `old` with what a reload may change taken from `new`, and the names of
/// the start-only keys that differ.
fn merge(old: &ServeConfig, new: ServeConfig) -> (ServeConfig, Vec<&'static str>) {
    let mut m = old.clone();
    m.users = new.users.clone();
    m.anonymous = new.anonymous;
    m.writable = new.writable;
    m.max_sessions = new.max_sessions;
    m.idle_timeout = new.idle_timeout;
    m.pasv_ports = new.pasv_ports;
    m.pasv_address = new.pasv_address;
    m.allow_foreign_data_host = new.allow_foreign_data_host;
    m.partials = new.partials;
    m.log_level = new.log_level.clone();
    // New certificate files, or the same files with new contents (a renewed
    // certificate), and the TLS policy; the TLS doors' addresses stay.
    if new.tls.server.is_some() || old.tls.server.is_none() {
        m.tls.files = new.tls.files.clone();
        m.tls.server = new.tls.server.clone();
    }
    m.tls.require_tls = new.tls.require_tls;
    if let (Some(mh), Some(nh)) = (m.http.as_mut(), new.http.as_ref()) {
        mh.max_connections = nh.max_connections;
    }
    // Every other difference is one the running server cannot take.
    let mut need_restart = Vec::new();
    let mut check = |name, differs: bool| {
        if differs {
            need_restart.push(name);
        }
    };
    check("root", old.root != new.root);
    check(
        "ftp",
        old.ftp != new.ftp || old.ftp_enabled != new.ftp_enabled,
    );
    let http_rest = |c: &ServeConfig| {
        c.http.clone().map(|mut h| {
            h.max_connections = 0;
            format!("{h:?}")
        })
    };
    check("http", http_rest(old) != http_rest(&new));
    check(
        "runtime",
        old.runtime != new.runtime || old.workers != new.workers,
    );
    check("metrics", old.metrics != new.metrics);
    check(
        "https/ftps",
        old.tls.https != new.tls.https || old.tls.ftps != new.tls.ftps,
    );
    check("listen_backlog", old.listen_backlog != new.listen_backlog);
    check("log_file", old.log_file != new.log_file);
    check(
        "shutdown_timeout",
        old.shutdown_timeout != new.shutdown_timeout,
    );
    let engine = |c: &ServeConfig| {
        format!(
            "{:?}",
            c.engine_config(sluice_engine::EngineConfig::default())
        )
    };
    check("engine", engine(old) != engine(&new));
    (m, need_restart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_for(dir: &std::path::Path, text: &str) -> ServeArgs {
        let path = dir.join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        ServeArgs {
            dir: Some(dir.to_path_buf()),
            config: Some(path),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn reload_applies_users_and_limits_and_refuses_a_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        let args = args_for(dir.path(), "max_sessions = 4\nanonymous = true\n");
        let cfg = ServeConfig::load(&args).unwrap();
        let current = Arc::new(Current::new(&cfg));
        let gate = Arc::new(Semaphore::new(4));
        current.set_ftp_gate(Arc::clone(&gate), 4);
        let mut r = Reloader::new(args.clone(), Arc::clone(&current));
        let applied = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&applied);
        r.on_reload(Box::new(move |_| {
            let seen = Arc::clone(&seen);
            Ok(Box::new(move || {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }))
        }));
        let hash = crate::auth::hash_password("pw").unwrap();
        std::fs::write(
            args.config.as_ref().unwrap(),
            format!(
                "max_sessions = 6\nanonymous = false\nidle_timeout = 9\nworkers = 3\n\
                 [[user]]\nname = \"al\"\npassword_hash = \"{hash}\"\n"
            ),
        )
        .unwrap();
        let out = r.reload().unwrap();
        assert_eq!(out.need_restart, ["runtime"]);
        let c = current.config();
        assert_eq!(
            (c.max_sessions, c.idle_timeout.as_secs(), c.anonymous),
            (6, 9, false)
        );
        assert_eq!(c.workers, None, "start-only keys keep their running value");
        assert_eq!(gate.available_permits(), 6);
        assert!(current.users().check("al", "pw").is_some());
        assert!(current.users().check("anonymous", "x").is_none());
        assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A broken file: refused, the running configuration stays.
        std::fs::write(args.config.as_ref().unwrap(), "max_sessions = [\n").unwrap();
        assert!(r.reload().is_err());
        assert_eq!(current.config().max_sessions, 6);
        // A hook that refuses stops the reload before anything applies.
        std::fs::write(args.config.as_ref().unwrap(), "max_sessions = 2\n").unwrap();
        r.on_reload(Box::new(|_| anyhow::bail!("certificate does not load")));
        let err = r.reload().unwrap_err().to_string();
        assert!(err.contains("certificate"), "{err}");
        assert_eq!(current.config().max_sessions, 6);
        assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Shrinking takes permits back as they come free; growing again
        // before that is done counts from the old size.
        r.hooks.pop();
        let held = Arc::clone(&gate).acquire_many_owned(5).await.unwrap();
        r.reload().unwrap(); // 6 -> 2: waits for 4 of the 5 in use
        std::fs::write(args.config.as_ref().unwrap(), "max_sessions = 7\n").unwrap();
        r.reload().unwrap(); // 6 -> 7, the shrink to 2 dropped
        drop(held);
        let settle = |want: usize| {
            let gate = Arc::clone(&gate);
            async move {
                tokio::time::timeout(std::time::Duration::from_secs(10), async {
                    while gate.available_permits() != want {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                })
                .await
                .unwrap_or_else(|_| panic!("{} permits, not {want}", gate.available_permits()))
            }
        };
        settle(7).await;
        std::fs::write(args.config.as_ref().unwrap(), "max_sessions = 3\n").unwrap();
        r.reload().unwrap();
        settle(3).await;
    }

    #[tokio::test]
    async fn http_connection_limit_reloads_other_http_keys_need_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let args = args_for(dir.path(), "http_max_connections = 8\n");
        let current = Arc::new(Current::new(&ServeConfig::load(&args).unwrap()));
        let gate = Arc::new(Semaphore::new(8));
        current.set_http_gate(Arc::clone(&gate), 8);
        let r = Reloader::new(args.clone(), Arc::clone(&current));
        let conf = args.config.as_ref().unwrap();
        std::fs::write(conf, "http_max_connections = 12\n").unwrap();
        assert!(r.reload().unwrap().need_restart.is_empty());
        assert_eq!(gate.available_permits(), 12);
        assert_eq!(current.config().http.as_ref().unwrap().max_connections, 12);
        std::fs::write(conf, "http_max_connections = 12\nhttp_send_timeout = 5\n").unwrap();
        assert_eq!(r.reload().unwrap().need_restart, ["http"]);
    }
}
