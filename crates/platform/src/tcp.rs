//! TCP socket introspection and tuning: `TCP_INFO`, send-queue depth
//! (`SIOCOUTQ`/`SIOCOUTQNSD`), `TCP_NOTSENT_LOWAT`, socket buffers, pacing and
//! congestion control. All functions take a borrowed fd and never close it.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::cvt;

/// `SIOCOUTQ` (= `TIOCOUTQ`): bytes in the send queue not yet acknowledged.
const SIOCOUTQ: libc::c_ulong = 0x5411;
/// `SIOCINQ` (= `FIONREAD`): bytes in the receive queue not yet read.
const SIOCINQ: libc::c_ulong = 0x541B;
/// `SIOCOUTQNSD`: bytes in the send queue not yet sent.
const SIOCOUTQNSD: libc::c_ulong = 0x894B;
/// `SO_MAX_PACING_RATE` from asm-generic/socket.h (same on x86_64 and arm64).
const SO_MAX_PACING_RATE: libc::c_int = 47;
/// Longest congestion-control name the kernel accepts (`TCP_CA_NAME_MAX`).
const TCP_CA_NAME_MAX: usize = 16;

/// The fields of the kernel's `struct tcp_info` the engine uses, in plain units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// TCP state (`TCP_ESTABLISHED` = 1, ...).
    pub state: u8,
    /// Congestion-avoidance state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// Smoothed round-trip time in microseconds.
    pub rtt_us: u32,
    /// Round-trip time variance in microseconds.
    pub rttvar_us: u32,
    /// Minimum observed round-trip time in microseconds.
    pub min_rtt_us: u32,
    /// Congestion window in segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold in segments.
    pub snd_ssthresh: u32,
    /// Sender maximum segment size in bytes.
    pub snd_mss: u32,
    /// Segments sent but not yet acknowledged.
    pub unacked: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Current pacing rate in bytes per second.
    pub pacing_rate: u64,
    /// Pacing cap (`SO_MAX_PACING_RATE`) in bytes per second; `u64::MAX` = none.
    pub max_pacing_rate: u64,
    /// Most recent delivery-rate sample in bytes per second.
    pub delivery_rate: u64,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Bytes sent including retransmissions.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Microseconds the sender was limited by the receive window.
    pub rwnd_limited_us: u64,
    /// Microseconds the sender was limited by the send buffer.
    pub sndbuf_limited_us: u64,
    /// Microseconds spent with data in flight.
    pub busy_time_us: u64,
    /// Advertised receive window of the peer in bytes.
    pub snd_wnd: u32,
    /// Receiver's round-trip estimate in microseconds (0 until measured).
    pub rcv_rtt_us: u32,
    /// Bytes the application read in one round trip (receive autotuning's measure).
    pub rcv_space: u32,
    /// Receive window we advertise now, bytes (`tcpi_rcv_wnd`; 0 on
    /// kernels before 6.2).
    pub rcv_wnd: u32,
    /// Window scale we offered (our receive window is shifted by it).
    pub rcv_wscale: u8,
    /// Window scale the peer offered.
    pub snd_wscale: u8,
    /// The last delivery-rate sample was application-limited (the sender
    /// did not keep the pipe full), so it is a lower bound on the path rate.
    pub delivery_rate_app_limited: bool,
    /// Segments that arrived out of order (`tcpi_rcv_ooopack`): at a
    /// receiver, the trace of the sender's losses and retransmits.
    pub rcv_ooopack: u32,
    /// Retransmission timeouts over the connection's life
    /// (`tcpi_total_rto`, Linux 6.7+; 0 before).
    pub total_rto: u32,
    /// Milliseconds since the last ACK came in (`tcpi_last_ack_recv`):
    /// when a drained send queue emptied.
    pub last_ack_recv_ms: u32,
}

/// Byte offset of the `tcpi_delivery_rate_app_limited:1` bitfield in the
/// kernel's `struct tcp_info`: right after the seven leading `__u8` fields
/// (state .. snd/rcv_wscale). The libc crate leaves that byte as padding,
/// so we read it by offset.
const APP_LIMITED_BYTE: usize = 7;

/// A byte buffer aligned for `libc::tcp_info` (the kernel fills it raw).
#[repr(C, align(8))]
struct RawTcpInfo([u8; mem::size_of::<libc::tcp_info>()]);

