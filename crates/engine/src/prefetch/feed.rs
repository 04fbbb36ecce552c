//! A sender's side of the hub: [`Feed`] hands out the chunks read for its
//! range, reports bytes sent, samples the socket for the planner, and drops
//! acknowledged pages of files no other feed reads.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_platform::tcp;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::pagecache::missing_bytes;
use super::{Chunk, Hub, Take, STARVING_SAMPLE_DIV, TCP_STATE_CLOSE};
use crate::counters::{Counters, Tally};
use crate::flow::{Carry, Flow};
use crate::plan::{CaState, ConnId, FlowSample};
use crate::{Cancel, Engine, EngineError};

/// Longest nap of a sender waiting for disk data before its connection's
/// first rate (after it, no naps: the hub's tick looks at its socket).
///
/// Tried in session 14 and taken back: up to 4 s where the socket's error
/// readiness tells a reset (half of what a slow reader's socket holds lasts
/// seconds). Wake-ups per GiB halved in lab tpf-mixed-rates, but the 256
/// MiB memory cgroup filled (max 256 MiB against 227), its reclaim ran on
/// the disk threads (their CPU 0.73 -> 2.17 s/GiB) and evicted read-ahead
/// before it was sent (5.45 MB; the 1 Mbit/s class at 97.8 %). The likely
/// reason: these naps' samples are also when acknowledged pages leave the
/// page cache (`DropBehind`, at most every `DROP_EVERY`), so sent pages
/// stayed up to 4x longer (lab/results/tpf-mixed-rates/README.md, session
/// 14). Dropping sent pages without a sample first is the way on.
const MAX_NAP: Duration = Duration::from_secs(1);

/// A sender's handle on the hub for one range; closing it (drop) cancels
/// what is left and adds its counters to the transfer's.
pub(crate) struct Feed<'a> {
    engine: &'a Engine,
    hub: &'a Hub,
    /// The connection's `TCP_INFO` reader, shared with the refill mark.
    flow: &'a Flow,
    id: ConnId,
    notify: Arc<Notify>,
    local: &'a Counters,
    last_sample: Option<Instant>,
    /// `tcpi_bytes_acked` and when it was read, for the rate estimate.
    anchor: Option<(u64, Instant)>,
    /// A rate has been measured (over one full `sample_interval`).
    rated: bool,
    /// The sender waited for disk data since the rate interval began: the
    /// acked rate then shows our supply, a lower bound on the reader's.
    starved: bool,
    /// The last rate measured, carried to the next feed on this connection.
    last_rate: Option<u64>,
    /// The hub has a duplicate of the socket for its tick's looks.
    attached: bool,
    file: Arc<File>,
}

impl Engine {
    /// A feed for `start..end` of `file`, or `None` in `kernel` mode.
    pub(crate) fn feed<'a>(
        &'a self,
        flow: &'a Flow,
        file: &Arc<File>,
        start: u64,
        end: u64,
        copy: bool,
        local: &'a Counters,
    ) -> Option<Feed<'a>> {
        let hub = self.inner.prefetch.as_ref()?;
        let (id, notify, carry) = hub.open(self, file, start, end, copy, flow.take_carry());
        let last_rate = carry.and_then(|c| c.rate);
        Some(Feed {
            engine: self,
            hub,
            flow,
            id,
            notify,
            local,
            last_sample: None,
            anchor: carry.and_then(|c| c.anchor),
            rated: last_rate.is_some(),
            starved: false,
            last_rate,
            attached: false,
            file: Arc::clone(file),
        })
    }
}

