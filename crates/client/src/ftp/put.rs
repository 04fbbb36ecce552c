//! `sluice put FILE ftp://...`: one file up.
//!
//! ```text
//! TYPE I, [MODE E], [SIZE path, CKSM alg 0 k path (--continue)], EPSV|PASV
//! MODE S: connect, STOR path | APPE path (resume at k), send, close
//! MODE E: ALLO len, STOR path | ESTO A k path, connect N streams,
//!         blocks striped over them, EOD on each, EOF(N) on the first
//! 1xx (111/112 markers) ... 226
//! ```
//! This is the order globus-url-copy uses for `-p N` uploads (seen with
//! `globus-url-copy -dbg`): it ends every stream with EOD and folds EOF
//! (offset = number of streams) into the first stream's EOD header.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_ftp::mode_e::BlockHeader;
use sluice_ftp::reply::Reply;

use super::control::{refused, Control};
use super::{data, session};
use crate::cli::PutArgs;
use crate::error::{ClientError, Result};
use crate::progress::Progress;
use crate::stats::{self, Stats};
use crate::tls::DataSock;
use crate::url::FtpUrl;

/// Bytes sent per `io::copy` round in MODE S (progress granularity).
const STREAM_ROUND: u64 = 8 << 20;

/// Runs one upload.
pub fn run(u: &FtpUrl, a: &PutArgs) -> Result<()> {
    let file = File::open(&a.file)
        .map_err(|e| ClientError::local(format!("open {}", a.file.display()), e))?;
    let meta = file
        .metadata()
        .map_err(|e| ClientError::local(format!("stat {}", a.file.display()), e))?;
    if !meta.is_file() {
        return Err(ClientError::Usage(format!(
            "{} is not a regular file",
            a.file.display()
        )));
    }
    let len = meta.len();
    let remote = remote_path(&u.path, &a.file)?;
    let timeout = Duration::from_secs(a.opts.timeout);
    let mut ctl = session::open(u, timeout)?;
    ctl.expect_ok("TYPE I", "TYPE I")?;
    if a.verify {
        session::require_cksm(&mut ctl)?;
    }
    let extended = a.opts.parallel > 1 && session::try_mode_e(&mut ctl)?;

    let mut offset = 0;
    let mut resumed = String::new();
    if a.resume {
        let (o, said) = resume_offset(&mut ctl, &remote, &file, len, &a.file)?;
        offset = o;
        // Said now, before the transfer and its progress bar.
        eprintln!("sluice: {said}");
        resumed = said;
    }
    let stats = Arc::new(Stats::default());
    let t0 = Instant::now();
    // Also when the server has every byte (offset == len): SIZE reports an
    // interrupted upload's partial, which only a finished transfer (an
    // APPE of nothing) turns into the file.
    let progress = Progress::start(stats.clone(), Some(len), offset, a.opts.quiet);
    let r = if extended {
        send_extended(&mut ctl, &file, len, offset, &remote, a, &stats)
    } else {
        send_stream(&mut ctl, &file, len, offset, &remote, &stats)
    };
    progress.finish();
    let streams = r?;
    let elapsed = t0.elapsed();
    let mut detail = format!(
        "{}, {streams} stream{}",
        if extended { "MODE E" } else { "MODE S" },
        if streams == 1 { "" } else { "s" }
    );
    if offset > 0 {
        detail.push_str(&format!(", resumed at {offset}"));
    } else if !resumed.is_empty() {
        detail.push_str(", sent from 0");
    }
    if a.verify {
        let v = session::verify(&mut ctl, &remote, &a.file).map_err(|e| {
            e.with_advice(|| {
                "the server's copy differs from the local file: upload again without --continue"
                    .into()
            })
        })?;
        detail.push_str(&format!(", verified {v}"));
    }
    ctl.quit();
    eprintln!(
        "{}",
        stats::summary("sent", stats.bytes.load(Relaxed), elapsed, &detail)
    );
    stats.print_end(
        a.opts.stats,
        if extended { "MODE E" } else { "MODE S" },
        elapsed,
    );
    Ok(())
}

