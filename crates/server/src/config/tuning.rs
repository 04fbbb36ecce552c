//! Engine tuning: every [`EngineConfig`] setting the top-level flags do not
//! already cover, defined once here. Each field is at the same time a
//! `sluice serve` flag (`--chunk-size 4M`, shown under "Engine tuning" in
//! `--help`, its doc comment being the help text) and a key of the
//! config file's `[engine]` table (`chunk_size = "4M"` or `= 4194304`);
//! the flag wins over the key, the key over the engine's measured default.
//! Nothing here is read from the process environment.
//!
//! Values are parsed after merging, so a bad one is reported with its key
//! whether it came from the command line or the file.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;
use sluice_engine::{parse_size, parse_switch, EngineConfig};

/// One setting as written: flag text, or a TOML string, integer, float or
/// boolean (kept as text, parsed per key by [`TuningArgs::apply`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Setting {
    /// `chunk_size = "4M"`, `--chunk-size 4M`.
    Text(String),
    /// `chunk_size = 4194304`.
    Int(i64),
    /// `sample_interval = 0.1`.
    Float(f64),
    /// `inline_reads = false`.
    Bool(bool),
}

impl std::str::FromStr for Setting {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Setting::Text(s.to_string()))
    }
}

impl Setting {
    fn text(&self) -> String {
        match self {
            Setting::Text(s) => s.clone(),
            Setting::Int(n) => n.to_string(),
            Setting::Float(x) => x.to_string(),
            Setting::Bool(b) => b.to_string(),
        }
    }
}

