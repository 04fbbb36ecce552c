//! Receivers: bytes from a socket into a file at given offsets, with the disk
//! writes on the engine's disk threads and a bounded number in flight.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::buffers::PoolBuf;
use crate::counters::{Counters, Tally};
use crate::disk::{IoClass, Ticket};
use crate::{Cancel, Engine, EngineError};

/// Outcome of [`FileWriter::read_exact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStatus {
    /// The buffer was filled.
    Filled,
    /// The peer closed the connection before the first byte (clean end).
    Eof,
}

/// Writes what arrives on data connections into one file. What arrives is
/// gathered into one pooled buffer as segments (adjacent data extends the
/// last one; MODE E blocks from other offsets add one, up to
/// [`MAX_SEGMENTS`]) and the full buffer goes to a disk thread as one job of
/// `pwrite`s; at most `upload_buffers_per_stream` jobs are in flight.
#[derive(Debug)]
pub struct FileWriter {
    engine: Engine,
    file: Arc<File>,
    counters: Arc<Counters>,
    cancel: Cancel,
    cur: Option<PoolBuf>,
    cur_len: usize,
    /// Segments of `cur`: (file offset, start in buffer, length).
    segs: Vec<(u64, usize, usize)>,
    inflight: VecDeque<Ticket<io::Result<Written>>>,
    written: u64,
    hook: Option<WrittenHook>,
}

/// The `(offset, len)` ranges one disk job wrote.
type Written = Vec<(u64, usize)>;

/// Most separate file ranges gathered in one buffer before it is written
/// (tiny MODE E blocks must not grow the segment list without bound).
pub const MAX_SEGMENTS: usize = 64;

/// Called with `(offset, len)` after each write reached the file.
pub type WrittenFn = dyn Fn(u64, u64) + Send + Sync;

struct WrittenHook(Arc<WrittenFn>);

impl std::fmt::Debug for WrittenHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WrittenHook")
    }
}

impl FileWriter {
    /// A writer into `file`, counting into `counters` (and the engine's totals).
    pub fn new(engine: &Engine, file: Arc<File>, counters: Arc<Counters>, cancel: Cancel) -> Self {
        FileWriter {
            engine: engine.clone(),
            file,
            counters,
            cancel,
            cur: None,
            cur_len: 0,
            segs: Vec::new(),
            inflight: VecDeque::new(),
            written: 0,
            hook: None,
        }
    }

    /// Calls `hook(offset, len)` for every range once its write completed,
    /// in completion order (for restart markers and upload progress).
    pub fn on_written(mut self, hook: Arc<WrittenFn>) -> Self {
        self.hook = Some(WrittenHook(hook));
        self
    }

    /// Reads exactly `buf.len()` bytes (a frame header) from `conn`.
    pub async fn read_exact(
        &mut self,
        conn: &TcpStream,
        buf: &mut [u8],
    ) -> Result<ReadStatus, EngineError> {
        self.read_exact_from(Source::Tcp(conn), buf).await
    }

    /// [`FileWriter::read_exact`] of decrypted bytes from a TLS connection.
    pub async fn read_exact_tls(
        &mut self,
        conn: &mut crate::TlsConn,
        buf: &mut [u8],
    ) -> Result<ReadStatus, EngineError> {
        self.read_exact_from(Source::Tls(conn.stream_mut()), buf)
            .await
    }

    async fn read_exact_from(
        &mut self,
        mut conn: Source<'_>,
        buf: &mut [u8],
    ) -> Result<ReadStatus, EngineError> {
        let mut got = 0;
        while got < buf.len() {
            let idle = self.engine.config().idle_timeout;
            let t = self.engine.tally(&self.counters);
            let n = match &mut conn {
                Source::Tcp(c) => read_some(c, &mut buf[got..], t, &self.cancel, idle).await?,
                Source::Tls(c) => read_tls(c, &mut buf[got..], t, &self.cancel, idle).await?,
            };
            if n == 0 {
                if got == 0 {
                    return Ok(ReadStatus::Eof);
                }
                return Err(EngineError::Connection(io::ErrorKind::UnexpectedEof.into()));
            }
            got += n;
        }
        Ok(ReadStatus::Filled)
    }

