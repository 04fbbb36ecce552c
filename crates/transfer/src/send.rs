//! Downloads: MODE S over one connection, MODE E over 1..n connections.
//!
//! MODE E: blocks are handed out in file order to whichever stream is ready
//! for its next one (a stream asks when its previous block has been taken
//! by the kernel), so a faster stream carries more blocks. When the queue
//! is empty each stream sends one empty header with EOD|CLOSE and closes;
//! stream 0's header also carries EOF with the offset field = number of
//! streams (the EOD count), as Globus does (descriptor 0x4C).
//!
//! Kept connections ([`send_keeping`]): each stream ends with EOD but
//! without CLOSE and stays open for the session's next transfer
//! (globus-gridftp-server does this for every MODE E download: from the
//! second file on it answers `125 ... reusing existing data connection`
//! and a small file costs no connection setup).

use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_engine::verdict::SendTally;
use sluice_engine::{Cancel, DataConn, Engine, IntoDataConn, Readers, SharedRead};
use sluice_ftp::mode_e::BlockHeader;
use sluice_platform::tcp;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::limits::{MAX_STREAMS, STREAM_PIECE};
use crate::send_shared::{send_extended_shared, send_in_order};
use crate::spec::BlockQueue;
use crate::{Conn, Mode, Progress, SendSpec, TransferError};

/// Sends the spec's ranges over `conns` and closes them; returns the payload
/// bytes sent. MODE S needs exactly one connection. On cancellation or error
/// every stream task is stopped before this returns.
pub async fn send<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    conns: Vec<C>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    send_relative(engine, spec, 0, conns, progress, cancel).await
}

/// Like [`send`], but MODE E block headers carry `file offset - base`
/// (ERET P in MODE E numbers the partial region from 0, GFD.20). `base`
/// must not exceed any range's offset; MODE S ignores it.
pub async fn send_relative<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<C>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    let (n, _) = send_inner(engine, spec, base, conns, false, progress, cancel).await?;
    Ok(n)
}

/// Like [`send_relative`] in MODE E, but every stream ends with EOD
/// without CLOSE and is handed back open (the receiver knows the transfer
/// is over from the EOD count): the sockets for the next MODE E transfer
/// on the same data channel. MODE S closes as always and returns none.
pub async fn send_keeping(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<DataConn>,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    send_inner(engine, spec, base, conns, true, progress, cancel).await
}

async fn send_inner<C: IntoDataConn>(
    engine: &Engine,
    spec: SendSpec,
    base: u64,
    conns: Vec<C>,
    keep: bool,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    spec.validate()?;
    if spec.ranges.iter().any(|r| r.len > 0 && r.offset < base) {
        return Err(TransferError::Setup(
            "MODE E header base beyond a range's offset",
        ));
    }
    // Each connection is an engine `DataConn` (socket settings applied
    // once, data path and quantum kept across pieces); the caller may have
    // made it, sized for what the peer asked.
    let conns: Vec<DataConn> = conns
        .into_iter()
        .map(|c| c.into_data_conn(engine))
        .collect();
    match spec.mode {
        Mode::Stream => {
            let mut it = conns.into_iter();
            let (Some(conn), None) = (it.next(), it.next()) else {
                return Err(TransferError::Setup(
                    "MODE S needs exactly one data connection",
                ));
            };
            // In-order sharing: the file's selector hands this download
            // its blocks in file order while another reader is about.
            let ranges: Vec<(u64, u64)> = spec.ranges.iter().map(|r| (r.offset, r.len)).collect();
            let readers = engine
                .join_readers_in_order(&spec.file, &ranges)
                .unwrap_or(Readers::Unshared);
            let _alone = match readers {
                Readers::Shared(read) => {
                    return send_stream_shared(&read, conn, &ranges, &progress, &cancel)
                        .await
                        .map(|n| (n, Vec::new()));
                }
                Readers::Alone(mark) => Some(mark),
                Readers::Unshared => None,
            };
            send_stream(&spec, conn, &progress, &cancel)
                .await
                .map(|n| (n, Vec::new()))
        }
        Mode::Extended { block_size } => {
            if conns.is_empty() || conns.len() > MAX_STREAMS {
                return Err(TransferError::Setup("MODE E needs 1..=64 data connections"));
            }
            // Circus: readers of one file share its blocks, in any order.
            // A lone reader (`--sharing auto`) keeps its mark on the file
            // while it sends, so the next reader of the file is shared.
            let _alone = match share(engine, &spec, conns.len()) {
                Readers::Shared(read) => {
                    return send_extended_shared(
                        read, block_size, base, conns, keep, progress, cancel,
                    )
                    .await;
                }
                Readers::Alone(mark) => Some(mark),
                Readers::Unshared => None,
            };
            let conns = conns.into_iter().map(Conn::from).collect();
            send_extended(spec, block_size, base, conns, keep, progress, cancel).await
        }
    }
}

