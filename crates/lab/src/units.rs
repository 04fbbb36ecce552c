//! Parsing of the human units used on command lines and in experiment files:
//! durations ("50ms", "1.5s", "200us"), bit rates ("100mbit", "1gbit"),
//! byte sizes ("256MiB", "2GB") and fractions ("1%", "0.01").

use std::time::Duration;

use anyhow::{bail, Context, Result};

fn split_number(s: &str) -> Result<(f64, String)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    // "1e3ms" is fine, but the "e" must not eat a unit letter such as in "5e" (nonsense anyway).
    let (num, unit) = s.split_at(end);
    let n: f64 = num
        .parse()
        .with_context(|| format!("not a number: {s:?}"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("value must be a finite non-negative number: {s:?}");
    }
    Ok((n, unit.trim().to_ascii_lowercase()))
}

/// Parses a duration; a bare number means milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let (n, unit) = split_number(s)?;
    let secs = match unit.as_str() {
        "" | "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "ns" => n / 1e9,
        "s" | "sec" => n,
        "m" | "min" => n * 60.0,
        _ => bail!("unknown duration unit in {s:?} (use ns, us, ms, s, min)"),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a bit rate into bits per second; a bare number means bit/s, "0" means unlimited.
pub fn parse_rate(s: &str) -> Result<u64> {
    let (n, unit) = split_number(s)?;
    let unit = unit.trim_end_matches("/s").trim_end_matches("ps");
    let mult = match unit {
        "" | "bit" | "b" => 1.0,
        "k" | "kbit" | "kb" => 1e3,
        "m" | "mbit" | "mb" => 1e6,
        "g" | "gbit" | "gb" => 1e9,
        _ => bail!("unknown rate unit in {s:?} (use bit, kbit, mbit, gbit)"),
    };
    Ok((n * mult).round() as u64)
}

/// Parses a byte size ("4096", "64KiB", "2GB", "1.5MiB").
pub fn parse_size(s: &str) -> Result<u64> {
    let (n, unit) = split_number(s)?;
    let mult = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => bail!("unknown size unit in {s:?} (use B, KB, KiB, MB, MiB, GB, GiB)"),
    };
    Ok((n * mult).round() as u64)
}

/// Parses a probability: "1%" is 0.01, a bare number in [0, 1] is taken as is.
pub fn parse_fraction(s: &str) -> Result<f64> {
    let t = s.trim();
    let v = if let Some(p) = t.strip_suffix('%') {
        p.trim().parse::<f64>()? / 100.0
    } else {
        t.parse::<f64>()?
    };
    if !(0.0..=1.0).contains(&v) {
        bail!("probability out of range [0, 1]: {s:?}");
    }
    Ok(v)
}

/// Formats bits per second for humans ("100 Mbit/s").
pub fn fmt_rate(bps: u64) -> String {
    match bps {
        0 => "unlimited".into(),
        b if b >= 1_000_000_000 && b % 1_000_000_000 == 0 => {
            format!("{} Gbit/s", b / 1_000_000_000)
        }
        b if b >= 1_000_000 => format!("{} Mbit/s", b as f64 / 1e6),
        b => format!("{} kbit/s", b as f64 / 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("200us").unwrap(), Duration::from_micros(200));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_millis(7));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1ms").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("2Mbit/s").unwrap(), 2_000_000);
        assert_eq!(parse_rate("0").unwrap(), 0);
        assert!(parse_rate("3 furlongs").is_err());
    }

    #[test]
    fn sizes_and_fractions() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_fraction("1%").unwrap(), 0.01);
        assert_eq!(parse_fraction("0.25").unwrap(), 0.25);
        assert!(parse_fraction("150%").is_err());
    }
}
