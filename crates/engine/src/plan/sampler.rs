//! The flow sampler: raw `TCP_INFO` readings in, a smoothed rate and edge
//! events out. Pure state over samples; the caller reads the socket.

use std::time::Duration;

/// Congestion-avoidance state as `TCP_INFO`'s `tcpi_ca_state` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaState {
    /// Nothing wrong.
    #[default]
    Open,
    /// Duplicate ACKs or SACKs seen; no reduction yet.
    Disorder,
    /// Window reduced after ECN (congestion window reduced).
    Cwr,
    /// Fast recovery after loss.
    Recovery,
    /// Retransmission timeout: window collapsed.
    Loss,
}

impl CaState {
    /// From the kernel's numbering (`TCP_CA_Open` = 0 .. `TCP_CA_Loss` = 4);
    /// an unknown value is treated as `Open` (it carries no cut we can act on).
    pub fn from_raw(v: u8) -> CaState {
        match v {
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            _ => CaState::Open,
        }
    }

    /// Whether the sender is in a window-reducing state.
    pub fn is_reducing(self) -> bool {
        matches!(self, CaState::Cwr | CaState::Recovery | CaState::Loss)
    }
}

/// One reading of a connection (from `TCP_INFO`, `SIOCOUTQ`/`SIOCOUTQNSD`,
/// and what the sender saw: FIN, RST or another error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowSample {
    /// Most recent delivery-rate sample, bytes per second.
    pub delivery_rate: u64,
    /// The kernel marked that rate sample application-limited (we did not
    /// keep the socket full), so it is a lower bound, not the path's rate.
    pub app_limited: bool,
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Congestion window in segments.
    pub cwnd: u32,
    /// Bytes written by us and not yet sent (`tcpi_notsent_bytes`).
    pub notsent_bytes: u64,
    /// Bytes sent and not yet acknowledged.
    pub unacked_bytes: u64,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Congestion-avoidance state.
    pub ca_state: CaState,
    /// The peer closed (FIN) or the transfer ended.
    pub closed: bool,
    /// The peer reset the connection (RST / `ECONNRESET` / `EPIPE`).
    pub reset: bool,
    /// Any other socket error: treated like a close.
    pub error: bool,
}

/// Edge events found in one sample (each reported once, on the sample that
/// shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowEvents {
    /// The congestion window was cut (entered CWR/recovery/loss, or shrank
    /// by a quarter or more): the connection needs data more slowly now.
    pub cwnd_cut: bool,
    /// New retransmissions since the last sample.
    pub loss: bool,
    /// Closed by FIN, end of transfer or a socket error.
    pub closed: bool,
    /// Reset by the peer.
    pub reset: bool,
}

impl FlowEvents {
    /// Whether the connection is gone (closed or reset): cancel its reads.
    pub fn is_gone(self) -> bool {
        self.closed || self.reset
    }
}

/// What the planner needs to know about a connection after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowState {
    /// Smoothed delivery rate `B_n` in bytes per second (0 before any sample).
    pub rate: u64,
    /// Bytes waiting in the socket, not yet sent (the paper's pending buffer).
    pub pending: u64,
    /// Bytes in flight (sent, unacknowledged).
    pub unacked: u64,
    /// Events found in this sample.
    pub events: FlowEvents,
}

/// Weight of a new rate sample in the moving average, as 1/`RATE_EWMA_DIV`:
/// a quarter follows a real change within a few samples yet smooths ACK
/// compression.
const RATE_EWMA_DIV: u64 = 4;
/// A cwnd that shrinks to 3/4 or less of its previous value is a cut even if
/// the kernel's ca_state was already back to Open when we looked.
const CWND_CUT_NUM: u64 = 3;
const CWND_CUT_DEN: u64 = 4;

/// Per-connection sampler state.
#[derive(Debug, Clone, Default)]
pub struct Sampler {
    state: FlowState,
    prev_cwnd: u32,
    prev_retrans: u32,
    prev_ca: CaState,
    seen: bool,
    gone: bool,
}

impl Sampler {
    /// A sampler that has seen nothing yet.
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// The state after the last sample (events are those of that sample).
    pub fn state(&self) -> FlowState {
        self.state
    }

