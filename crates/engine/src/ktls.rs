//! A TLS connection whose records the kernel seals and opens (kTLS): after
//! the handshake (in user space, rustls) the traffic keys are handed to the
//! socket, and from then on the connection is a clear [`DataConn`] to the
//! engine: `sendfile`, `splice` and `writev` put plaintext in and TLS
//! records come out, so the data path of clear text is kept.
//!
//! What differs from clear text is at the edges, and lives here:
//! - bytes rustls had already decrypted when the keys were handed over
//!   ("drained") are read first;
//! - a record that is not application data (the peer's close_notify, or a
//!   TLS 1.3 KeyUpdate, which the kernel does not handle) makes `read`
//!   fail with EIO; both end the connection: it reads as the end of the
//!   stream;
//! - closing sends a close_notify alert as a record of its own type.
//!
//! The handshake side (probe, key hand-over) is in the server's `ktls.rs`.
//! Untested on this project's machines: their kernel has no `tls` upper
//! layer protocol, so the server's probe keeps this path off there.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::{Cancel, Counters, DataConn, EngineError};

/// Alert level "warning", description "close_notify".
const CLOSE_NOTIFY: [u8; 2] = [1, 0];
/// `EIO` (asm-generic/errno-base.h).
const EIO: i32 = 5;

/// A connection under kernel TLS: a [`DataConn`] plus what the handshake
/// left unread.
#[derive(Debug)]
pub struct KtlsConn {
    conn: DataConn,
    drained: Vec<u8>,
    at: usize,
    closed: bool,
}

impl KtlsConn {
    /// Wraps `conn`, whose socket has the kernel's TLS keys for both
    /// directions; `drained` is plaintext rustls had decrypted before.
    pub fn new(conn: DataConn, drained: Vec<u8>) -> KtlsConn {
        KtlsConn {
            conn,
            drained,
            at: 0,
            closed: false,
        }
    }

    /// Sends `prefix` and then `len` bytes of `file` from `offset` by the
    /// clear-text data path (the kernel encrypts).
    pub async fn send_range(
        &mut self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        self.conn
            .send_range(file, offset, len, prefix, counters, cancel)
            .await
    }

    /// Sends `bytes` in full.
    pub async fn send_bytes(
        &mut self,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        self.conn.send_bytes(bytes, counters, cancel).await
    }

    /// Reads into `buf`; 0 at the end of the stream (FIN, or a record that
    /// is not application data).
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(n) = self.take_drained(buf.len(), |b| buf[..b.len()].copy_from_slice(b)) {
            return Ok(n);
        }
        not_data_is_end(self.conn.stream_mut().read(buf).await)
    }

    /// Reads into `buf`'s spare capacity; 0 at the end of the stream.
    pub async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let room = buf.capacity() - buf.len();
        if let Some(n) = self.take_drained(room.max(1), |b| buf.extend_from_slice(b)) {
            return Ok(n);
        }
        not_data_is_end(self.conn.stream_mut().read_buf(buf).await)
    }

    /// Hands at most `max` drained bytes to `put`; `None` once all are read.
    fn take_drained(&mut self, max: usize, put: impl FnOnce(&[u8])) -> Option<usize> {
        if self.at >= self.drained.len() {
            return None;
        }
        let end = self.drained.len().min(self.at + max);
        put(&self.drained[self.at..end]);
        let n = end - self.at;
        self.at = end;
        if self.at == self.drained.len() {
            self.drained = Vec::new();
            self.at = 0;
        }
        Some(n)
    }

    /// Sends close_notify (once), then half-closes the socket.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        if !self.closed {
            self.closed = true;
            // The socket is writable in practice (an alert is 2 bytes of
            // payload); a full buffer or a gone peer only loses the alert,
            // which HTTP/1.1 with lengths and FTP with 226 do not need.
            if let Err(e) =
                sluice_platform::ktls::send_tls_alert(self.conn.stream().as_fd(), &CLOSE_NOTIFY)
            {
                tracing::debug!(error = %e, "kTLS close_notify not sent");
            }
        }
        self.conn.shutdown().await
    }

    /// The TCP socket beneath.
    pub fn tcp(&self) -> &TcpStream {
        self.conn.stream()
    }
}

/// EIO from a kTLS socket means a record that is not application data was
/// next (close_notify, KeyUpdate): the stream ends there for us.
fn not_data_is_end(r: io::Result<usize>) -> io::Result<usize> {
    match r {
        Err(e) if e.raw_os_error() == Some(EIO) => Ok(0),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes rustls decrypted before the hand-over come first, in order,
    /// in pieces no larger than asked.
    #[test]
    fn drained_bytes_come_first_in_pieces() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = l.local_addr().unwrap();
            let (c, s) = tokio::join!(TcpStream::connect(a), l.accept());
            let (mut c, (s, _)) = (c.unwrap(), s.unwrap());
            let engine = crate::Engine::new(crate::EngineConfig::default());
            let mut k = KtlsConn::new(engine.data_conn(s), b"GET / HTTP/1.1\r\n".to_vec());
            let mut b = [0u8; 4];
            assert_eq!(k.read(&mut b).await.unwrap(), 4);
            assert_eq!(&b, b"GET ");
            let mut v = Vec::with_capacity(64);
            assert_eq!(k.read_buf(&mut v).await.unwrap(), 12);
            assert_eq!(v, b"/ HTTP/1.1\r\n");
            // Then the socket (clear here: no kernel TLS on a test socket).
            tokio::io::AsyncWriteExt::write_all(&mut c, b"x")
                .await
                .unwrap();
            assert_eq!(k.read(&mut b).await.unwrap(), 1);
        });
    }

    #[test]
    fn eio_reads_as_the_end_of_the_stream() {
        assert_eq!(
            not_data_is_end(Err(io::Error::from_raw_os_error(EIO))).unwrap(),
            0
        );
        assert!(not_data_is_end(Err(io::Error::from_raw_os_error(104))).is_err());
        assert_eq!(not_data_is_end(Ok(7)).unwrap(), 7);
    }
}
