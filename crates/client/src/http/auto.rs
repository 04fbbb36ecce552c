//! `sluice get http://...` without `-p`: the stream count is chosen while
//! the file comes in. The download starts as one GET of the whole rest of
//! the file; every [`TICK`] the [`Controller`] gets the bytes so far, the
//! out-of-order segments (the sender's losses as we see them) and the
//! RTT, and answers with a stream count. One more stream is the second
//! half of the range with most left ([`RangePlan`]): that range's end
//! ([`Span`]) is moved down and a new connection asks for the rest, so
//! no byte is asked for twice and no connection starts over. One stream
//! fewer is the range with most left stopped where it is; its rest is
//! queued for the next connection that opens.
//!
//! ```text
//!  main thread: controller + plan  --cut end-->  Span (per range)
//!     | opens ranges on opener threads (connect + request + head)
//!     v
//!  one drain thread per range  --(offset, bytes)-->  writer
//! ```
//!
//! Near the end, when no range has enough left to split, the count is
//! no longer changed (the controller's measurements would only see the
//! tail) and the ranges run out.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sluice_http::HttpUrl;

use super::get::{ranged, start_drain, Piece};
use super::ranges::RangePlan;
use crate::autostreams::{Controller, Sample, MAX_STREAMS, MIN_LEFT_TIME};
use crate::cli::GetArgs;
use crate::drain::{Drain, Span};
use crate::error::{ClientError, Result};
use crate::stats::Stats;
use crate::writer::Writer;

/// How often the controller gets a sample and the ranges are looked at.
const TICK: Duration = Duration::from_millis(50);

/// Smallest range a split leaves to either side: below this, a new
/// connection's handshake and slow start cost more than it brings.
const MIN_PIECE: u64 = 4 << 20;

/// What the automatic download works on.
pub(super) struct Job<'a> {
    pub(super) a: &'a GetArgs,
    pub(super) u: &'a HttpUrl,
    /// File size (from HEAD, confirmed by the first GET).
    pub(super) size: u64,
    /// The version every range asks for (If-Range / the ETag check).
    pub(super) etag: Option<&'a str>,
    pub(super) timeout: Duration,
}

/// One range: its span, and its drain once the connection is open.
struct Live {
    span: Arc<Span>,
    drain: Option<Drain>,
    /// Its end before it was stopped: what it still owed.
    owed: Option<u64>,
}

