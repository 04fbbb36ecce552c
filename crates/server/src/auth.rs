//! Logins: anonymous (`anonymous`/`ftp`, any password) and the configured
//! users (argon2 PHC hashes). Verification is CPU work of tens of
//! milliseconds by design, so the shell runs [`Users::check`] on a blocking
//! thread.

use std::path::PathBuf;
use std::sync::Arc;

use argon2::password_hash::{PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, PasswordHash};

use crate::config::ServeConfig;

/// Who logged in, and what they may do.
#[derive(Clone, Debug)]
pub struct Login {
    /// Root directory of this login.
    pub root: PathBuf,
    /// May change files.
    pub writable: bool,
    /// Anonymous login (never granted foreign data hosts).
    pub anonymous: bool,
}

/// The login table.
#[derive(Clone, Debug)]
pub struct Users {
    config: Arc<ServeConfig>,
    /// Password checks allowed at once, server-wide. Each argon2 check
    /// takes ~19 MiB and tens of milliseconds of a core; unbounded, 250
    /// connections sending USER x / PASS y took 5 GiB and 250 threads
    /// (outside probe, 2026-11-22).
    checks: Arc<tokio::sync::Semaphore>,
}

impl Users {
    /// Builds the table from the merged configuration.
    pub fn new(config: &ServeConfig) -> Users {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Users {
            config: Arc::new(config.clone()),
            checks: Arc::new(tokio::sync::Semaphore::new(cores)),
        }
    }

    /// The table of a reloaded configuration (SIGHUP, crate::reload),
    /// sharing this one's bound on password checks.
    pub fn reloaded(&self, config: &ServeConfig) -> Users {
        Users {
            config: Arc::new(config.clone()),
            checks: Arc::clone(&self.checks),
        }
    }

    /// True when checking this user's password costs a hash: a name other
    /// than the anonymous ones while users are configured. With no users
    /// configured there are no names to hide, so no hash is spent.
    pub fn check_is_costly(&self, user: &str) -> bool {
        !(user == "anonymous" || user == "ftp" || self.config.users.is_empty())
    }

    /// Whether `user` must protect the control connection (AUTH TLS)
    /// before logging in: the user's own `require_tls`, else the global
    /// one (also for anonymous and for names that are not configured, so
    /// the answer tells nothing about which names exist).
    pub fn requires_tls(&self, user: &str) -> bool {
        let global = self.config.tls.require_tls;
        if user == "anonymous" || user == "ftp" {
            return global;
        }
        self.config
            .users
            .iter()
            .find(|u| u.name == user)
            .and_then(|u| u.require_tls)
            .unwrap_or(global)
    }

    /// The server-wide bound on password checks running at once.
    pub fn check_slots(&self) -> Arc<tokio::sync::Semaphore> {
        Arc::clone(&self.checks)
    }

    /// Checks a USER/PASS pair. `None` means 530.
    pub fn check(&self, user: &str, pass: &str) -> Option<Login> {
        if user == "anonymous" || user == "ftp" {
            return self.config.anonymous.then(|| Login {
                root: self.config.root.clone(),
                writable: self.config.writable,
                anonymous: true,
            });
        }
        if self.config.users.is_empty() {
            return None;
        }
        let u = self.config.users.iter().find(|u| u.name == user);
        let Some(u) = u else {
            // Spend the same time as a real check, so the reply time does
            // not tell which user names exist.
            let _ = verify(DUMMY_HASH, pass);
            return None;
        };
        verify(&u.password_hash, pass).then(|| Login {
            root: u.root.clone().unwrap_or_else(|| self.config.root.clone()),
            writable: u.writable,
            anonymous: false,
        })
    }
}

/// A hash of a random password, verified against when the user is unknown.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$IN7lY2vYsXUHwxQy938Ykg$2+veh4CT0HM4sDkD3+te/Dqpi5f5oHuJ7vhvP0uVjZ4";

fn verify(hash: &str, pass: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(h) => Argon2::default()
            .verify_password(pass.as_bytes(), &h)
            .is_ok(),
        Err(_) => false,
    }
}

/// Hashes a password into an argon2id PHC string for `[[user]]`.
pub fn hash_password(pass: &str) -> anyhow::Result<String> {
    // 16 random bytes from the kernel; no RNG crate needed for one salt.
    let mut raw = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut raw)?;
    let salt =
        SaltString::encode_b64(&raw).map_err(|e| anyhow::anyhow!("cannot encode salt: {e}"))?;
    Argon2::default()
        .hash_password(pass.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("cannot hash password: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ServeArgs, UserConfig};

    /// The configuration of `sluice serve DIR` with no file and no flags.
    fn config_in(dir: &std::path::Path) -> ServeConfig {
        let args = ServeArgs {
            dir: Some(dir.into()),
            ..Default::default()
        };
        ServeConfig::load(&args).unwrap()
    }

    #[test]
    fn anonymous_and_configured_users() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config_in(dir.path());
        config.users.push(UserConfig {
            name: "alice".into(),
            password_hash: hash_password("s3cret").unwrap(),
            root: None,
            writable: true,
            require_tls: None,
            rate_cap: None,
            class: None,
        });
        let users = Users::new(&config);
        let anon = users.check("anonymous", "x@y").unwrap();
        assert!(anon.anonymous && !anon.writable);
        assert!(users.check("ftp", "").is_some());
        assert!(users.check("bob", "s3cret").is_none());
        assert!(users.check("alice", "wrong").is_none());
        let a = users.check("alice", "s3cret").unwrap();
        assert!(a.writable && !a.anonymous);
        // Unknown names cost a hash too (reply times hide which exist).
        assert!(users.check_is_costly("bob") && users.check_is_costly("alice"));
        assert!(!users.check_is_costly("anonymous"));
    }

    #[test]
    fn without_users_no_password_costs_a_hash() {
        let dir = tempfile::tempdir().unwrap();
        let users = Users::new(&config_in(dir.path()));
        assert!(!users.check_is_costly("x"));
        assert!(users.check("x", "y").is_none());
        assert!(users.check_slots().available_permits() >= 1);
    }
}
