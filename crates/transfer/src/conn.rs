//! A connection of either door, in clear or under TLS: [`Conn`] holds the
//! engine's [`DataConn`] or [`TlsConn`] and offers what the doors and
//! [`Transfer`](crate::Transfer) use of them (send a file range behind a
//! prefix, send bytes, read, close). (It lived in the server as
//! `transport.rs`; the server re-exports it under that name.)
//!
//! An enum here rather than a variant of the engine's `DataConn`, because
//! `DataConn` hands out its `TcpStream` for reads and MODE E reuse; when
//! the engine's connection object owns its transport this goes there.

use std::fs::File;
use std::io;
use std::sync::Arc;

use sluice_engine::{Cancel, Counters, DataConn, EngineError, KtlsConn, TlsConn};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// One connection, clear or TLS.
#[derive(Debug)]
pub enum Conn {
    /// Clear text: the engine's sendfile/copy/splice paths.
    Plain(DataConn),
    /// TLS: read, encrypt, write (engine `tls.rs`).
    Tls(Box<TlsConn>),
    /// TLS sealed by the kernel (engine `ktls.rs`): the clear data paths.
    Ktls(Box<KtlsConn>),
}

impl Conn {
    /// Sends `prefix` and then `len` bytes of `file` from `offset`.
    pub async fn send_range(
        &mut self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        prefix: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        match self {
            Conn::Plain(c) => {
                c.send_range(file, offset, len, prefix, counters, cancel)
                    .await
            }
            Conn::Tls(c) => {
                c.send_range(file, offset, len, prefix, counters, cancel)
                    .await
            }
            Conn::Ktls(c) => {
                c.send_range(file, offset, len, prefix, counters, cancel)
                    .await
            }
        }
    }

    /// Sends `bytes` in full.
    pub async fn send_bytes(
        &mut self,
        bytes: &[u8],
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<(), EngineError> {
        match self {
            Conn::Plain(c) => c.send_bytes(bytes, counters, cancel).await,
            Conn::Tls(c) => c.send_bytes(bytes, counters, cancel).await,
            Conn::Ktls(c) => c.send_bytes(bytes, counters, cancel).await,
        }
    }

    /// Reads into `buf`'s spare capacity; 0 at the end of the stream.
    pub async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Conn::Plain(c) => c.stream_mut().read_buf(buf).await,
            Conn::Tls(c) => c.stream_mut().read_buf(buf).await,
            Conn::Ktls(c) => c.read_buf(buf).await,
        }
    }

    /// Reads into `buf`; 0 at the end of the stream.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(c) => c.stream_mut().read(buf).await,
            Conn::Tls(c) => c.stream_mut().read(buf).await,
            Conn::Ktls(c) => c.read(buf).await,
        }
    }

    /// Ends the sending side (TLS: close_notify first).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(c) => c.shutdown().await,
            Conn::Tls(c) => c.shutdown().await,
            Conn::Ktls(c) => c.shutdown().await,
        }
    }

    /// The TCP socket beneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(c) => c.stream(),
            Conn::Tls(c) => c.tcp(),
            Conn::Ktls(c) => c.tcp(),
        }
    }

    /// Whether the bytes are encrypted.
    pub fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_) | Conn::Ktls(_))
    }
}

impl From<DataConn> for Conn {
    fn from(c: DataConn) -> Conn {
        Conn::Plain(c)
    }
}

impl From<KtlsConn> for Conn {
    fn from(c: KtlsConn) -> Conn {
        Conn::Ktls(Box::new(c))
    }
}

impl From<TlsConn> for Conn {
    fn from(c: TlsConn) -> Conn {
        Conn::Tls(Box::new(c))
    }
}
