//! A download's side of a shared file: the pieces it takes from its
//! queue, how one goes out on a connection, and its leaving (which drops
//! its demand at once).

use std::fs::File;
use std::io;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::conn::Link;
use crate::counters::Counters;
use crate::sched::circus::{Piece, ReaderId};
use crate::send::write_all;
use crate::wake::counted;
use crate::{Cancel, Engine, EngineError};

use super::{Held, SharedFile};

/// One download's part in a shared file; dropping it drops its demand.
#[derive(Debug)]
pub struct SharedRead {
    pub(super) engine: Engine,
    pub(super) shared: Arc<SharedFile>,
    pub(super) id: ReaderId,
    pub(super) notify: Arc<Notify>,
}

/// Part of a shared block for one reader: `len` bytes at file `offset`.
#[derive(Debug)]
pub struct SharedPiece {
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    piece: Piece,
    buf: Held,
    /// Where the piece starts in `buf`.
    at: usize,
    /// The file, for a piece held in the page cache.
    file: Arc<File>,
}

impl SharedPiece {
    /// The piece's bytes, when it is held in an engine buffer (`None`:
    /// in the page cache).
    pub fn bytes(&self) -> Option<&[u8]> {
        let b = self.buf.as_ref()?;
        Some(&b[self.at..self.at + self.len as usize])
    }

    /// `len` bytes from file offset `offset`, clipped to the piece (as
    /// a file range, and its bytes when held in a buffer).
    fn part(&self, offset: u64, len: u64) -> (u64, u64, Option<&[u8]>) {
        let from = offset.clamp(self.offset, self.offset + self.len) - self.offset;
        let to = offset
            .saturating_add(len)
            .clamp(self.offset, self.offset + self.len)
            - self.offset;
        let bytes = self.bytes().map(|b| &b[from as usize..to as usize]);
        (self.offset + from, to - from, bytes)
    }
}

impl Engine {
    /// Sends `prefix` and `len` bytes of a shared piece from file offset
    /// `offset` in full on a connection ([`crate::DataConn::send_piece`]):
    /// `writev` from its buffer, or `sendfile` from the page cache.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_piece_on(
        &self,
        conn: &TcpStream,
        link: &mut Link,
        prefix: &[u8],
        (piece, offset, len): (&SharedPiece, u64, u64),
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<u64, EngineError> {
        let t = self.tally(counters);
        let Link { turn, flow, .. } = link;
        let (offset, len, bytes) = piece.part(offset, len);
        let n = match bytes {
            None => {
                let f = self.send_sendfile(
                    conn,
                    &piece.file,
                    offset,
                    len,
                    prefix,
                    counters,
                    cancel,
                    turn,
                    flow,
                );
                counted(f, t).await?
            }
            Some(bytes) => {
                let mut refill = self.refill(flow);
                let send = async {
                    let waited =
                        write_all(conn, [prefix, bytes], t, cancel, self.config().idle_timeout)
                            .await?;
                    let n = (prefix.len() + bytes.len()) as u64;
                    if let Some(r) = refill.as_mut() {
                        r.wrote(conn, n, waited);
                    }
                    if waited {
                        turn.waited();
                    }
                    turn.pushed(n, t).await;
                    Ok::<u64, EngineError>(bytes.len() as u64)
                };
                counted(send, t).await?
            }
        };
        self.inner.counters.add_shared_sent(n);
        counters.add_shared_sent(n);
        Ok(n)
    }
}

impl SharedRead {
    /// The next piece for one of this download's streams; `None` once
    /// every piece has been handed out. Waits while none is ready.
    /// Waiting counts as wake-ups in `counters` (and the engine's).
    pub async fn next(
        &self,
        counters: &Counters,
        cancel: &Cancel,
    ) -> Result<Option<SharedPiece>, EngineError> {
        counted(self.wait_next(cancel), self.engine.tally(counters)).await
    }

    async fn wait_next(&self, cancel: &Cancel) -> Result<Option<SharedPiece>, EngineError> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            {
                let mut st = self.shared.lock();
                if let Some((kind, msg)) = &st.failed {
                    return Err(EngineError::Disk(io::Error::new(*kind, msg.clone())));
                }
                let q = st.readers.get_mut(&self.id).ok_or(EngineError::Cancelled)?;
                let popped = q.pieces.pop_front();
                if let Some((piece, buf)) = popped {
                    let bs = st.circus.config().block_size;
                    return Ok(Some(SharedPiece {
                        file: Arc::clone(&self.shared.file),
                        offset: piece.offset,
                        len: piece.len,
                        at: (piece.offset - piece.block * bs) as usize,
                        piece,
                        buf,
                    }));
                }
                if st.circus.handed_all(self.id) {
                    return Ok(None);
                }
                notified.as_mut().enable();
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return Err(EngineError::Cancelled),
            }
        }
    }

    /// `piece` is out: its block is no longer held for this download.
    pub fn sent(&self, piece: SharedPiece) {
        let Some(sharing) = &self.engine.inner.sharing else {
            return;
        };
        let now = sharing.epoch.elapsed();
        let mut st = self.shared.lock();
        st.circus.sent(self.id, piece.piece, now);
        drop(piece);
        // A batch when this reader's queue is down to half (or another
        // stream of it may be waiting), not per piece.
        let low = st
            .readers
            .get(&self.id)
            .is_some_and(|q| q.pieces.len() * 2 <= st.circus.queue_cap(self.id));
        if low {
            self.engine.batch(&self.shared, &mut st);
        }
    }
}

impl Drop for SharedRead {
    fn drop(&mut self) {
        let Some(sharing) = &self.engine.inner.sharing else {
            return;
        };
        let empty = {
            let mut st = self.shared.lock();
            st.circus.gone(self.id);
            st.readers.remove(&self.id);
            self.engine.batch(&self.shared, &mut st);
            st.circus.readers() == 0
        };
        if empty {
            let mut files = sharing.files();
            // Checked again under both locks: a reader may have come.
            if self.shared.lock().circus.readers() == 0 {
                if let Some(f) = files.get(&self.shared.key) {
                    if Arc::ptr_eq(f, &self.shared) {
                        files.remove(&self.shared.key);
                        let slot = self.shared.lock().circus.slot();
                        sharing.slots().remove(&slot);
                    }
                }
            }
        }
    }
}
