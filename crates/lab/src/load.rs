//! The workload generator: many downloads over plain FTP (MODE S, PASV) or
//! HTTP/1.1 GET, each with its own start time, optional application-limited
//! read rate, optional abort (RST via `SO_LINGER` 0) and a class name for
//! grouping. It records per-download completion time and throughput and, per
//! class, bytes received per sampling interval. It runs as `sluice-lab _load`
//! inside a client network namespace and prints JSON.

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

mod wire;
pub(crate) use wire::{connect, ftp_cmd, ftp_login, ftp_reply, percent_decode, rst, split_url};
use wire::{pasv_port, timeout_named, REPLY_TIMEOUT};

/// Size of one read from a data connection.
pub(crate) const READ_CHUNK: usize = 256 * 1024;
/// How often a blocked read wakes up to check abort and deadline.
pub(crate) const POLL_TICK: Duration = Duration::from_millis(100);

/// One download.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DownloadSpec {
    /// `ftp://host:port/path` or `http://host:port/path`.
    pub url: String,
    /// Group name for per-class results.
    pub class: String,
    /// Seconds after the run starts.
    pub start_s: f64,
    /// Application-limited read rate in bit/s (None: read as fast as possible).
    pub rate_bps: Option<u64>,
    /// Abort (RST) this many seconds after the download started.
    pub abort_after_s: Option<f64>,
    /// `SO_RCVBUF` to set before connecting (None: kernel autotuning).
    pub rcvbuf: Option<usize>,
    /// Caller's id, copied into the result (results of several generators are merged).
    #[serde(default)]
    pub id: u32,
    /// `ftp://` only: 0 for MODE S, else MODE E over this many streams
    /// (`load_mode_e.rs`).
    #[serde(default)]
    pub streams: u32,
    /// First byte to ask for (HTTP `Range: bytes=X-`, FTP `REST X`, MODE E
    /// `REST 0-X`); the download is the rest of the file.
    #[serde(default)]
    pub offset: u64,
    /// When the download completes before the deadline, start another of
    /// the same file from its first byte (a new arrival in the finished
    /// one's place, so the offered load stays), and so on.
    #[serde(default)]
    pub wrap: bool,
}

/// The whole workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadSpec {
    /// The downloads.
    pub downloads: Vec<DownloadSpec>,
    /// Sampling interval of the per-class timeline.
    pub sample_ms: u64,
    /// Stop everything this many seconds after the start (None: run to completion).
    pub deadline_s: Option<f64>,
    /// Record every download's received bytes at each sample (`DownloadResult::series`).
    #[serde(default)]
    pub client_series: bool,
}

/// Outcome of one download.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DownloadResult {
    /// Class from the spec.
    pub class: String,
    /// Seconds after the run start when the download began.
    pub start_s: f64,
    /// Seconds after the run start when it ended (complete, aborted, failed or cut).
    pub end_s: f64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Bytes the first request asked for (the server's HTTP Content-Length,
    /// or FTP SIZE less the start offset), if known.
    pub expected: Option<u64>,
    /// The start offset from the spec.
    #[serde(default)]
    pub offset: u64,
    /// Downloads started again from 0 after completing (`wrap`).
    #[serde(default)]
    pub wraps: u32,
    /// The whole file arrived and the server confirmed it.
    pub complete: bool,
    /// Aborted on purpose.
    pub aborted: bool,
    /// Cut at the deadline.
    pub cut: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// Id from the spec.
    #[serde(default)]
    pub id: u32,
    /// With `client_series`: bytes received at the end of each sampling
    /// interval (entry k at (k+1) * sample_ms): the kernel's count for the
    /// socket (TCP_INFO bytes_received, in-order bytes the client's TCP has
    /// taken, read by the application or not), at most 20 ms old.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<u64>,
}

impl DownloadResult {
    /// Payload throughput in MB/s over the download's lifetime.
    pub fn mbytes_per_s(&self) -> f64 {
        let t = (self.end_s - self.start_s).max(1e-9);
        self.bytes as f64 / 1e6 / t
    }
}

/// Everything `_load` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadReport {
    /// Per download, in spec order.
    pub results: Vec<DownloadResult>,
    /// Per class: bytes received in each sampling interval.
    pub timeline: BTreeMap<String, Vec<u64>>,
    /// The sampling interval.
    pub sample_ms: u64,
    /// Wall time of the whole run.
    pub wall_s: f64,
    /// CLOCK_MONOTONIC seconds of the run start (bin 0 starts here).
    #[serde(default)]
    pub t0_mono_s: f64,
}

