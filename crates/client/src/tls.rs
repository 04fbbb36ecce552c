//! TLS for the client: `https://`, `ftpes://` (explicit AUTH TLS) and
//! `ftps://` (implicit). Certificates are checked against the system's
//! roots, or the CA file of `--ca`; `--insecure` skips the check.
//!
//! One [`ClientConfig`] per process (the options are the command's), so
//! every connection to a server shares rustls' session cache: an FTPS
//! data connection resumes the control connection's session, as vsftpd
//! (`require_ssl_reuse`) and other servers demand.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, StreamOwned};

use crate::error::{ClientError, Result};

/// TLS options of every subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsOpts {
    /// Trust the CA certificates in FILE (PEM) instead of the system's,
    /// for https://, ftps:// and ftpes:// servers.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Do not check the server's certificate (encryption without
    /// authentication: anyone on the path can pretend to be the server).
    #[arg(long)]
    pub insecure: bool,
}

static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();

/// Sets the process's TLS configuration from the command's options (a bad
/// CA file is a usage error now, not a surprise at the first connection).
pub fn configure(opts: &TlsOpts) -> Result<()> {
    if opts.ca.is_none() && !opts.insecure {
        return Ok(());
    }
    let c = build(opts)?;
    let _ = CONFIG.set(c);
    Ok(())
}

/// The process's TLS configuration (system roots unless [`configure`]d).
pub fn config() -> Result<Arc<ClientConfig>> {
    if let Some(c) = CONFIG.get() {
        return Ok(Arc::clone(c));
    }
    let c = build(&TlsOpts::default())?;
    Ok(Arc::clone(CONFIG.get_or_init(|| c)))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(opts: &TlsOpts) -> Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Usage(format!("TLS: {e}")))?;
    let config = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCheck(provider())))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        match &opts.ca {
            Some(path) => {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| ClientError::Usage(format!("--ca {}: {e}", path.display())))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(ClientError::Usage(format!(
                        "--ca {}: no usable CERTIFICATE in it (expected PEM)",
                        path.display()
                    )));
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// `--insecure`: any certificate is accepted; signatures are still
/// checked, so the connection is at least a TLS connection.
#[derive(Debug)]
struct NoCheck(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A data or control socket, in clear or under TLS.
#[derive(Debug)]
pub enum DataSock {
    /// Clear text.
    Plain(TcpStream),
    /// TLS (the handshake runs on the first read or write).
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl DataSock {
    /// Starts TLS on `sock` as a client of `host` (no I/O yet: the
    /// handshake runs on the first read or write, so it also works on a
    /// non-blocking socket driven by `poll`). `alpn`: the protocol to
    /// ask for (`http/1.1`), if any.
    pub fn tls(sock: TcpStream, host: &str, alpn: Option<&[u8]>) -> Result<DataSock> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ClientError::Usage(format!("{host:?} is not a valid TLS server name")))?;
        let config = config()?;
        let conn = match alpn {
            Some(p) => ClientConnection::new_with_alpn(config, name, vec![p.to_vec()]),
            None => ClientConnection::new(config, name),
        }
        .map_err(|e| ClientError::Protocol(format!("TLS: {e}")))?;
        Ok(DataSock::Tls(Box::new(StreamOwned::new(conn, sock))))
    }

    /// Runs the handshake to its end (blocking socket), so certificate
    /// errors come out here with a clear message.
    pub fn handshake(&mut self, host: &str) -> Result<()> {
        if let DataSock::Tls(s) = self {
            while s.conn.is_handshaking() {
                s.conn
                    .complete_io(&mut s.sock)
                    .map_err(|e| handshake_error(host, e))?;
            }
        }
        Ok(())
    }

    /// The TCP socket beneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            DataSock::Plain(s) => s,
            DataSock::Tls(s) => &s.sock,
        }
    }

    /// The TLS layer has work that `poll(POLLIN)` on the socket would not
    /// announce: decrypted bytes waiting, or TLS bytes to send (the
    /// ClientHello of a handshake not started yet). A read drives both.
    pub fn has_buffered(&self) -> bool {
        match self {
            DataSock::Plain(_) => false,
            DataSock::Tls(s) => {
                s.conn.wants_write() || (!s.conn.is_handshaking() && !s.conn.wants_read())
            }
        }
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, DataSock::Tls(_))
    }

    /// Ends a stream we sent on: TLS close_notify, FIN, and (TLS) reading
    /// until the server's close_notify or FIN, within the socket's read
    /// timeout. Closing with unread bytes (TLS 1.3 session tickets the
    /// server sent after the handshake) would make the kernel send RST,
    /// which can destroy the upload's last bytes in the server's buffer.
    pub fn finish(&mut self) {
        if let DataSock::Tls(s) = self {
            s.conn.send_close_notify();
            let _ = s.conn.complete_io(&mut s.sock);
        }
        let _ = self.tcp().shutdown(std::net::Shutdown::Write);
        if self.is_tls() {
            let mut sink = [0u8; 4096];
            while let Ok(n) = self.read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
    }
}

/// A handshake error with what to do about a certificate problem. The
/// advice depends on the problem: a private CA is fixed by `--ca`, an
/// expired certificate or one for another name only by the server's
/// operator (or `--insecure`, knowingly).
pub fn handshake_error(host: &str, e: io::Error) -> ClientError {
    let cert = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .and_then(|r| match r {
            rustls::Error::InvalidCertificate(c) => Some(c),
            _ => None,
        });
    let what = match cert {
        Some(c) => format!(
            "TLS handshake with {host}: the server's certificate was refused: {} ({})",
            certificate_problem(c),
            certificate_advice(c)
        ),
        None => format!("TLS handshake with {host}"),
    };
    ClientError::net(what, e)
}

/// What is wrong with a refused certificate, in the user's words.
fn certificate_problem(c: &rustls::CertificateError) -> &'static str {
    use rustls::CertificateError as C;
    match c {
        C::Expired | C::ExpiredContext { .. } => "it has expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet",
        C::NotValidForName | C::NotValidForNameContext { .. } => "it does not name this host",
        C::UnknownIssuer => "it is not signed by a CA this client trusts",
        C::Revoked => "it has been revoked",
        C::BadSignature => "its signature does not check out",
        _ => "it failed verification",
    }
}

/// What the user can do about it.
fn certificate_advice(c: &rustls::CertificateError) -> &'static str {
    use rustls::CertificateError as C;
    match c {
        C::UnknownIssuer => "--ca FILE trusts a private CA; --insecure skips the check",
        C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
            "the server's operator must renew it, or check this machine's clock; \
             --insecure skips the check"
        }
        _ => "--ca FILE trusts a private CA; --insecure skips the check",
    }
}

impl From<TcpStream> for DataSock {
    fn from(s: TcpStream) -> DataSock {
        DataSock::Plain(s)
    }
}

impl Read for DataSock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            DataSock::Plain(s) => s.read(buf),
            // A peer that closes without close_notify ends the stream like
            // a FIN in clear (the byte count or the server's reply says
            // whether everything came).
            DataSock::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                r => r,
            },
        }
    }
}

impl Write for DataSock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            DataSock::Plain(s) => s.write(buf),
            DataSock::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            DataSock::Plain(s) => s.flush(),
            DataSock::Tls(s) => s.flush(),
        }
    }
}

impl AsFd for DataSock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}
