//! Data-connection set-up: passive (EPSV, falling back to PASV) where we
//! connect, active (PORT / EPRT) where the server connects to us.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sluice_ftp::addr;

use super::control::{is_unsupported, refused, Control};
use crate::error::{ClientError, Result};

/// Asks the server for a passive address. EPSV first (works for IPv4 and
/// IPv6); PASV if the server does not know EPSV and we are on IPv4. The
/// host part of a PASV answer is ignored: we always connect to the control
/// peer, as curl does, so a server cannot point us elsewhere.
pub fn passive(ctl: &mut Control) -> Result<SocketAddr> {
    let peer_ip = ctl.peer.ip();
    let r = ctl.cmd("EPSV")?;
    if r.code.0 == 229 {
        let port = addr::parse_229(r.text())
            .map_err(|e| ClientError::Protocol(format!("EPSV reply: {e}")))?;
        return Ok(SocketAddr::new(peer_ip, port));
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
    Ok(SocketAddr::new(peer_ip, a.port()))
}

/// Connects to a passive address.
pub fn connect(to: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let s = TcpStream::connect_timeout(&to, timeout)
        .map_err(|e| ClientError::net(format!("data connection to {to}"), e))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Listens on the control connection's local address and tells the server
/// with PORT (IPv4) or EPRT (IPv6, or when PORT is refused).
pub fn active(ctl: &mut Control) -> Result<TcpListener> {
    let ip: IpAddr = ctl.local.ip();
    let l = TcpListener::bind(SocketAddr::new(ip, 0))
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