    /// Copies exactly `len` bytes from `conn` into the file at `offset`.
    pub async fn copy_exact(
        &mut self,
        conn: &TcpStream,
        offset: u64,
        len: u64,
    ) -> Result<(), EngineError> {
        let got = self.copy(Source::Tcp(conn), offset, Some(len)).await?;
        exactly(got, len)
    }

    /// [`FileWriter::copy_exact`] of decrypted bytes from a TLS connection
    /// (a MODE E block's payload under PROT P).
    pub async fn copy_exact_tls(
        &mut self,
        conn: &mut crate::TlsConn,
        offset: u64,
        len: u64,
    ) -> Result<(), EngineError> {
        let got = self
            .copy(Source::Tls(conn.stream_mut()), offset, Some(len))
            .await?;
        exactly(got, len)
    }

    /// Copies from `conn` into the file from `offset` until the peer closes;
    /// returns the bytes received.
    pub async fn copy_to_eof(&mut self, conn: &TcpStream, offset: u64) -> Result<u64, EngineError> {
        self.copy(Source::Tcp(conn), offset, None).await
    }

    /// [`FileWriter::copy_to_eof`] from a TLS connection: the decrypted
    /// bytes until the peer's close_notify (or its FIN) land at `offset`
    /// on.
    pub async fn copy_tls_to_eof(
        &mut self,
        conn: &mut crate::TlsConn,
        offset: u64,
    ) -> Result<u64, EngineError> {
        self.copy(Source::Tls(conn.stream_mut()), offset, None)
            .await
    }

    async fn copy(
        &mut self,
        mut conn: Source<'_>,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<u64, EngineError> {
        let mut pos = offset;
        let mut total = 0u64;
        loop {
            if limit.is_some_and(|l| total >= l) {
                return Ok(total);
            }
            let adjacent = matches!(self.segs.last(), Some(&(o, st, l)) if o + l as u64 == pos && st + l == self.cur_len);
            if self.cur.is_some()
                && (self.cur_full() || (!adjacent && self.segs.len() >= MAX_SEGMENTS))
            {
                self.flush().await?;
            }
            if self.cur.is_none() {
                self.cur = Some(self.engine.buffers().take());
                self.cur_len = 0;
                self.segs.clear();
            }
            if !matches!(self.segs.last(), Some(&(o, st, l)) if o + l as u64 == pos && st + l == self.cur_len)
            {
                self.segs.push((pos, self.cur_len, 0));
            }
            let room = self.cur.as_ref().map_or(0, |b| b.len()) - self.cur_len;
            let want = match limit {
                Some(l) => (l - total).min(room as u64) as usize,
                None => room,
            };
            let t = self.engine.tally(&self.counters);
            let start = self.cur_len;
            let Some(buf) = self.cur.as_mut() else {
                continue;
            };
            let idle = self.engine.config().idle_timeout;
            let n = match &mut conn {
                Source::Tcp(c) => {
                    read_some(c, &mut buf[start..start + want], t, &self.cancel, idle).await?
                }
                Source::Tls(c) => {
                    read_tls(c, &mut buf[start..start + want], t, &self.cancel, idle).await?
                }
            };
            if n == 0 {
                return Ok(total);
            }
            self.cur_len += n;
            if let Some(seg) = self.segs.last_mut() {
                seg.2 += n;
            }
            pos += n as u64;
            total += n as u64;
        }
    }

    fn cur_full(&self) -> bool {
        self.cur.as_ref().is_some_and(|b| self.cur_len >= b.len())
    }

