//! Kernel TLS for the HTTPS door: whether to use it (`--ktls
//! auto|on|off`, probed at start), and the hand-over of a finished
//! handshake's keys to the socket.
//!
//! With kTLS the kernel seals records, so an HTTPS body leaves by the same
//! `sendfile`/`writev` path as clear HTTP (engine `ktls.rs`) instead of
//! read, encrypt in user space, write. rustls does the handshake; the
//! [`ktls`] crate drains what rustls read past it (its `CorkStream` stops
//! rustls at a record boundary) and hands the traffic secrets to the
//! socket.
//!
//! The probe makes a connected loopback pair per cipher and asks the kernel
//! for the `tls` upper layer protocol and for transmit and receive keys of
//! that cipher (zero keys; nothing is sent). The HTTPS configuration then
//! offers only the ciphers the kernel took, so every handshake can be
//! handed over. A hand-over that still fails ends that connection and
//! turns kTLS off for the rest of the run (logged once).
//!
//! Untested on this project's machines: their kernel has no `tls` module,
//! the probe says so, and `auto` stays in user space there. `on` refuses
//! to start on such a kernel instead.

use std::io;
use std::net::{TcpListener, TcpStream as StdTcpStream};
use std::os::fd::AsFd;

use sluice_platform::ktls as kt;
use std::sync::Arc;

use anyhow::{bail, Result};
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, SupportedCipherSuite};
use tokio::net::TcpStream;

use sluice_engine::{Engine, KtlsConn};

/// `--ktls`: kernel TLS for HTTPS bodies.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KtlsMode {
    /// Used when the kernel offers it (probed at start).
    #[default]
    Auto,
    /// Required: the start fails on a kernel without it.
    On,
    /// Never: records are sealed in user space.
    Off,
}

impl std::str::FromStr for KtlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<KtlsMode, String> {
        match s {
            "auto" => Ok(KtlsMode::Auto),
            "on" => Ok(KtlsMode::On),
            "off" => Ok(KtlsMode::Off),
            _ => Err(format!("ktls = {s:?}: expected auto, on or off")),
        }
    }
}

/// What the kernel accepts, from [`probe`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelTls {
    /// Cipher suites whose keys the kernel took for both directions.
    pub suites: Vec<CipherSuite>,
}

/// The cipher suites Sluice hands to the kernel, with what the kernel
/// calls them (linux/tls.h): TLS version, cipher type, key length.
const CANDIDATES: [(CipherSuite, u16, u16, usize); 6] = [
    (CipherSuite::TLS13_AES_128_GCM_SHA256, 0x0304, 51, 16),
    (CipherSuite::TLS13_AES_256_GCM_SHA384, 0x0304, 52, 32),
    (
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        0x0303,
        51,
        16,
    ),
    (
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        0x0303,
        52,
        32,
    ),
    (
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        0x0303,
        51,
        16,
    ),
    (
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        0x0303,
        52,
        32,
    ),
];

/// Decides at start whether HTTPS uses kernel TLS; `Err` only for `on` on
/// a kernel without it.
pub fn decide(mode: KtlsMode) -> Result<Option<KernelTls>> {
    if mode == KtlsMode::Off {
        return Ok(None);
    }
    match probe() {
        Ok(k) if !k.suites.is_empty() => Ok(Some(k)),
        Ok(_) if mode == KtlsMode::On => {
            bail!("--ktls on: the kernel's TLS takes none of the AES-GCM ciphers")
        }
        Err(e) if mode == KtlsMode::On => {
            bail!("--ktls on: this kernel has no kernel TLS ({e}; `modprobe tls`, or --ktls auto)")
        }
        _ => Ok(None),
    }
}

/// Asks the kernel which candidate ciphers it can seal and open.
pub fn probe() -> io::Result<KernelTls> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut suites = Vec::new();
    for (i, &(suite, version, cipher, key_len)) in CANDIDATES.iter().enumerate() {
        let _client = StdTcpStream::connect(addr)?;
        let (server, _) = listener.accept()?;
        let fd = server.as_fd();
        if let Err(e) = kt::set_ulp_tls(fd) {
            // No module: no cipher will do; the first error says why.
            if i == 0 {
                return Err(e);
            }
            break;
        }
        let info = kt::zero_crypto_info(version, cipher, key_len);
        if kt::set_tls_keys(fd, kt::TLS_TX, &info).is_ok()
            && kt::set_tls_keys(fd, kt::TLS_RX, &info).is_ok()
        {
            suites.push(suite);
        }
    }
    Ok(KernelTls { suites })
}

/// The crypto provider of the HTTPS configuration: with kernel TLS, only
/// the ciphers the kernel takes (every handshake can then be handed over).
pub fn provider(kernel: Option<&KernelTls>) -> CryptoProvider {
    let mut provider: CryptoProvider = rustls::crypto::ring::default_provider();
    if let Some(k) = kernel {
        provider
            .cipher_suites
            .retain(|s: &SupportedCipherSuite| k.suites.contains(&s.suite()));
    }
    provider
}

/// Why [`accept`] failed.
#[derive(Debug)]
pub enum AcceptError {
    /// The handshake (the client's doing: garbage, a stop halfway, ...).
    Handshake(io::Error),
    /// Handing the keys to the kernel (ours: kTLS should be turned off).
    HandOver(io::Error),
}

/// The server side of a handshake with `config` (built on [`provider`],
/// with `enable_secret_extraction`) whose keys then go to the kernel: the
/// connection the HTTP door serves.
pub async fn accept(
    engine: &Engine,
    config: Arc<rustls::ServerConfig>,
    stream: TcpStream,
    cue: Option<sluice_engine::sched::cue::CueSpec>,
) -> Result<KtlsConn, AcceptError> {
    let tls = crate::tls::handshake(config, ktls::CorkStream::new(stream))
        .await
        .map_err(AcceptError::Handshake)?;
    let k = ktls::config_ktls_server(tls).await.map_err(|e| {
        AcceptError::HandOver(io::Error::other(format!("kernel TLS hand-over: {e}")))
    })?;
    let (drained, tcp) = k.into_raw();
    Ok(KtlsConn::new(
        engine.data_conn_in(tcp, None, cue),
        drained.unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse::<KtlsMode>().unwrap(), KtlsMode::Auto);
        assert_eq!("off".parse::<KtlsMode>().unwrap(), KtlsMode::Off);
        assert!("yes".parse::<KtlsMode>().is_err());
    }

    /// Whatever the kernel, the probe answers and `auto` never fails the
    /// start; `off` never probes.
    #[test]
    fn auto_and_off_never_fail_the_start() {
        let _ = probe();
        assert!(decide(KtlsMode::Auto).is_ok());
        assert_eq!(decide(KtlsMode::Off).unwrap(), None);
    }

    /// Only probed ciphers are offered.
    #[test]
    fn the_provider_offers_only_what_the_kernel_takes() {
        let kernel = KernelTls {
            suites: vec![CipherSuite::TLS13_AES_128_GCM_SHA256],
        };
        let offered: Vec<_> = provider(Some(&kernel))
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect();
        assert_eq!(offered, vec![CipherSuite::TLS13_AES_128_GCM_SHA256]);
        assert!(provider(None).cipher_suites.len() > 1);
    }
}
