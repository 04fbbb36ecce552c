//! HTTP flags and config keys, merged into [`HttpSettings`].
//!
//! The flags live here (flattened into `sluice serve`'s arguments) so the
//! front door's knobs sit next to the code that uses them; the file keys
//! have the same names with underscores, as everywhere in `config.rs`:
//!
//! ```toml
//! http = "0.0.0.0:8080"          # --http
//! no_http = false                # --no-http
//! no_ftp = false                 # --no-ftp
//! http_header_timeout = 20       # seconds to receive a whole request head
//! http_keepalive_timeout = 60    # seconds an idle keep-alive connection stays
//! http_send_timeout = 60         # seconds a body may go without progress
//! http_max_connections = 1024
//! http_open_cache = 1            # seconds an open file is reused by path; 0: off
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Default HTTP listen address.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// Seconds to receive one complete request head (nginx:
/// `client_header_timeout` 60 s; shorter, since a head is small).
pub const DEFAULT_HEADER_SECS: u64 = 20;
/// Seconds an idle keep-alive connection is kept (nginx: 75 s).
pub const DEFAULT_KEEPALIVE_SECS: u64 = 60;
/// Seconds a response body may make no progress (nginx `send_timeout`: 60 s).
pub const DEFAULT_SEND_SECS: u64 = 60;
/// Most concurrent HTTP connections; more get 503.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Seconds an open file is reused for requests of the same path before
/// the path is resolved again (see `open_files.rs`; nginx's
/// `open_file_cache_valid` is 60 s, off by default).
pub const DEFAULT_OPEN_CACHE_SECS: u64 = 1;

/// `sluice serve` flags of the HTTP front door.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HttpArgs {
    /// HTTP listen address [default: 127.0.0.1:8080]. Port 0 picks a free
    /// port; the bound address is printed on stdout as `http listening on ADDR`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// Do not serve HTTP.
    #[arg(long)]
    pub no_http: bool,
    /// Do not serve FTP (HTTP only).
    #[arg(long)]
    pub no_ftp: bool,
    /// Seconds a client has to send a complete request head; then 408
    /// and close [default: 20].
    #[arg(long, value_name = "SECS")]
    pub http_header_timeout: Option<u64>,
    /// Seconds an idle keep-alive connection stays open [default: 60].
    #[arg(long, value_name = "SECS")]
    pub http_keepalive_timeout: Option<u64>,
    /// Seconds a response may go without the client taking a byte before
    /// the connection is closed [default: 60].
    #[arg(long, value_name = "SECS")]
    pub http_send_timeout: Option<u64>,
    /// Most concurrent HTTP connections; more get 503 [default: 1024].
    #[arg(long, value_name = "N")]
    pub http_max_connections: Option<usize>,
    /// Seconds an open file is reused by later requests for the same path
    /// (re-checked with fstat each time; a deleted or replaced file is
    /// noticed at once, and closed within about a second even if never
    /// asked for again); 0 opens every request anew [default: 1].
    #[arg(long, value_name = "SECS")]
    pub http_open_cache: Option<u64>,
}

/// The same keys, as read from the config file.
#[derive(Debug, Default, Clone)]
pub struct HttpFileKeys {
    /// `http`
    pub http: Option<String>,
    /// `no_http`
    pub no_http: Option<bool>,
    /// `http_header_timeout`
    pub http_header_timeout: Option<u64>,
    /// `http_keepalive_timeout`
    pub http_keepalive_timeout: Option<u64>,
    /// `http_send_timeout`
    pub http_send_timeout: Option<u64>,
    /// `http_max_connections`
    pub http_max_connections: Option<usize>,
    /// `http_open_cache`
    pub http_open_cache: Option<u64>,
}

/// What the HTTP front door runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Listen address.
    pub addr: SocketAddr,
    /// The address was given (flag or file), not the default.
    pub explicit: bool,
    /// Deadline for a complete request head, from its first byte (from
    /// accept for the first request).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub keepalive_timeout: Duration,
    /// How long a response may make no progress.
    pub send_timeout: Duration,
    /// Connection limit.
    pub max_connections: usize,
    /// How long an open file is reused by path; zero: not at all.
    pub open_cache: Duration,
}