/// CLOCK_MONOTONIC now, in seconds (the clock of `Instant` and of the `mono` trace clock).
pub fn mono_now_s() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(f64::NAN)
}

pub(crate) struct Ctx {
    t0: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) counter: Arc<AtomicU64>,
    /// This download's received bytes (kernel count), when series are recorded.
    pub(crate) received: Option<Arc<AtomicU64>>,
    /// Bytes received by the earlier requests of this download (`wrap`),
    /// added to this request's count in `received`.
    pub(crate) prior: u64,
}

/// How stale a download's kernel received count may get.
const RECEIVED_TICK: Duration = Duration::from_millis(20);

enum Stop {
    Done,
    Aborted,
    Cut,
}

/// Runs the workload and returns the report.
pub fn run(spec: &LoadSpec) -> Result<LoadReport> {
    let t0 = Instant::now();
    let t0_mono_s = mono_now_s();
    let deadline = spec.deadline_s.map(|s| t0 + Duration::from_secs_f64(s));
    let mut classes: BTreeMap<String, Arc<AtomicU64>> = BTreeMap::new();
    for d in &spec.downloads {
        classes.entry(d.class.clone()).or_default();
    }
    let done = Arc::new(AtomicBool::new(false));
    let sample = Duration::from_millis(spec.sample_ms.max(10));
    let per_dl: Vec<Arc<AtomicU64>> = if spec.client_series {
        spec.downloads.iter().map(|_| Arc::default()).collect()
    } else {
        Vec::new()
    };
    let sampler = {
        let classes = classes.clone();
        let done = done.clone();
        let per_dl = per_dl.clone();
        std::thread::spawn(move || {
            let mut series: Vec<Vec<u64>> = per_dl.iter().map(|_| Vec::new()).collect();
            let mut last: BTreeMap<String, u64> = classes.keys().map(|k| (k.clone(), 0)).collect();
            let mut tl: BTreeMap<String, Vec<u64>> =
                classes.keys().map(|k| (k.clone(), Vec::new())).collect();
            let mut next = Instant::now() + sample;
            loop {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += sample;
                // Read the flag before sampling so the last sample sees every byte.
                let finished = done.load(Ordering::Relaxed);
                for (k, c) in &classes {
                    let v = c.load(Ordering::Relaxed);
                    let l = last
                        .get_mut(k)
                        .map(|l| std::mem::replace(l, v))
                        .unwrap_or(0);
                    tl.entry(k.clone()).or_default().push(v - l);
                }
                for (s, c) in series.iter_mut().zip(&per_dl) {
                    s.push(c.load(Ordering::Relaxed));
                }
                if finished {
                    return (tl, series);
                }
            }
        })
    };
    let handles: Vec<_> = spec
        .downloads
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, d)| {
            let ctx = Ctx {
                t0,
                deadline,
                counter: classes[&d.class].clone(),
                received: per_dl.get(i).cloned(),
                prior: 0,
            };
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || one(&d, &ctx))
        })
        .collect::<std::io::Result<_>>()?;
    let mut results: Vec<DownloadResult> = handles
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow!("download thread panicked")))
        .collect::<Result<_>>()?;
    done.store(true, Ordering::Relaxed);
    let (timeline, series) = sampler.join().map_err(|_| anyhow!("sampler panicked"))?;
    for (r, s) in results.iter_mut().zip(series) {
        r.series = s;
    }
    Ok(LoadReport {
        results,
        timeline,
        sample_ms: sample.as_millis() as u64,
        wall_s: t0.elapsed().as_secs_f64(),
        t0_mono_s,
    })
}