/// Reads `TCP_INFO` for a connected TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut buf = RawTcpInfo([0u8; mem::size_of::<libc::tcp_info>()]);
    let mut len = mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: `buf` is a writable buffer of `len` bytes that outlives the
    // call, and the kernel writes at most `len` bytes and updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.0.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: tcp_info is a plain C struct of integers, valid for any bytes
    // (fields an older kernel does not fill stay zero); the buffer is
    // exactly its size and `read_unaligned` needs no alignment.
    let raw: libc::tcp_info = unsafe { std::ptr::read_unaligned(buf.0.as_ptr().cast()) };
    let app_limited = buf.0[APP_LIMITED_BYTE] & 1 == 1;
    Ok(TcpInfo {
        state: raw.tcpi_state,
        ca_state: raw.tcpi_ca_state,
        rtt_us: raw.tcpi_rtt,
        rttvar_us: raw.tcpi_rttvar,
        min_rtt_us: raw.tcpi_min_rtt,
        snd_cwnd: raw.tcpi_snd_cwnd,
        snd_ssthresh: raw.tcpi_snd_ssthresh,
        snd_mss: raw.tcpi_snd_mss,
        unacked: raw.tcpi_unacked,
        total_retrans: raw.tcpi_total_retrans,
        notsent_bytes: raw.tcpi_notsent_bytes,
        pacing_rate: raw.tcpi_pacing_rate,
        max_pacing_rate: raw.tcpi_max_pacing_rate,
        delivery_rate: raw.tcpi_delivery_rate,
        bytes_acked: raw.tcpi_bytes_acked,
        bytes_received: raw.tcpi_bytes_received,
        bytes_sent: raw.tcpi_bytes_sent,
        bytes_retrans: raw.tcpi_bytes_retrans,
        rwnd_limited_us: raw.tcpi_rwnd_limited,
        sndbuf_limited_us: raw.tcpi_sndbuf_limited,
        busy_time_us: raw.tcpi_busy_time,
        snd_wnd: raw.tcpi_snd_wnd,
        rcv_rtt_us: raw.tcpi_rcv_rtt,
        rcv_space: raw.tcpi_rcv_space,
        rcv_wnd: raw.tcpi_rcv_wnd,
        // tcpi_snd_wscale:4, tcpi_rcv_wscale:4 (little-endian bitfields).
        snd_wscale: raw.tcpi_snd_rcv_wscale & 0x0f,
        rcv_wscale: raw.tcpi_snd_rcv_wscale >> 4,
        delivery_rate_app_limited: app_limited,
        rcv_ooopack: raw.tcpi_rcv_ooopack,
        total_rto: u32::from(raw.tcpi_total_rto),
        last_ack_recv_ms: raw.tcpi_last_ack_recv,
    })
}

fn ioctl_int(fd: BorrowedFd<'_>, request: libc::c_ulong) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    // SAFETY: both requests write one c_int through the pointer, which points
    // to a live local.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut value as *mut libc::c_int) })?;
    Ok(value.max(0) as u32)
}

/// Bytes received and not yet read by the application (`SIOCINQ`).
pub fn inq(fd: BorrowedFd<'_>) -> io::Result<u32> {
    ioctl_int(fd, SIOCINQ)
}

/// Bytes in the socket's send queue that the peer has not acknowledged (`SIOCOUTQ`).
pub fn outq(fd: BorrowedFd<'_>) -> io::Result<u32> {
    ioctl_int(fd, SIOCOUTQ)
}

/// Bytes in the socket's send queue not yet handed to the network (`SIOCOUTQNSD`).
pub fn outq_nsd(fd: BorrowedFd<'_>) -> io::Result<u32> {
    ioctl_int(fd, SIOCOUTQNSD)
}

fn setsockopt_raw<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly `size_of::<T>()` bytes,
    // which the kernel only reads.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a writable c_int and `len` holds its size.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// Sets `TCP_NOTSENT_LOWAT`: the socket reports writable only while fewer
/// than `bytes` unsent bytes are queued.
pub fn set_notsent_lowat(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let v = bytes.min(i32::MAX as u32) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &v)
}

