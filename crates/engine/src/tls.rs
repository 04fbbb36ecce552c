//! A TLS data connection: [`TlsConn`], the [`crate::DataConn`] of a
//! connection whose bytes are encrypted in user space (HTTPS, FTPS data
//! connections under `PROT P`).
//!
//! Without kernel TLS there is no `sendfile` under TLS: each chunk is read
//! into a pooled buffer (inline with `RWF_NOWAIT` when its pages are
//! cached, else on a disk thread, as the copy path does), encrypted by
//! rustls and written. To keep the system calls few per byte the chunk is
//! large ([`TLS_CHUNK`]), a prefix (HTTP head, MODE E header) is copied
//! in front of it so both go out in the same records, and rustls may hold
//! a whole chunk of records ([`TLS_BUFFER_LIMIT`]), which tokio-rustls
//! then writes with one `writev` of up to 64 records (1 MiB).
//!
//! Kept beside `DataConn` rather than inside it because `DataConn` hands
//! out its `TcpStream` (for reads, MODE E caching, `into_stream`), which a
//! TLS connection cannot do; the front doors hold either behind their own
//! small enum until the engine's connection object owns the transport.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use sluice_platform::fileio;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

use crate::disk::IoClass;
use crate::send::{check, read_full_at, Turn};
use crate::{Cancel, Counters, Engine, EngineError};

/// File bytes read and encrypted per step: 16 full TLS records.
pub const TLS_CHUNK: usize = 256 << 10;

/// Encrypted bytes rustls may queue before a write must wait for the
/// socket: a chunk and its prefix, with room for record overheads.
pub const TLS_BUFFER_LIMIT: usize = 2 * TLS_CHUNK;

/// One TLS connection (either side of the handshake) and the sending state
/// that lives as long as it. Made by [`Engine::tls_conn`].
#[derive(Debug)]
pub struct TlsConn {
    // First: leaves Cue's scheduler before the socket closes (conn.rs).
    turn: Turn,
    engine: Engine,
    stream: TlsStream<TcpStream>,
}

impl Engine {
    /// Takes a connection whose TLS handshake is done: applies the engine's
    /// socket settings to its TCP socket and lets rustls queue a whole
    /// chunk of records.
    pub fn tls_conn(&self, stream: TlsStream<TcpStream>) -> TlsConn {
        self.tls_conn_in(stream, None)
    }

    /// [`Engine::tls_conn`] for a connection of a known Cue class and user
    /// (see [`Engine::data_conn_in`]).
    pub fn tls_conn_in(
        &self,
        mut stream: TlsStream<TcpStream>,
        spec: Option<crate::sched::cue::CueSpec>,
    ) -> TlsConn {
        self.prepare_socket(stream.get_ref().0);
        match &mut stream {
            TlsStream::Server(s) => s.get_mut().1.set_buffer_limit(Some(TLS_BUFFER_LIMIT)),
            TlsStream::Client(c) => c.get_mut().1.set_buffer_limit(Some(TLS_BUFFER_LIMIT)),
        }
        let turn = Turn::with_cue(
            self.config().send_quantum,
            self.cue_join(stream.get_ref().0, spec),
        );
        TlsConn {
            turn,
            engine: self.clone(),
            stream,
        }
    }
}

impl TlsConn {
    /// Sends `prefix` (may be empty) and then `len` bytes of `file` from
    /// `offset`; returns the file bytes sent (`len` on success).
    pub async fn send_range(
        &mut self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let engine = self.engine.clone();
        let t = engine.tally(counters);
        let end = offset + len;
        let mut pos = offset;
        let mut prefix = prefix;
        // A prefix longer than a chunk (never, for heads and headers) goes
        // out on its own.
        if prefix.len() > TLS_CHUNK {
            self.send_bytes(prefix, counters, cancel).await?;
            prefix = &[];
        }
        if len == 0 {
            return self.send_bytes(prefix, counters, cancel).await.map(|()| 0);
        }
        let mut buf = engine.buffers().take();
        while pos < end {
            check(cancel)?;
            let p = prefix.len();
            let room = (buf.len() - p).min(TLS_CHUNK);
            let want = (room as u64).min(end - pos) as usize;
            buf[..p].copy_from_slice(prefix);
            let cached = if engine.config().inline_cached_reads {
                fileio::pread_nowait(file.as_fd(), &mut buf[p..p + want], pos).ok()
            } else {
                None
            };
            let n = match cached {
                Some(n) => n,
                // Not cached (or not supported): read on a disk thread.
                None => {
                    let f = Arc::clone(file);
                    let (back, r) = engine
                        .inner
                        .disk
                        .submit(IoClass::Transfer, cancel, move || {
                            let r = read_full_at(&f, &mut buf[p..p + want], pos);
                            (buf, r)
                        })
                        .await?
                        .await?;
                    buf = back;
                    t.disk_reads(1);
                    r.map_err(EngineError::Disk)?
                }
            };
            if n == 0 {
                return Err(EngineError::ShortFile { at: pos });
            }
            t.read_disk(n as u64);
            self.write(&buf[..p + n], counters, cancel).await?;
            self.turn.pushed((p + n) as u64, t).await;
            prefix = &[];
            pos += n as u64;
        }
        Ok(pos - offset)
    }