/// Merges flags over file keys; `Ok(None)` when HTTP is switched off.
pub fn merge(args: &HttpArgs, file: &HttpFileKeys) -> Result<Option<HttpSettings>> {
    if args.no_http || file.no_http.unwrap_or(false) {
        return Ok(None);
    }
    let explicit = args.http.is_some() || file.http.is_some();
    let addr = match (args.http, &file.http) {
        (Some(a), _) => a,
        (None, Some(s)) => s
            .parse()
            .with_context(|| format!("config: http = {s:?} is not ADDR:PORT"))?,
        (None, None) => DEFAULT_HTTP.parse().expect("constant address parses"),
    };
    let secs = |flag: Option<u64>, key: Option<u64>, default: u64, name: &str| {
        let s = flag.or(key).unwrap_or(default);
        if s == 0 {
            bail!("{name} must be at least 1 second");
        }
        Ok(Duration::from_secs(s))
    };
    let max_connections = args
        .http_max_connections
        .or(file.http_max_connections)
        .unwrap_or(DEFAULT_MAX_CONNECTIONS);
    if max_connections == 0 {
        bail!("http_max_connections must be at least 1");
    }
    Ok(Some(HttpSettings {
        addr,
        explicit,
        header_timeout: secs(
            args.http_header_timeout,
            file.http_header_timeout,
            DEFAULT_HEADER_SECS,
            "http_header_timeout",
        )?,
        keepalive_timeout: secs(
            args.http_keepalive_timeout,
            file.http_keepalive_timeout,
            DEFAULT_KEEPALIVE_SECS,
            "http_keepalive_timeout",
        )?,
        send_timeout: secs(
            args.http_send_timeout,
            file.http_send_timeout,
            DEFAULT_SEND_SECS,
            "http_send_timeout",
        )?,
        max_connections,
        open_cache: Duration::from_secs(
            args.http_open_cache
                .or(file.http_open_cache)
                .unwrap_or(DEFAULT_OPEN_CACHE_SECS),
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_then_file_then_flags() {
        let s = merge(&HttpArgs::default(), &HttpFileKeys::default())
            .unwrap()
            .unwrap();
        assert_eq!(s.addr, DEFAULT_HTTP.parse().unwrap());
        assert_eq!(s.header_timeout, Duration::from_secs(DEFAULT_HEADER_SECS));
        assert_eq!(s.open_cache, Duration::from_secs(DEFAULT_OPEN_CACHE_SECS));
        let file = HttpFileKeys {
            http: Some("127.0.0.1:9000".into()),
            http_send_timeout: Some(5),
            http_open_cache: Some(0),
            ..Default::default()
        };
        let s = merge(&HttpArgs::default(), &file).unwrap().unwrap();
        assert_eq!(s.addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(s.send_timeout, Duration::from_secs(5));
        assert_eq!(s.open_cache, Duration::ZERO);
        let args = HttpArgs {
            http: Some("127.0.0.1:0".parse().unwrap()),
            http_send_timeout: Some(7),
            ..Default::default()
        };
        let s = merge(&args, &file).unwrap().unwrap();
        assert_eq!(s.addr.port(), 0);
        assert_eq!(s.send_timeout, Duration::from_secs(7));
    }

    #[test]
    fn switched_off_and_bad_values() {
        let off = HttpArgs {
            no_http: true,
            ..Default::default()
        };
        assert_eq!(merge(&off, &HttpFileKeys::default()).unwrap(), None);
        let file = HttpFileKeys {
            no_http: Some(true),
            ..Default::default()
        };
        assert_eq!(merge(&HttpArgs::default(), &file).unwrap(), None);
        let bad = HttpFileKeys {
            http: Some("nope".into()),
            ..Default::default()
        };
        assert!(merge(&HttpArgs::default(), &bad).is_err());
        let zero = HttpArgs {
            http_header_timeout: Some(0),
            ..Default::default()
        };
        assert!(merge(&zero, &HttpFileKeys::default()).is_err());
    }
}
