//! Dynamic right-sizing at a socket: reads `TCP_INFO`, feeds the
//! estimator ([`crate::drs`]) and sets the buffer it asks for. One
//! [`DrsSocket`] per connection and direction: the server's `DataConn`
//! (send side) and the client's drain (receive side) call
//! [`DrsSocket::sample`] when [`DrsSocket::due`].
//!
//! The limits are read once per process. Beyond `net.core.{w,r}mem_max`
//! the buffer is set with `SO_*BUFFORCE` when the process has
//! `CAP_NET_ADMIN`; otherwise it stays within the limit and one log line
//! per process and direction says which sysctl would help and what the
//! limit costs ([`DrsSocket::limit_note`] gives the same text to the
//! client's summary).

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sluice_platform::sockbuf::{self, BufferLimits, Dir};
use sluice_platform::tcp::{self, TcpInfo};

use crate::flow::MARK_UNKNOWN;

pub use crate::drs::notsent_mark;
#[cfg(test)]
use crate::drs::CONN_SEND_MEM;
use crate::drs::{
    receiver_autotune, sender_autotune, Drs, DrsConfig, RecvSample, SendSample,
    RECV_BUFFER_PER_WINDOW, RECV_START_WINDOW,
};

/// Limits of each direction, read once (the namespace's sysctls do not
/// change under a running process, and a sample must not open files).
fn limits(dir: Dir) -> Option<BufferLimits> {
    static SEND: OnceLock<Option<BufferLimits>> = OnceLock::new();
    static RECV: OnceLock<Option<BufferLimits>> = OnceLock::new();
    let cell = match dir {
        Dir::Send => &SEND,
        Dir::Recv => &RECV,
    };
    *cell.get_or_init(|| match BufferLimits::read(dir) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::debug!("DRS off: cannot read the buffer sysctls: {e}");
            None
        }
    })
}

/// Whether DRS can do better than autotuning here; says once per
/// direction when it cannot.
fn usable(dir: Dir, l: &BufferLimits) -> bool {
    if can_beat_autotuning(l, sockbuf::probe_force) {
        return true;
    }
    static SAID: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    if !SAID[dir as usize].swap(true, Relaxed) {
        tracing::warn!(
            "DRS off for {dir:?} buffers: {} allows {} bytes, below autotuning's {} ({}), \
             and there is no CAP_NET_ADMIN; raise {} to at least {} to let DRS size buffers",
            dir.core_sysctl(),
            l.set_max / 2,
            l.auto_max,
            dir.tcp_sysctl(),
            dir.core_sysctl(),
            l.auto_max.div_ceil(2),
        );
    }
    false
}

/// DRS can set buffers at least as large as autotuning's ceiling: the
/// plain limit allows it, or `FORCE` does (`force` is asked only if needed).
fn can_beat_autotuning(l: &BufferLimits, force: impl FnOnce() -> bool) -> bool {
    l.set_max >= l.auto_max || force()
}

/// Whether a mark `cur` on the socket must come down to the ceiling `cap`.
/// 0 is the kernel's "no mark": unlimited. Within a sixteenth above the
/// ceiling it stays: the ceiling moves with the bytes in flight at each
/// sample (`notsent_mark`: 768 KiB less them), and a refill mark set
/// under one sample's ceiling was found a few kB above the next one's,
/// so DRS lowered it by that much at every other wake-up of a slow reader
/// (lab send-wakeups: ~0.35 `setsockopt` per wake-up, 1485 per GiB).
fn lowers(cur: u64, cap: u64) -> bool {
    cur == 0 || cur > cap + cap / 16
}

/// One process-wide "said so" per direction.
static SAID_SEND: AtomicBool = AtomicBool::new(false);
static SAID_RECV: AtomicBool = AtomicBool::new(false);

