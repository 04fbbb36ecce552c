//! Environment overrides for the engine's measured send-path settings, so a
//! benchmark can switch one mechanism without a new flag in every front end:
//!
//! | variable | field | value |
//! |---|---|---|
//! | `SLUICE_NOTSENT_LOWAT` | `notsent_lowat` | size, or `off` |
//! | `SLUICE_REFILL_TIME` | `refill_time` | seconds (`4`, `0.5`), or `off` (fixed mark) |
//! | `SLUICE_CHUNK_SIZE` | `chunk_size` (one `sendfile` call) | size |
//! | `SLUICE_READ_BUFFER` | `read_buffer_size` (copy path) | size |
//! | `SLUICE_SEND_QUANTUM` | `send_quantum` | size |
//! | `SLUICE_SNDBUF` | `send_buffer`, `send_buffer_max` | size; `auto` (kernel autotuning); `max` (`wmem_max`); `off` (no fixed size: `send_buffer_max` decides) |
//! | `SLUICE_INLINE_READS` | `inline_cached_reads` | on/off |
//! | `SLUICE_RESIDENT_CHECK` | `sendfile_resident_check` | on/off |
//! | `SLUICE_SNDBUF_MAX` | `send_buffer_max` | on/off |
//!
//! Sizes take an optional `K`, `M` or `G` suffix (binary units). A value
//! that does not parse is logged and ignored (the default stays).

use crate::config::parse_switch;
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

/// How data sockets get their `SO_SNDBUF` (`--send-buffer`, `SLUICE_SNDBUF`).
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

    /// Applies the `SLUICE_*` overrides from the process environment.
    pub fn with_env_overrides(self) -> Self {
        self.with_overrides(|k| std::env::var(k).ok())
    }

    /// Applies overrides looked up by `get` (the environment, or a test map).
    pub fn with_overrides(mut self, get: impl Fn(&str) -> Option<String>) -> Self {
        let bad = |k: &str, v: &str| tracing::warn!("ignoring {k}={v:?}: not understood");
        if let Some(v) = get("SLUICE_NOTSENT_LOWAT") {
            match parse_notsent_lowat(&v) {
                Some(n) => self.notsent_lowat = n,
                None => bad("SLUICE_NOTSENT_LOWAT", &v),
            }
        }
        if let Some(v) = get("SLUICE_REFILL_TIME") {
            match parse_refill_time(&v) {
                Some(t) => self.refill_time = t,
                None => bad("SLUICE_REFILL_TIME", &v),
            }
        }
        if let Some(v) = get("SLUICE_SNDBUF") {
            if let Some(c) = SendBufferChoice::parse(&v) {
                self.set_send_buffer(c);
            } else {
                match parse_opt_size(&v) {
                    Some(n) => self.send_buffer = n.map(|n| n as usize),
                    None => bad("SLUICE_SNDBUF", &v),
                }
            }
        }
        for (key, field) in [
            ("SLUICE_CHUNK_SIZE", &mut self.chunk_size),
            ("SLUICE_READ_BUFFER", &mut self.read_buffer_size),
            ("SLUICE_SEND_QUANTUM", &mut self.send_quantum),
        ] {
            if let Some(v) = get(key) {
                match parse_size(&v) {
                    Some(n) if n > 0 => *field = n as usize,
                    _ => bad(key, &v),
                }
            }
        }
        for (key, field) in [
            ("SLUICE_INLINE_READS", &mut self.inline_cached_reads),
            ("SLUICE_RESIDENT_CHECK", &mut self.sendfile_resident_check),
            ("SLUICE_SNDBUF_MAX", &mut self.send_buffer_max),
        ] {
            if let Some(v) = get(key) {
                match parse_switch(&v) {
                    Some(b) => *field = b,
                    None => bad(key, &v),
                }
            }
        }
        self
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
    fn overrides_change_only_what_is_set() {
        let base = EngineConfig::default();
        let c = base.clone().with_overrides(|k| match k {
            "SLUICE_NOTSENT_LOWAT" => Some("off".into()),
            "SLUICE_CHUNK_SIZE" => Some("16M".into()),
            "SLUICE_SEND_QUANTUM" => Some("0".into()),
            "SLUICE_INLINE_READS" => Some("off".into()),
            "SLUICE_RESIDENT_CHECK" => Some("maybe".into()),
            _ => None,
        });
        assert_eq!(c.notsent_lowat, None);
        assert_eq!(c.chunk_size, 16 << 20);
        assert_eq!(c.send_quantum, base.send_quantum, "0 is refused");
        assert!(!c.inline_cached_reads);
        assert!(c.sendfile_resident_check, "a bad switch keeps the default");
        assert_eq!(c.read_buffer_size, base.read_buffer_size);
        let d = base.clone().with_overrides(|_| None);
        assert_eq!(d, base);
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
        let r = EngineConfig::default()
            .with_overrides(|k| (k == "SLUICE_REFILL_TIME").then(|| "off".into()));
        assert_eq!(r.refill_time, None);
        let auto = EngineConfig::default()
            .with_overrides(|k| (k == "SLUICE_SNDBUF").then(|| "auto".into()));
        assert_eq!((auto.send_buffer, auto.send_buffer_max), (None, false));
        let fixed =
            EngineConfig::default().with_overrides(|k| (k == "SLUICE_SNDBUF").then(|| "1M".into()));
        assert_eq!(
            (fixed.send_buffer, fixed.send_buffer_max),
            (Some(1 << 20), false)
        );
        let off = EngineConfig::default()
            .with_overrides(|k| (k == "SLUICE_SNDBUF").then(|| "off".into()));
        assert_eq!(
            (off.send_buffer, off.send_buffer_max),
            (None, true),
            "off keeps send_buffer_max"
        );
    }
}