/// `--continue`: where to start, and a sentence saying why. The server's
/// bytes are kept only when its checksum of them equals ours: a size alone
/// does not say they are the start of *this* file (an older file of the
/// same name, or an interrupted upload of another one, has a size too).
pub(crate) fn resume_offset(
    ctl: &mut Control,
    remote: &str,
    file: &File,
    len: u64,
    local: &Path,
) -> Result<(u64, String)> {
    let Some(have) = session::size(ctl, remote)?.filter(|&n| n > 0) else {
        return Ok((
            0,
            "the server has nothing of this file: sending it all".into(),
        ));
    };
    if have > len {
        return Ok((
            0,
            format!(
                "the server has {have} bytes, more than {} ({len}): sending it all again",
                local.display()
            ),
        ));
    }
    let (algo, server) = match session::server_checksum_of(ctl, remote, 0, Some(have)) {
        Ok(c) => c,
        // Nothing better can be done against a server without checksums
        // (vsftpd): the resume is what was asked for; say it is unchecked.
        Err(ClientError::NoChecksum(why)) => {
            return Ok((
                have,
                format!("resuming at {have} without checking the server's bytes ({why})"),
            ))
        }
        Err(e) => return Err(e),
    };
    let mine = crate::checksum::prefix(file, have, algo)
        .map_err(|e| ClientError::local(format!("checksum {}", local.display()), e))?;
    if crate::checksum::same(&server, &mine) {
        Ok((
            have,
            format!(
                "resuming at {have}: the server's first {have} bytes match ({} {mine})",
                algo.name()
            ),
        ))
    } else {
        Ok((
            0,
            format!(
                "the server's first {have} bytes differ from {} ({} {server}, local {mine}): sending it all again",
                local.display(),
                algo.name()
            ),
        ))
    }
}

/// A URL ending in `/` names a directory: append the local file name.
fn remote_path(url_path: &str, local: &Path) -> Result<String> {
    if !url_path.ends_with('/') {
        return Ok(url_path.to_string());
    }
    let name = local
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| ClientError::Usage("local file name is not UTF-8".into()))?;
    Ok(format!("{url_path}{name}"))
}

/// MODE S: one connection, the bytes in order, close = end of file.
pub(crate) fn send_stream(
    ctl: &mut Control,
    file: &File,
    len: u64,
    offset: u64,
    remote: &str,
    stats: &Stats,
) -> Result<u64> {
    let to = data::passive(ctl)?;
    let mut sock = ctl.data_sock(data::connect(to, ctl.timeout())?)?;
    let cmd = if offset > 0 {
        // APPE, not REST + STOR: what the server has was read with SIZE
        // (and checked with CKSM), and Sluice continues with REST + STOR
        // only an interrupted upload, while APPE also extends a complete
        // file (docs/SECURITY.md, "Partial uploads").
        format!("APPE {remote}")
    } else {
        format!("STOR {remote}")
    };
    let first = ctl.cmd(&cmd)?;
    if !first.code.is_preliminary() {
        return Err(refused("STOR", &first));
    }
    Stats::add(&stats.streams, 1);
    let _ = sock.tcp().set_write_timeout(Some(ctl.timeout()));
    let _ = sock.tcp().set_read_timeout(Some(ctl.timeout()));
    let mut f = file;
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| ClientError::local("seek", e))?;
    let mut left = len - offset;
    while left > 0 {
        // std::io::copy from a File to a TcpStream uses sendfile on Linux.
        let n = match std::io::copy(&mut f.take(left.min(STREAM_ROUND)), &mut sock) {
            Ok(n) => n,
            Err(e) => return Err(why_send_failed(ctl, e)),
        };
        if n == 0 {
            return Err(ClientError::local(
                "read",
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "file shrank while sending",
                ),
            ));
        }
        left -= n;
        Stats::add(&stats.bytes, n);
        Stats::add(&stats.socket_calls, 1);
    }
    let _ = sock.flush();
    count_retransmits(sock.tcp(), stats);
    // TLS: close_notify, so the server knows the end is the end.
    sock.finish();
    drop(sock);
    // Every byte is out: from here on, silence is a timeout.
    let last = final_reply(ctl, || false, stats)?;
    if !last.code.is_completion() {
        return Err(refused("transfer", &last));
    }
    Ok(1)
}