impl Feed<'_> {
    /// Waits for the chunk that starts at `pos` (the sender's offset).
    pub(crate) async fn next(
        &mut self,
        conn: &TcpStream,
        pos: u64,
        cancel: &Cancel,
    ) -> Result<Chunk, EngineError> {
        let idle = self.engine.config().idle_timeout;
        let deadline = tokio::time::Instant::now() + idle;
        // Naps in a row while this chunk is awaited and the socket still
        // holds data: each twice the last.
        let mut naps = 0u32;
        // Whether the socket's error readiness still tells a reset (see below).
        let mut watch_reset = true;
        if !self.attached {
            self.attached = true;
            if let Ok(sock) = conn.as_fd().try_clone_to_owned() {
                self.hub.attach(self.id, sock);
            }
        }
        loop {
            match self.hub.take(self.id, pos) {
                Take::Ready(mut c) => {
                    self.local.add_disk_read(c.len);
                    if c.bufs.is_empty() {
                        // Page-cache chunk: evicted before it was sent means
                        // the budget is larger than the memory really there.
                        c.evicted = missing_bytes(&self.file, pos, c.len);
                        if c.evicted > 0 {
                            self.hub.pressure(self.engine, self.id, c.evicted);
                        }
                    }
                    return Ok(c);
                }
                Take::Failed(e) => return Err(e),
                Take::Wait => self.starved = true,
            }
            // Starving: a fresh sample shows the planner the drained socket.
            let before = self.last_sample;
            self.sample(conn, true)?;
            let told = self.last_sample != before;
            // The disk job's completion wakes us (`notify`). Once the
            // planner has a rate the sender needs no more looks of its
            // own: the hub's tick looks at every socket once a second
            // (`Hub::sample_all`, through the duplicate handed over above),
            // which shows the planner the socket draining and drops the
            // acknowledged pages. So the sender sleeps until its data
            // comes, with no timer of its own, whether or not its socket
            // still holds data, and a reset wakes it through the socket's
            // error readiness (EPOLLERR). Its own naps of up to 1 s while
            // the socket held data were most of the loop's switches in lab
            // tpf-mixed-rates (480 slow readers; session 14: 15.2-17.8k
            // per GiB; one tick for all, s15-naps-D: 3.1k). Napping at
            // the starving sample rate woke 300 disk-bound senders ~20 000
            // times a second (lab tpf-abort: 500k wake-ups per GiB); naps
            // doubling to MAX_NAP still woke them ~4 times per read (15k
            // wake-ups per GiB for ~4k reads); a 2 s nap once dry, about
            // once per read (each waited ~3 s for its next read).
            let nap = self.nap(conn);
            // Only once the planner has a rate and a sample from this
            // wait: it plans this connection's next read from that sample
            // (one skipped or not yet passed on would leave it waiting).
            let long = watch_reset && self.rated;
            if long && !told {
                self.last_sample = None;
                self.sample(conn, true)?;
            }
            if !long {
                naps = naps.saturating_add(1).min(16);
            }
            let nap = (nap * 2u32.saturating_pow(naps.max(1) - 1)).min(MAX_NAP);
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(nap), if !long => {}
                r = conn.ready(Interest::ERROR), if watch_reset => {
                    if let Some(e) = conn.take_error().ok().flatten() {
                        return Err(EngineError::Connection(e));
                    }
                    if let Err(e) = r {
                        return Err(EngineError::Connection(e));
                    }
                    // Error readiness without an error (a kernel or runtime
                    // quirk): back to naps rather than spinning on it.
                    watch_reset = false;
                }
                _ = tokio::time::sleep_until(deadline) => return Err(EngineError::Idle),
                _ = cancel.cancelled() => return Err(EngineError::Cancelled),
            }
        }
    }

    /// How long a sender waiting for disk data sleeps before it looks at
    /// its socket again (a completed read wakes it at once anyway). While
    /// the socket still holds unsent data for longer than `sample_every`
    /// at the connection's rate, the reader is not starving and a look
    /// would learn nothing: the nap is that time, up to [`MAX_NAP`]. With a
    /// fixed `sample_every` nap, 480 rate-limited readers of a throttled
    /// disk woke ~4,800 times a second (lab tpf-mixed-rates: 114k wake-ups
    /// per GiB against nginx's 6.9k context switches).
    /// Only before the connection's first rate (then the hub's tick looks).
    fn nap(&self, conn: &TcpStream) -> Duration {
        let every = self.hub.sample_every;
        let Some((_, info)) = self.flow.info(conn) else {
            return every;
        };
        let Some(rate) = self.last_rate.filter(|&r| r > 0) else {
            return every;
        };
        let queued = Duration::from_secs_f64(f64::from(info.notsent_bytes) / rate as f64);
        // Wake while half of it is still queued: the planner then sees the
        // socket before it runs dry.
        (queued / 2).clamp(every, MAX_NAP)
    }

    /// `n` bytes of the range went into the socket.
    pub(crate) fn sent(&self, n: u64) {
        self.hub.sent(self.engine, self.id, n);
    }

    /// Feeds a `TCP_INFO` sample to the planner if the last one is old
    /// enough; a connection found reset/closed ends the transfer.
    pub(crate) fn sample(&mut self, conn: &TcpStream, starving: bool) -> Result<(), EngineError> {
        let every = if starving {
            self.hub.sample_every / STARVING_SAMPLE_DIV
        } else {
            self.hub.sample_every
        };
        if self.last_sample.is_some_and(|l| l.elapsed() < every) {
            return Ok(());
        }
        self.last_sample = Some(Instant::now());
        let Some((now, info)) = self.flow.info(conn) else {
            return Ok(()); // not TCP (tests on other sockets): plan blind
        };
        if info.state == TCP_STATE_CLOSE {
            return Err(EngineError::Connection(
                io::ErrorKind::ConnectionReset.into(),
            ));
        }
        // The rate is bytes acked per second between two samples, not the
        // kernel's `tcpi_delivery_rate`: a receive-window-limited reader on a
        // short path acks each small window in microseconds, so the kernel's
        // per-flight samples can show the link's burst rate rather than how
        // fast the reader drains; what was acked over a span cannot.
        // Measured over at least a whole interval, whatever the sampling
        // cadence: over a few ms the acked count moves in window-sized steps.
        let mut fresh = None;
        // Application-limited means *we* had nothing to send (waited for the
        // disk). The kernel's `delivery_rate_app_limited` also fires when the
        // send buffer, not the reader, is the limit, which would keep the
        // estimate from ever coming down; it is not used.
        let mut app_limited = false;
        match self.anchor {
            None => self.anchor = Some((info.bytes_acked, now)),
            Some((acked, at)) => {
                let dt = now.duration_since(at);
                if dt >= self.hub.sample_every {
                    let bytes = info.bytes_acked.saturating_sub(acked) as f64;
                    fresh = Some((bytes / dt.as_secs_f64()) as u64);
                    self.last_rate = fresh;
                    self.anchor = Some((info.bytes_acked, now));
                    app_limited = std::mem::take(&mut self.starved);
                }
            }
        }
        let mut sample = flow_sample(&info, fresh.unwrap_or(0), app_limited);
        if fresh.is_none() {
            if !self.rated {
                // Before the first whole interval the planner keeps its initial rate.
                return Ok(());
            }
            // No new rate: an app-limited 0 leaves the estimate as it is, and
            // the queue lengths still reach the planner.
            sample.app_limited = true;
        }
        self.rated = true;
        let t = Tally {
            global: &self.engine.inner.counters,
            local: self.local,
        };
        t.flow_samples(1);
        self.hub.sample(self.engine, self.id, &sample);
        Ok(())
    }
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        let c = self.hub.close(self.engine, self.id);
        self.local.add_tpf(&c);
        self.flow.keep_carry(Carry {
            rate: self.last_rate,
            anchor: self.anchor,
            at: Instant::now(),
        });
    }
}

/// What the planner needs from `TCP_INFO`. Close and reset are not set
/// here: the sender sees them as errors and drops its feed.
pub(super) fn flow_sample(i: &tcp::TcpInfo, rate: u64, app_limited: bool) -> FlowSample {
    FlowSample {
        delivery_rate: rate,
        app_limited,
        rtt: Duration::from_micros(u64::from(i.rtt_us)),
        cwnd: i.snd_cwnd,
        notsent_bytes: u64::from(i.notsent_bytes),
        unacked_bytes: u64::from(i.unacked) * u64::from(i.snd_mss),
        total_retrans: i.total_retrans,
        ca_state: CaState::from_raw(i.ca_state),
        ..FlowSample::default()
    }
}
