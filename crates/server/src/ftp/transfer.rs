//! One data transfer (LIST/NLST/MLSD, RETR/ERET, STOR/APPE/ESTO) as a task:
//! open the file, get the data connection(s), hand both to
//! `sluice_transfer`, report events back to the session task.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_engine::TlsConn;
use sluice_engine::{Cancel, Engine};
use sluice_ftp::command::TransferMode;
use sluice_ftp::markers::{range_marker, PerfMarker};
use sluice_ftp::path::VirtualPath;
use sluice_ftp::reply::Reply;
use sluice_ftp::session::{DataChannel, DataSpec, ListFormat, ListMatch, OpError, StoreKind};
use sluice_platform::fs::ServedRoot;
use sluice_transfer::{
    ByteRange, Fault, Framing, Mode, Progress, Protect, SendSpec, Transfer, TransferError,
};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::data::{self, Passive};
use crate::listing::Lister;
use crate::ops::{check_names_dir, op_error, open_listing, FtpLines, ListSource};
use crate::transport::Conn;
use crate::upload::{PartialPolicy, Upload};
use crate::xferlog::{Direction, XferRecord};
use sluice_engine::verdict::Verdict;

/// The log target of a transfer's lines, in this file and the files of
/// its parts alike (as before they were split: operators' filters and
/// log searches match `sluice_server::ftp::transfer: ...`).
const LOG_TARGET: &str = "sluice_server::ftp::transfer";

/// Getting the data connections: passive accepts, active connects, TLS.
mod data_conns;
/// LIST/NLST/MLSD as transfers.
mod list;
/// RETR/ERET: downloads.
mod retr;
/// STOR/APPE/ESTO into a temporary upload.
mod stor;
#[cfg(test)]
mod tests;

use data_conns::{accept_all, asked_buffer, handshake_data, open_data, protect_data};
use list::list;
#[cfg(test)]
use retr::gaps;
use retr::retr;
use stor::stor;

/// What a transfer task tells its session.
#[derive(Debug)]
pub enum Event {
    /// File opened; about to move data (150).
    Started(Option<u64>),
    /// A 111/112 marker.
    Marker(Reply),
    /// The transfer starts on data connections kept from the last one
    /// (125 instead of 150).
    StartedReusing(Option<u64>),
    /// MODE E connections kept open after a transfer on this data channel
    /// (uploads: the client ended with EOD without CLOSE; downloads: we
    /// did, as globus-gridftp-server does); sent before a successful
    /// `Done`. The session hands them to the next transfer in the same
    /// direction on the same channel ([`Job::cached`]).
    Kept(DataChannel, Vec<TcpStream>, Direction),
    /// Finished: payload bytes, or why not.
    Done(Result<u64, OpError>),
}

/// What a transfer needs from its session.
pub struct Job {
    /// Engine.
    pub engine: Engine,
    /// The login's root.
    pub root: Arc<ServedRoot>,
    /// The same root as both doors see it (downloads: hidden names).
    pub store: Arc<crate::store::Store>,
    /// The passive listener, if the session has one.
    pub passive: Option<Passive>,
    /// Control connection's local IP (active connects come from it).
    pub local_ip: IpAddr,
    /// Control peer.
    pub peer: IpAddr,
    /// Login name and kind (xferlog).
    pub user: String,
    /// Anonymous login.
    pub anonymous: bool,
    /// Login may write (MLSD perm facts).
    pub writable: bool,
    /// ABOR.
    pub cancel: Cancel,
    /// Connections kept from the previous MODE E transfer in the same
    /// direction on this data channel: an upload's the client may send on
    /// (`globus-url-copy -fast`), a download's to send on (checked alive,
    /// as many as the download's parallelism).
    pub cached: Vec<TcpStream>,
    /// How long kept partial uploads live (crate::upload).
    pub partials: PartialPolicy,
    /// A second handle on the control connection ([`control_watch`]), to
    /// tell a MODE S upload's end from its client's death.
    pub control: Option<TcpStream>,
    /// The FTPS configuration for data connections under PROT P.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The server's stop: a transfer ended by it says so in the log.
    pub shutdown: crate::shutdown::Shutdown,
    /// When the session last read bytes from the control connection
    /// (it reads them, so [`Job::control`] cannot peek them any more).
    pub control_input: tokio::sync::watch::Receiver<Option<Instant>>,
    /// The login's class, user and cap under Cue (`None`: off).
    pub cue: Option<sluice_engine::sched::cue::CueSpec>,
}

/// A second handle on the control connection (a dup of its fd, never read,
/// only peeked) for [`Job::control`].
pub fn control_watch(conn: &TcpStream) -> Option<TcpStream> {
    watch_handle(conn)
}

/// How long a finished MODE S upload watches the control connection for
/// its client's death before it counts as complete (overlapping the
/// commit's fsync).
const CONTROL_CLOSE_GRACE: Duration = Duration::from_millis(20);