    /// Folds one sample in. `_now` is unused today; it is taken so a
    /// time-weighted average can be added without changing callers.
    pub fn update(&mut self, _now: Duration, s: &FlowSample) -> FlowState {
        let mut ev = FlowEvents::default();
        if self.gone {
            // A connection is gone once; later samples change nothing.
            self.state.events = ev;
            return self.state;
        }
        if s.reset {
            ev.reset = true;
        } else if s.closed || s.error {
            ev.closed = true;
        }
        if self.seen {
            let entered_reducing = s.ca_state.is_reducing() && !self.prev_ca.is_reducing();
            let shrank =
                u64::from(s.cwnd) * CWND_CUT_DEN <= u64::from(self.prev_cwnd) * CWND_CUT_NUM;
            ev.cwnd_cut = entered_reducing || (shrank && s.cwnd > 0);
            ev.loss = s.total_retrans > self.prev_retrans;
        }
        self.state.rate = self.next_rate(s, ev.cwnd_cut);
        self.state.pending = s.notsent_bytes;
        self.state.unacked = s.unacked_bytes;
        self.state.events = ev;
        self.prev_cwnd = s.cwnd;
        self.prev_retrans = s.total_retrans;
        self.prev_ca = s.ca_state;
        self.seen = true;
        self.gone = ev.is_gone();
        self.state
    }

    fn next_rate(&self, s: &FlowSample, cut: bool) -> u64 {
        let old = self.state.rate;
        if !self.seen || old == 0 {
            return s.delivery_rate;
        }
        let mut base = old;
        if cut && self.prev_cwnd > 0 {
            // The delivery rate lags a cut by an RTT or more; scale at once by
            // the window ratio so the planner stops reading for the old rate.
            base = old.saturating_mul(u64::from(s.cwnd)) / u64::from(self.prev_cwnd);
        }
        if s.app_limited && s.delivery_rate <= base {
            // An application-limited sample only says the path can do at
            // least this much; it must not drag the estimate down (else a
            // starving connection would be planned ever less data).
            return base;
        }
        // Exponential moving average; i128 keeps the subtraction signed.
        let diff = i128::from(s.delivery_rate) - i128::from(base);
        let next = i128::from(base) + diff / i128::from(RATE_EWMA_DIV);
        u64::try_from(next.max(0)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rate: u64, cwnd: u32) -> FlowSample {
        FlowSample {
            delivery_rate: rate,
            cwnd,
            ..FlowSample::default()
        }
    }

    #[test]
    fn rate_is_smoothed_and_app_limited_samples_do_not_lower_it() {
        let mut s = Sampler::new();
        let t = Duration::ZERO;
        assert_eq!(s.update(t, &sample(1000, 10)).rate, 1000);
        assert_eq!(s.update(t, &sample(2000, 10)).rate, 1250);
        let low = FlowSample {
            app_limited: true,
            ..sample(10, 10)
        };
        assert_eq!(s.update(t, &low).rate, 1250);
        let high = FlowSample {
            app_limited: true,
            ..sample(2250, 10)
        };
        assert_eq!(s.update(t, &high).rate, 1500);
    }

    #[test]
    fn a_cwnd_cut_is_reported_once_and_scales_the_rate() {
        let mut s = Sampler::new();
        let t = Duration::ZERO;
        s.update(t, &sample(1000, 20));
        let cut = FlowSample {
            ca_state: CaState::Recovery,
            total_retrans: 1,
            ..sample(1000, 10)
        };
        let st = s.update(t, &cut);
        assert!(st.events.cwnd_cut && st.events.loss);
        // 1000 * 10/20 = 500, then a quarter of the way to the 1000 sample.
        assert_eq!(st.rate, 625);
        let again = s.update(t, &cut);
        assert!(!again.events.cwnd_cut && !again.events.loss);
    }

    #[test]
    fn reset_and_close_are_events_and_final() {
        let mut s = Sampler::new();
        let t = Duration::ZERO;
        s.update(t, &sample(1000, 10));
        let st = s.update(
            t,
            &FlowSample {
                reset: true,
                ..sample(0, 10)
            },
        );
        assert!(st.events.reset && st.events.is_gone());
        let later = s.update(
            t,
            &FlowSample {
                closed: true,
                ..sample(0, 10)
            },
        );
        assert_eq!(later.events, FlowEvents::default());
        let mut c = Sampler::new();
        assert!(
            c.update(
                t,
                &FlowSample {
                    error: true,
                    ..sample(0, 0)
                }
            )
            .events
            .closed
        );
    }
}