/// Engine tuning flags and `[engine]` keys. Defaults are the engine's
/// (`EngineConfig::default`, where each is explained with its measurement).
#[derive(clap::Args, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Engine tuning (defaults are measured; see docs/TUNING.md)")]
pub struct TuningArgs {
    /// Largest number of bytes handed to one sendfile call [default: 4M].
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<Setting>,
    /// Size of one pooled read buffer (copy path, uploads) [default: 1M].
    #[arg(long, value_name = "BYTES")]
    pub read_buffer: Option<Setting>,
    /// Bytes one sender may push before it yields the event loop to other
    /// connections [default: 4M].
    #[arg(long, value_name = "BYTES")]
    pub send_quantum: Option<Setting>,
    /// Copy path: read cached pages inline with RWF_NOWAIT, a disk thread
    /// only on a miss [default: on].
    #[arg(long, value_name = "on|off")]
    pub inline_reads: Option<Setting>,
    /// Sendfile path: check page-cache residency (cachestat) before each
    /// sendfile and read cold ranges on a disk thread [default: on].
    #[arg(long, value_name = "on|off")]
    pub resident_check: Option<Setting>,
    /// With no --send-buffer size: SO_SNDBUF = net.core.wmem_max when that
    /// is at least autotuning's ceiling [default: on].
    #[arg(long, value_name = "on|off")]
    pub send_buffer_max: Option<Setting>,
    /// SO_RCVBUF of data sockets, or `auto` (kernel autotuning) [default: auto].
    #[arg(long, value_name = "BYTES|auto")]
    pub recv_buffer: Option<Setting>,
    /// Dynamic right-sizing: size each data connection's send buffer to
    /// its path (about 2x the bandwidth-delay product, from TCP_INFO),
    /// beyond net.core.wmem_max with CAP_NET_ADMIN [default: on].
    #[arg(long, value_name = "on|off")]
    pub drs: Option<Setting>,
    /// SO_MAX_PACING_RATE per data socket in bytes per second, or `off`
    /// [default: off]. Under Cue (`--cue`) this is the per-transfer cap,
    /// hence its alias `--rate-cap` (key `rate_cap`).
    #[arg(long, visible_alias = "rate-cap", value_name = "BYTES/S|off")]
    #[serde(alias = "rate_cap")]
    pub max_pacing_rate: Option<Setting>,
    /// TCP congestion control of data sockets (`cubic`, `bbr`, ...), or
    /// `system` [default: system].
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<Setting>,
    /// Blocking disk threads [default: 2].
    #[arg(long, value_name = "N")]
    pub disk_threads: Option<Setting>,
    /// Most disk jobs queued at once [default: 64].
    #[arg(long, value_name = "N")]
    pub disk_queue_depth: Option<Setting>,
    /// Most pooled read buffers kept idle for reuse [default: 64].
    #[arg(long, value_name = "N")]
    pub buffer_pool_max: Option<Setting>,
    /// Buffers in flight per upload stream [default: 4].
    #[arg(long, value_name = "N")]
    pub upload_buffers: Option<Setting>,
    /// `fixed` prefetch: read-ahead window per connection [default: 8M].
    #[arg(long, value_name = "BYTES")]
    pub fixed_window: Option<Setting>,
    /// Seconds a data socket may make no progress before its transfer
    /// fails [default: 300].
    #[arg(long, value_name = "SECS")]
    pub data_timeout: Option<Setting>,
    /// `tcp` prefetch: read-ahead memory for all connections together
    /// (an upper bound on the budget measured from the memory cgroup)
    /// [default: 256M].
    #[arg(long, value_name = "BYTES")]
    pub prefetch_budget: Option<Setting>,
    /// `tcp` prefetch: share (0-1) of the memory not held by other page
    /// cache the budget may use, or `off` to leave that cache out [default: off].
    #[arg(long, value_name = "SHARE|off")]
    pub prefetch_budget_of_free: Option<Setting>,
    /// `tcp` prefetch: largest single read [default: 1M].
    #[arg(long, value_name = "BYTES")]
    pub prefetch_max_read: Option<Setting>,
    /// `tcp` prefetch: device-friendly smallest read, 0 for none [default: 256K].
    #[arg(long, value_name = "BYTES")]
    pub prefetch_min_read: Option<Setting>,
    /// Prefetch reads on the disk at once [default: 6].
    #[arg(long, value_name = "N")]
    pub prefetch_queue_depth: Option<Setting>,
    /// Planned reads go to the disk in batches of at least N while others
    /// are in flight (one disk-thread job and one loop wake-up per batch);
    /// 1 hands each read out alone [default: 3].
    #[arg(long, value_name = "N")]
    pub prefetch_batch: Option<Setting>,
    /// `tcp` prefetch: drop pages from the cache once acknowledged, unless
    /// another transfer has the file open [default: on].
    #[arg(long, value_name = "on|off")]
    pub prefetch_drop_sent: Option<Setting>,
    /// `tcp` prefetch: between socket samples, take each socket as draining
    /// at its measured rate, so reads fall due without a sample (measured
    /// to fill a memory-limited cgroup: lab tpf-mixed-rates s15-naps)
    /// [default: off].
    #[arg(long, value_name = "on|off")]
    pub prefetch_drain_estimate: Option<Setting>,
    /// Circus sharing: bytes per shared block, read once for every
    /// reader of the file [default: 1M].
    #[arg(long, value_name = "BYTES")]
    pub circus_block: Option<Setting>,
    /// Circus sharing: memory for one file's shared blocks at most (the
    /// active region; all files together stay within circus-budget)
    /// [default: 64M].
    #[arg(long, value_name = "BYTES")]
    pub circus_region: Option<Setting>,
    /// Circus sharing: most blocks queued per stream of a download [default: 4].
    #[arg(long, value_name = "N")]
    pub circus_queue: Option<Setting>,
    /// Circus sharing: memory for all files' shared blocks together (one
    /// engine-wide budget, fair shares when it is full); auto: 60 % of
    /// the memory the server's cgroup (or MemAvailable) leaves at start,
    /// 16M to 1G [default: auto].
    #[arg(long, value_name = "BYTES|auto")]
    pub circus_budget: Option<Setting>,
    /// Circus sharing: seconds of a download's measured rate its queue of
    /// blocks holds (1 to circus-queue blocks per stream; 0: always
    /// circus-queue) [default: 0.5].
    #[arg(long, value_name = "SECS")]
    pub circus_queue_time: Option<Setting>,
    /// Circus sharing: share (0-1) of its download after which a reader
    /// reads its own blocks outside the region [default: 0.75].
    #[arg(long, value_name = "SHARE")]
    pub circus_independent: Option<Setting>,
    /// Circus sharing: keep shared blocks in engine `buffers` (one read,
    /// writev to each reader), in the `pagecache` (one read, sendfile to
    /// each reader), or `auto`: the page cache for a block already cached
    /// when read, a buffer for one read from the disk [default: auto].
    #[arg(long, value_name = "auto|buffers|pagecache")]
    pub circus_hold: Option<Setting>,
    /// Least seconds between two TCP_INFO samples of a full socket [default: 0.1].
    #[arg(long, value_name = "SECS")]
    pub sample_interval: Option<Setting>,
    /// Event-loop ticks between polls for I/O (tokio's event_interval)
    /// [default: tokio's, 61].
    #[arg(long, value_name = "N")]
    pub event_interval: Option<Setting>,
}