fn one(d: &DownloadSpec, ctx: &Ctx) -> DownloadResult {
    let start_at = ctx.t0 + Duration::from_secs_f64(d.start_s);
    std::thread::sleep(start_at.saturating_duration_since(Instant::now()));
    let started = Instant::now();
    let fresh = |offset| DownloadResult {
        class: d.class.clone(),
        start_s: started.duration_since(ctx.t0).as_secs_f64(),
        end_s: 0.0,
        bytes: 0,
        expected: None,
        offset,
        wraps: 0,
        complete: false,
        aborted: false,
        cut: false,
        error: None,
        id: d.id,
        series: Vec::new(),
    };
    let mut r = fresh(d.offset);
    let abort_at = d
        .abort_after_s
        .map(|s| started + Duration::from_secs_f64(s));
    let mut offset = d.offset;
    loop {
        // One request; with `wrap`, the next starts from 0.
        let mut q = fresh(offset);
        let qctx = Ctx {
            t0: ctx.t0,
            deadline: ctx.deadline,
            counter: ctx.counter.clone(),
            received: ctx.received.clone(),
            prior: r.bytes,
        };
        let out = if d.url.starts_with("ftp://") && d.streams > 0 {
            crate::load_mode_e::mode_e_get(d, offset, &qctx, abort_at, &mut q)
        } else if d.url.starts_with("ftp://") {
            ftp_get(d, offset, &qctx, abort_at, &mut q)
        } else if d.url.starts_with("http://") {
            http_get(d, offset, &qctx, abort_at, &mut q)
        } else {
            Err(anyhow!("unsupported URL {}", d.url))
        };
        r.bytes += q.bytes;
        if r.wraps == 0 {
            r.expected = q.expected;
        }
        (r.complete, r.aborted, r.cut) = (q.complete, q.aborted, q.cut);
        if let Err(e) = out {
            r.error = Some(format!("{e:#}"));
            break;
        }
        let dead = ctx.deadline.is_some_and(|dl| Instant::now() >= dl);
        if !(d.wrap && q.complete) || dead {
            break;
        }
        offset = 0;
        r.wraps += 1;
    }
    r.end_s = ctx.t0.elapsed().as_secs_f64();
    r
}

/// What a request from `offset` should bring: the file's size less the
/// offset, when the size is known.
fn rest_of(size: Option<u64>, offset: u64) -> Option<u64> {
    size.map(|s| s.saturating_sub(offset))
}

/// The length a `Content-Range: bytes A-B/N` header gives when A is `offset`.
fn content_range_len(head: &str, offset: u64) -> Result<u64> {
    let v = header(head, "content-range").ok_or_else(|| anyhow!("206 without Content-Range"))?;
    let spec = v
        .trim()
        .strip_prefix("bytes ")
        .ok_or_else(|| anyhow!("Content-Range {v:?}"))?;
    let (range, _) = spec
        .split_once('/')
        .ok_or_else(|| anyhow!("Content-Range {v:?}"))?;
    let (a, b) = range
        .split_once('-')
        .ok_or_else(|| anyhow!("Content-Range {v:?}"))?;
    let (a, b): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
    if a != offset || b < a {
        bail!("Content-Range {v:?} for a request from {offset}");
    }
    Ok(b - a + 1)
}

/// Value of header `name` (lowercase) in an HTTP head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        l.split_once(':')
            .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    })
}

fn ftp_get(
    d: &DownloadSpec,
    offset: u64,
    ctx: &Ctx,
    abort_at: Option<Instant>,
    r: &mut DownloadResult,
) -> Result<()> {
    let (addr, path) = split_url(&d.url, 21)?;
    let path = percent_decode(&path);
    let mut ctl = connect(addr, None)?;
    let mut rd = BufReader::new(ctl.try_clone()?);
    r.expected = rest_of(ftp_login(&mut ctl, &mut rd, &path)?, offset);
    let (_, l) = ftp_cmd(&mut ctl, &mut rd, "PASV", &[227])?;
    let data_addr = SocketAddr::new(addr.ip(), pasv_port(&l)?);
    let mut data = connect(data_addr, d.rcvbuf)?;
    if offset > 0 {
        ftp_cmd(&mut ctl, &mut rd, &format!("REST {offset}"), &[350])?;
    }
    ftp_cmd(&mut ctl, &mut rd, &format!("RETR {path}"), &[125, 150])?;
    let stop = pump(&mut data, d, ctx, abort_at, r, None, 0)?;
    match stop {
        Stop::Done => {
            drop(data);
            let (c, l) = ftp_reply(&mut rd)?;
            if c != 226 && c != 250 {
                bail!("after transfer: {l}");
            }
            r.complete = r.expected.is_none_or(|e| e == r.bytes);
            let _ = ctl.write_all(b"QUIT\r\n");
        }
        Stop::Aborted | Stop::Cut => {
            rst(&data);
            rst(&ctl);
        }
    }
    Ok(())
}