/// The data connection broke while sending: a server that stops an upload
/// (452 disk full, 426 aborted) closes it and says why on the control
/// connection. That reply is the error (exit 5) when it comes within one
/// `--timeout`; otherwise the send error is.
fn why_send_failed(ctl: &mut Control, e: std::io::Error) -> ClientError {
    let deadline = Instant::now() + ctl.timeout();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match ctl.poll_reply(left) {
            Ok(Some(r)) if r.code.is_preliminary() => continue,
            Ok(Some(r)) if r.code.is_failure() => return refused("transfer", &r),
            _ => break,
        }
    }
    ClientError::net("send data", e)
}

/// MODE E: `-p N` streams, blocks of `--block-size` handed out in file
/// order to whichever stream is free.
pub(crate) fn send_extended(
    ctl: &mut Control,
    file: &File,
    len: u64,
    offset: u64,
    remote: &str,
    a: &PutArgs,
    stats: &Arc<Stats>,
) -> Result<u64> {
    let n = a.opts.parallel as usize;
    let to = data::passive(ctl)?;
    let _ = ctl.cmd(&format!("ALLO {len}"))?; // a hint; refusals do not matter
    let cmd = if offset > 0 {
        // Adjusted store: block offsets count from `offset`.
        format!("ESTO A {offset} {remote}")
    } else {
        format!("STOR {remote}")
    };
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        // PROT P: each a TLS client; the handshake runs on the first write,
        // after the server has taken STOR and secures what it accepted.
        socks.push(ctl.data_sock(data::connect(to, ctl.timeout())?)?);
    }
    let first = ctl.cmd(&cmd)?;
    if !first.code.is_preliminary() {
        return Err(refused("STOR", &first));
    }
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let mut threads: Vec<JoinHandle<Result<DataSock>>> = Vec::with_capacity(n);
    for (i, mut sock) in socks.into_iter().enumerate() {
        let file = file
            .try_clone()
            .map_err(|e| ClientError::local("dup file", e))?;
        let (next, failed, stats) = (next.clone(), failed.clone(), stats.clone());
        let bs = a.opts.block_size;
        let timeout = ctl.timeout();
        let eof = (i == 0).then_some(n as u64);
        threads.push(
            std::thread::Builder::new()
                .name(format!("sluice-send-{i}"))
                .spawn(move || {
                    let _ = sock.tcp().set_write_timeout(Some(timeout));
                    let _ = sock.tcp().set_read_timeout(Some(timeout));
                    Stats::add(&stats.streams, 1);
                    // Under TLS the stream ends here (CLOSE, close_notify):
                    // a TLS data connection is not cached for the next file.
                    let tls = sock.is_tls();
                    let r = send_blocks(&mut sock, &file, len, offset, bs, &next, &failed, &stats)
                        .and_then(|()| {
                            sock.write_all(&BlockHeader::end(eof, tls).encode())
                                .and_then(|()| sock.flush())
                                .map_err(|e| ClientError::net("send EOD", e))
                        });
                    count_retransmits(sock.tcp(), &stats);
                    if tls && r.is_ok() {
                        sock.finish();
                    }
                    if r.is_err() {
                        failed.store(true, Relaxed);
                    }
                    r.map(|()| sock)
                })
                .map_err(|e| ClientError::local("start sender thread", e))?,
        );
    }
    // While a sender runs, its own write timeout watches the data; once
    // all are done, the wait for the final reply is what may time out.
    let sending = || !threads.iter().all(|t| t.is_finished());
    let last = final_reply(ctl, sending, stats);
    let mut socks = Vec::new();
    let mut send_err = None;
    for t in threads {
        match t.join() {
            Ok(Ok(s)) => socks.push(s),
            Ok(Err(e)) => send_err = send_err.or(Some(e)),
            Err(_) => {
                send_err = send_err.or(Some(ClientError::Bug("sender thread panicked".into())))
            }
        }
    }
    let last = last?;
    if !last.code.is_completion() {
        return Err(refused("transfer", &last));
    }
    if let Some(e) = send_err {
        return Err(e);
    }
    drop(socks); // only now: the server reads EODs before it answers 226
    Ok(n as u64)
}