/// Receives `first` (the whole rest of the file) on a growing and
/// shrinking set of range connections into `w`.
pub(super) fn receive(
    job: Job<'_>,
    first: Piece,
    w: &Writer,
    recycled: Option<mpsc::Receiver<Vec<u8>>>,
    stats: &Arc<Stats>,
) -> Result<()> {
    let t0 = Instant::now();
    let end = first.start + first.len.unwrap_or(0);
    let mut plan = RangePlan::new(MIN_PIECE);
    let max = u32::try_from((end - first.start) / MIN_PIECE)
        .unwrap_or(MAX_STREAMS)
        .clamp(1, MAX_STREAMS);
    // A split costs no restart, but the new stream's slow start on a full
    // path overflows the queue for both: not for a file ending in seconds.
    let mut ctl = Controller::new(max).with_todo(end - first.start, MIN_LEFT_TIME);
    let mut live: HashMap<u64, Live> = HashMap::new();
    let id = plan.add();
    let span = Arc::new(Span::new(first.start, end));
    let d = start_drain(
        job.a,
        first,
        w,
        recycled,
        stats,
        job.timeout,
        Some(span.clone()),
    )?;
    live.insert(
        id,
        Live {
            span,
            drain: Some(d.ok_or_else(writer_stopped)?),
            owed: None,
        },
    );
    let (opened_tx, opened) = mpsc::channel::<(u64, Result<Piece>)>();
    let mut endgame = false;
    let mut want = 1u32;
    stats.streams_auto.store(1, Relaxed);
    let r = loop {
        // Connections that opened: start their drains.
        match opened.recv_timeout(TICK) {
            Ok((id, r)) => {
                if let Err(e) = on_opened(&job, &mut live, id, r, w, stats) {
                    break Err(e);
                }
                while let Ok((id, r)) = opened.try_recv() {
                    if let Err(e) = on_opened(&job, &mut live, id, r, w, stats) {
                        return cancel_all(live, e);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        // Drains that ended: what they did not read is owed again.
        let done: Vec<u64> = live
            .iter()
            .filter(|(_, l)| l.drain.as_ref().is_some_and(Drain::is_finished))
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            let Some(mut l) = live.remove(&id) else {
                continue;
            };
            if let Some(d) = l.drain.take() {
                if let Err(e) = d.join() {
                    return cancel_all(live, e);
                }
            }
            let owed = l.owed.unwrap_or_else(|| l.span.end());
            plan.finished(id, l.span.next(), owed);
        }
        if plan.is_done() {
            break Ok(());
        }
        // The count: the controller's, until the ranges run out.
        if !endgame {
            let wanted = ctl.on_sample(Sample {
                at: t0.elapsed(),
                bytes: stats.bytes.load(Relaxed),
                lost: stats.rcv_loss_events.load(Relaxed),
                rtt: Duration::from_micros(stats.rtt_now_micros.load(Relaxed)),
            });
            if wanted != want {
                Stats::add(&stats.streams_changes, 1);
                want = wanted;
                stats.streams_auto.store(u64::from(want), Relaxed);
            }
        }
        let progress = |id: u64| {
            live.get(&id)
                .map_or((0, 0), |l| (l.span.next(), l.span.end()))
        };
        let running = plan.running();
        if running < want as usize {
            let mut add = Vec::new();
            for _ in running..want as usize {
                if let Some(r) = plan.take_queued() {
                    add.push(r);
                    continue;
                }
                let Some((victim, mid)) = plan.pick_split(&progress) else {
                    // Nothing left worth splitting: the tail runs out on
                    // the connections there are.
                    // The count reported is the one that ran.
                    endgame = running > 0;
                    if endgame {
                        stats.streams_auto.store(running as u64, Relaxed);
                    }
                    break;
                };
                let Some(v) = live.get(&victim) else { break };
                let old_end = v.span.end();
                let cut = v.span.cut(mid);
                if cut < old_end {
                    add.push(cut..old_end);
                }
                // Ranges handed out in this round must be seen by the
                // next pick: only one split per tick.
                break;
            }
            for r in add {
                let id = plan.add();
                let span = Arc::new(Span::new(r.start, r.end));
                live.insert(
                    id,
                    Live {
                        span,
                        drain: None,
                        owed: None,
                    },
                );
                open(&job, id, r, opened_tx.clone())?;
            }
        } else if running > want as usize {
            if let Some(id) = plan.pick_stop() {
                if let Some(l) = live.get_mut(&id) {
                    l.owed = Some(l.span.end());
                    l.span.cut(l.span.next());
                    plan.stopping(id);
                }
            }
        }
        let open_now = live.len() as u64;
        stats.streams_peak.fetch_max(open_now, Relaxed);
    };
    stats.set_epochs(ctl.history());
    match r {
        Ok(()) => Ok(()),
        Err(e) => cancel_all(live, e),
    }
}

/// Stops every drain and returns `e`.
fn cancel_all(live: HashMap<u64, Live>, e: ClientError) -> Result<()> {
    for l in live.into_values() {
        if let Some(d) = l.drain {
            d.cancel();
            let _ = d.join();
        }
    }
    Err(e)
}

fn writer_stopped() -> ClientError {
    ClientError::Bug("writer stopped".into())
}

/// Starts the drain of a range whose connection opened.
fn on_opened(
    job: &Job<'_>,
    live: &mut HashMap<u64, Live>,
    id: u64,
    r: Result<Piece>,
    w: &Writer,
    stats: &Arc<Stats>,
) -> Result<()> {
    let p = r?;
    if p.x.head.framing(sluice_http::Method::Get) == sluice_http::Framing::Chunked {
        return Err(ClientError::Protocol(
            "the server sent a range chunked, which cannot be cut short: try -p 1".into(),
        ));
    }
    let Some(l) = live.get_mut(&id) else {
        return Ok(());
    };
    let d = start_drain(job.a, p, w, None, stats, job.timeout, Some(l.span.clone()))?;
    l.drain = Some(d.ok_or_else(writer_stopped)?);
    Ok(())
}

/// Opens a connection for range `r` on its own thread (connect, request
/// and response head take round trips the main thread should not wait).
fn open(
    job: &Job<'_>,
    id: u64,
    r: std::ops::Range<u64>,
    tx: mpsc::Sender<(u64, Result<Piece>)>,
) -> Result<()> {
    let u = job.u.clone();
    let (size, etag, timeout) = (job.size, job.etag.map(str::to_owned), job.timeout);
    let drs = job.a.opts.drs;
    std::thread::Builder::new()
        .name("sluice-range".into())
        .spawn(move || {
            let p = ranged(&u, r, size, etag.as_deref(), timeout, drs);
            let _ = tx.send((id, p));
        })
        .map(|_| ())
        .map_err(|e| ClientError::local("start range thread", e))
}