/// Sets or clears `TCP_CORK`: while set the kernel sends only full
/// segments; clearing it sends what is held at once.
pub fn set_cork(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let v: libc::c_int = on.into();
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_CORK, &v)
}

/// Reads `TCP_NOTSENT_LOWAT` (`u32::MAX`-ish when unset).
pub fn notsent_lowat(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)? as u32)
}

/// Sets `SO_SNDBUF` (the kernel doubles it and caps it at `wmem_max`);
/// returns the effective size read back.
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v)?;
    send_buffer(fd)
}

/// Effective `SO_SNDBUF` in bytes.
pub fn send_buffer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?.max(0) as usize)
}

/// The system's send-buffer ceilings: `net.core.wmem_max` (most a
/// `SO_SNDBUF` request may ask for; the kernel doubles what it grants) and the
/// third field of `net.ipv4.tcp_wmem` (most autotuning grows a buffer to).
/// Both are per network namespace: read from the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendBufferLimits {
    /// `net.core.wmem_max` in bytes.
    pub wmem_max: usize,
    /// `net.ipv4.tcp_wmem` maximum in bytes.
    pub tcp_wmem_max: usize,
}

impl SendBufferLimits {
    /// Reads both from `/proc/sys`.
    pub fn read() -> io::Result<Self> {
        let wmem = std::fs::read_to_string("/proc/sys/net/core/wmem_max")?;
        let tcp = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")?;
        Self::parse(&wmem, &tcp)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable wmem sysctls"))
    }

    /// Parses the two sysctl files' contents.
    pub fn parse(wmem_max: &str, tcp_wmem: &str) -> Option<Self> {
        Some(SendBufferLimits {
            wmem_max: wmem_max.trim().parse().ok()?,
            tcp_wmem_max: tcp_wmem.split_whitespace().nth(2)?.parse().ok()?,
        })
    }

    /// The `SO_SNDBUF` request that gives a buffer at least as large as
    /// autotuning could ever reach (the granted size is twice the request),
    /// or `None` when `wmem_max` is too small for that: asking then would
    /// cap the buffer below autotuning's ceiling.
    pub fn fixed_at_least_autotuned(&self) -> Option<usize> {
        (self.wmem_max.saturating_mul(2) >= self.tcp_wmem_max).then_some(self.wmem_max)
    }
}

/// `net.ipv4.tcp_mem` in pages: below the first value TCP memory is not
/// under pressure; above the second it is (sockets then get writable
/// wake-ups they cannot use); the third is the hard limit. Global to the host.
pub fn tcp_mem_pages() -> io::Result<[u64; 3]> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem")?;
    parse_tcp_mem(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable tcp_mem"))
}

/// Parses the contents of `/proc/sys/net/ipv4/tcp_mem`.
pub fn parse_tcp_mem(text: &str) -> Option<[u64; 3]> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Sets `SO_RCVBUF` (switches off receive autotuning for this socket);
/// returns the effective size read back.
pub fn set_recv_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v)?;
    recv_buffer(fd)
}

/// Effective `SO_RCVBUF` in bytes.
pub fn recv_buffer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as usize)
}

/// Caps the socket's pacing rate (`SO_MAX_PACING_RATE`) in bytes per second;
/// `u64::MAX` removes the cap.
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, bytes_per_sec: u64) -> io::Result<()> {
    setsockopt_raw(fd, libc::SOL_SOCKET, SO_MAX_PACING_RATE, &bytes_per_sec)
}

/// Selects the congestion-control algorithm (`TCP_CONGESTION`), e.g. "cubic".
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= TCP_CA_NAME_MAX || name.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad congestion control name",
        ));
    }
    // SAFETY: `name` is a live byte slice of `name.len()` bytes, which the
    // kernel copies; it does not need a NUL terminator since the length is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Reads the congestion-control algorithm in use.
pub fn congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut buf = [0u8; TCP_CA_NAME_MAX];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let end = buf[..(len as usize).min(buf.len())]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    Ok(String::from_utf8_lossy(&buf[..end.min(buf.len())]).into_owned())
}