/// How the download reads its file: from its shared selector, alone, or
/// unshared (a file that cannot be told apart, `fstat` failing, is sent
/// unshared).
fn share(engine: &Engine, spec: &SendSpec, streams: usize) -> Readers {
    let ranges: Vec<(u64, u64)> = spec.ranges.iter().map(|r| (r.offset, r.len)).collect();
    match engine.join_readers(&spec.file, &ranges, streams) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("not shared: {e}");
            Readers::Unshared
        }
    }
}

async fn send_stream(
    spec: &SendSpec,
    mut conn: DataConn,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<u64, TransferError> {
    let watch = Watch::start(conn.stream());
    let mut total = 0;
    for r in &spec.ranges {
        let mut pos = r.offset;
        while pos < r.end() {
            // Pieces keep progress current; each is still many chunks.
            let len = (r.end() - pos).min(STREAM_PIECE);
            let n = conn
                .send_range(&spec.file, pos, len, &[], progress.counters(), cancel)
                .await?;
            progress.add_bytes(n);
            total += n;
            pos += n;
        }
    }
    // End of data in MODE S is the close; FIN follows the queued data.
    conn.shutdown().await.map_err(TransferError::Connection)?;
    watch.finish(conn.stream(), progress);
    Ok(total)
}

/// MODE S from the file's shared selector (in order).
async fn send_stream_shared(
    read: &SharedRead,
    mut conn: DataConn,
    ranges: &[(u64, u64)],
    progress: &Progress,
    cancel: &Cancel,
) -> Result<u64, TransferError> {
    let watch = Watch::start(conn.stream());
    let len = ranges.iter().map(|r| r.1).sum();
    let total = send_in_order(
        &mut conn,
        read,
        &[],
        len,
        progress.counters(),
        cancel,
        |n| progress.add_bytes(n),
    )
    .await?;
    conn.shutdown().await.map_err(TransferError::Connection)?;
    watch.finish(conn.stream(), progress);
    Ok(total)
}

/// MODE E over clear or TLS connections (`tls.rs` after its checks):
/// blocks handed out in file order to whichever stream is ready. With
/// `keep`, clear connections end without CLOSE and come back open.
pub(crate) async fn send_extended(
    spec: SendSpec,
    block_size: u64,
    base: u64,
    conns: Vec<Conn>,
    keep: bool,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    let queue = Arc::new(Mutex::new(BlockQueue::new(&spec.ranges, block_size, base)));
    let n_streams = conns.len() as u64;
    // Our own token, so one failing stream stops the others.
    let inner = Cancel::new();
    let mut tasks = JoinSet::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let eof = if i == 0 { Some(n_streams) } else { None };
        let (file, queue, progress, inner) = (
            Arc::clone(&spec.file),
            Arc::clone(&queue),
            Arc::clone(&progress),
            inner.clone(),
        );
        tasks.spawn(
            async move { stream_task(conn, &file, &queue, eof, keep, &progress, &inner).await },
        );
    }
    join_streams(tasks, &inner, &cancel).await
}

/// Waits for every stream task of a MODE E transfer: the first error
/// stops the others (through `inner`) and is the result; the caller's
/// `cancel` stops them all.
pub(crate) async fn join_streams(
    mut tasks: JoinSet<Result<(u64, Option<TcpStream>), TransferError>>,
    inner: &Cancel,
    cancel: &Cancel,
) -> Result<(u64, Vec<TcpStream>), TransferError> {
    let mut total = 0u64;
    let mut kept = Vec::new();
    let mut first_err: Option<TransferError> = None;
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok((n, conn)))) => {
                    total += n;
                    kept.extend(conn);
                }
                Some(Ok(Err(e))) => {
                    inner.cancel();
                    first_err.get_or_insert(e);
                }
                Some(Err(_panic_or_abort)) => {
                    inner.cancel();
                    first_err.get_or_insert(TransferError::Setup("sender task failed"));
                }
            },
            _ = cancel.cancelled(), if !inner.is_cancelled() => {
                inner.cancel();
                first_err.get_or_insert(TransferError::Cancelled);
            }
        }
    }
    match first_err {
        // A stream that stopped because another failed reports Cancelled;
        // the first error is the cause.
        Some(e) => Err(e),
        None => Ok((total, kept)),
    }
}