    /// Sends `bytes` in full and flushes them to the socket.
    pub async fn send_bytes(
        &mut self,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.write(bytes, counters, cancel).await
    }

    /// Encrypts and writes `bytes`, then flushes; fails after the engine's
    /// idle timeout without progress or when `cancel` fires.
    async fn write(
        &mut self,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        let engine = self.engine.clone();
        let t = engine.tally(counters);
        let idle = engine.config().idle_timeout;
        let mut left = bytes;
        while !left.is_empty() {
            let r = tokio::select! {
                r = tokio::time::timeout(idle, self.stream.write(left)) => r,
                _ = cancel.cancelled() => return Err(EngineError::Cancelled),
            };
            match r {
                Err(_) => return Err(EngineError::Idle),
                Ok(Err(e)) => return Err(EngineError::Connection(e)),
                Ok(Ok(0)) => return Err(EngineError::Connection(io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    t.sent(n as u64);
                    t.send_calls(1);
                    left = &left[n..];
                }
            }
        }
        let r = tokio::select! {
            r = tokio::time::timeout(idle, self.stream.flush()) => r,
            _ = cancel.cancelled() => return Err(EngineError::Cancelled),
        };
        match r {
            Err(_) => Err(EngineError::Idle),
            Ok(r) => r.map_err(EngineError::Connection),
        }
    }

    /// Sends TLS close_notify and half-closes the TCP connection.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.stream.shutdown().await
    }

    /// The TLS stream, for reading (HTTP requests, uploads).
    pub fn stream_mut(&mut self) -> &mut TlsStream<TcpStream> {
        &mut self.stream
    }

    /// The TCP socket beneath (addresses, `TCP_INFO`; never read or
    /// written directly).
    pub fn tcp(&self) -> &TcpStream {
        self.stream.get_ref().0
    }

    /// The TLS stream back.
    pub fn into_stream(self) -> TlsStream<TcpStream> {
        self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::tests::{pair, pattern, temp_file};
    use crate::{DataPath, EngineConfig};
    use tokio::io::AsyncReadExt;
    use tokio_rustls::rustls;

    fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = ck.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    #[tokio::test]
    async fn ranges_with_prefixes_arrive_whole_through_tls() {
        let e = Engine::new(EngineConfig {
            data_path: DataPath::Copy,
            ..EngineConfig::default()
        });
        // Over a chunk and not a multiple of a record.
        let data = pattern(3 * TLS_CHUNK + 12_345);
        let file = temp_file(&data);
        let (tx, rx) = pair().await;
        let (server, client) = configs();
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(client);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let (s, c) = tokio::join!(acceptor.accept(tx), connector.connect(name, rx));
        let mut c = c.unwrap();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut conn = e.tls_conn(TlsStream::Server(s.unwrap()));
        let counters = Counters::new();
        let cancel = Cancel::new();
        let n = conn
            .send_range(&file, 0, data.len() as u64, b"HEAD", &counters, &cancel)
            .await
            .unwrap();
        assert_eq!(n, data.len() as u64);
        conn.send_range(&file, 7, 0, b"mid", &counters, &cancel)
            .await
            .unwrap();
        conn.send_range(&file, 10, 5, b"", &counters, &cancel)
            .await
            .unwrap();
        conn.send_bytes(b"tail", &counters, &cancel).await.unwrap();
        conn.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        let mut want = b"HEAD".to_vec();
        want.extend_from_slice(&data);
        want.extend_from_slice(b"mid");
        want.extend_from_slice(&data[10..15]);
        want.extend_from_slice(b"tail");
        assert_eq!(got.len(), want.len());
        assert!(got == want);
        assert_eq!(counters.snapshot().bytes_read_disk, data.len() as u64 + 5);
    }

    #[tokio::test]
    async fn a_short_file_is_an_error_not_a_hang() {
        let e = Engine::new(EngineConfig::default());
        let file = temp_file(&pattern(100));
        let (tx, rx) = pair().await;
        let (server, client) = configs();
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(client);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let (s, c) = tokio::join!(acceptor.accept(tx), connector.connect(name, rx));
        let _c = c.unwrap();
        let mut conn = e.tls_conn(TlsStream::Server(s.unwrap()));
        let r = conn
            .send_range(&file, 50, 100, b"", &Counters::new(), &Cancel::new())
            .await;
        assert!(
            matches!(r, Err(EngineError::ShortFile { at: 100 })),
            "{r:?}"
        );
    }
}