/// DRS of one socket in one direction.
#[derive(Debug)]
pub struct DrsSocket {
    dir: Dir,
    drs: Drs,
    limits: BufferLimits,
    born: Instant,
    next: Instant,
    /// Largest buffer set.
    peak: u64,
    /// Buffer changes made.
    changes: u64,
    /// Samples taken.
    samples: u64,
    /// The path wanted more than the system allowed: (wanted, got).
    short: Option<(u64, u64)>,
    /// Least buffer besides autotuning's (a size the engine fixed).
    floor: u64,
    /// Least buffer while the path is short (`with_short_path_floor`).
    short_floor: u64,
    /// Sender only: where the not-sent mark's ceiling is published for
    /// the connection's refill (`refill.rs`); 0 until a BDP is known.
    mark_cap: Option<Arc<AtomicU64>>,
    /// Sender only: the mark the engine last set on the socket
    /// (`Flow::mark_now`; `flow::MARK_UNKNOWN`: read it from the socket).
    mark_now: Option<Arc<AtomicU64>>,
    /// Sender only: the send buffer DRS set last. The kernel locks a
    /// buffer set by hand (`SOCK_SNDBUF_LOCK`: neither autotuning nor
    /// memory pressure changes it), so after a set it is known without a
    /// `getsockopt` per sample.
    buffer_set: Option<u64>,
    /// Receiver only: the window clamp set last (0: none), and the largest.
    window: u64,
    peak_window: u64,
}

impl DrsSocket {
    /// Starts right-sizing the `dir` buffer, or `None` when the limits
    /// cannot be read (DRS then leaves the socket to the kernel).
    /// Also `None` when the process could set no buffer as large as
    /// autotuning's ceiling (no `CAP_NET_ADMIN` and `*mem_max` below
    /// `tcp_*mem[2]`, as with Debian's defaults): setting one would turn
    /// autotuning off and cap the socket below what it would have had.
    pub fn new(dir: Dir) -> Option<DrsSocket> {
        let limits = limits(dir)?;
        if !usable(dir, &limits) {
            return None;
        }
        let now = Instant::now();
        Some(DrsSocket {
            dir,
            drs: Drs::new(DrsConfig::default()),
            limits,
            born: now,
            next: now,
            peak: 0,
            changes: 0,
            samples: 0,
            short: None,
            floor: 0,
            short_floor: 0,
            mark_cap: None,
            mark_now: None,
            buffer_set: None,
            window: 0,
            peak_window: 0,
        })
    }

    /// Never sizes the buffer below `bytes` (a buffer the configuration
    /// or the peer fixed, `--send-buffer N` or SBUF: DRS then only grows
    /// it for paths that need more, and takes it back down to this).
    pub fn with_floor(mut self, bytes: u64) -> DrsSocket {
        self.floor = bytes;
        self
    }

    /// Keeps the buffer at least `bytes` while the path is short (the
    /// server's `send_buffer_max`, there for the wake-ups it saves on fast
    /// local paths); on a long path DRS sizes it (`drs::FIXED_FLOOR_BDPS`).
    pub fn with_short_path_floor(mut self, bytes: u64) -> DrsSocket {
        self.short_floor = bytes;
        self
    }

    /// Publishes the not-sent mark's ceiling ([`notsent_mark`] of the BDP
    /// estimate) to `cap` after each send-side sample; the connection's
    /// refill keeps its mark under it.
    pub fn with_mark_cap(mut self, cap: Arc<AtomicU64>) -> DrsSocket {
        self.mark_cap = Some(cap);
        self
    }

    /// The buffer a receiving socket should have before its handshake:
    /// the largest DRS may ever set, so the window scale offered in the
    /// SYN can cover it. It costs no memory until data is queued
    /// (measured, docs/TUNING.md); [`DrsSocket::after_connect`] brings
    /// it down to where autotuning starts.
    pub fn before_connect(&self) -> u64 {
        let max = DrsConfig::default().max;
        if sockbuf::force_allowed() == Some(false) {
            max.min(self.limits.set_max)
        } else {
            max
        }
    }

    /// The limits in force for this direction.
    pub fn limits(&self) -> &BufferLimits {
        &self.limits
    }

    /// Right after the handshake of a socket made with
    /// [`DrsSocket::before_connect`]: the window clamped to
    /// [`RECV_START_WINDOW`] and the buffer down to a few of it (at least
    /// autotuning's start, `tcp_rmem[1]`), from where the samples grow
    /// them. The window scale the SYN offered still allows the largest.
    pub fn after_connect(&mut self, fd: BorrowedFd<'_>) {
        let start = (RECV_START_WINDOW * RECV_BUFFER_PER_WINDOW)
            .max(self.limits.auto_start)
            .max(DrsConfig::default().min);
        self.apply(fd, start);
        self.set_window(fd, RECV_START_WINDOW);
    }

