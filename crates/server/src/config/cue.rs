//! Cue: fairness between transfers, rate caps and classes (issue 14;
//! the engine's `sched/cue.rs`), defined once here. Each field is a
//! `sluice serve` flag and a top-level key of the config file of the
//! same name; class weights are also the `[classes]` table, and users get
//! `rate_cap` and `class` in their `[[user]]` entry. The per-transfer cap
//! is the engine's `max_pacing_rate` (`--rate-cap` is its alias).
//!
//! ```toml
//! cue = "auto"                 # --cue on|off|auto|fair (auto: on when a cap or class is set;
//!                              #   fair: on, plus fair shares of the measured aggregate)
//! server_rate_cap = "100mbit"  # --server-rate-cap: all transfers together, shared by weight
//! http_class = "interactive"   # --http-class: class of the HTTP and HTTPS doors' connections
//! ftp_class = "bulk"           # --ftp-class: class of FTP data connections (users may override)
//! [classes]                    # --class NAME=WEIGHT (repeatable)
//! interactive = 3
//! bulk = 1
//! [[user]]
//! name = "replica"
//! rate_cap = "10M"             # bytes/s (or "80mbit") shared by the user's transfers
//! class = "bulk"
//! ```

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use sluice_engine::sched::cue::{CueConfig, CueSpec, FairConfig};

/// Cue flags.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Fairness, rate caps and classes (Cue)")]
pub struct CueArgs {
    /// Cue: one scheduler for every data connection: the send quantum
    /// scaled by each connection's weight, and rate caps (per transfer
    /// `--rate-cap`, per user, server-wide) shared by weight and set as
    /// each socket's TCP pacing rate. `auto`: on when any cap or class is
    /// configured. `fair`: on, and with no cap configured each transfer is
    /// paced just above its fair (max-min, by weight) share of the
    /// measured aggregate, so flows sharing an unknown bottleneck get
    /// equal rates (engine's sched/cue_fair.rs) [default: auto].
    #[arg(long, value_name = "on|off|auto|fair")]
    pub cue: Option<String>,
    /// Cap on all data connections together, bytes/s (`100M`, or bits
    /// with `mbit`/`gbit`: `800mbit`), shared among the active transfers
    /// by weight; a share one cannot use goes to the others.
    #[arg(long, value_name = "RATE")]
    pub server_rate_cap: Option<String>,
    /// A class and its weight, `NAME=WEIGHT` (repeatable; a class not
    /// named weighs 1). Under contention classes share by weight.
    #[arg(long = "class", value_name = "NAME=WEIGHT")]
    pub classes: Vec<String>,
    /// Class of the HTTP and HTTPS doors' connections [default: default].
    #[arg(long, value_name = "NAME")]
    pub http_class: Option<String>,
    /// Class of FTP data connections (a user's `class` wins)
    /// [default: default].
    #[arg(long, value_name = "NAME")]
    pub ftp_class: Option<String>,
}

/// The file's Cue keys.
#[derive(Debug, Default, Clone)]
pub struct CueFileKeys {
    pub cue: Option<String>,
    pub server_rate_cap: Option<String>,
    pub classes: BTreeMap<String, f64>,
    pub http_class: Option<String>,
    pub ftp_class: Option<String>,
}

/// Cue as the server runs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CueSettings {
    /// The engine's scheduler configuration; `None`: off.
    pub engine: Option<CueConfig>,
    /// Class of HTTP(S) connections.
    pub http_class: String,
    /// Class of FTP data connections.
    pub ftp_class: String,
}

/// A rate: bytes/s with the size suffixes (`10M` = 10 MiB/s) or bits/s
/// with `kbit`, `mbit`, `gbit` (decimal, as link speeds are written).
pub fn parse_rate(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    if let Some(num) = t.strip_suffix("bit") {
        let (num, mult) = match num.as_bytes().last()? {
            b'k' => (&num[..num.len() - 1], 1e3),
            b'm' => (&num[..num.len() - 1], 1e6),
            b'g' => (&num[..num.len() - 1], 1e9),
            _ => (num, 1.0),
        };
        let x: f64 = num.trim().parse().ok()?;
        let bytes = x * mult / 8.0;
        return (1.0..1e15).contains(&bytes).then_some(bytes as u64);
    }
    sluice_engine::parse_size(&t).filter(|&n| n > 0)
}

fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Merges flags over file keys; `users` are (class, has cap) of the
/// `[[user]]` entries, which also turn `auto` on.
pub fn merge(
    args: &CueArgs,
    file: &CueFileKeys,
    users: &[(Option<&str>, Option<&str>)],
) -> Result<CueSettings> {
    let mut classes = file.classes.clone();
    for c in &args.classes {
        let (n, w) = c
            .split_once('=')
            .ok_or_else(|| anyhow!("--class {c:?}: expected NAME=WEIGHT"))?;
        let w: f64 = w
            .trim()
            .parse()
            .map_err(|_| anyhow!("--class {c:?}: the weight is not a number"))?;
        classes.insert(n.trim().to_string(), w);
    }
    for (n, w) in &classes {
        if !name_ok(n) {
            bail!("class {n:?}: names are letters, digits, _ and - (at most 64)");
        }
        if !(w.is_finite() && *w > 0.0 && *w <= 1e6) {
            bail!("class {n:?}: weight {w} must be above 0 (and at most 1e6)");
        }
    }
    let server_cap = match args
        .server_rate_cap
        .clone()
        .or(file.server_rate_cap.clone())
    {
        None => None,
        Some(s) if matches!(s.trim(), "off" | "none") => None,
        Some(s) => Some(parse_rate(&s).ok_or_else(|| {
            anyhow!("server_rate_cap {s:?}: expected bytes/s (100M) or bits/s (800mbit), or off")
        })?),
    };
    let http_class = args.http_class.clone().or(file.http_class.clone());
    let ftp_class = args.ftp_class.clone().or(file.ftp_class.clone());
    for (u_class, u_cap) in users {
        if let Some(c) = u_class {
            if !name_ok(c) {
                bail!("user class {c:?}: names are letters, digits, _ and -");
            }
        }
        if let Some(r) = u_cap {
            parse_rate(r).ok_or_else(|| {
                anyhow!("user rate_cap {r:?}: expected bytes/s (10M) or bits/s (80mbit)")
            })?;
        }
    }
    for c in [&http_class, &ftp_class].into_iter().flatten() {
        if !name_ok(c) {
            bail!("class {c:?}: names are letters, digits, _ and -");
        }
    }
    let configured = server_cap.is_some()
        || !classes.is_empty()
        || http_class.is_some()
        || ftp_class.is_some()
        || users.iter().any(|(c, r)| c.is_some() || r.is_some());
    let mode = args.cue.clone().or(file.cue.clone());
    let fair = mode.as_deref().map(str::trim) == Some("fair");
    let on = match mode.as_deref().map(str::trim) {
        None | Some("auto") => configured,
        Some("fair") => true,
        Some(s) => sluice_engine::parse_switch(s)
            .ok_or_else(|| anyhow!("cue {s:?}: expected on, off, auto or fair"))?,
    };
    Ok(CueSettings {
        engine: on.then(|| CueConfig {
            server_cap,
            classes: classes.into_iter().collect(),
            fair: fair.then(FairConfig::default),
            ..CueConfig::default()
        }),
        http_class: http_class.unwrap_or_else(|| "default".into()),
        ftp_class: ftp_class.unwrap_or_else(|| "default".into()),
    })
}

impl CueSettings {
    /// What an HTTP(S) connection registers with; `None` when off.
    pub fn http_spec(&self) -> Option<CueSpec> {
        self.engine.as_ref()?;
        Some(CueSpec {
            class: self.http_class.clone(),
            ..CueSpec::default()
        })
    }

    /// What a logged-in user's FTP data connections register with.
    pub fn ftp_spec(&self, user: Option<&crate::config::UserConfig>) -> Option<CueSpec> {
        self.engine.as_ref()?;
        Some(CueSpec {
            class: user
                .and_then(|u| u.class.clone())
                .unwrap_or_else(|| self.ftp_class.clone()),
            user: user.map(|u| u.name.clone()),
            cap: None,
            user_cap: user
                .and_then(|u| u.rate_cap.as_deref())
                .and_then(parse_rate),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_bytes_or_bits() {
        assert_eq!(parse_rate("4M"), Some(4 << 20));
        assert_eq!(parse_rate("100mbit"), Some(12_500_000));
        assert_eq!(parse_rate("1Gbit"), Some(125_000_000));
        assert_eq!(parse_rate("0"), None);
        assert_eq!(parse_rate("fast"), None);
    }

    #[test]
    fn auto_is_on_only_when_something_is_configured() {
        let none = merge(&CueArgs::default(), &CueFileKeys::default(), &[]).unwrap();
        assert_eq!(none.engine, None);
        let args = CueArgs {
            classes: vec!["gold=3".into()],
            server_rate_cap: Some("80mbit".into()),
            ..CueArgs::default()
        };
        let on = merge(&args, &CueFileKeys::default(), &[]).unwrap();
        let e = on.engine.unwrap();
        assert_eq!(e.server_cap, Some(10_000_000));
        assert_eq!(e.classes, vec![("gold".to_string(), 3.0)]);
        let forced = CueArgs {
            cue: Some("on".into()),
            ..CueArgs::default()
        };
        assert!(merge(&forced, &CueFileKeys::default(), &[])
            .unwrap()
            .engine
            .is_some());
        let user = merge(
            &CueArgs::default(),
            &CueFileKeys::default(),
            &[(None, Some("1M"))],
        )
        .unwrap();
        assert!(user.engine.is_some(), "a user's cap turns auto on");
        let fair = CueArgs {
            cue: Some("fair".into()),
            ..CueArgs::default()
        };
        let e = merge(&fair, &CueFileKeys::default(), &[]).unwrap().engine;
        assert!(e.unwrap().fair.is_some(), "fair: on with fair shares");
        let caps_only = merge(&args, &CueFileKeys::default(), &[]).unwrap();
        assert_eq!(caps_only.engine.unwrap().fair, None, "fair only when asked");
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |a: CueArgs| {
            merge(&a, &CueFileKeys::default(), &[])
                .unwrap_err()
                .to_string()
        };
        assert!(bad(CueArgs {
            classes: vec!["x".into()],
            ..Default::default()
        })
        .contains("NAME=WEIGHT"));
        assert!(bad(CueArgs {
            classes: vec!["x=0".into()],
            ..Default::default()
        })
        .contains("above 0"));
        assert!(bad(CueArgs {
            server_rate_cap: Some("lots".into()),
            ..Default::default()
        })
        .contains("server_rate_cap"));
        assert!(bad(CueArgs {
            cue: Some("maybe".into()),
            ..Default::default()
        })
        .contains("on, off, auto or fair"));
        let e = merge(
            &CueArgs::default(),
            &CueFileKeys::default(),
            &[(None, Some("x"))],
        )
        .unwrap_err();
        assert!(e.to_string().contains("rate_cap"));
    }
}