/// True when the client closes (or resets) the control connection within
/// `grace`. A MODE S upload ends with the data connection's FIN, and a
/// client killed mid-upload sends exactly that too, with its control
/// connection's FIN a moment before or after: only the control connection
/// tells a finished upload from a dead client (a live one waits there
/// for 226), and the session task may not have read it yet.
///
/// A client that talks on the control connection around the data's end
/// (within `grace` before now, or until the grace is over) is alive: a
/// pipelining client (`sluice put -r` sends the file's MFMT and the next
/// EPSV right after its data) then costs no wait at all. Its bytes are
/// either still unread (the peek sees them) or already read by the
/// session task (`Job::control_input`).
async fn control_closes_within(job: &Job, grace: Duration) -> bool {
    let Some(c) = &job.control else { return false };
    let ended = Instant::now();
    let mut input = job.control_input.clone();
    let talked = |t: &Option<Instant>| t.is_some_and(|t| t + grace >= ended);
    let spoke = async {
        loop {
            if talked(&input.borrow_and_update()) {
                return;
            }
            if input.changed().await.is_err() {
                // The session is gone: only the peek can tell.
                std::future::pending::<()>().await;
            }
        }
    };
    let mut b = [0u8; 1];
    let peek = async {
        match c.peek(&mut b).await {
            Ok(0) | Err(_) => true,
            Ok(_) => false,
        }
    };
    tokio::select! {
        biased;
        dead = peek => dead,
        () = spoke => false,
        () = tokio::time::sleep(grace) => false,
    }
}

/// What to do.
#[derive(Debug)]
pub enum Work {
    /// LIST/NLST/MLSD.
    List {
        path: VirtualPath,
        format: ListFormat,
        data: DataSpec,
        matching: Option<ListMatch>,
    },
    /// RETR/ERET.
    Retr {
        path: VirtualPath,
        offset: u64,
        len: Option<u64>,
        skip: Vec<std::ops::Range<u64>>,
        data: DataSpec,
    },
    /// STOR/APPE/ESTO.
    Stor {
        path: VirtualPath,
        kind: StoreKind,
        data: DataSpec,
    },
}

/// Runs one transfer to its end; the last event sent is always `Done`
/// (a download's xferlog record follows it).
pub async fn run(mut job: Job, work: Work, events: mpsc::UnboundedSender<Event>) {
    let started = Instant::now();
    let cached = std::mem::take(&mut job.cached);
    // Not raced against ABOR here: each step watches the cancel token
    // itself, so an aborted upload still gets to keep its partial.
    let progress = Progress::new();
    let (result, record) = execute(&job, &work, &events, cached, &progress).await;
    let Some((path, ascii, direction)) = record else {
        let _ = events.send(Event::Done(result));
        return;
    };
    let elapsed = started.elapsed();
    // A failed transfer logs the bytes that moved before it broke
    // (with the incomplete flag), not 0.
    let bytes = match &result {
        Ok(n) => *n,
        Err(_) => moved_before_failure(&work, direction, &progress),
    };
    let cut = job.shutdown.is_cutting();
    if result.is_err() && cut {
        log_cut(&path, direction, bytes, &job.user);
    }
    let complete = result.is_ok();
    // The reply goes out now; the record waits for the download's send
    // queues to drain, so the verdict covers the bytes the kernel still
    // held when the last write returned (bounded: a client that stopped
    // reading does not hold it).
    let _ = events.send(Event::Done(result));
    let bound = if complete && !cut {
        TAIL_WAIT
    } else {
        Duration::ZERO
    };
    progress.settle(bound).await;
    // The download's connections that finished sending, for /metrics.
    job.engine.limits().add(&progress.send_tally());
    XferRecord {
        elapsed,
        peer: job.peer,
        bytes,
        path: path.as_str(),
        ascii,
        direction,
        anonymous: job.anonymous,
        user: &job.user,
        complete,
        limit: limit_field(direction, complete, &progress),
    }
    .log();
}

/// Longest wait for a download's send queues to drain before its record
/// is written (its tally then read as it is).
const TAIL_WAIT: Duration = Duration::from_secs(5);

type Record = Option<(VirtualPath, bool, Direction)>;

/// A finished download's xferlog extension: what limited it, from the
/// kernel's accounting of its data connections (`verdict.rs`). The disk
/// wait is not measured by the send paths yet, so socket-idle time shows
/// as `sender` (disk or CPU).
fn limit_field(direction: Direction, complete: bool, progress: &Progress) -> Option<String> {
    if direction != Direction::Outgoing || !complete {
        return None;
    }
    let tally = progress.send_tally();
    if tally.elapsed.is_zero() {
        return None;
    }
    let v = Verdict::of_sender(&tally, Duration::ZERO);
    Some(format!(
        "{} retrans={} rtt_ms={:.1}",
        v.log_field(),
        v.retransmits,
        v.rtt.as_secs_f64() * 1e3
    ))
}