    /// Receiver: clamps the window offered to `bytes`.
    fn set_window(&mut self, fd: BorrowedFd<'_>, bytes: u64) {
        match sockbuf::set_window_clamp(fd, bytes) {
            Ok(()) => {
                self.window = bytes;
                self.peak_window = self.peak_window.max(bytes);
                tracing::trace!(bytes, "DRS window");
            }
            Err(e) => tracing::debug!("DRS: TCP_WINDOW_CLAMP refused: {e}"),
        }
    }

    /// Whether a sample is due.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Reads the socket and resizes its buffer if the estimator says so.
    pub fn sample(&mut self, fd: BorrowedFd<'_>, now: Instant) {
        self.sample_with(fd, now, tcp::tcp_info(fd).ok());
    }

    /// [`DrsSocket::sample`] with a `TCP_INFO` reading already taken at
    /// this wake-up (the connection's `Flow`; `None`: the read failed).
    pub(crate) fn sample_with(&mut self, fd: BorrowedFd<'_>, now: Instant, info: Option<TcpInfo>) {
        let Some(info) = info else {
            self.next = now + Duration::from_secs(1);
            return;
        };
        self.samples += 1;
        let t = now.saturating_duration_since(self.born);
        let dec = match self.dir {
            Dir::Send => {
                let buffer = match self.buffer_set {
                    Some(b) => b,
                    None => tcp::send_buffer(fd).unwrap_or(0) as u64,
                };
                let s = SendSample {
                    delivery_rate: info.delivery_rate,
                    app_limited: info.delivery_rate_app_limited,
                    rtt: Duration::from_micros(u64::from(info.rtt_us)),
                    min_rtt: Duration::from_micros(u64::from(info.min_rtt_us)),
                    cwnd_bytes: u64::from(info.snd_cwnd) * u64::from(info.snd_mss),
                    notsent: u64::from(info.notsent_bytes),
                    sndbuf_limited: Duration::from_micros(info.sndbuf_limited_us),
                    busy: Duration::from_micros(info.busy_time_us),
                    retrans: u64::from(info.total_retrans),
                    buffer,
                    floor: sender_autotune(info.snd_cwnd, info.snd_mss, self.limits.auto_max)
                        .max(self.floor),
                    fixed: self.short_floor,
                };
                let d = self.drs.on_send_sample(t, &s);
                let in_flight = u64::from(info.unacked) * u64::from(info.snd_mss);
                self.cap_mark(fd, in_flight, info.delivery_rate);
                d
            }
            Dir::Recv => {
                let buffer = tcp::recv_buffer(fd).unwrap_or(0) as u64;
                let s = RecvSample {
                    rcv_rtt: Duration::from_micros(u64::from(info.rcv_rtt_us)),
                    rcv_space: u64::from(info.rcv_space),
                    bytes_received: info.bytes_received,
                    buffer,
                    floor: receiver_autotune(
                        u64::from(info.rcv_space),
                        self.limits.auto_start,
                        self.limits.auto_max,
                    )
                    .max(self.floor),
                    window: self.window,
                };
                self.drs.on_recv_sample(t, &s)
            }
        };
        if let Some(w) = dec.window {
            self.set_window(fd, w);
        }
        self.next = now + dec.next_sample;
        if let Some(want) = dec.set {
            self.apply(fd, want);
        }
    }

    /// Publishes the mark's ceiling, and lowers a mark already on the
    /// socket that is above it (the refill resizes only at wake-ups, and a
    /// fixed `--notsent-lowat` never does).
    fn cap_mark(&mut self, fd: BorrowedFd<'_>, in_flight: u64, rate: u64) {
        let (Some(cell), bdp) = (&self.mark_cap, self.drs.bdp()) else {
            return;
        };
        if bdp == 0 {
            return;
        }
        let cap = notsent_mark(bdp, in_flight, rate);
        cell.store(cap, Relaxed);
        let known = self
            .mark_now
            .as_ref()
            .map(|m| m.load(Relaxed))
            .filter(|&m| m != MARK_UNKNOWN);
        let cur = match known {
            Some(m) => m,
            None => match tcp::notsent_lowat(fd) {
                Ok(m) => u64::from(m),
                Err(_) => return,
            },
        };
        if lowers(cur, cap) {
            let m = cap.min(u64::from(u32::MAX)) as u32;
            let ok = tcp::set_notsent_lowat(fd, m).is_ok();
            if let Some(cell) = &self.mark_now {
                cell.store(if ok { u64::from(m) } else { MARK_UNKNOWN }, Relaxed);
            }
        }
    }

