//! Data-connection set-up: passive (EPSV, falling back to PASV) where we
//! connect, active (PORT / EPRT) where the server connects to us.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sluice_engine::DrsSocket;
use sluice_ftp::addr;
use sluice_platform::sockbuf::{self, Dir};

use super::control::{is_unsupported, refused, Control};
use crate::error::{ClientError, Result};
use sluice_ftp::reply::Reply;

/// Asks the server for a passive address. EPSV first (works for IPv4 and
/// IPv6); PASV if the server does not know EPSV and we are on IPv4. The
/// host part of a PASV answer is ignored: we always connect to the control
/// peer, as curl does, so a server cannot point us elsewhere.
pub fn passive(ctl: &mut Control) -> Result<SocketAddr> {
    passive_after(ctl, &[]).map(|(_, a)| a)
}

/// [`passive`] with the commands `before` (`MODE E`) sent in the same
/// round trip: their replies, whatever they say, and the address.
pub fn passive_after(ctl: &mut Control, before: &[&str]) -> Result<(Vec<Reply>, SocketAddr)> {
    let peer_ip = ctl.peer.ip();
    let mut lines = before.to_vec();
    lines.push("EPSV");
    ctl.send_lines(&lines)?;
    let mut replies = Vec::with_capacity(before.len());
    for _ in before {
        replies.push(ctl.read_reply()?);
    }
    let r = ctl.read_reply()?;
    if r.code.0 == 229 {
        let port = addr::parse_229(r.text())
            .map_err(|e| ClientError::Protocol(format!("EPSV reply: {e}")))?;
        return Ok((replies, SocketAddr::new(peer_ip, port)));
    }
    if !is_unsupported(r.code) || peer_ip.is_ipv6() {
        return Err(refused("EPSV", &r));
    }
    let r = ctl.cmd("PASV")?;
    if r.code.0 != 227 {
        return Err(refused("PASV", &r));
    }
    let a =
        addr::parse_227(r.text()).map_err(|e| ClientError::Protocol(format!("PASV reply: {e}")))?;
    Ok((replies, SocketAddr::new(peer_ip, a.port())))
}

/// Connects to a passive address.
pub fn connect(to: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    connect_receiving(to, timeout, false)
}

/// Connects to a passive address for a download (with `drs`, sized for
/// DRS before the SYN: `drain::connect_sized`).
pub fn connect_receiving(to: SocketAddr, timeout: Duration, drs: bool) -> Result<TcpStream> {
    crate::drain::connect_sized(to, timeout, drs)
        .map_err(|e| ClientError::net(format!("data connection to {to}"), e))
}

/// Listens on the control connection's local address and tells the server
/// with PORT (IPv4) or EPRT (IPv6, or when PORT is refused).
pub fn active(ctl: &mut Control) -> Result<TcpListener> {
    active_receiving(ctl, false)
}

/// [`active`] with the commands `before` (`TYPE I`, `MODE E`) sent in
/// the same round trip as PORT (IPv4): their replies, whatever they say,
/// and the listener.
pub fn active_after(ctl: &mut Control, before: &[&str]) -> Result<(Vec<Reply>, TcpListener)> {
    let ip: IpAddr = ctl.local.ip();
    let l = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    let me = l
        .local_addr()
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    let mut lines: Vec<String> = before.iter().map(|l| l.to_string()).collect();
    if let SocketAddr::V4(v4) = me {
        lines.push(format!("PORT {}", addr::format_port(v4)));
    }
    ctl.send_lines(&lines)?;
    let SocketAddr::V4(_) = me else {
        let mut replies = Vec::with_capacity(before.len());
        for _ in before {
            replies.push(ctl.read_reply()?);
        }
        ctl.expect_ok(&format!("EPRT {}", addr::format_eprt(me)), "EPRT")?;
        return Ok((replies, l));
    };
    let mut replies = Vec::with_capacity(before.len());
    for _ in before {
        replies.push(ctl.read_reply()?);
    }
    let r = ctl.read_reply()?;
    if !r.code.is_completion() {
        if !is_unsupported(r.code) {
            return Err(refused("PORT", &r));
        }
        ctl.expect_ok(&format!("EPRT {}", addr::format_eprt(me)), "EPRT")?;
    }
    Ok((replies, l))
}

/// [`active`] for a download: with `drs`, accepted connections inherit a
/// receive buffer set before their SYN (see [`connect_receiving`]).
pub fn active_receiving(ctl: &mut Control, drs: bool) -> Result<TcpListener> {
    let ip: IpAddr = ctl.local.ip();
    let at = SocketAddr::new(ip, 0);
    let l = match drs.then(|| DrsSocket::new(Dir::Recv)).flatten() {
        Some(d) => {
            sockbuf::listen_with_recv_buffer(at, d.before_connect(), d.limits()).map(|(l, _)| l)
        }
        None => TcpListener::bind(at),
    }
    .map_err(|e| ClientError::net("listen for data connections", e))?;
    let me = l
        .local_addr()
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    if let SocketAddr::V4(v4) = me {
        let r = ctl.cmd(&format!("PORT {}", addr::format_port(v4)))?;
        if r.code.is_completion() {
            return Ok(l);
        }
        if !is_unsupported(r.code) {
            return Err(refused("PORT", &r));
        }
    }
    ctl.expect_ok(&format!("EPRT {}", addr::format_eprt(me)), "EPRT")?;
    Ok(l)
}