/// One line per transfer the shutdown ended, saying what is left of it.
fn log_cut(path: &VirtualPath, direction: Direction, bytes: u64, user: &str) {
    match direction {
        Direction::Incoming if bytes > 0 => tracing::warn!(
            path = path.as_str(),
            user,
            bytes,
            partial = crate::upload::partial_path(path)
                .as_ref()
                .map_or("", |p| p.as_str()),
            "upload cut by shutdown; kept as a partial for a resume (REST/APPE, sluice put --continue)"
        ),
        Direction::Incoming => tracing::warn!(
            path = path.as_str(),
            user,
            "upload cut by shutdown before any data; nothing kept"
        ),
        Direction::Outgoing => tracing::warn!(
            path = path.as_str(),
            user,
            bytes,
            "download cut by shutdown"
        ),
    }
}

/// Payload bytes a failed transfer moved. Uploads: what reached the file.
/// MODE S downloads: what went into the socket (the senders count whole
/// pieces into `progress` only when a piece completes); MODE E downloads
/// count only whole blocks (the socket count would include headers).
fn moved_before_failure(work: &Work, direction: Direction, progress: &Progress) -> u64 {
    match (direction, work) {
        (Direction::Outgoing, Work::Retr { data, .. }) if data.mode == TransferMode::Stream => {
            progress
                .bytes()
                .max(progress.counters().snapshot().bytes_sent)
        }
        _ => progress.bytes(),
    }
}

async fn execute(
    job: &Job,
    work: &Work,
    events: &mpsc::UnboundedSender<Event>,
    cached: Vec<TcpStream>,
    progress: &Arc<Progress>,
) -> (Result<u64, OpError>, Record) {
    match work {
        Work::List {
            path,
            format,
            data,
            matching,
        } => (
            list(job, path, *format, data, matching.clone(), events, cached).await,
            None,
        ),
        Work::Retr {
            path,
            offset,
            len,
            skip,
            data,
        } => {
            let r = retr(
                job, path, *offset, *len, skip, data, events, cached, progress,
            )
            .await;
            (r, Some((path.clone(), data.ascii, Direction::Outgoing)))
        }
        Work::Stor { path, kind, data } => {
            let r = stor(job, path, *kind, data, events, cached, progress).await;
            (r, Some((path.clone(), data.ascii, Direction::Incoming)))
        }
    }
}

/// Runs a file-system job (open, prepare, commit) on the engine's disk
/// threads.
async fn blocking<T: Send + 'static>(
    job: &Job,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, OpError> {
    job.engine
        .run_blocking(&Cancel::new(), f)
        .await
        .map_err(|_| OpError::Local)
}

/// The transfer object of a download or upload: the job's progress and
/// ABOR token. No stall bound of its own (the engine's `idle_timeout`).
fn transfer(job: &Job, progress: &Arc<Progress>) -> Transfer {
    Transfer::new(Arc::clone(progress), job.cancel.clone())
}

/// A second handle on a data socket (a dup of its fd), registered with the
/// reactor on its own.
fn watch_handle(conn: &TcpStream) -> Option<TcpStream> {
    use std::os::fd::AsFd;
    let fd = conn.as_fd().try_clone_to_owned().ok()?;
    TcpStream::from_std(std::net::TcpStream::from(fd)).ok()
}

/// How long an upload waits for another upload of the same name to let go
/// of the partial. The common holder is not a live client but one that has
/// just gone (killed, timed out): its session is still committing what
/// arrived (the grace above, then an fsync that can take seconds on a busy
/// disk). A client that retries at once should get its upload, not `450`.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Runs `fut`, sending 112 (and for uploads 111) markers every
/// `marker_interval_secs` while it runs in MODE E.
async fn with_markers<T>(
    fut: impl std::future::Future<Output = Result<T, TransferError>>,
    data: &DataSpec,
    progress: &Arc<Progress>,
    upload: bool,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<T, TransferError> {
    if data.mode != TransferMode::ExtendedBlock {
        return fut.await;
    }
    let period = Duration::from_secs(u64::from(data.marker_interval_secs.max(1)));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tokio::pin!(fut);
    loop {
        tokio::select! {
            r = &mut fut => return r,
            _ = tick.tick() => {
                let tenths = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64 / 100).unwrap_or(0);
                let _ = events.send(Event::Marker(PerfMarker::single(tenths, progress.bytes()).to_reply()));
                if upload {
                    let set = progress.ranges();
                    if !set.is_empty() {
                        let _ = events.send(Event::Marker(range_marker(&set)));
                    }
                }
            }
        }
    }
}

/// The FTP answer to a failed transfer, from whose fault it is: 426 when
/// the transfer was aborted, the data connection was lost or the peer
/// broke MODE E, 452 for a full disk, 451 for our side (disk, resources).
fn transfer_error(e: &TransferError, cancel: &Cancel) -> OpError {
    if cancel.is_cancelled() {
        return OpError::Aborted;
    }
    match e.fault() {
        Fault::Cancelled => OpError::Aborted,
        Fault::PeerProtocol => OpError::BadData,
        Fault::PeerGone => {
            tracing::info!(error = %e, "transfer lost its data connection");
            OpError::ConnectionLost
        }
        Fault::DiskFull => OpError::NoSpace,
        Fault::Disk | Fault::Local => {
            tracing::warn!(error = %e, "transfer failed");
            OpError::Local
        }
    }
}
