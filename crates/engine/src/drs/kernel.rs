//! The sizes the kernel's side of DRS is measured against: the not-sent
//! mark a sender keeps (what its send memory holds beyond what is in
//! flight) and what Linux's autotuning would give a socket (DRS's floor).

/// Least not-sent mark: below it a wake-up moves too little.
const MARK_MIN: u64 = 256 << 10;
/// Send memory (in flight + not sent) a connection may always hold: on a
/// path with a small BDP (a slow reader, a short round trip) most of it is
/// the not-sent queue, so a wake-up moves more. Measured (lab send-wakeups,
/// 1000 readers at 1 Mbit/s, 100 ms): with the 256 KiB floor each wake-up
/// moved ~128 KiB, one loop wake-up per socket wake, 6.6k context switches
/// per GiB against nginx's 2.8k.
pub const CONN_SEND_MEM: u64 = 768 << 10;
/// The mark holds this much time of the connection's rate: the kernel
/// wakes the sender at half the mark, so the sender has 10 ms to refill
/// before the connection runs dry; a short-RTT fast path (loopback) keeps
/// few wake-ups per GiB.
const MARK_TIME: f64 = 0.02;

/// The not-sent mark (`TCP_NOTSENT_LOWAT`) for a sender with this
/// delivery rate. The kernel's send memory is the data in flight (at
/// least a BDP, by necessity: what is unacknowledged) plus the data not
/// sent yet, which only needs to last until the sender's next wake-up: a
/// rate-sized piece, whatever the round trip. A rate-sized mark of seconds
/// (refill.rs, 8 MiB cap) kept send memory at the whole buffer (8 MiB on a
/// 100 Mbit/s 50 ms path whose BDP is 0.6 MB), and half a BDP (session 9)
/// was 2.5 MB of unsent data at 400 Mbit/s 100 ms where 20 ms of the rate
/// is 1 MB (lab/results/drs-wan, s12).
///
/// The mark may also fill [`CONN_SEND_MEM`] less what is in flight now (at
/// most the BDP): the kernel's send memory stays within that, and the
/// refill's rate and share of the host's TCP memory (`refill.rs`) bound it
/// further. In flight, not the BDP estimate: a reader that paces itself
/// keeps the window small, while the estimate (windowed-max delivery rate
/// x RTT) takes in the bursts each window update lets through (lab
/// send-wakeups, 1000 readers at 1 Mbit/s over 100 ms: wake-ups per GiB
/// the same with the BDP in this term, as if every mark were ~400 kB).
pub fn notsent_mark(bdp: u64, in_flight: u64, rate: u64) -> u64 {
    rate_mark(rate).max(CONN_SEND_MEM.saturating_sub(in_flight.min(bdp)))
}

/// The rate's part of [`notsent_mark`]: 20 ms of it, at least the least
/// mark. What DRS sizes the send buffer for.
pub(super) fn rate_mark(rate: u64) -> u64 {
    ((rate as f64 * MARK_TIME) as u64).max(MARK_MIN)
}

/// The send buffer Linux's autotuning (`tcp_sndbuf_expand`) gives a
/// socket with this congestion window: two windows of segments, each
/// costing a power-of-two data block plus the skb, at most `tcp_wmem[2]`.
pub fn sender_autotune(cwnd: u32, mss: u32, tcp_wmem_max: u64) -> u64 {
    // MAX_TCP_HEADER (~320) and skb_shared_info (~320) on x86_64, the
    // sk_buff itself 256: the kernel's constants, close enough for a floor.
    let per_mss = (u64::from(mss.max(536)) + 320 + 320).next_power_of_two() + 256;
    let segs = u64::from(cwnd.max(10));
    (2 * segs * per_mss).min(tcp_wmem_max)
}

/// The receive buffer Linux's autotuning (`tcp_rcv_space_adjust`) gives a
/// socket whose application read `rcv_space` bytes in a round trip: a
/// window of twice that, a buffer of twice the window (default
/// `tcp_adv_win_scale`), at most `tcp_rmem[2]`, at least `start`
/// (`tcp_rmem[1]`, where every socket begins).
pub fn receiver_autotune(rcv_space: u64, start: u64, tcp_rmem_max: u64) -> u64 {
    rcv_space
        .saturating_mul(4)
        .max(start)
        .min(tcp_rmem_max.max(start))
}
