//! TLS for both front doors: the flags and file keys, loading the
//! certificate chain and key, and the rustls server configurations.
//!
//! ```toml
//! tls_cert = "/etc/sluice/fullchain.pem"   # --tls-cert: PEM, leaf first, chain allowed
//! tls_key = "/etc/sluice/key.pem"          # --tls-key: PEM (PKCS#8, PKCS#1 or SEC1)
//! https = "0.0.0.0:8443"                   # --https: the HTTPS door (ALPN http/1.1)
//! ftps = "0.0.0.0:990"                     # --ftps: implicit FTPS (TLS from the first byte)
//! require_tls = true                       # --require-tls: no login over clear text
//! ktls = "auto"                            # --ktls auto|on|off: kernel TLS for HTTPS (crate::ktls)
//! # and per user: [[user]] require_tls = false (overrides the global one)
//! ```
//!
//! With a certificate and key, the FTP port offers explicit FTPS (AUTH
//! TLS, RFC 4217) whether or not `--https`/`--ftps` are given. A bad
//! certificate or key stops the start with a message naming the file.
//!
//! [`ServerTls::load`] builds everything from the two paths; a reload
//! (SIGHUP) can call it and [`Acceptor::replace`] the configuration of a
//! running door: connections already up keep the one they started with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// Sessions remembered for resumption (per door). FTPS clients resume the
/// control connection's session on every data connection (vsftpd's
/// `require_ssl_reuse`), so this is sized for many concurrent sessions.
const SESSION_CACHE: usize = 4096;

/// How long a client has to complete the TLS handshake (a client that
/// stops halfway, or sends garbage slowly, frees its slot then).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `sluice serve` flags for TLS.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// HTTPS listen address (needs --tls-cert and --tls-key); off by
    /// default. The bound address is printed on stdout as
    /// `https listening on ADDR`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub https: Option<SocketAddr>,
    /// Implicit FTPS listen address (TLS from the first byte, usually port
    /// 990); off by default. Printed as `ftps listening on ADDR`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub ftps: Option<SocketAddr>,
    /// Certificate chain (PEM, the server's certificate first). With
    /// --tls-key it enables AUTH TLS on the FTP port.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of the certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Refuse FTP logins (anonymous and users without their own
    /// `require_tls`) before AUTH TLS.
    #[arg(long)]
    pub require_tls: bool,
    /// Kernel TLS for HTTPS bodies (sendfile under TLS): `auto` uses it
    /// when the kernel has it (probed at start), `on` requires it, `off`
    /// seals records in user space. [default: auto]
    #[arg(long, value_enum, value_name = "MODE")]
    pub ktls: Option<crate::ktls::KtlsMode>,
}

/// The same keys, as read from the config file.
#[derive(Debug, Default, Clone)]
pub struct TlsFileKeys {
    /// `https`
    pub https: Option<String>,
    /// `ftps`
    pub ftps: Option<String>,
    /// `tls_cert`
    pub tls_cert: Option<PathBuf>,
    /// `tls_key`
    pub tls_key: Option<PathBuf>,
    /// `require_tls`
    pub require_tls: Option<bool>,
    /// `ktls`
    pub ktls: Option<String>,
}

/// What the server runs with for TLS.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// The HTTPS door's address.
    pub https: Option<SocketAddr>,
    /// The implicit FTPS door's address.
    pub ftps: Option<SocketAddr>,
    /// Certificate and key files (kept for a reload).
    pub files: Option<(PathBuf, PathBuf)>,
    /// FTP logins need TLS unless a user says otherwise.
    pub require_tls: bool,
    /// The loaded configurations; `Some` exactly when `files` is.
    pub server: Option<ServerTls>,
    /// What the kernel's TLS takes, when HTTPS hands its keys to it.
    pub ktls: Option<crate::ktls::KernelTls>,
}

/// The rustls configurations of both doors, from one certificate and key.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// HTTPS: ALPN `http/1.1`.
    pub https: Arc<ServerConfig>,
    /// FTPS control and data connections: no ALPN required (curl offers
    /// `ftp`, others nothing), one session cache for resumption.
    pub ftp: Arc<ServerConfig>,
    /// FTPS data connections: the control configuration (same session
    /// cache and ticketer, so they resume the control session) without
    /// TLS 1.3 session tickets. A client never reads on an upload's data
    /// connection, so tickets sent there sit unread in its socket and its
    /// close becomes a reset, which can destroy the end of the upload
    /// before the server has read it (seen with curl under load).
    pub ftp_data: Arc<ServerConfig>,
}

impl ServerTls {
    /// Loads a PEM certificate chain and key and builds both
    /// configurations; errors name the file and what is wrong with it.
    pub fn load(cert: &Path, key: &Path) -> Result<ServerTls> {
        ServerTls::load_for(cert, key, None)
    }