/// What a key's text must be.
enum Kind {
    Size,
    Count,
    Switch,
    Seconds,
}

fn bad(key: &str, v: &str, kind: Kind) -> anyhow::Error {
    let what = match kind {
        Kind::Size => "a size such as 4M, 256K or 1048576",
        Kind::Count => "a whole number of at least 1",
        Kind::Switch => "on or off",
        Kind::Seconds => "seconds, e.g. 0.5 or 300",
    };
    anyhow!("{key} = {v:?}: expected {what}")
}

fn size(key: &str, s: &Setting) -> Result<u64> {
    let v = s.text();
    parse_size(&v).ok_or_else(|| bad(key, &v, Kind::Size))
}

fn positive_size(key: &str, s: &Setting) -> Result<usize> {
    match size(key, s)? {
        0 => Err(bad(key, "0", Kind::Size)),
        n => usize::try_from(n).map_err(|_| bad(key, &s.text(), Kind::Size)),
    }
}

fn count(key: &str, s: &Setting) -> Result<usize> {
    let v = s.text();
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(bad(key, &v, Kind::Count)),
    }
}

fn switch(key: &str, s: &Setting) -> Result<bool> {
    let v = s.text();
    parse_switch(&v).ok_or_else(|| bad(key, &v, Kind::Switch))
}

fn seconds(key: &str, s: &Setting) -> Result<Duration> {
    let v = s.text();
    let t = v.trim();
    match t.strip_suffix('s').unwrap_or(t).parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 86_400.0 => Ok(Duration::from_secs_f64(x)),
        _ => Err(bad(key, &v, Kind::Seconds)),
    }
}

fn is_off(s: &Setting, off_words: &[&str]) -> bool {
    off_words.contains(&s.text().trim().to_ascii_lowercase().as_str())
}