async fn stream_task(
    mut conn: Conn,
    file: &Arc<std::fs::File>,
    queue: &Mutex<BlockQueue>,
    eof: Option<u64>,
    keep: bool,
    progress: &Progress,
    cancel: &Cancel,
) -> Result<(u64, Option<TcpStream>), TransferError> {
    let watch = Watch::start(conn.tcp());
    let mut sent = 0;
    loop {
        let block = match queue.lock() {
            Ok(mut q) => q.next_block(),
            Err(_) => return Err(TransferError::Setup("block queue poisoned")),
        };
        let Some((b, wire_offset)) = block else { break };
        let header = BlockHeader::data(wire_offset, b.len).encode();
        let n = conn
            .send_range(file, b.offset, b.len, &header, progress.counters(), cancel)
            .await?;
        progress.add_bytes(n);
        sent += n;
    }
    // Only a clear connection is kept (a TLS one would need its session
    // carried over too).
    let keep = keep && matches!(conn, Conn::Plain(_));
    let end = BlockHeader::end(eof, !keep).encode();
    conn.send_bytes(&end, progress.counters(), cancel).await?;
    watch.finish(conn.tcp(), progress);
    match conn {
        Conn::Plain(c) if keep => Ok((sent, Some(c.into_stream()))),
        mut conn => {
            conn.shutdown().await.map_err(TransferError::Connection)?;
            Ok((sent, None))
        }
    }
}

/// A data connection's `TCP_INFO` at the start of its part of a transfer,
/// to tally what limited it at the end (a MODE E connection kept from an
/// earlier transfer counts from here, not from its handshake).
pub(crate) struct Watch(Option<(tcp::TcpInfo, Instant)>);

impl Watch {
    pub(crate) fn start(conn: &TcpStream) -> Watch {
        Watch(
            tcp::tcp_info(conn.as_fd())
                .ok()
                .map(|i| (i, Instant::now())),
        )
    }