/// Sends `buf` with `MSG_MORE` (more data follows: the kernel holds a partial
/// segment back) and `MSG_DONTWAIT`. Returns bytes sent; `WouldBlock` when full.
pub fn send_more(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live readable slice of `buf.len()` bytes.
    let n = crate::sys::cvt_retry(|| unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_MORE | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    })?;
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn tcp_info_on_loopback_counts_acked_bytes() {
        let (mut c, mut s) = pair();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        s.read_exact(&mut got).unwrap();
        let info = tcp_info(c.as_fd()).unwrap();
        assert_eq!(info.state, 1, "established");
        assert!(info.snd_cwnd > 0);
        assert!(info.snd_mss > 0);
        let rinfo = tcp_info(s.as_fd()).unwrap();
        assert!(rinfo.bytes_received >= 100_000);
    }

    #[test]
    fn inq_counts_unread_bytes() {
        let (mut c, mut s) = pair();
        assert_eq!(inq(s.as_fd()).unwrap(), 0);
        c.write_all(&[1u8; 1000]).unwrap();
        let mut seen = 0;
        for _ in 0..1000 {
            seen = inq(s.as_fd()).unwrap();
            if seen == 1000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(seen, 1000);
        let mut got = [0u8; 400];
        s.read_exact(&mut got).unwrap();
        assert_eq!(inq(s.as_fd()).unwrap(), 600);
    }

    #[test]
    fn a_trickle_is_reported_application_limited() {
        // One small write on an idle connection cannot fill the pipe, so the
        // kernel marks the delivery-rate sample app-limited once it is acked.
        let (mut c, mut s) = pair();
        c.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).unwrap();
        let mut info = tcp_info(c.as_fd()).unwrap();
        for _ in 0..1000 {
            if info.bytes_acked >= 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            info = tcp_info(c.as_fd()).unwrap();
        }
        assert!(info.bytes_acked >= 4);
        assert!(info.delivery_rate_app_limited, "{info:?}");
    }

    #[test]
    fn queues_and_options_round_trip() {
        let (c, _s) = pair();
        assert_eq!(outq(c.as_fd()).unwrap(), 0);
        assert_eq!(outq_nsd(c.as_fd()).unwrap(), 0);
        set_notsent_lowat(c.as_fd(), 131_072).unwrap();
        assert_eq!(notsent_lowat(c.as_fd()).unwrap(), 131_072);
        let eff = set_send_buffer(c.as_fd(), 65_536).unwrap();
        assert!(eff >= 65_536, "kernel doubles SO_SNDBUF, got {eff}");
        let eff = set_recv_buffer(c.as_fd(), 65_536).unwrap();
        assert!(eff >= 65_536);
        set_max_pacing_rate(c.as_fd(), 1_000_000).unwrap();
        assert_eq!(tcp_info(c.as_fd()).unwrap().max_pacing_rate, 1_000_000);
        set_congestion(c.as_fd(), "cubic").unwrap();
        assert_eq!(congestion(c.as_fd()).unwrap(), "cubic");
        assert!(set_congestion(c.as_fd(), "no-such-algo").is_err());
        assert!(set_congestion(c.as_fd(), "").is_err());
    }

    #[test]
    fn send_buffer_limits_parse_and_decide() {
        let l = SendBufferLimits::parse("4194304\n", "4096\t16384\t4194304\n").unwrap();
        assert_eq!(l.wmem_max, 4 << 20);
        assert_eq!(l.tcp_wmem_max, 4 << 20);
        assert_eq!(l.fixed_at_least_autotuned(), Some(4 << 20));
        let big = SendBufferLimits::parse("212992", "4096 16384 33554432").unwrap();
        assert_eq!(big.fixed_at_least_autotuned(), None, "would cap autotuning");
        assert!(SendBufferLimits::parse("x", "1 2 3").is_none());
        assert!(SendBufferLimits::parse("1", "1 2").is_none());
        assert!(SendBufferLimits::read().is_ok());
    }

    #[test]
    fn send_more_delivers_bytes() {
        let (c, mut s) = pair();
        assert_eq!(send_more(c.as_fd(), b"hello").unwrap(), 5);
        drop(c);
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"hello");
    }

    #[test]
    fn tcp_mem_parses() {
        assert_eq!(
            parse_tcp_mem("287901\t383868\t575802\n"),
            Some([287901, 383868, 575802])
        );
        assert_eq!(parse_tcp_mem("1 2"), None);
        assert!(tcp_mem_pages().is_ok());
    }
}
