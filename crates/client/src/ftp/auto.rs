//! `sluice get ftp://...` without `-p`, from a server with MODE E: the
//! stream count is chosen while the file comes in.
//!
//! GridFTP fixes a transfer's parallelism when it starts: the server opens
//! its `OPTS RETR Parallelism` connections for each RETR and never adds one
//! mid-transfer (globus-gridftp-server neither; its cached connections are
//! for the next transfer). So a change of count is a restart: when the
//! [`Controller`] asks for another count, the running transfer is
//! aborted (ABOR; 426 then 226), what arrived is kept, and the rest is
//! asked for with GridFTP's restart marker (`REST a-b,c-d`: the ranges we
//! have) on the new count:
//!
//! ```text
//!  round: OPTS RETR Parallelism=n,n,n;  PORT/EPRT  [REST have]  RETR path
//!         drain (n streams) -> writer (this round's blocks)   control: 1xx, samples
//!  count changes: cancel drain, ABOR, read 426 + 226, have += what the
//!         writer placed, next round with the new count
//! ```
//!
//! A restart costs the new connections' handshakes and slow start, so
//! near the end of the file (less than [`MIN_LEFT`] per stream, or less
//! than [`Controller::restarting`]'s time at the rate seen) the count
//! stays as it is.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sluice_ftp::markers::{PerfMarker, RangeSet};
use sluice_ftp::reply::Reply;

use super::control::{refused, Control};
use super::data;
use crate::autostreams::{Controller, Sample, MAX_STREAMS, MIN_LEFT_TIME};
use crate::cli::GetArgs;
use crate::drain::{Drain, DrainConfig, DrainReport, Framing, Source};
use crate::error::{ClientError, Result};
use crate::progress::Progress;
use crate::stats::Stats;
use crate::url::FtpUrl;
use crate::writer::{self, Sink, Writer, WriterConfig};

/// How often the control connection is read and the controller sampled.
const TICK: Duration = Duration::from_millis(50);

/// Bytes left per stream below which the count is no longer changed: a
/// restart would cost more than the new count could bring back.
pub const MIN_LEFT: u64 = 8 << 20;

/// How one round ended.
enum Round {
    /// The server's final reply came and the drain is done.
    Done(DrainReport, Reply),
    /// The controller wants `n` streams: restart on them (the drain is
    /// still running until it is taken out and stopped).
    Switch(Option<Drain>, u32),
}

/// Downloads the rest of `u` (`size` bytes, `already` of them in the
/// `.part`) into `file` over rounds of MODE E transfers. `resume` is the
/// side file where the contiguous prefix is recorded.
#[allow(clippy::too_many_arguments)]
pub(super) fn transfer(
    ctl: &mut Control,
    u: &FtpUrl,
    a: &GetArgs,
    size: u64,
    already: u64,
    file: &File,
    resume: Option<PathBuf>,
    stats: &Arc<Stats>,
) -> Result<DrainReport> {
    let timeout = ctl.timeout();
    let mut have = RangeSet::new();
    have.insert(0..already);
    let max = u32::try_from((size - already) / MIN_LEFT)
        .unwrap_or(MAX_STREAMS)
        .clamp(1, MAX_STREAMS);
    let mut ctl_n = Controller::new(max)
        .with_todo(size - already, MIN_LEFT_TIME)
        .restarting();
    let t0 = Instant::now();
    let progress = Progress::start(stats.clone(), Some(size - already), already, a.opts.quiet);
    let mut total = DrainReport::default();
    let mut n = ctl_n.streams();
    let r = loop {
        stats.streams_auto.store(u64::from(n), Relaxed);
        let round = match one_round(ctl, u, a, n, size, &have, file, stats, timeout) {
            Ok(x) => x,
            Err(e) => break Err(e),
        };
        let (drain, w) = round;
        let ended = follow(ctl, drain, stats, timeout, &mut ctl_n, t0, size - already);
        // A restart stops the drain first: the writer ends when its last
        // input does, and must place everything the drain read.
        let ended = match ended {
            Ok(Round::Switch(Some(drain), next)) => {
                drain.cancel();
                let _ = drain.join();
                Ok(Round::Switch(None, next))
            }
            other => other,
        };
        let placed = w.finish();
        let outcome = match (ended, placed) {
            (Err(e), _) | (Ok(_), Err(e)) => break Err(e),
            (Ok(o), Ok(placed)) => {
                // What this round placed: everything but its gaps.
                let mut got = RangeSet::new();
                let mut at = 0;
                for g in &placed.gaps {
                    got.insert(at..g.start);
                    at = g.end;
                }
                got.insert(at..size);
                for r in got.ranges() {
                    have.insert(r.clone());
                }
                o
            }
        };
        if let (Some(p), Some(first)) = (&resume, have.ranges().first()) {
            if first.start == 0 {
                let _ = writer::save_prefix(p, first.end);
            }
        }
        match outcome {
            Round::Done(rep, last) => {
                total.bytes += rep.bytes;
                total.streams += rep.streams;
                total.eods += rep.eods;
                if !last.code.is_completion() {
                    break Err(refused("transfer", &last));
                }
                break Ok(());
            }
            Round::Switch(_, next) => {
                if let Err(e) = abort(ctl) {
                    break Err(e);
                }
                total.streams += u64::from(n);
                Stats::add(&stats.streams_changes, 1);
                n = next;
            }
        }
    };
    stats.set_epochs(ctl_n.history());
    progress.finish();
    r?;
    let missing = have.gaps(size);
    if !missing.is_empty() {
        return Err(ClientError::Protocol(format!(
            "server reported success but {} range(s) are missing, first {:?}",
            missing.len(),
            missing[0]
        )));
    }
    total.bytes = stats.bytes.load(Relaxed);
    Ok(total)
}