    /// The connection has sent its last byte: its tally is read once the
    /// kernel has them all acknowledged ([`Progress::settle`]), or now if
    /// the socket cannot be kept.
    pub(crate) fn finish(self, conn: &TcpStream, progress: &Progress) {
        let Some((before, t0)) = self.0 else { return };
        match conn.as_fd().try_clone_to_owned() {
            Ok(fd) => progress.add_pending(before, t0, fd),
            Err(_) => {
                if let Ok(after) = tcp::tcp_info(conn.as_fd()) {
                    progress.add_tally(&SendTally::between(&before, &after, t0.elapsed()));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{ByteRange, EngineConfig};
    use sluice_engine::DataPath;
    use sluice_ftp::mode_e::{Descriptor, HEADER_LEN};
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;
    use tokio::net::TcpStream;

    pub(crate) fn pattern(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect()
    }

    pub(crate) fn temp_file(data: &[u8]) -> Arc<std::fs::File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        Arc::new(f)
    }

    pub(crate) async fn pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..n {
            a.push(TcpStream::connect(l.local_addr().unwrap()).await.unwrap());
            b.push(l.accept().await.unwrap().0);
        }
        (a, b)
    }

    pub(crate) fn engine(path: DataPath) -> Engine {
        Engine::new(EngineConfig {
            data_path: path,
            read_buffer_size: 128 << 10,
            ..EngineConfig::default()
        })
    }

    /// What a test receiver saw on one MODE E stream.
    #[derive(Debug, Default)]
    struct Decoded {
        blocks: Vec<(u64, Vec<u8>)>,
        last_descriptor: u8,
        eof: Option<u64>,
        trailing: usize,
    }

    /// An independent MODE E reader: headers by hand, no engine code.
    fn decode(bytes: &[u8]) -> Decoded {
        let mut d = Decoded::default();
        let mut p = 0;
        while p + HEADER_LEN <= bytes.len() {
            let desc = bytes[p];
            let count = u64::from_be_bytes(bytes[p + 1..p + 9].try_into().unwrap()) as usize;
            let offset = u64::from_be_bytes(bytes[p + 9..p + 17].try_into().unwrap());
            p += HEADER_LEN;
            if desc & Descriptor::EOF != 0 {
                d.eof = Some(offset);
            } else if count > 0 {
                d.blocks.push((offset, bytes[p..p + count].to_vec()));
                p += count;
            }
            d.last_descriptor = desc;
            if desc & Descriptor::EOD != 0 {
                break;
            }
        }
        d.trailing = bytes.len() - p;
        d
    }

    async fn mode_e_roundtrip(
        path: DataPath,
        data: &[u8],
        ranges: Vec<ByteRange>,
        streams: usize,
    ) -> Vec<Decoded> {
        let e = engine(path);
        let (tx, rx) = pairs(streams).await;
        let readers: Vec<_> = rx
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    let mut v = Vec::new();
                    s.read_to_end(&mut v).await.unwrap();
                    decode(&v)
                })
            })
            .collect();
        let spec = SendSpec {
            file: temp_file(data),
            ranges: ranges.clone(),
            mode: Mode::Extended {
                block_size: 64 << 10,
            },
        };
        let progress = Progress::new();
        let n = send(&e, spec, tx, Arc::clone(&progress), Cancel::new())
            .await
            .unwrap();
        let want: u64 = ranges.iter().map(|r| r.len).sum();
        assert_eq!((n, progress.bytes()), (want, want));
        let mut out = Vec::new();
        for r in readers {
            out.push(r.await.unwrap());
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mode_e_over_four_streams_reassembles_to_the_file() {
        let data = pattern((5 << 20) + 4321);
        for path in [DataPath::Copy, DataPath::Sendfile] {
            let streams =
                mode_e_roundtrip(path, &data, vec![ByteRange::new(0, data.len() as u64)], 4).await;
            let mut out = vec![0u8; data.len()];
            let mut covered = 0;
            let mut eofs = Vec::new();
            for s in &streams {
                // Every stream ends with EOD|CLOSE and nothing after it.
                assert_eq!(s.last_descriptor & 0x0C, 0x0C, "{path}");
                assert_eq!(s.trailing, 0);
                eofs.extend(s.eof);
                for (off, b) in &s.blocks {
                    assert!(b.len() as u64 <= 64 << 10);
                    out[*off as usize..*off as usize + b.len()].copy_from_slice(b);
                    covered += b.len();
                }
            }
            assert_eq!(eofs, vec![4], "one EOF carrying the EOD count");
            assert_eq!(covered, data.len());
            assert_eq!(out, data, "{path}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_faster_stream_carries_more_blocks() {
        let data = pattern(32 << 20);
        let e = engine(DataPath::Copy);
        let (tx, mut rx) = pairs(2).await;
        let (mut slow, mut fast) = (rx.remove(1), rx.remove(0));
        // The fast reader drains at once; the slow one reads nothing until the
        // fast stream has ended, so it can only hold what fits in its socket buffers.
        let fast_reader = tokio::spawn(async move {
            let mut v = Vec::new();
            fast.read_to_end(&mut v).await.unwrap();
            decode(&v)
        });
        let spec = SendSpec {
            file: temp_file(&data),
            ranges: vec![ByteRange::new(0, data.len() as u64)],
            mode: Mode::Extended {
                block_size: 64 << 10,
            },
        };
        let sender = tokio::spawn({
            let e = e.clone();
            async move { send(&e, spec, tx, Progress::new(), Cancel::new()).await }
        });
        let fast = fast_reader.await.unwrap();
        let mut v = Vec::new();
        slow.read_to_end(&mut v).await.unwrap();
        let slow = decode(&v);
        assert_eq!(sender.await.unwrap().unwrap(), data.len() as u64);
        let bytes = |d: &Decoded| d.blocks.iter().map(|b| b.1.len()).sum::<usize>();
        assert_eq!(bytes(&fast) + bytes(&slow), data.len());
        assert!(
            bytes(&fast) > data.len() / 2,
            "fast stream carried {} of {}",
            bytes(&fast),
            data.len()
        );
    }

    #[tokio::test]
    async fn mode_e_partial_ranges_and_an_empty_file() {
        let data = pattern(300_000);
        let ranges = vec![
            ByteRange::new(1000, 150_000),
            ByteRange::new(200_000, 100_000),
        ];
        let streams = mode_e_roundtrip(DataPath::Copy, &data, ranges.clone(), 2).await;
        let mut got: Vec<(u64, Vec<u8>)> = streams.into_iter().flat_map(|s| s.blocks).collect();
        got.sort();
        let joined: Vec<u8> = got.iter().flat_map(|(_, b)| b.clone()).collect();
        let expect: Vec<u8> = ranges
            .iter()
            .flat_map(|r| data[r.offset as usize..r.end() as usize].to_vec())
            .collect();
        assert_eq!(joined, expect);
        assert_eq!(got.first().map(|b| b.0), Some(1000));

        let empty = mode_e_roundtrip(DataPath::Sendfile, b"", vec![ByteRange::new(0, 0)], 3).await;
        assert!(empty
            .iter()
            .all(|s| s.blocks.is_empty() && s.last_descriptor & 0x08 != 0));
        assert_eq!(
            empty.iter().filter_map(|s| s.eof).collect::<Vec<_>>(),
            vec![3]
        );
    }

    /// Kept connections: two files back to back on one connection, each
    /// ending with EOD|EOF (count 1) and no CLOSE, the connection handed
    /// back open after each; the receiver reads both from one stream.
    #[tokio::test]
    async fn kept_streams_end_without_close_and_carry_the_next_file() {
        let e = engine(DataPath::Copy);
        let (mut tx, mut rx) = pairs(1).await;
        let mut r = rx.pop().unwrap();
        let (a, b) = (pattern(150_000), pattern(70_000));
        let mut conn = tx.pop().unwrap();
        for data in [&a, &b] {
            let spec = SendSpec {
                file: temp_file(data),
                ranges: vec![ByteRange::new(0, data.len() as u64)],
                mode: Mode::Extended {
                    block_size: 64 << 10,
                },
            };
            let dc = e.data_conn_in(conn, None, None);
            let (n, mut kept) = send_keeping(&e, spec, 0, vec![dc], Progress::new(), Cancel::new())
                .await
                .unwrap();
            assert_eq!((n, kept.len()), (data.len() as u64, 1));
            conn = kept.pop().unwrap();
        }
        drop(conn);
        let mut v = Vec::new();
        r.read_to_end(&mut v).await.unwrap();
        // Both files, one after the other, each ending EOD|EOF (0x48).
        let first = decode(&v);
        assert_eq!(first.last_descriptor, 0x48);
        assert_eq!(first.eof, Some(1));
        let one: Vec<u8> = first.blocks.iter().flat_map(|b| b.1.clone()).collect();
        assert_eq!(one, a);
        let second = decode(&v[v.len() - first.trailing..]);
        let two: Vec<u8> = second.blocks.iter().flat_map(|b| b.1.clone()).collect();
        assert_eq!(
            (two, second.last_descriptor, second.trailing),
            (b.clone(), 0x48, 0)
        );
    }

    #[tokio::test]
    async fn relative_headers_number_the_region_from_zero() {
        let data = pattern(400_000);
        let e = engine(DataPath::Copy);
        let (tx, mut rx) = pairs(1).await;
        let mut r = rx.pop().unwrap();
        let reader = tokio::spawn(async move {
            let mut v = Vec::new();
            r.read_to_end(&mut v).await.unwrap();
            decode(&v)
        });
        let spec = SendSpec {
            file: temp_file(&data),
            ranges: vec![ByteRange::new(100_000, 150_000)],
            mode: Mode::Extended {
                block_size: 64 << 10,
            },
        };
        send_relative(
            &e,
            spec.clone(),
            100_000,
            tx,
            Progress::new(),
            Cancel::new(),
        )
        .await
        .unwrap();
        let d = reader.await.unwrap();
        assert_eq!(d.blocks.first().map(|b| b.0), Some(0));
        let joined: Vec<u8> = d.blocks.iter().flat_map(|b| b.1.clone()).collect();
        assert_eq!(joined, &data[100_000..250_000]);
        let (tx, _rx) = pairs(1).await;
        let r = send_relative(&e, spec, 100_001, tx, Progress::new(), Cancel::new()).await;
        assert!(matches!(r, Err(TransferError::Setup(_))));
    }

    #[tokio::test]
    async fn mode_s_sends_the_range_then_closes() {
        let data = pattern(1_000_000);
        for len in [0u64, 999_000] {
            let (mut tx, mut rx) = pairs(1).await;
            let mut r = rx.pop().unwrap();
            let reader = tokio::spawn(async move {
                let mut v = Vec::new();
                r.read_to_end(&mut v).await.unwrap();
                v
            });
            let spec = SendSpec {
                file: temp_file(&data),
                ranges: vec![ByteRange::new(1000, len)],
                mode: Mode::Stream,
            };
            let n = send(
                &engine(DataPath::Sendfile),
                spec,
                vec![tx.pop().unwrap()],
                Progress::new(),
                Cancel::new(),
            )
            .await
            .unwrap();
            assert_eq!(n, len);
            assert_eq!(reader.await.unwrap(), &data[1000..1000 + len as usize]);
        }
    }

    #[tokio::test]
    async fn bad_setups_are_local_errors() {
        let e = engine(DataPath::Copy);
        let f = temp_file(b"x");
        let spec = SendSpec {
            file: Arc::clone(&f),
            ranges: vec![],
            mode: Mode::Stream,
        };
        let r = send(
            &e,
            spec,
            Vec::<TcpStream>::new(),
            Progress::new(),
            Cancel::new(),
        )
        .await;
        // Ours (the FTP door answers 451).
        assert_eq!(r.unwrap_err().fault(), crate::Fault::Local);
        let spec = SendSpec {
            file: f,
            ranges: vec![],
            mode: Mode::Extended { block_size: 1 },
        };
        let (tx, _rx) = pairs(1).await;
        assert!(matches!(
            send(&e, spec, tx, Progress::new(), Cancel::new()).await,
            Err(TransferError::Setup(_))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_mid_transfer_stops_every_stream_task() {
        let metrics = tokio::runtime::Handle::current().metrics();
        for path in [DataPath::Copy, DataPath::Sendfile] {
            let e = engine(path);
            // Nobody reads: the streams fill their socket buffers and wait.
            let (tx, _rx) = pairs(4).await;
            let spec =
                SendSpec::from_offset(temp_file(&pattern(64 << 20)), 0, Mode::extended()).unwrap();
            let progress = Progress::new();
            let cancel = Cancel::new();
            let (p2, c2, e2) = (Arc::clone(&progress), cancel.clone(), e.clone());
            let h = tokio::spawn(async move { send(&e2, spec, tx, p2, c2).await });
            // Each stream has found its socket full (a wake-up is counted only
            // once a waiting sender resumes, which nobody reading means never).
            while progress.counters().snapshot().eagains < 4 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            assert!(
                metrics.num_alive_tasks() >= 5,
                "sender and its stream tasks run"
            );
            cancel.cancel();
            let r = h.await.unwrap();
            // The FTP door answers 426.
            assert_eq!(r.unwrap_err().fault(), crate::Fault::Cancelled);
            // A finished task leaves the runtime's list just after its output is
            // handed over; give it a moment, but a stuck task never leaves.
            for _ in 0..1000 {
                if metrics.num_alive_tasks() == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            assert_eq!(
                metrics.num_alive_tasks(),
                0,
                "{path}: a task outlived the cancel"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reset_stream_fails_the_transfer_and_stops_the_rest() {
        let e = engine(DataPath::Copy);
        let (tx, mut rx) = pairs(3).await;
        // One receiver goes away with data unread: the kernel answers with RST.
        let gone = rx.remove(0);
        let spec =
            SendSpec::from_offset(temp_file(&pattern(32 << 20)), 0, Mode::extended()).unwrap();
        let h = tokio::spawn({
            let e = e.clone();
            async move { send(&e, spec, tx, Progress::new(), Cancel::new()).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        drop(gone);
        let err = h.await.unwrap().unwrap_err();
        // The peer's fault (the FTP door answers 426).
        assert_eq!(err.fault(), crate::Fault::PeerGone, "{err}");
        assert!(matches!(err, TransferError::Connection(_)), "{err:?}");
    }
}
