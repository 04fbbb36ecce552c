//! Data connections: passive listeners (bound to the control connection's
//! local address, inside `--pasv-ports`) and active connects (PORT/EPRT).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

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
    /// on a free port in `range` (or any port).
    pub fn open(
        local: IpAddr,
        range: Option<(u16, u16)>,
        peer: Option<IpAddr>,
    ) -> io::Result<Passive> {
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

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(64)
}

/// Connects `n` data connections to `to`, from the control connection's
/// local IP, within [`DATA_CONNECT_TIMEOUT`].
pub async fn connect(local: IpAddr, to: SocketAddr, n: u32) -> io::Result<Vec<TcpStream>> {
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
        let conn = tokio::time::timeout(DATA_CONNECT_TIMEOUT, sock.connect(to))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        conns.push(conn);
    }
    Ok(conns)
}

/// Applies SBUF to a data connection (both directions; the kernel caps it
/// at `net.core.{w,r}mem_max`).
pub fn apply_buffer(conn: &TcpStream, size: Option<u64>) {
    if let Some(n) = size {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let _ = sluice_platform::tcp::set_send_buffer(conn.as_fd(), n);
        let _ = sluice_platform::tcp::set_recv_buffer(conn.as_fd(), n);
    }
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
        let p = Passive::open(lo, None, Some(lo)).unwrap();
        let addr = p.local_addr().unwrap();
        assert_eq!(addr.ip(), lo);
        let (c, a) = tokio::join!(connect(lo, addr, 1), p.accept_timeout());
        assert_eq!(c.unwrap().len(), 1);
        assert!(a.is_ok());
        // A range of one port already taken by `p` is exhausted.
        let port = addr.port();
        assert!(Passive::open(lo, Some((port, port)), None).is_err());
    }
}