    /// The send buffer as the engine set it before DRS started (the
    /// kernel keeps a buffer set by hand as it is).
    pub(crate) fn with_buffer_known(mut self, bytes: u64) -> DrsSocket {
        if self.dir == Dir::Send {
            self.buffer_set = Some(bytes);
        }
        self
    }

    /// Where the engine keeps the mark it last set on the socket
    /// (`Flow::mark_now`), so the ceiling check need not read it back.
    pub(crate) fn with_mark_now(mut self, cell: Arc<AtomicU64>) -> DrsSocket {
        self.mark_now = Some(cell);
        self
    }

    fn apply(&mut self, fd: BorrowedFd<'_>, want: u64) {
        match sockbuf::set_buffer(fd, self.dir, want, &self.limits) {
            Ok(a) => {
                self.changes += 1;
                if self.dir == Dir::Send {
                    self.buffer_set = Some(a.effective);
                }
                self.peak = self.peak.max(a.effective);
                if a.limited {
                    self.short = Some((want, a.effective));
                    self.say_once(want, a.effective);
                }
                tracing::trace!(dir = ?self.dir, want, got = a.effective, "DRS buffer");
            }
            Err(e) => tracing::debug!("DRS: setting the {:?} buffer refused: {e}", self.dir),
        }
    }

    fn say_once(&self, want: u64, got: u64) {
        let said = match self.dir {
            Dir::Send => &SAID_SEND,
            Dir::Recv => &SAID_RECV,
        };
        if !said.swap(true, Relaxed) {
            if let Some(note) = self.limit_note_for(want, got) {
                tracing::warn!("{note}");
            }
        }
    }

    /// When the system's limit held the buffer below what the path
    /// needed: which sysctls would help and what the limit costs.
    pub fn limit_note(&self) -> Option<String> {
        let (want, got) = self.short?;
        self.limit_note_for(want, got)
    }

    fn limit_note_for(&self, want: u64, got: u64) -> Option<String> {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        // The connection can keep about got/want of the window the path
        // needs in flight, so it may lose up to the rest of its throughput.
        let cost = 100.0 * (1.0 - got as f64 / want.max(1) as f64);
        Some(format!(
            "DRS: this path needs a {:.1} MiB {} buffer, the system allows {:.1} MiB \
             (up to {cost:.0} % of the throughput): raise {} to {} (and the third \
             value of {}), or run with CAP_NET_ADMIN",
            mib(want),
            match self.dir {
                Dir::Send => "send",
                Dir::Recv => "receive",
            },
            mib(got),
            self.dir.core_sysctl(),
            want.div_ceil(2),
            self.dir.tcp_sysctl(),
        ))
    }

    /// Largest buffer set so far, bytes (0: none).
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Receiver: largest window clamp set so far, bytes (0: none).
    pub fn peak_window(&self) -> u64 {
        self.peak_window
    }

    /// Buffer changes made so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Samples taken so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The estimator's last bandwidth-delay product, bytes.
    pub fn bdp(&self) -> u64 {
        self.drs.bdp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_a_few_kb_above_the_ceiling_stays_and_one_well_above_comes_down() {
        let cap = 755 << 10;
        assert!(lowers(0, cap), "no mark is unlimited");
        assert!(!lowers(cap, cap));
        // 12.5 kB more in flight at this sample than at the refill's.
        assert!(!lowers(cap + 12_500, cap));
        assert!(lowers(cap + cap / 16 + 1, cap));
        assert!(lowers(8 << 20, cap), "a fixed 8 MiB mark");
    }
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn a_receiver_starts_big_for_the_handshake_then_at_its_start_window() {
        let mut d = DrsSocket::new(Dir::Recv).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut c, _) = sockbuf::connect_with_recv_buffer(
            l.local_addr().unwrap(),
            Duration::from_secs(5),
            d.before_connect(),
            d.limits(),
        )
        .unwrap();
        d.after_connect(c.as_fd());
        let start = (RECV_START_WINDOW * RECV_BUFFER_PER_WINDOW)
            .max(d.limits().auto_start)
            .max(DrsConfig::default().min);
        assert_eq!(tcp::recv_buffer(c.as_fd()).unwrap() as u64, start);
        assert_eq!(d.peak_window(), RECV_START_WINDOW);
        // Data flows and samples keep the buffer at least at the start.
        let (mut s, _) = l.accept().unwrap();
        let w = std::thread::spawn(move || s.write_all(&vec![1u8; 8 << 20]).unwrap());
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        while got < 8 << 20 {
            got += c.read(&mut buf).unwrap();
            if d.due(Instant::now()) {
                d.sample(c.as_fd(), Instant::now());
            }
        }
        w.join().unwrap();
        assert!(tcp::recv_buffer(c.as_fd()).unwrap() as u64 >= start);
    }

