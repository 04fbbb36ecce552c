//! Socket buffers sized by the application (dynamic right-sizing): the
//! system's limits, setting a buffer beyond `net.core.{w,r}mem_max` with
//! `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` where the process may
//! (`CAP_NET_ADMIN`), and sockets whose receive buffer is set before the
//! handshake (the window scale is fixed by the SYN).
//!
//! Sizes here are effective sizes, the kernel's units: what
//! `getsockopt(SO_SNDBUF/SO_RCVBUF)` returns, twice what `setsockopt` asks.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::time::Duration;

use crate::sys::cvt;
use crate::tcp;

/// `SO_SNDBUFFORCE` / `SO_RCVBUFFORCE` (asm-generic; x86_64 and arm64).
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Which of a socket's two buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `SO_SNDBUF`, autotuned within `net.ipv4.tcp_wmem`.
    Send,
    /// `SO_RCVBUF`, autotuned within `net.ipv4.tcp_rmem`.
    Recv,
}

impl Dir {
    /// The sysctl that caps what `setsockopt` may ask without `FORCE`.
    pub fn core_sysctl(self) -> &'static str {
        match self {
            Dir::Send => "net.core.wmem_max",
            Dir::Recv => "net.core.rmem_max",
        }
    }

    /// The sysctl that bounds autotuning.
    pub fn tcp_sysctl(self) -> &'static str {
        match self {
            Dir::Send => "net.ipv4.tcp_wmem",
            Dir::Recv => "net.ipv4.tcp_rmem",
        }
    }
}

/// The limits of one direction, in effective bytes, read from the
/// caller's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// Largest buffer `setsockopt` grants without `FORCE`: twice `*mem_max`.
    pub set_max: u64,
    /// Where autotuning starts (`tcp_*mem[1]`).
    pub auto_start: u64,
    /// Where autotuning stops (`tcp_*mem[2]`).
    pub auto_max: u64,
}

impl BufferLimits {
    /// Reads the two sysctls of `dir`.
    pub fn read(dir: Dir) -> io::Result<BufferLimits> {
        let (core, tcp) = match dir {
            Dir::Send => ("/proc/sys/net/core/wmem_max", "/proc/sys/net/ipv4/tcp_wmem"),
            Dir::Recv => ("/proc/sys/net/core/rmem_max", "/proc/sys/net/ipv4/tcp_rmem"),
        };
        let c = std::fs::read_to_string(core)?;
        let t = std::fs::read_to_string(tcp)?;
        Self::parse(&c, &t).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unreadable {core} or {tcp}"),
            )
        })
    }

    /// Parses `*mem_max` and `tcp_*mem` file contents.
    pub fn parse(core_max: &str, tcp_mem: &str) -> Option<BufferLimits> {
        let core: u64 = core_max.trim().parse().ok()?;
        let mut t = tcp_mem.split_whitespace().map(|w| w.parse::<u64>().ok());
        let _min = t.next()??;
        let start = t.next()??;
        let max = t.next()??;
        Some(BufferLimits {
            set_max: core.saturating_mul(2),
            auto_start: start,
            auto_max: max,
        })
    }
}

/// Whether this process may use `SO_*BUFFORCE`: 0 not tried, 1 yes, 2 no.
/// Learned from the first attempt (one `EPERM`), then never tried again.
static FORCE: AtomicU8 = AtomicU8::new(0);

/// Whether `FORCE` worked (`Some(true)`), was refused (`Some(false)`) or was
/// never needed yet (`None`).
pub fn force_allowed() -> Option<bool> {
    match FORCE.load(Relaxed) {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    }
}

/// Whether this process may use `FORCE`, probing once if no buffer has
/// needed it yet (the kernel checks `CAP_NET_ADMIN` before the value, so a
/// small request on a throwaway socket answers).
pub fn probe_force() -> bool {
    if let Some(known) = force_allowed() {
        return known;
    }
    let ok = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .and_then(|s| setsockopt_int(s.as_fd(), libc::SOL_SOCKET, SO_RCVBUFFORCE, 4096))
        .is_ok();
    FORCE.store(if ok { 1 } else { 2 }, Relaxed);
    ok
}

/// What [`set_buffer`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The effective size read back.
    pub effective: u64,
    /// Less than asked: the sysctl limit held and `FORCE` was not allowed.
    pub limited: bool,
}

fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` is a live c_int the kernel only reads, and the length is its size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Sets the `dir` buffer to `effective` bytes (asks half: the kernel
/// doubles). Beyond `limits.set_max` it uses `FORCE` if the process may,
/// else it asks for what the limit allows. Setting a buffer turns that
/// direction's autotuning off for the socket.
pub fn set_buffer(
    fd: BorrowedFd<'_>,
    dir: Dir,
    effective: u64,
    limits: &BufferLimits,
) -> io::Result<Applied> {
    let want = effective.clamp(4096, i32::MAX as u64);
    let ask = (want / 2) as libc::c_int;
    let (plain, force) = match dir {
        Dir::Send => (libc::SO_SNDBUF, SO_SNDBUFFORCE),
        Dir::Recv => (libc::SO_RCVBUF, SO_RCVBUFFORCE),
    };
    let mut limited = false;
    if want > limits.set_max && FORCE.load(Relaxed) != 2 {
        match setsockopt_int(fd, libc::SOL_SOCKET, force, ask) {
            Ok(()) => FORCE.store(1, Relaxed),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                FORCE.store(2, Relaxed);
                limited = true;
                setsockopt_int(fd, libc::SOL_SOCKET, plain, ask)?;
            }
            Err(e) => return Err(e),
        }
    } else {
        limited = want > limits.set_max;
        setsockopt_int(fd, libc::SOL_SOCKET, plain, ask)?;
    }
    let effective = match dir {
        Dir::Send => tcp::send_buffer(fd)?,
        Dir::Recv => tcp::recv_buffer(fd)?,
    } as u64;
    Ok(Applied { effective, limited })
}

/// Sets `TCP_WINDOW_CLAMP`: the largest receive window we offer, bytes.
/// The kernel fixes the clamp from the receive buffer at the handshake and
/// raises it only while it autotunes; a buffer raised by hand later needs it.
pub fn set_window_clamp(fd: BorrowedFd<'_>, bytes: u64) -> io::Result<()> {
    let v = bytes.min(i32::MAX as u64) as libc::c_int;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, v)
}

fn socket_for(addr: &SocketAddr) -> io::Result<socket2::Socket> {
    socket2::Socket::new(
        socket2::Domain::for_address(*addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
}

/// Connects to `to` with a receive buffer of `rcvbuf` effective bytes set
/// before the SYN, so the window scale we offer can cover it. Returns the
/// stream and what was applied.
pub fn connect_with_recv_buffer(
    to: SocketAddr,
    timeout: Duration,
    rcvbuf: u64,
    limits: &BufferLimits,
) -> io::Result<(TcpStream, Applied)> {
    let s = socket_for(&to)?;
    let applied = set_buffer(s.as_fd(), Dir::Recv, rcvbuf, limits)?;
    s.connect_timeout(&to.into(), timeout)?;
    Ok((s.into(), applied))
}

/// A listener whose accepted sockets start with a receive buffer of
/// `rcvbuf` effective bytes (inherited from the listener, before the SYN).
pub fn listen_with_recv_buffer(
    at: SocketAddr,
    rcvbuf: u64,
    limits: &BufferLimits,
) -> io::Result<(TcpListener, Applied)> {
    let s = socket_for(&at)?;
    let applied = set_buffer(s.as_fd(), Dir::Recv, rcvbuf, limits)?;
    s.bind(&at.into())?;
    s.listen(128)?;
    Ok((s.into(), applied))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn limits_parse() {
        let l = BufferLimits::parse("4194304\n", "4096\t131072\t33554432\n").unwrap();
        assert_eq!(l.set_max, 8 << 20);
        assert_eq!(l.auto_start, 131072);
        assert_eq!(l.auto_max, 32 << 20);
        assert!(BufferLimits::parse("x", "1 2 3").is_none());
        assert!(BufferLimits::parse("1", "1 2").is_none());
        assert!(BufferLimits::read(Dir::Send).is_ok());
        assert!(BufferLimits::read(Dir::Recv).is_ok());
    }

    #[test]
    fn a_receive_buffer_set_before_connect_scales_the_window() {
        let limits = BufferLimits::read(Dir::Recv).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let want = limits.set_max.min(8 << 20);
        let (mut c, applied) = connect_with_recv_buffer(
            l.local_addr().unwrap(),
            Duration::from_secs(5),
            want,
            &limits,
        )
        .unwrap();
        assert!(
            applied.effective >= want.min(limits.set_max) / 2,
            "{applied:?}"
        );
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"hello").unwrap();
        let mut got = [0u8; 5];
        c.read_exact(&mut got).unwrap();
        let info = tcp::tcp_info(c.as_fd()).unwrap();
        // A window of `want` bytes needs a scale of log2(want) - 16 or more.
        let need = (64 - (want / 2).leading_zeros()).saturating_sub(16);
        assert!(u32::from(info.rcv_wscale) >= need, "{info:?}");
        // Resizing after the handshake works, and the clamp can follow.
        let back = set_buffer(c.as_fd(), Dir::Recv, 256 << 10, &limits).unwrap();
        assert_eq!(back.effective, 256 << 10);
        assert!(!back.limited);
        set_window_clamp(c.as_fd(), 1 << 20).unwrap();
    }

    #[test]
    fn the_force_probe_matches_what_set_buffer_learns() {
        let allowed = probe_force();
        assert_eq!(force_allowed(), Some(allowed));
    }

    #[test]
    fn beyond_the_limit_force_or_say_limited() {
        let limits = BufferLimits::read(Dir::Send).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let want = limits.set_max * 2;
        let a = set_buffer(c.as_fd(), Dir::Send, want, &limits).unwrap();
        match force_allowed() {
            Some(true) => assert!(a.effective >= want && !a.limited, "{a:?}"),
            _ => assert!(a.limited && a.effective <= limits.set_max, "{a:?}"),
        }
    }
}