    /// Hands the current buffer to a disk thread, first waiting for the
    /// oldest write if too many are in flight.
    async fn flush(&mut self) -> Result<(), EngineError> {
        let Some(buf) = self.cur.take() else {
            return Ok(());
        };
        let segs: Vec<(u64, usize, usize)> = self.segs.drain(..).filter(|s| s.2 > 0).collect();
        self.cur_len = 0;
        if segs.is_empty() {
            return Ok(());
        }
        while self.inflight.len() >= self.engine.config().upload_buffers_per_stream.max(1) {
            self.reap_one().await?;
        }
        let f = Arc::clone(&self.file);
        let ticket = self
            .engine
            .inner
            .disk
            .submit(IoClass::Transfer, &self.cancel, move || {
                let buf: PoolBuf = buf;
                let mut done = Vec::with_capacity(segs.len());
                for (off, start, len) in segs {
                    f.write_all_at(&buf[start..start + len], off)?;
                    done.push((off, len));
                }
                Ok(done)
            })
            .await?;
        self.inflight.push_back(ticket);
        Ok(())
    }

    async fn reap_one(&mut self) -> Result<(), EngineError> {
        if let Some(t) = self.inflight.pop_front() {
            let done = t.await?.map_err(EngineError::Disk)?;
            let tally = self.engine.tally(&self.counters);
            tally.disk_writes(1);
            for (off, n) in done {
                tally.written_disk(n as u64);
                self.written += n as u64;
                if let Some(h) = &self.hook {
                    (h.0)(off, n as u64);
                }
            }
        }
        Ok(())
    }

    /// Writes out buffered data and waits for every write; returns the bytes
    /// written to the file by this writer so far.
    pub async fn finish(&mut self) -> Result<u64, EngineError> {
        self.flush().await?;
        while !self.inflight.is_empty() {
            self.reap_one().await?;
        }
        Ok(self.written)
    }
}