/// Starts one round: the commands, a writer for its blocks and a drain
/// for its `n` connections.
#[allow(clippy::too_many_arguments)]
fn one_round(
    ctl: &mut Control,
    u: &FtpUrl,
    a: &GetArgs,
    n: u32,
    size: u64,
    have: &RangeSet,
    file: &File,
    stats: &Arc<Stats>,
    timeout: Duration,
) -> Result<(Drain, Writer)> {
    let r = ctl.cmd(&format!("OPTS RETR Parallelism={n},{n},{n};"))?;
    if !r.code.is_completion() {
        tracing::info!(
            "server refused parallelism: {}",
            super::control::printable(r.text())
        );
    }
    let listener = data::active_receiving(ctl, a.opts.drs)?;
    if !have.is_empty() {
        // GridFTP restart marker: the ranges we have; the server sends the
        // rest, at their own offsets.
        let r = ctl.cmd(&format!("REST {have}"))?;
        if r.code.0 != 350 {
            return Err(refused("REST (restart with the ranges received)", &r));
        }
    }
    let first = ctl.cmd(&format!("RETR {}", u.path))?;
    if !first.code.is_preliminary() {
        return Err(refused("RETR", &first));
    }
    let sink = file
        .try_clone()
        .map_err(|e| ClientError::local("reopen the .part", e))?;
    let (recycle_tx, recycle_rx) = mpsc::sync_channel(writer::RECYCLE_SLOTS);
    let w = Writer::start(
        WriterConfig {
            sink: Sink::File(sink),
            already: 0,
            size: Some(size),
            mem_cap: a.opts.mem_cap,
            prefix_file: None,
            recycle: Some(recycle_tx),
        },
        stats.clone(),
    )?;
    let drain = Drain::start(
        DrainConfig {
            framing: Framing::Extended { base: 0 },
            idle_timeout: timeout,
            raise_priority: a.drain_priority,
            drs: a.opts.drs,
            span: None,
        },
        Source::Listen {
            listener,
            max: n as usize,
            from: ctl.peer.ip(),
            tls_host: ctl.tls_host(),
        },
        w.input(),
        recycle_rx,
        stats.clone(),
    )?;
    Ok((drain, w))
}

/// Reads control replies while the drain works, feeding the controller;
/// returns when the transfer is over or the controller wants another
/// count while enough of the file is left to pay for a restart.
fn follow(
    ctl: &mut Control,
    drain: Drain,
    stats: &Stats,
    timeout: Duration,
    c: &mut Controller,
    t0: Instant,
    todo: u64,
) -> Result<Round> {
    let mut drain = Some(drain);
    let mut report = None;
    let mut last: Option<Reply> = None;
    let mut drained_at: Option<Instant> = None;
    let now_n = c.streams();
    loop {
        if let Some(d) = drain.take_if(|d| d.is_finished()) {
            report = Some(d.join()?);
            drained_at = Some(Instant::now());
        }
        if let (Some(r), Some(l)) = (&report, &last) {
            return Ok(Round::Done(r.clone(), l.clone()));
        }
        if let Some(l) = &last {
            if !l.code.is_completion() {
                if let Some(d) = drain.take() {
                    d.cancel();
                }
                return Err(refused("transfer", l));
            }
        }
        if last.is_none() {
            if let Some(r) = ctl.poll_reply(TICK)? {
                match r.code.0 {
                    111 => Stats::add(&stats.restart_markers, 1),
                    112 => {
                        Stats::add(&stats.perf_markers, 1);
                        if let Ok(m) = PerfMarker::parse(&r) {
                            stats.server_reported_bytes.store(m.stripe_bytes, Relaxed);
                        }
                    }
                    c if c < 200 => {}
                    _ => last = Some(r),
                }
            }
            if drained_at.is_some_and(|t| t.elapsed() > timeout) {
                return Err(ClientError::net(
                    "waiting for the end-of-transfer reply",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                ));
            }
            // A new count, while the transfer runs and enough is left.
            if let Some(d) = drain.take_if(|_| last.is_none()) {
                let bytes = stats.bytes.load(Relaxed);
                let left = todo.saturating_sub(bytes);
                let want = c.on_sample(Sample {
                    at: t0.elapsed(),
                    bytes,
                    lost: stats.rcv_loss_events.load(Relaxed),
                    rtt: Duration::from_micros(stats.rtt_now_micros.load(Relaxed)),
                });
                if want != now_n {
                    // A restart for a file that ends in a few seconds at
                    // the rate seen would cost more than it brings.
                    if left >= MIN_LEFT * u64::from(want.max(now_n)) && c.change_pays(bytes) {
                        return Ok(Round::Switch(Some(d), want));
                    }
                    c.pin(now_n, t0.elapsed());
                }
                drain = Some(d);
            }
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Aborts the running transfer: ABOR, then the transfer's final reply
/// (426, or 226 if it had just finished) and ABOR's own.
fn abort(ctl: &mut Control) -> Result<()> {
    ctl.send("ABOR")?;
    let mut finals = 0;
    while finals < 2 {
        let r = ctl.read_reply()?;
        if r.code.is_preliminary() {
            continue;
        }
        // The transfer's (426, or 426/451 for the connections we closed,
        // or 226 if it had just ended), then ABOR's own (226, RFC 959
        // 4.1.3).
        finals += 1;
    }
    Ok(())
}
