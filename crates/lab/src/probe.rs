//! Round-trip probes: a UDP echo server and a pinger (the machine has no
//! `ping`), run inside namespaces as `sluice-lab _echo` / `sluice-lab _ping`.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Echoes every datagram back to its sender, forever.
pub fn echo(bind: &str) -> Result<()> {
    let s = UdpSocket::bind(bind)?;
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = s.recv_from(&mut buf)?;
        let _ = s.send_to(&buf[..n], from);
    }
}

/// RTT samples in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PingReport {
    /// Every answered probe's RTT.
    pub rtt_ms: Vec<f64>,
    /// Probes sent.
    pub sent: u32,
}

/// Sends `count` probes `interval` apart to `to` and collects the RTTs.
pub fn ping(to: &str, count: u32, interval: Duration, size: usize) -> Result<PingReport> {
    let s = UdpSocket::bind("0.0.0.0:0")?;
    s.connect(to)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut rtt = Vec::new();
    let mut pkt = vec![0u8; size.clamp(16, 1400)];
    let mut buf = vec![0u8; 2048];
    for seq in 0..count {
        pkt[..4].copy_from_slice(&seq.to_be_bytes());
        let t = Instant::now();
        s.send(&pkt)?;
        loop {
            match s.recv(&mut buf) {
                Ok(n) if n >= 4 && buf[..4] == seq.to_be_bytes() => {
                    rtt.push(t.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                Ok(_) => continue, // a late answer to an earlier probe
                Err(_) => break,   // lost
            }
        }
        std::thread::sleep(interval.saturating_sub(t.elapsed()));
    }
    if rtt.is_empty() {
        bail!("no answer from {to}");
    }
    Ok(PingReport {
        rtt_ms: rtt,
        sent: count,
    })
}
