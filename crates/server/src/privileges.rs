//! Running as root: bind the listeners (ports below 1024 need root or
//! CAP_NET_BIND_SERVICE), then switch for good to the `--run-as` user
//! (its groups, gid, uid; no way back), before the first connection is
//! accepted.
//!
//! Without `--run-as`, serving as root is refused when a listener is on
//! an address reachable from other networks (a wildcard such as 0.0.0.0
//! or [::], or a global unicast address) unless `--allow-root` says it
//! is meant; on loopback and private addresses (a developer's machine,
//! CI, the lab's network namespaces, all of which run as root) it is
//! allowed with a warning. docs/SECURITY.md, "Privileges", says why.

use std::ffi::CString;
use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context, Result};
use nix::unistd::{Uid, User};

use crate::config::ServeConfig;

/// The addresses the server will listen on.
fn listen_addrs(cfg: &ServeConfig) -> Vec<SocketAddr> {
    let mut v = Vec::new();
    if cfg.ftp_enabled {
        v.push(cfg.ftp);
    }
    if let Some(h) = &cfg.http {
        v.push(h.addr);
    }
    v.extend(cfg.metrics);
    v
}

/// True for an address other networks can reach: a wildcard, or a
/// global unicast one (not loopback, private, link-local, CGNAT or ULA).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                // 100.64.0.0/10, carrier-grade NAT (RFC 6598).
                || (o[0] == 100 && (o[1] & 0xc0) == 64))
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                let s = a.segments()[0];
                !(a.is_loopback()
                    // fc00::/7 unique local, fe80::/10 link-local.
                    || (s & 0xfe00) == 0xfc00
                    || (s & 0xffc0) == 0xfe80)
            }
        },
    }
}

/// Before binding: the root policy. Errors say what to give.
pub fn check(cfg: &ServeConfig) -> Result<()> {
    let root = Uid::effective().is_root();
    match (&cfg.run_as, root) {
        (Some(name), false) => {
            let user = lookup(name)?;
            if user.uid != Uid::effective() {
                bail!(
                    "run_as {name:?}: switching users needs root (running as uid {})",
                    Uid::effective()
                );
            }
            Ok(())
        }
        (Some(name), true) => lookup(name).map(|_| ()),
        (None, false) => Ok(()),
        (None, true) if cfg.allow_root => {
            tracing::warn!("serving as root (allow_root); prefer run_as NAME");
            Ok(())
        }
        (None, true) => {
            let public: Vec<String> = listen_addrs(cfg)
                .into_iter()
                .filter(|a| is_public(a.ip()))
                .map(|a| a.to_string())
                .collect();
            if !public.is_empty() {
                bail!(
                    "refusing to serve as root on {}: give --run-as NAME (binds as root, then \
                     runs as NAME) or, if root is really meant, --allow-root (docs/SECURITY.md)",
                    public.join(", ")
                );
            }
            tracing::warn!(
                "serving as root on loopback or private addresses only; every session could \
                 touch the whole machine: give --run-as NAME (docs/SECURITY.md)"
            );
            Ok(())
        }
    }
}

fn lookup(name: &str) -> Result<User> {
    User::from_name(name)
        .with_context(|| format!("run_as {name:?}: cannot look up the user"))?
        .with_context(|| format!("run_as {name:?}: no such user"))
}

/// After binding: becomes the `run_as` user for good (a no-op when it is
/// not set or is already who we are).
pub fn drop_to(cfg: &ServeConfig) -> Result<()> {
    let Some(name) = &cfg.run_as else {
        return Ok(());
    };
    if !Uid::effective().is_root() {
        return Ok(());
    }
    let user = lookup(name)?;
    let cname = CString::new(name.as_str()).context("run_as: a NUL in the name")?;
    // Groups first: once the uid is gone, they can no longer change.
    nix::unistd::initgroups(&cname, user.gid)
        .with_context(|| format!("run_as {name:?}: cannot set its groups"))?;
    nix::unistd::setgid(user.gid).with_context(|| format!("run_as {name:?}: setgid"))?;
    // glibc applies setuid to every thread of the process (the event
    // loops and disk threads already running).
    nix::unistd::setuid(user.uid).with_context(|| format!("run_as {name:?}: setuid"))?;
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        bail!("run_as {name:?}: root privileges could be regained; stopping");
    }
    tracing::info!(user = %name, uid = user.uid.as_raw(), gid = user.gid.as_raw(), "switched user");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses() {
        let p = |s: &str| is_public(s.parse().unwrap());
        for s in [
            "0.0.0.0",
            "203.0.113.7",
            "::",
            "2001:db8::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(p(s), "{s}");
        }
        for s in [
            "127.0.0.1",
            "10.77.0.1",
            "192.168.1.2",
            "172.16.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!p(s), "{s}");
        }
    }
}