    #[test]
    fn a_sender_is_sampled_and_never_left_below_autotuning() {
        let mut d = DrsSocket::new(Dir::Send).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let r = std::thread::spawn(move || {
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            v.len()
        });
        let block = vec![2u8; 1 << 20];
        for _ in 0..16 {
            c.write_all(&block).unwrap();
            d.sample(c.as_fd(), Instant::now());
        }
        let info = tcp::tcp_info(c.as_fd()).unwrap();
        let floor = sender_autotune(info.snd_cwnd, info.snd_mss, d.limits().auto_max);
        if d.changes() > 0 {
            assert!(tcp::send_buffer(c.as_fd()).unwrap() as u64 >= floor.min(d.limits().set_max));
        }
        drop(c);
        assert_eq!(r.join().unwrap(), 16 << 20);
    }

    #[test]
    fn the_not_sent_mark_is_20_ms_of_the_rate_or_the_connections_send_memory() {
        // 400 Mbit/s (100 ms: BDP 5 MB, a window in flight): 1 MB, not
        // half the BDP.
        assert_eq!(notsent_mark(5_000_000, 5_000_000, 50_000_000), 1_000_000);
        // 1 Gbit/s.
        assert_eq!(notsent_mark(12_500_000, 12_500_000, 125_000_000), 2_500_000);
        // Loopback: fast rate, few wake-ups per GiB.
        assert_eq!(notsent_mark(100_000, 100_000, 2_000_000_000), 40_000_000);
        // 100 Mbit/s 50 ms (20 ms of it is 250 kB; 768 KiB less the 625 kB
        // in flight is less): the least mark.
        assert_eq!(notsent_mark(625_000, 625_000, 12_500_000), 256 << 10);
        // Slow and short (1 Mbit/s, 80 ms): the connection's send memory
        // is nearly all not-sent queue, so a wake-up moves ~760 kB.
        assert_eq!(
            notsent_mark(10_000, 10_000, 125_000),
            CONN_SEND_MEM - 10_000
        );
        // A reader pacing itself: the estimate saw 800 kB (bursts through
        // each window update), 20 kB are in flight: the send memory is the
        // in-flight bytes' complement.
        assert_eq!(
            notsent_mark(800_000, 20_000, 125_000),
            CONN_SEND_MEM - 20_000
        );
        // More in flight than the estimate counts only up to the estimate.
        assert_eq!(
            notsent_mark(10_000, 500_000, 125_000),
            CONN_SEND_MEM - 10_000
        );
    }

    #[test]
    fn without_force_debians_small_maxima_leave_autotuning_alone() {
        let debian = BufferLimits::parse("212992", "4096 131072 6291456").unwrap();
        assert!(!can_beat_autotuning(&debian, || false));
        assert!(can_beat_autotuning(&debian, || true));
        let lab = BufferLimits::parse("4194304", "4096 16384 4194304").unwrap();
        assert!(can_beat_autotuning(&lab, || panic!("not asked")));
    }

    #[test]
    fn the_limit_note_names_the_sysctls() {
        let mut d = DrsSocket::new(Dir::Send).unwrap();
        assert!(d.limit_note().is_none());
        d.short = Some((32 << 20, 8 << 20));
        let n = d.limit_note().unwrap();
        assert!(n.contains("net.core.wmem_max to 16777216"), "{n}");
        assert!(n.contains("net.ipv4.tcp_wmem"), "{n}");
        assert!(n.contains("75 %"), "{n}");
    }
}
