//! The I/O side of the link emulator: one thread per direction reads packets
//! from one TUN device in batches, runs them through its [`DelayLine`] and
//! writes them to the other TUN device when due. The thread sleeps in `ppoll`
//! with a nanosecond timeout until the next packet is due or one arrives.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use super::delay_line::{DelayLine, LineStats};
use super::params::LinkParams;

/// Packets read per wake-up before the thread looks at due packets again.
const READ_BATCH: usize = 64;
/// Longest sleep, so parameter changes and stop requests are seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Packets due this close to now go out in the current wake-up: at 1 Gbit/s
/// full-size packets are 12 us apart, and one wake-up per packet cost more
/// than a core. 20 us early is far below the RTT tolerance (max(1 ms, 3 %))
/// and does not change the rate, which the due times still space out.
const EARLY: Duration = Duration::from_micros(20);

/// Settings of one direction shared with the control socket.
pub struct Shared {
    /// Parameters; the direction thread copies them when `generation` changes.
    pub params: Mutex<LinkParams>,
    /// Bumped on every change of `params`.
    pub generation: AtomicU64,
    /// Latest counters, published by the direction thread.
    pub stats: Mutex<LineStats>,
    /// Asks the thread to stop.
    pub stop: AtomicBool,
}

impl Shared {
    /// Shared state starting with `params`.
    pub fn new(params: LinkParams) -> Arc<Shared> {
        Arc::new(Shared {
            params: Mutex::new(params),
            generation: AtomicU64::new(0),
            stats: Mutex::new(LineStats::default()),
            stop: AtomicBool::new(false),
        })
    }

    /// Replaces the parameters.
    pub fn update(
        &self,
        f: impl FnOnce(&mut LinkParams) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut p = self
            .params
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        let mut new = p.clone();
        f(&mut new)?;
        *p = new;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// Forwards packets from `input` to `output` until `shared.stop` is set.
/// `mtu` bounds the packet size read.
pub fn run_direction(
    input: File,
    mut output: File,
    mtu: usize,
    seed: u64,
    shared: Arc<Shared>,
) -> io::Result<()> {
    let start_params = shared.params.lock().map(|p| p.clone()).unwrap_or_default();
    let mut line: DelayLine<Vec<u8>> = DelayLine::new(start_params, seed);
    let mut seen_gen = shared.generation.load(Ordering::Acquire);
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let buf_len = mtu.max(1500) + 64;
    let mut last_publish = Instant::now();
    let mut reader = &input;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let sleep = line
            .next_due()
            .map(|d| d.saturating_duration_since(now + EARLY))
            .unwrap_or(MAX_SLEEP)
            .min(MAX_SLEEP);
        if !sleep.is_zero() {
            let mut fds = [PollFd::new(input.as_fd(), PollFlags::POLLIN)];
            match ppoll(&mut fds, Some(TimeSpec::from_duration(sleep)), None) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let g = shared.generation.load(Ordering::Acquire);
        if g != seen_gen {
            seen_gen = g;
            if let Ok(p) = shared.params.lock() {
                line.set_params(p.clone());
            }
        }
        let now = Instant::now();
        for _ in 0..READ_BATCH {
            let mut buf = pool.pop().unwrap_or_else(|| vec![0u8; buf_len]);
            buf.resize(buf_len, 0);
            match reader.read(&mut buf) {
                Ok(0) => {
                    pool.push(buf);
                    break;
                }
                Ok(n) => {
                    buf.truncate(n);
                    line.handle_packet(now, n, buf);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pool.push(buf);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => pool.push(buf),
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        while let Some(pkt) = line.poll_due(now + EARLY) {
            // A write to a TUN device injects the packet into the other
            // namespace's stack; errors there (e.g. device down) lose it.
            let _ = output.write(&pkt);
            if pool.len() < 4096 {
                pool.push(pkt);
            }
        }
        if now.duration_since(last_publish) > Duration::from_millis(100) {
            last_publish = now;
            if let Ok(mut s) = shared.stats.lock() {
                *s = line.stats();
            }
        }
    }
    Ok(())
}