    /// The same, with HTTPS handing its keys to the kernel's TLS when
    /// `ktls` says what it takes.
    pub fn load_for(
        cert: &Path,
        key: &Path,
        ktls: Option<&crate::ktls::KernelTls>,
    ) -> Result<ServerTls> {
        let chain = load_chain(cert)?;
        let key = load_key(key)?;
        let provider = crate::ktls::provider(ktls);
        let mut https = server_config(provider, chain.clone(), key.clone_key(), &[b"http/1.1"])
            .with_context(|| format!("tls_cert {} with tls_key", cert.display()))?;
        if ktls.is_some() {
            https.enable_secret_extraction = true;
            // No TLS 1.3 tickets after the handshake: a ticket still queued
            // in rustls when the keys go to the kernel would leave the
            // kernel's record numbers ahead of what the client received.
            // Clients resume less often; nothing can go out of step.
            https.send_tls13_tickets = 0;
        }
        let ftp = server_config(crate::ktls::provider(None), chain, key, &[])
            .with_context(|| format!("tls_cert {} with tls_key", cert.display()))?;
        let mut ftp_data = ftp.clone();
        ftp_data.send_tls13_tickets = 0;
        Ok(ServerTls {
            https: Arc::new(https),
            ftp: Arc::new(ftp),
            ftp_data: Arc::new(ftp_data),
        })
    }
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_error(path, "tls_cert", e))?;
    if chain.is_empty() {
        bail!(
            "tls_cert {}: no CERTIFICATE block found (expected PEM)",
            path.display()
        );
    }
    Ok(chain)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error(path, "tls_key", e))
}

fn pem_error(path: &Path, key: &str, e: rustls::pki_types::pem::Error) -> anyhow::Error {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::Io(e) => anyhow::anyhow!("{key} {}: {e}", path.display()),
        E::NoItemsFound => anyhow::anyhow!(
            "{key} {}: no {} found (expected PEM)",
            path.display(),
            if key == "tls_key" {
                "PRIVATE KEY block"
            } else {
                "CERTIFICATE block"
            }
        ),
        e => anyhow::anyhow!("{key} {}: not valid PEM: {e:?}", path.display()),
    }
}

fn server_config(
    provider: rustls::crypto::CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: &[&[u8]],
) -> Result<ServerConfig> {
    let mut c = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| anyhow::anyhow!("unusable certificate or key: {e}"))?;
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    c.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    c.ticketer = rustls::crypto::ring::Ticketer::new()?;
    Ok(c)
}

/// Logs, once at start, how HTTPS bodies leave.
pub fn log_data_path(ktls: Option<&crate::ktls::KernelTls>) {
    match ktls {
        Some(k) => tracing::info!(ciphers = ?k.suites, "HTTPS bodies are sealed by the kernel (kTLS): sendfile under TLS"),
        None => tracing::info!("HTTPS bodies are encrypted in user space (no kTLS: --ktls off, or the kernel has no tls module)"),
    }
}

/// Merges flags over file keys and loads the certificate if one is named.
pub fn merge(args: &TlsArgs, file: &TlsFileKeys) -> Result<TlsSettings> {
    let addr = |flag: Option<SocketAddr>, key: &Option<String>, name: &str| match (flag, key) {
        (Some(a), _) => Ok(Some(a)),
        (None, Some(s)) => s
            .parse()
            .map(Some)
            .with_context(|| format!("config: {name} = {s:?} is not ADDR:PORT")),
        (None, None) => Ok(None),
    };
    let https = addr(args.https, &file.https, "https")?;
    let ftps = addr(args.ftps, &file.ftps, "ftps")?;
    let require_tls = args.require_tls || file.require_tls.unwrap_or(false);
    let cert = args.tls_cert.clone().or(file.tls_cert.clone());
    let key = args.tls_key.clone().or(file.tls_key.clone());
    let files = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => bail!("tls_cert is given without tls_key"),
        (None, Some(_)) => bail!("tls_key is given without tls_cert"),
    };
    if files.is_none() {
        for (on, what) in [
            (https.is_some(), "https"),
            (ftps.is_some(), "ftps"),
            (require_tls, "require_tls"),
        ] {
            if on {
                bail!(
                    "{what} needs a certificate: give tls_cert and tls_key (--tls-cert, --tls-key)"
                );
            }
        }
    }
    let mode = match (args.ktls, &file.ktls) {
        (Some(m), _) => m,
        (None, Some(s)) => s
            .parse()
            .map_err(|e: String| anyhow::anyhow!("config: {e}"))?,
        (None, None) => crate::ktls::KtlsMode::default(),
    };
    let ktls = match (&https, &files) {
        (Some(_), Some(_)) => crate::ktls::decide(mode)?,
        _ => None,
    };
    let server = match &files {
        Some((c, k)) => Some(ServerTls::load_for(c, k, ktls.as_ref())?),
        None => None,
    };
    Ok(TlsSettings {
        https,
        ftps,
        files,
        require_tls,
        server,
        ktls,
    })
}