/// A copy that ended before `want` bytes: the peer closed early.
fn exactly(got: u64, want: u64) -> Result<(), EngineError> {
    if got < want {
        return Err(EngineError::Connection(io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(())
}

/// Where a [`FileWriter`] copies from.
enum Source<'a> {
    Tcp(&'a TcpStream),
    Tls(&'a mut tokio_rustls::TlsStream<TcpStream>),
}

/// One read of decrypted bytes, under the idle timeout and `cancel`. A
/// peer that closes without close_notify ends the stream like a FIN does
/// for clear MODE S (FTP clients do that, and the file is judged by the
/// control connection as in clear).
async fn read_tls(
    conn: &mut tokio_rustls::TlsStream<TcpStream>,
    buf: &mut [u8],
    t: Tally<'_>,
    cancel: &Cancel,
    idle: Duration,
) -> Result<usize, EngineError> {
    use tokio::io::AsyncReadExt;
    let r = tokio::select! {
        r = tokio::time::timeout(idle, conn.read(buf)) => r,
        _ = cancel.cancelled() => return Err(EngineError::Cancelled),
    };
    match r {
        Err(_) => Err(EngineError::Idle),
        Ok(Ok(n)) => {
            if n > 0 {
                t.received(n as u64);
                t.recv_calls(1);
            }
            Ok(n)
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
        Ok(Err(e)) => Err(EngineError::Connection(e)),
    }
}

/// One `recv` into `buf`, waiting for readability as needed (at most `idle`
/// without data); 0 = peer closed.
async fn read_some(
    conn: &TcpStream,
    buf: &mut [u8],
    t: Tally<'_>,
    cancel: &Cancel,
    idle: Duration,
) -> Result<usize, EngineError> {
    loop {
        if cancel.is_cancelled() {
            return Err(EngineError::Cancelled);
        }
        match conn.try_read(buf) {
            Ok(n) => {
                if n > 0 {
                    t.received(n as u64);
                    t.recv_calls(1);
                }
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                t.eagains(1);
                t.wakeups(1);
                tokio::select! {
                    r = tokio::time::timeout(idle, conn.readable()) => match r {
                        Ok(r) => r.map_err(EngineError::Connection)?,
                        Err(_) => return Err(EngineError::Idle),
                    },
                    _ = cancel.cancelled() => return Err(EngineError::Cancelled),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(EngineError::Connection(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;
    use std::os::unix::fs::FileExt;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    fn engine() -> Engine {
        Engine::new(EngineConfig {
            read_buffer_size: 64 << 10,
            upload_buffers_per_stream: 2,
            ..EngineConfig::default()
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copy_to_eof_writes_at_the_start_offset() {
        let e = engine();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
        let file = Arc::new(tempfile::tempfile().unwrap());
        let (mut tx, rx) = pair().await;
        let d2 = data.clone();
        let writer = tokio::spawn(async move {
            tx.write_all(&d2).await.unwrap();
        });
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        let counters = Arc::new(Counters::new());
        let mut w = FileWriter::new(&e, Arc::clone(&file), Arc::clone(&counters), Cancel::new())
            .on_written(Arc::new(move |o, l| s2.lock().unwrap().push((o, l))));
        assert_eq!(w.copy_to_eof(&rx, 100).await.unwrap(), 1_000_000);
        assert_eq!(w.finish().await.unwrap(), 1_000_000);
        writer.await.unwrap();
        let mut back = vec![0u8; 1_000_000];
        file.read_exact_at(&mut back, 100).unwrap();
        assert_eq!(back, data);
        let total: u64 = seen.lock().unwrap().iter().map(|&(_, l)| l).sum();
        assert_eq!(total, 1_000_000);
        let s = counters.snapshot();
        assert_eq!(
            (s.bytes_received, s.bytes_written_disk),
            (1_000_000, 1_000_000)
        );
        // Reads are coalesced into full buffers: never more writes than reads.
        assert!(s.disk_writes <= s.recv_calls);
    }

    #[tokio::test]
    async fn headers_and_blocks_at_offsets() {
        let e = engine();
        let file = Arc::new(tempfile::tempfile().unwrap());
        let (mut tx, rx) = pair().await;
        tx.write_all(b"HDR1worldHDR2hello").await.unwrap();
        drop(tx);
        let counters = Arc::new(Counters::new());
        let mut w = FileWriter::new(&e, Arc::clone(&file), Arc::clone(&counters), Cancel::new());
        let mut h = [0u8; 4];
        assert_eq!(w.read_exact(&rx, &mut h).await.unwrap(), ReadStatus::Filled);
        w.copy_exact(&rx, 5, 5).await.unwrap();
        assert_eq!(w.read_exact(&rx, &mut h).await.unwrap(), ReadStatus::Filled);
        w.copy_exact(&rx, 0, 5).await.unwrap();
        assert_eq!(w.read_exact(&rx, &mut h).await.unwrap(), ReadStatus::Eof);
        assert!(w.copy_exact(&rx, 10, 1).await.is_err());
        assert_eq!(w.finish().await.unwrap(), 10);
        // Both blocks were gathered into one buffer: one disk job, two pwrites.
        assert_eq!(counters.snapshot().disk_writes, 1);
        let mut back = [0u8; 10];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"helloworld");
    }

    #[tokio::test]
    async fn a_silent_sender_times_the_receiver_out() {
        let e = Engine::new(EngineConfig {
            idle_timeout: Duration::from_millis(50),
            ..EngineConfig::default()
        });
        let (_tx, rx) = pair().await;
        let mut w = FileWriter::new(
            &e,
            Arc::new(tempfile::tempfile().unwrap()),
            Arc::new(Counters::new()),
            Cancel::new(),
        );
        assert!(matches!(
            w.copy_to_eof(&rx, 0).await,
            Err(EngineError::Idle)
        ));
    }

    #[tokio::test]
    async fn a_waiting_receiver_stops_on_cancel() {
        let e = engine();
        let file = Arc::new(tempfile::tempfile().unwrap());
        let (_tx, rx) = pair().await;
        let cancel = Cancel::new();
        let mut w = FileWriter::new(&e, file, Arc::new(Counters::new()), cancel.clone());
        let h = tokio::spawn(async move { w.copy_to_eof(&rx, 0).await });
        tokio::task::yield_now().await;
        cancel.cancel();
        assert!(matches!(h.await.unwrap(), Err(EngineError::Cancelled)));
    }
}
