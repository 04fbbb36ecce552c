//! What one direction of an emulated link does to packets, and the text form
//! used on the command line and the control socket ("delay=25ms rate=100mbit").

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::units::{fmt_rate, parse_duration, parse_fraction, parse_rate, parse_size};

/// Default drop-tail queue: 1000 full-size packets, as a typical router/netem default.
pub const DEFAULT_QUEUE_LIMIT_BYTES: u64 = 1000 * 1500;

/// Parameters of one direction of the link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkParams {
    /// One-way propagation delay added to every packet.
    pub delay: Duration,
    /// Uniform jitter: each packet's delay is drawn from delay ± jitter.
    pub jitter: Duration,
    /// Allow jitter to reorder packets (off: a packet never overtakes an earlier one).
    pub reorder: bool,
    /// Random loss probability per packet, 0..=1.
    pub loss: f64,
    /// Bottleneck rate in bit/s (IP bytes); 0 = unlimited.
    pub rate_bps: u64,
    /// Drop-tail limit on bytes waiting for the bottleneck (only with a rate).
    pub queue_limit_bytes: u64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder: false,
            loss: 0.0,
            rate_bps: 0,
            queue_limit_bytes: DEFAULT_QUEUE_LIMIT_BYTES,
        }
    }
}

impl LinkParams {
    /// Applies one `key=value` setting.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "delay" => self.delay = parse_duration(value)?,
            "jitter" => self.jitter = parse_duration(value)?,
            "reorder" => self.reorder = matches!(value, "1" | "true" | "yes" | "on"),
            "loss" => self.loss = parse_fraction(value)?,
            "rate" => self.rate_bps = parse_rate(value)?,
            // A bare number is packets of 1500 bytes (netem's unit); with a unit it is bytes.
            "limit" | "queue" => {
                self.queue_limit_bytes = match value.trim().parse::<u64>() {
                    Ok(pkts) => pkts.saturating_mul(1500),
                    Err(_) => parse_size(value)?,
                }
            }
            _ => bail!("unknown link setting {key:?} (delay, jitter, reorder, loss, rate, limit)"),
        }
        Ok(())
    }

    /// Applies whitespace-separated `key=value` settings.
    pub fn apply(&mut self, settings: &str) -> Result<()> {
        for kv in settings.split_whitespace() {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("expected key=value, got {kv:?}")
            };
            self.set(k, v)?;
        }
        Ok(())
    }
}

impl fmt::Display for LinkParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "delay={:?} jitter={:?} reorder={} loss={} rate={} limit={}B",
            self.delay,
            self.jitter,
            self.reorder,
            self.loss,
            fmt_rate(self.rate_bps).replace(' ', ""),
            self.queue_limit_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_settings() {
        let mut p = LinkParams::default();
        p.apply("delay=25ms rate=100mbit loss=1% limit=200")
            .unwrap();
        assert_eq!(p.delay, Duration::from_millis(25));
        assert_eq!(p.rate_bps, 100_000_000);
        assert_eq!(p.loss, 0.01);
        assert_eq!(p.queue_limit_bytes, 300_000);
        p.apply("limit=2MiB reorder=on").unwrap();
        assert_eq!(p.queue_limit_bytes, 2 << 20);
        assert!(p.reorder);
        assert!(p.apply("colour=blue").is_err());
        assert!(p.apply("delay").is_err());
    }
}
