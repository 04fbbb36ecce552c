//! Applying the engine's socket tuning to a data connection.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::OnceLock;

use sluice_platform::tcp;
use tokio::net::TcpStream;

use crate::Engine;

/// What was actually applied to one socket (effective values read back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketSettings {
    /// `TCP_NOTSENT_LOWAT` in force, if set.
    pub notsent_lowat: Option<u32>,
    /// Effective `SO_SNDBUF` in bytes.
    pub send_buffer: usize,
    /// Effective `SO_RCVBUF` in bytes.
    pub recv_buffer: usize,
    /// Congestion control in use.
    pub congestion: String,
    /// The engine set `SO_SNDBUF` (so the kernel keeps it as set:
    /// `SOCK_SNDBUF_LOCK`, no autotuning).
    pub send_buffer_set: bool,
}

impl Engine {
    /// Applies the configured socket options to a data connection. An option
    /// the kernel refuses is logged and skipped (degrade, do not fail).
    pub fn prepare_socket(&self, conn: &TcpStream) -> SocketSettings {
        self.prepare_socket_sized(conn, None)
    }

    /// [`Engine::prepare_socket`] with a buffer size the peer asked for
    /// (GridFTP `SBUF`), which then wins over the configured ones in both
    /// directions.
    pub fn prepare_socket_sized(&self, conn: &TcpStream, asked: Option<usize>) -> SocketSettings {
        let cfg = self.config();
        let fd = conn.as_fd();
        let mut out = SocketSettings::default();
        let _ = conn.set_nodelay(true);
        // Rate-sized marks start small (refill.rs) and then live on the
        // socket from one send to the next.
        if let Some(lowat) = self.start_mark().or(cfg.notsent_lowat) {
            if self.features().notsent_lowat.is_supported() {
                match tcp::set_notsent_lowat(fd, lowat) {
                    Ok(()) => out.notsent_lowat = Some(lowat),
                    Err(e) => tracing::debug!("TCP_NOTSENT_LOWAT refused: {e}"),
                }
            }
        }
        out.send_buffer_set = self.size_buffers(fd, asked);
        if let Some(rate) = cfg.max_pacing_rate {
            if let Err(e) = tcp::set_max_pacing_rate(fd, rate) {
                tracing::debug!("SO_MAX_PACING_RATE refused: {e}");
            }
        }
        if let Some(cc) = &cfg.congestion {
            if let Err(e) = tcp::set_congestion(fd, cc) {
                tracing::warn!("congestion control {cc:?} refused: {e}");
            }
        }
        out.send_buffer = tcp::send_buffer(fd).unwrap_or(0);
        out.recv_buffer = tcp::recv_buffer(fd).unwrap_or(0);
        out.congestion = tcp::congestion(fd).unwrap_or_default();
        out
    }

    /// Sizes the buffers of a data socket that has not had its SYN yet: a
    /// listener (accepted connections inherit its sizes, and the window
    /// scale of the SYN-ACK is computed from its receive buffer) or a socket
    /// about to connect. The receive window can only ever grow to what the
    /// scale chosen at the handshake allows, so a buffer set after the
    /// handshake (as `SBUF` was) may not be usable in full.
    pub fn size_before_syn(&self, fd: BorrowedFd<'_>, asked: Option<usize>) {
        let _ = self.size_buffers(fd, asked);
    }

    /// `SO_SNDBUF`/`SO_RCVBUF`: what the peer asked for, else the
    /// configured sizes (`send_buffer`, or `wmem_max` under
    /// `send_buffer_max`; `recv_buffer`); nothing set leaves autotuning on.
    /// Returns whether `SO_SNDBUF` was set.
    fn size_buffers(&self, fd: BorrowedFd<'_>, asked: Option<usize>) -> bool {
        let cfg = self.config();
        let send_buffer = asked.or(cfg.send_buffer).or_else(|| {
            if cfg.send_buffer_max {
                send_buffer_limits().and_then(|l| l.fixed_at_least_autotuned())
            } else {
                None
            }
        });
        let mut set = false;
        if let Some(b) = send_buffer {
            match tcp::set_send_buffer(fd, b) {
                Ok(_) => set = true,
                Err(e) => tracing::debug!("SO_SNDBUF refused: {e}"),
            }
        }
        if let Some(b) = asked.or(cfg.recv_buffer) {
            if let Err(e) = tcp::set_recv_buffer(fd, b) {
                tracing::debug!("SO_RCVBUF refused: {e}");
            }
        }
        set
    }
}

/// The send-buffer sysctls, read once per process (a data socket is set up
/// per transfer; the sysctls of the server's namespace do not change under it).
fn send_buffer_limits() -> Option<tcp::SendBufferLimits> {
    static LIMITS: OnceLock<Option<tcp::SendBufferLimits>> = OnceLock::new();
    *LIMITS.get_or_init(|| match tcp::SendBufferLimits::read() {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::debug!("cannot read the send-buffer sysctls: {e}");
            None
        }
    })
}