fn http_get(
    d: &DownloadSpec,
    offset: u64,
    ctx: &Ctx,
    abort_at: Option<Instant>,
    r: &mut DownloadResult,
) -> Result<()> {
    let (addr, path) = split_url(&d.url, 80)?;
    let mut s = connect(addr, d.rcvbuf)?;
    s.set_read_timeout(Some(REPLY_TIMEOUT))?;
    let range = if offset > 0 {
        format!("Range: bytes={offset}-\r\n")
    } else {
        String::new()
    };
    // One write: a server may answer (and close) after the first segment.
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: sluice-lab\r\n{range}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
    // Read the head byte by byte into a small buffer so no body bytes are lost.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 * 1024 {
            bail!("HTTP head too long");
        }
        if s.read(&mut b).map_err(timeout_named)? == 0 {
            bail!("connection closed in HTTP head");
        }
        head.push(b[0]);
    }
    let head_len = head.len() as u64;
    let head = String::from_utf8_lossy(&head);
    let status = head.lines().next().unwrap_or("");
    let want = if offset > 0 { "206" } else { "200" };
    if status.split_whitespace().nth(1) != Some(want) {
        bail!("HTTP: {status}");
    }
    r.expected = header(&head, "content-length").and_then(|v| v.parse().ok());
    if offset > 0 {
        // The server must send exactly the rest from `offset`.
        let len = content_range_len(&head, offset)?;
        if r.expected.is_some_and(|e| e != len) {
            bail!("Content-Length and Content-Range disagree");
        }
        r.expected = Some(len);
    }
    let stop = pump(&mut s, d, ctx, abort_at, r, r.expected, head_len)?;
    match stop {
        Stop::Done => r.complete = r.expected.is_none_or(|e| e == r.bytes),
        Stop::Aborted | Stop::Cut => rst(&s),
    }
    Ok(())
}

/// Reads the body until EOF (or `limit` bytes), honouring rate, abort and
/// deadline; `head` bytes came before the body on this connection (HTTP).
#[allow(clippy::too_many_arguments)]
fn pump(
    s: &mut TcpStream,
    d: &DownloadSpec,
    ctx: &Ctx,
    abort_at: Option<Instant>,
    r: &mut DownloadResult,
    limit: Option<u64>,
    head: u64,
) -> Result<Stop> {
    s.set_read_timeout(Some(POLL_TICK))?;
    let chunk = match d.rate_bps {
        // About 20 reads per second when rate-limited, so pacing is smooth.
        Some(rate) => ((rate / 8 / 20) as usize).clamp(1024, READ_CHUNK),
        None => READ_CHUNK,
    };
    let mut buf = vec![0u8; chunk];
    let began = Instant::now();
    let mut idle_since = Instant::now();
    let mut noted = began - RECEIVED_TICK;
    loop {
        let now = Instant::now();
        if let Some(c) = &ctx.received {
            if now.duration_since(noted) >= RECEIVED_TICK {
                noted = now;
                // The kernel's in-order received count; the application's when TCP_INFO fails.
                let k = sluice_platform::tcp::tcp_info(std::os::fd::AsFd::as_fd(&*s))
                    .map(|i| i.bytes_received.saturating_sub(head))
                    .unwrap_or(r.bytes);
                // The FIN takes a sequence number too: never beyond the announced size.
                let k = r.expected.map_or(k, |e| k.min(e));
                c.store(ctx.prior + k.max(r.bytes), Ordering::Relaxed);
            }
        }
        if abort_at.is_some_and(|a| now >= a) {
            r.aborted = true;
            return Ok(Stop::Aborted);
        }
        if ctx.deadline.is_some_and(|dl| now >= dl) {
            r.cut = true;
            return Ok(Stop::Cut);
        }
        if let Some(rate) = d.rate_bps {
            // Token bucket: never ahead of rate * elapsed.
            let allowed = began + Duration::from_secs_f64(r.bytes as f64 * 8.0 / rate as f64);
            if allowed > now {
                std::thread::sleep((allowed - now).min(POLL_TICK));
                continue;
            }
        }
        let want = match limit {
            Some(l) if l <= r.bytes => return Ok(Stop::Done),
            Some(l) => buf.len().min((l - r.bytes) as usize),
            None => buf.len(),
        };
        match read_some(s, &mut buf[..want], idle_since)? {
            Some(0) => return Ok(Stop::Done),
            Some(n) => {
                r.bytes += n as u64;
                ctx.counter.fetch_add(n as u64, Ordering::Relaxed);
                if let Some(c) = &ctx.received {
                    c.fetch_max(ctx.prior + r.bytes, Ordering::Relaxed);
                }
                idle_since = Instant::now();
            }
            None => {}
        }
    }
}

/// One read of a load client's data socket (which has a read timeout, so
/// the caller's pacing and stop time keep running): `Some(n)`, 0 at the
/// end; `None` when it timed out or was interrupted; an error after 120 s
/// without data since `idle_since`, or on any other failure.
pub(crate) fn read_some(
    s: &mut impl Read,
    buf: &mut [u8],
    idle_since: Instant,
) -> Result<Option<usize>> {
    match s.read(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            if idle_since.elapsed() > Duration::from_secs(120) {
                bail!("no data for 120 s");
            }
            Ok(None)
        }
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
