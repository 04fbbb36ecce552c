//! Data connections: passive listeners (bound to the control connection's
//! local address, inside `--pasv-ports`) and active connects (PORT/EPRT).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use sluice_engine::Engine;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long we wait for a client to connect to a passive listener, or for
/// an active connect to complete. Long enough for a slow client to read
/// the 150 and connect; short enough that a client that never does frees
/// its session.
pub const DATA_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A passive listener waiting for the client (cheap to clone: MODE E
/// uploads keep accepting on it from a helper task).
#[derive(Debug, Clone)]
pub struct Passive {
    listener: std::sync::Arc<TcpListener>,
    /// Only connections from this address are accepted (no data theft by
    /// a third host racing the real client), unless `None`.
    peer: Option<IpAddr>,
}

impl Passive {
    /// Binds a listener on `local` (the control connection's local IP),
    /// on a free port in `range` (or any port), its buffers sized by
    /// `engine` before any SYN (for `asked`, the session's SBUF).
    pub fn open(
        engine: &Engine,
        asked: Option<u64>,
        local: IpAddr,
        range: Option<(u16, u16)>,
        peer: Option<IpAddr>,
    ) -> io::Result<Passive> {
        let bind = |addr| bind(engine, asked, addr);
        let listener = match range {
            None => bind(SocketAddr::new(local, 0))?,
            Some((lo, hi)) => {
                let span = u32::from(hi - lo) + 1;
                // Start at a varying port so concurrent sessions do not all
                // probe the same ones first.
                let start = std::process::id().wrapping_add(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.subsec_nanos())
                        .unwrap_or(0),
                ) % span;
                let mut found = None;
                for i in 0..span {
                    let port = lo + ((start + i) % span) as u16;
                    if let Ok(l) = bind(SocketAddr::new(local, port)) {
                        found = Some(l);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::AddrInUse, "passive port range exhausted")
                })?
            }
        };
        Ok(Passive {
            listener: std::sync::Arc::new(listener),
            peer,
        })
    }

    /// Sizes the listener again for a buffer asked after PASV (SBUF before
    /// RETR): connections not yet made get it before their handshake.
    pub fn resize(&self, engine: &Engine, asked: Option<u64>) {
        if asked.is_some() {
            engine.size_before_syn(self.listener.as_fd(), asked.map(clamp_usize));
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts one connection from the allowed peer.
    pub async fn accept(&self) -> io::Result<TcpStream> {
        loop {
            let (conn, from) = self.listener.accept().await?;
            if self.peer.is_none_or(|p| same_ip(p, from.ip())) {
                return Ok(conn);
            }
            tracing::warn!(%from, "refused data connection from a foreign host");
        }
    }

    /// Accepts one connection, within [`DATA_CONNECT_TIMEOUT`].
    pub async fn accept_timeout(&self) -> io::Result<TcpStream> {
        tokio::time::timeout(DATA_CONNECT_TIMEOUT, self.accept())
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
    }
}

fn bind(engine: &Engine, asked: Option<u64>, addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    engine.size_before_syn(sock.as_fd(), asked.map(clamp_usize));
    sock.bind(addr)?;
    sock.listen(64)
}

/// Connects `n` data connections to `to`, from the control connection's
/// local IP, within [`DATA_CONNECT_TIMEOUT`], each sized by `engine`
/// before its SYN.
pub async fn connect(
    engine: &Engine,
    asked: Option<u64>,
    local: IpAddr,
    to: SocketAddr,
    n: u32,
) -> io::Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n as usize);
    for _ in 0..n.max(1) {
        let sock = if to.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if local.is_ipv4() == to.is_ipv4() {
            sock.bind(SocketAddr::new(local, 0))?;
        }
        engine.size_before_syn(sock.as_fd(), asked.map(clamp_usize));
        let conn = tokio::time::timeout(DATA_CONNECT_TIMEOUT, sock.connect(to))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        conns.push(conn);
    }
    Ok(conns)
}

/// SBUF's size as the socket calls take it (the kernel caps it at
/// `net.core.{w,r}mem_max` anyway).
pub fn clamp_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// IPv4-mapped IPv6 addresses equal their IPv4 form.
pub fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passive_in_range_and_active_connect() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let e = Engine::new(sluice_engine::EngineConfig::default());
        let p = Passive::open(&e, None, lo, None, Some(lo)).unwrap();
        let addr = p.local_addr().unwrap();
        assert_eq!(addr.ip(), lo);
        let (c, a) = tokio::join!(connect(&e, None, lo, addr, 1), p.accept_timeout());
        assert_eq!(c.unwrap().len(), 1);
        assert!(a.is_ok());
        // A range of one port already taken by `p` is exhausted.
        let port = addr.port();
        assert!(Passive::open(&e, None, lo, Some((port, port)), None).is_err());
    }

    #[tokio::test]
    async fn sbuf_sizes_both_ends_before_the_handshake() {
        // The receive buffer of an accepted connection comes from its
        // listener, so SBUF set on the listener before the client connects
        // is what the handshake's window scale is computed from.
        let lo = IpAddr::from([127, 0, 0, 1]);
        let e = Engine::new(sluice_engine::EngineConfig::default());
        let p = Passive::open(&e, None, lo, None, Some(lo)).unwrap();
        let asked = 3 << 20;
        p.resize(&e, Some(asked));
        let addr = p.local_addr().unwrap();
        let (c, a) = tokio::join!(connect(&e, Some(asked), lo, addr, 1), p.accept_timeout());
        let (c, a) = (c.unwrap().pop().unwrap(), a.unwrap());
        let max = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        // The kernel doubles what it grants, capped at the sysctl maximum.
        let rcv = 2 * (asked as usize).min(max("rmem_max"));
        let snd = 2 * (asked as usize).min(max("wmem_max"));
        for s in [&c, &a] {
            assert_eq!(sluice_platform::tcp::recv_buffer(s.as_fd()).unwrap(), rcv);
            assert_eq!(sluice_platform::tcp::send_buffer(s.as_fd()).unwrap(), snd);
        }
    }
}
