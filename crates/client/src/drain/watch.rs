//! What the drain learns of each data connection from the kernel, on a
//! timer of its own: the verdict's tally and the receive buffer's
//! right-sizing (DRS).

use super::*;

/// How often a connection's `TCP_INFO` is read for the verdict (DRS
/// samples on its own schedule, about once a round trip while it grows).
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// What the drain learns of one connection from the kernel: the tally of
/// what limited it (`sluice_engine::verdict`) and, with `--drs on`, its
/// receive buffer's right-sizing.
pub(super) struct Watch {
    born: Instant,
    next: Instant,
    tally: RecvTally,
    drs: Option<DrsSocket>,
    closed: bool,
    /// `tcpi_rcv_ooopack` at the last look (counted into stats as it grows).
    ooo: u32,
    /// Receive buffer at the last look (for the queue-full test).
    pub(super) rcvbuf: u64,
}

impl Watch {
    pub(super) fn new(sock: &crate::tls::DataSock, drs: bool, stats: &Stats) -> Watch {
        let now = Instant::now();
        let mut drs = drs.then(|| DrsSocket::new(Dir::Recv)).flatten();
        if let Some(d) = drs.as_mut() {
            d.after_connect(sock.as_fd());
        }
        let mut w = Watch {
            born: now,
            next: now,
            tally: RecvTally::default(),
            drs,
            closed: false,
            ooo: 0,
            rcvbuf: 0,
        };
        w.look(sock, now, stats);
        w
    }

    /// Reads the socket if a look is due.
    pub(super) fn tick(&mut self, sock: &crate::tls::DataSock, now: Instant, stats: &Stats) {
        if now >= self.next {
            self.look(sock, now, stats);
        }
        if let Some(d) = self.drs.as_mut() {
            if d.due(now) {
                d.sample(sock.as_fd(), now);
            }
        }
    }

    pub(super) fn look(&mut self, sock: &crate::tls::DataSock, now: Instant, stats: &Stats) {
        self.next = now + WATCH_EVERY;
        self.rcvbuf = tcp::recv_buffer(sock.as_fd()).map_or(0, |b| b as u64);
        if let Ok(i) = tcp::tcp_info(sock.as_fd()) {
            let new = u64::from(i.rcv_ooopack.saturating_sub(self.ooo));
            Stats::add(&stats.rcv_ooo_packets, new);
            if new > 0 {
                Stats::add(&stats.rcv_loss_events, 1);
            }
            self.ooo = self.ooo.max(i.rcv_ooopack);
            if i.rcv_rtt_us > 0 {
                stats.rtt_now_micros.store(u64::from(i.rcv_rtt_us), Relaxed);
            }
            self.tally.sample(
                now.duration_since(self.born),
                i.bytes_received,
                u64::from(i.rcv_wnd),
                Duration::from_micros(u64::from(i.rcv_rtt_us)),
            );
        }
    }

    /// The connection is done: a last look, and everything into `stats`.
    pub(super) fn close(&mut self, sock: &crate::tls::DataSock, stats: &Stats) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        self.look(sock, Instant::now(), stats);
        stats.add_recv_tally(&self.tally);
        self.tally = RecvTally::default();
        if let Some(d) = self.drs.take() {
            stats.drs_peak_buffer.fetch_max(d.peak(), Relaxed);
            stats.drs_peak_window.fetch_max(d.peak_window(), Relaxed);
            Stats::add(&stats.drs_changes, d.changes());
            if let Some(n) = d.limit_note() {
                if let Ok(mut mine) = stats.drs_note.lock() {
                    mine.get_or_insert(n);
                }
            }
        }
    }
}
