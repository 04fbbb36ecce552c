//! Parsers for the engine's size, switch and time settings, shared by the
//! server's flags and config file (which are the only way to set them:
//! nothing here reads the process environment), and the `SO_SNDBUF` choice.
//!
//! Sizes take an optional `K`, `M` or `G` suffix (binary units).

use crate::EngineConfig;

/// Parses `1048576`, `1024K`, `1M`, `2G` (binary units) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = num.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// How data sockets get their `SO_SNDBUF` (`--send-buffer`, key `send_buffer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBufferChoice {
    /// Kernel autotuning (`tcp_wmem`), nothing set.
    Auto,
    /// `net.core.wmem_max` when that is at least autotuning's ceiling
    /// (the engine default, `send_buffer_max`).
    Max,
    /// This many bytes asked of `SO_SNDBUF` (the kernel doubles it and caps
    /// it at `wmem_max`).
    Bytes(usize),
}

impl SendBufferChoice {
    /// Parses `auto`, `max` or a size (`4M`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(SendBufferChoice::Auto),
            "max" => Some(SendBufferChoice::Max),
            _ => match parse_size(s)? {
                0 => None,
                n => Some(SendBufferChoice::Bytes(n as usize)),
            },
        }
    }
}

/// Parses a `TCP_NOTSENT_LOWAT` setting: `off` is `Some(None)`, a size
/// (at most 4 GiB - 1) is `Some(Some(n))`.
pub fn parse_notsent_lowat(s: &str) -> Option<Option<u32>> {
    match parse_opt_size(s)? {
        None => Some(None),
        Some(n) => u32::try_from(n).ok().filter(|&n| n > 0).map(Some),
    }
}

/// Parses a refill time: seconds (`4`, `0.5`) or `off` (`Some(None)`).
pub fn parse_refill_time(s: &str) -> Option<Option<std::time::Duration>> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Some(None),
        t => {
            let secs: f64 = t.strip_suffix('s').unwrap_or(t).parse().ok()?;
            (secs > 0.0 && secs <= 3600.0).then(|| Some(std::time::Duration::from_secs_f64(secs)))
        }
    }
}

/// `off` (or `none`) is `Some(None)`; a size is `Some(Some(n))`.
fn parse_opt_size(s: &str) -> Option<Option<u64>> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Some(None),
        _ => parse_size(s).map(Some),
    }
}

impl EngineConfig {
    /// Applies a [`SendBufferChoice`] (`send_buffer` and `send_buffer_max`).
    pub fn set_send_buffer(&mut self, c: SendBufferChoice) {
        (self.send_buffer, self.send_buffer_max) = match c {
            SendBufferChoice::Auto => (None, false),
            SendBufferChoice::Max => (None, true),
            SendBufferChoice::Bytes(n) => (Some(n), false),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("256K"), Some(256 << 10));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("x1"), None);
    }

    #[test]
    fn send_buffer_and_lowat_settings_parse() {
        assert_eq!(
            SendBufferChoice::parse("auto"),
            Some(SendBufferChoice::Auto)
        );
        assert_eq!(SendBufferChoice::parse(" MAX"), Some(SendBufferChoice::Max));
        assert_eq!(
            SendBufferChoice::parse("4M"),
            Some(SendBufferChoice::Bytes(4 << 20))
        );
        assert_eq!(SendBufferChoice::parse("0"), None);
        assert_eq!(SendBufferChoice::parse("lots"), None);
        assert_eq!(parse_notsent_lowat("off"), Some(None));
        assert_eq!(parse_notsent_lowat("128K"), Some(Some(128 << 10)));
        assert_eq!(parse_notsent_lowat("8G"), None, "beyond u32");
        assert_eq!(parse_notsent_lowat("0"), None);
        assert_eq!(parse_refill_time("off"), Some(None));
        assert_eq!(
            parse_refill_time("0.5"),
            Some(Some(std::time::Duration::from_millis(500)))
        );
        assert_eq!(
            parse_refill_time("4s"),
            Some(Some(std::time::Duration::from_secs(4)))
        );
        assert_eq!(parse_refill_time("-1"), None);
        let mut c = EngineConfig::default();
        c.set_send_buffer(SendBufferChoice::Auto);
        assert_eq!((c.send_buffer, c.send_buffer_max), (None, false));
        c.set_send_buffer(SendBufferChoice::Bytes(1 << 20));
        assert_eq!((c.send_buffer, c.send_buffer_max), (Some(1 << 20), false));
        c.set_send_buffer(SendBufferChoice::Max);
        assert_eq!((c.send_buffer, c.send_buffer_max), (None, true));
    }
}