impl TuningArgs {
    /// Every key here, in `[engine]` spelling (the tests check each is a
    /// flag and a key that reaches the engine).
    #[cfg(test)]
    pub const KEYS: &'static [&'static str] = &[
        "chunk_size",
        "read_buffer",
        "send_quantum",
        "inline_reads",
        "resident_check",
        "send_buffer_max",
        "recv_buffer",
        "drs",
        "max_pacing_rate",
        "congestion",
        "disk_threads",
        "disk_queue_depth",
        "buffer_pool_max",
        "upload_buffers",
        "fixed_window",
        "data_timeout",
        "prefetch_budget",
        "prefetch_budget_of_free",
        "prefetch_max_read",
        "prefetch_min_read",
        "prefetch_queue_depth",
        "prefetch_batch",
        "prefetch_drop_sent",
        "prefetch_drain_estimate",
        "circus_block",
        "circus_region",
        "circus_queue",
        "circus_budget",
        "circus_queue_time",
        "circus_independent",
        "circus_hold",
        "sample_interval",
        "event_interval",
    ];

    /// `self` (the flags) over `file` (the `[engine]` table), key by key.
    pub fn over(self, file: TuningArgs) -> TuningArgs {
        macro_rules! pick {
            ($($f:ident),*) => { TuningArgs { $($f: self.$f.or(file.$f)),* } };
        }
        pick!(
            chunk_size,
            read_buffer,
            send_quantum,
            inline_reads,
            resident_check,
            send_buffer_max,
            recv_buffer,
            drs,
            max_pacing_rate,
            congestion,
            disk_threads,
            disk_queue_depth,
            buffer_pool_max,
            upload_buffers,
            fixed_window,
            data_timeout,
            prefetch_budget,
            prefetch_budget_of_free,
            prefetch_max_read,
            prefetch_min_read,
            prefetch_queue_depth,
            prefetch_batch,
            prefetch_drop_sent,
            prefetch_drain_estimate,
            circus_block,
            circus_region,
            circus_queue,
            circus_budget,
            circus_queue_time,
            circus_independent,
            circus_hold,
            sample_interval,
            event_interval
        )
    }

    /// Checks every given value and writes it into `e`.
    pub fn apply(&self, e: &mut EngineConfig) -> Result<()> {
        if let Some(s) = &self.chunk_size {
            e.chunk_size = positive_size("chunk_size", s)?;
        }
        if let Some(s) = &self.read_buffer {
            e.read_buffer_size = positive_size("read_buffer", s)?;
        }
        if let Some(s) = &self.send_quantum {
            e.send_quantum = positive_size("send_quantum", s)?;
        }
        if let Some(s) = &self.inline_reads {
            e.inline_cached_reads = switch("inline_reads", s)?;
        }
        if let Some(s) = &self.resident_check {
            e.sendfile_resident_check = switch("resident_check", s)?;
        }
        if let Some(s) = &self.send_buffer_max {
            e.send_buffer_max = switch("send_buffer_max", s)?;
        }
        if let Some(s) = &self.recv_buffer {
            e.recv_buffer = if is_off(s, &["auto"]) {
                None
            } else {
                Some(positive_size("recv_buffer", s)?)
            };
        }
        if let Some(s) = &self.drs {
            e.drs = switch("drs", s)?;
        }
        if let Some(s) = &self.max_pacing_rate {
            e.max_pacing_rate = if is_off(s, &["off", "none"]) {
                None
            } else {
                Some(size("max_pacing_rate", s)?).filter(|&n| n > 0)
            };
        }
        if let Some(s) = &self.congestion {
            let name = s.text().trim().to_string();
            if name.is_empty()
                || name.len() > 15
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                bail!("congestion = {name:?}: expected an algorithm name such as cubic or bbr, or system");
            }
            e.congestion = (name != "system").then_some(name);
        }
        if let Some(s) = &self.disk_threads {
            e.disk_threads = count("disk_threads", s)?;
        }
        if let Some(s) = &self.disk_queue_depth {
            e.disk_queue_depth = count("disk_queue_depth", s)?;
        }
        if let Some(s) = &self.buffer_pool_max {
            e.buffer_pool_max = count("buffer_pool_max", s)?;
        }
        if let Some(s) = &self.upload_buffers {
            e.upload_buffers_per_stream = count("upload_buffers", s)?;
        }
        if let Some(s) = &self.fixed_window {
            e.sendfile_prefetch = positive_size("fixed_window", s)?;
        }
        if let Some(s) = &self.data_timeout {
            e.idle_timeout = seconds("data_timeout", s)?;
        }
        if let Some(s) = &self.prefetch_budget {
            e.prefetch_budget = positive_size("prefetch_budget", s)? as u64;
        }
        if let Some(s) = &self.prefetch_budget_of_free {
            e.prefetch_budget_of_free = if is_off(s, &["off", "none"]) {
                None
            } else {
                let v = s.text();
                match v.trim().parse::<f64>() {
                    Ok(x) if (0.0..=1.0).contains(&x) => Some(x),
                    _ => bail!(
                        "prefetch_budget_of_free = {v:?}: expected a share from 0 to 1, or off"
                    ),
                }
            };
        }
        if let Some(s) = &self.prefetch_max_read {
            e.prefetch_h_max = positive_size("prefetch_max_read", s)? as u64;
        }
        if let Some(s) = &self.prefetch_min_read {
            e.prefetch_min_read = size("prefetch_min_read", s)?;
        }
        if let Some(s) = &self.prefetch_queue_depth {
            e.prefetch_queue_depth = count("prefetch_queue_depth", s)?;
        }
        if let Some(s) = &self.prefetch_batch {
            e.prefetch_batch_min = count("prefetch_batch", s)?;
        }
        if let Some(s) = &self.prefetch_drop_sent {
            e.prefetch_drop_sent = switch("prefetch_drop_sent", s)?;
        }
        if let Some(s) = &self.prefetch_drain_estimate {
            e.prefetch_drain_estimate = switch("prefetch_drain_estimate", s)?;
        }
        if let Some(s) = &self.circus_block {
            e.circus_block = positive_size("circus_block", s)? as u64;
        }
        if let Some(s) = &self.circus_region {
            e.circus_region = positive_size("circus_region", s)? as u64;
        }
        if let Some(s) = &self.circus_queue {
            e.circus_queue = count("circus_queue", s)?;
        }
        if let Some(s) = &self.circus_budget {
            e.circus_budget = if s.text().trim() == "auto" {
                0
            } else {
                positive_size("circus_budget", s)? as u64
            };
        }
        if let Some(s) = &self.circus_queue_time {
            // 0 turns rate-sized queues off (a fixed circus_queue per stream).
            e.circus_queue_time = if s.text().trim().trim_end_matches('s') == "0" {
                Duration::ZERO
            } else {
                seconds("circus_queue_time", s)?
            };
        }
        if let Some(s) = &self.circus_independent {
            let v = s.text();
            e.circus_independent = match v.trim().parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => x,
                _ => bail!("circus_independent = {v:?}: expected a share from 0 to 1"),
            };
        }
        if let Some(s) = &self.circus_hold {
            e.circus_hold = s
                .text()
                .parse()
                .map_err(|m: String| anyhow!("circus_hold: {m}"))?;
        }
        if let Some(s) = &self.sample_interval {
            e.sample_interval = seconds("sample_interval", s)?;
        }
        Ok(())
    }

    /// `--event-interval` (a runtime setting, not the engine's).
    pub fn event_interval(&self) -> Result<Option<u32>> {
        match &self.event_interval {
            None => Ok(None),
            Some(s) => {
                let n = count("event_interval", s)?;
                u32::try_from(n)
                    .map(Some)
                    .map_err(|_| bad("event_interval", &s.text(), Kind::Count))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        t: TuningArgs,
    }

    /// A value for each key that differs from the engine default.
    fn sample(key: &str) -> &'static str {
        match key {
            "inline_reads" | "resident_check" | "send_buffer_max" | "prefetch_drop_sent" => "off",
            "congestion" => "reno",
            "drs" if EngineConfig::default().drs => "off",
            "drs" => "on",
            "prefetch_budget_of_free" => "0.5",
            "data_timeout" | "sample_interval" | "circus_queue_time" => "7",
            "disk_threads"
            | "disk_queue_depth"
            | "buffer_pool_max"
            | "upload_buffers"
            | "prefetch_queue_depth"
            | "circus_queue"
            | "event_interval" => "3",
            "prefetch_batch" => "5",
            "circus_independent" => "0.5",
            "circus_hold" => "pagecache",
            "prefetch_drain_estimate" => "on",
            _ => "3M",
        }
    }

    fn engine_with(t: &TuningArgs) -> EngineConfig {
        let mut e = EngineConfig::default();
        t.apply(&mut e).unwrap();
        e
    }

    #[test]
    fn every_key_is_a_flag_and_a_file_key_and_changes_the_engine() {
        let default = EngineConfig::default();
        for key in TuningArgs::KEYS {
            let flag = format!("--{}", key.replace('_', "-"));
            let from_flag = Cli::try_parse_from(["sluice", &flag, sample(key)])
                .unwrap_or_else(|e| panic!("{flag}: {e}"))
                .t;
            let from_file: TuningArgs =
                toml::from_str(&format!("{key} = {:?}", sample(key))).unwrap();
            if *key == "event_interval" {
                assert_eq!(from_flag.event_interval().unwrap(), Some(3));
                assert_eq!(from_file.event_interval().unwrap(), Some(3));
                continue;
            }
            let (a, b) = (engine_with(&from_flag), engine_with(&from_file));
            assert_eq!(a, b, "{key}: flag and file disagree");
            assert_ne!(a, default, "{key} changed nothing");
        }
    }

    #[test]
    fn numbers_and_booleans_work_in_the_file() {
        let t: TuningArgs = toml::from_str(
            "chunk_size = 1048576\ninline_reads = false\nsample_interval = 0.25\nmax_pacing_rate = \"off\"",
        )
        .unwrap();
        let e = engine_with(&t);
        assert_eq!(e.chunk_size, 1 << 20);
        assert!(!e.inline_cached_reads);
        assert_eq!(e.sample_interval, Duration::from_millis(250));
        assert_eq!(e.max_pacing_rate, None);
    }

    #[test]
    fn the_flag_wins_over_the_file() {
        let flags = Cli::try_parse_from(["sluice", "--chunk-size", "2M"])
            .unwrap()
            .t;
        let file: TuningArgs =
            toml::from_str("chunk_size = \"8M\"\nsend_quantum = \"1M\"").unwrap();
        let e = engine_with(&flags.over(file));
        assert_eq!(e.chunk_size, 2 << 20);
        assert_eq!(e.send_quantum, 1 << 20);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (key, v) in [
            ("chunk_size", "lots"),
            ("chunk_size", "0"),
            ("inline_reads", "maybe"),
            ("disk_threads", "0"),
            ("sample_interval", "-1"),
            ("prefetch_budget_of_free", "2"),
            ("circus_independent", "1.5"),
            ("circus_hold", "disk"),
            ("congestion", "c u b i c"),
        ] {
            let t: TuningArgs = toml::from_str(&format!("{key} = {v:?}")).unwrap();
            let err = t
                .apply(&mut EngineConfig::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{key} = {v:?}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = toml::from_str::<TuningArgs>("chunk_sise = 1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("chunk_sise"), "{err}");
    }
}