#[allow(clippy::too_many_arguments)]
fn send_blocks(
    sock: &mut impl Write,
    file: &File,
    len: u64,
    base: u64,
    bs: u64,
    next: &AtomicU64,
    failed: &AtomicBool,
    stats: &Stats,
) -> Result<()> {
    let mut buf = vec![0u8; bs as usize];
    loop {
        if failed.load(Relaxed) {
            return Ok(());
        }
        let idx = next.fetch_add(1, Relaxed);
        let Some(off) = idx.checked_mul(bs).and_then(|o| o.checked_add(base)) else {
            return Ok(());
        };
        if off >= len {
            return Ok(());
        }
        let n = (len - off).min(bs) as usize;
        file.read_exact_at(&mut buf[..n], off)
            .map_err(|e| ClientError::local("read", e))?;
        let hdr = BlockHeader::data(off - base, n as u64).encode();
        sock.write_all(&hdr)
            .map_err(|e| ClientError::net("send data", e))?;
        sock.write_all(&buf[..n])
            .map_err(|e| ClientError::net("send data", e))?;
        Stats::add(&stats.bytes, n as u64);
        Stats::add(&stats.blocks, 1);
        Stats::add(&stats.socket_calls, 2);
    }
}

/// Adds what the kernel retransmitted on `sock` to the stats, and its
/// accounting of what limited the sending (counted when the last byte is
/// queued, so a few late retransmissions may be missed). The connection's
/// time is taken as its busy time: the verdict splits the time data was
/// in flight between the server's window, our buffer and the network.
fn count_retransmits(sock: &TcpStream, stats: &Stats) {
    use sluice_platform::tcp::{tcp_info, TcpInfo};
    if let Ok(info) = tcp_info(sock.as_fd()) {
        Stats::add(&stats.tcp_retransmits, u64::from(info.total_retrans));
        Stats::add(&stats.tcp_rtos, u64::from(info.total_rto));
        let busy = std::time::Duration::from_micros(info.busy_time_us);
        stats.add_send_tally(&sluice_engine::verdict::SendTally::between(
            &TcpInfo::default(),
            &info,
            busy,
        ));
    }
}

/// After the last byte of an upload, the final reply may take this many
/// `--timeout`s: the server is still writing (Sluice fsyncs before it
/// renames; a large upload can leave gigabytes of dirty pages for a slow
/// disk), and giving up then would call a good upload failed. A server
/// that never answers is still given up on (5 minutes by default).
const FINAL_REPLY_TIMEOUTS: u32 = 5;

/// Reads replies until the final one, counting markers. While `sending()`
/// says the data is still going out, silence is not a timeout.
fn final_reply(ctl: &mut Control, sending: impl Fn() -> bool, stats: &Stats) -> Result<Reply> {
    let mut quiet_since = Instant::now();
    let limit = ctl.timeout() * FINAL_REPLY_TIMEOUTS;
    loop {
        match ctl.poll_reply(Duration::from_millis(200))? {
            Some(r) if r.code.0 == 111 => Stats::add(&stats.restart_markers, 1),
            Some(r) if r.code.0 == 112 => Stats::add(&stats.perf_markers, 1),
            Some(r) if r.code.is_preliminary() => {}
            Some(r) => return Ok(r),
            None => {}
        }
        if !sending() {
            if quiet_since.elapsed() > limit {
                return Err(ClientError::net(
                    "waiting for the end-of-transfer reply",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                ));
            }
        } else {
            quiet_since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_url_gets_local_name() {
        assert_eq!(
            remote_path("/up/", Path::new("/tmp/a.bin")).unwrap(),
            "/up/a.bin"
        );
        assert_eq!(
            remote_path("/up/b", Path::new("/tmp/a.bin")).unwrap(),
            "/up/b"
        );
    }
}