/// A door's TLS configuration, replaceable while it runs.
#[derive(Debug)]
pub struct Acceptor {
    config: RwLock<Arc<ServerConfig>>,
    /// Handshakes hand their keys to the kernel (HTTPS with kTLS); cleared
    /// for good if a hand-over fails.
    ktls: std::sync::atomic::AtomicBool,
}

impl Acceptor {
    /// An acceptor using `config`.
    pub fn new(config: Arc<ServerConfig>) -> Acceptor {
        Acceptor {
            config: RwLock::new(config),
            ktls: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// An acceptor whose connections go to the kernel's TLS after the
    /// handshake (`config` from [`ServerTls::load_for`] with kTLS).
    pub fn with_ktls(config: Arc<ServerConfig>) -> Acceptor {
        let a = Acceptor::new(config);
        a.ktls.store(true, std::sync::atomic::Ordering::Relaxed);
        a
    }

    /// A handshake on `stream` made into the door's connection: under
    /// kernel TLS when it is on, else the engine's user-space TLS.
    pub async fn accept_conn(
        &self,
        engine: &sluice_engine::Engine,
        stream: TcpStream,
        cue: Option<sluice_engine::sched::cue::CueSpec>,
    ) -> std::io::Result<crate::transport::Conn> {
        use std::sync::atomic::Ordering;
        if self.ktls.load(Ordering::Relaxed) {
            return match crate::ktls::accept(engine, self.config(), stream, cue).await {
                Ok(k) => Ok(k.into()),
                Err(crate::ktls::AcceptError::Handshake(e)) => Err(e),
                Err(crate::ktls::AcceptError::HandOver(e)) => {
                    if self.ktls.swap(false, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "kTLS hand-over failed: HTTPS falls back to user-space TLS for new connections");
                    }
                    Err(e)
                }
            };
        }
        let tls = self.accept(stream).await?;
        Ok(engine.tls_conn_in(tls.into(), cue).into())
    }

    /// Uses `config` for handshakes from now on (certificate reload).
    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The server side of a handshake on `stream`, within
    /// [`HANDSHAKE_TIMEOUT`]. A failure is the client's (garbage, a
    /// protocol or certificate it dislikes, a stop halfway) and only ends
    /// this connection.
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        handshake(self.config(), stream).await
    }
}

/// The server side of a handshake with `config`, within [`HANDSHAKE_TIMEOUT`]
/// (over a TCP stream, or kTLS's record-aligned `CorkStream`).
pub async fn handshake<IO>(config: Arc<ServerConfig>, stream: IO) -> std::io::Result<TlsStream<IO>>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake not completed in time",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path) -> (PathBuf, PathBuf) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, ck.cert.pem()).unwrap();
        std::fs::write(&k, ck.key_pair.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn loads_a_pair_and_sets_alpn() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path());
        let t = ServerTls::load(&c, &k).unwrap();
        assert_eq!(t.https.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(t.ftp.alpn_protocols.is_empty());
    }

    #[test]
    fn bad_files_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path());
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a pem file\n").unwrap();
        let err = format!("{:#}", ServerTls::load(&junk, &k).unwrap_err());
        assert!(
            err.contains("junk.pem") && err.contains("CERTIFICATE"),
            "{err}"
        );
        let err = format!("{:#}", ServerTls::load(&c, &junk).unwrap_err());
        assert!(
            err.contains("junk.pem") && err.contains("PRIVATE KEY"),
            "{err}"
        );
        let missing = dir.path().join("missing.pem");
        let err = format!("{:#}", ServerTls::load(&missing, &k).unwrap_err());
        assert!(err.contains("missing.pem"), "{err}");
        // A key that is not the certificate's.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let (_, k2) = write_pair(&other);
        let err = format!("{:#}", ServerTls::load(&c, &k2).unwrap_err());
        assert!(err.contains("unusable"), "{err}");
    }

    #[test]
    fn doors_need_a_certificate() {
        let args = TlsArgs {
            https: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        };
        let err = merge(&args, &TlsFileKeys::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("https") && err.contains("tls_cert"), "{err}");
        let file = TlsFileKeys {
            tls_cert: Some("x".into()),
            ..Default::default()
        };
        assert!(merge(&TlsArgs::default(), &file).is_err());
        let none = merge(&TlsArgs::default(), &TlsFileKeys::default()).unwrap();
        assert!(none.server.is_none() && !none.require_tls);
    }
}
