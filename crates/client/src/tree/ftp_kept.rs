//! Files of `sluice get -r` over one kept MODE E data connection
//! (GridFTP data channel caching, as globus-url-copy `-pp` does against
//! globus-gridftp-server): `MODE E` and `PORT`/`EPRT` once per worker
//! connection, then each file is a `RETR` whose blocks end with EOD but
//! without CLOSE, so the data connection stays open and the next file
//! (answered `125`) costs its bytes and no connection setup or slow
//! start (a large file keeps the window the last one opened, as an HTTP
//! client's kept-alive connection does). The next file's `RETR` goes out as soon as this one's
//! `125`/`150` is in.
//!
//! Active, not passive: in MODE E the sender connects (GFD.20);
//! globus-gridftp-server refuses a MODE E RETR on a passive channel
//! ("Call local_port or local_spor before calling connect_write"), and
//! `sluice get -p N` already listens for MODE E the same way.
//!
//! The blocks of one file are read exactly (header, then its payload), so
//! the next file's bytes stay in the socket for the next call. A server
//! that ends with CLOSE (or answers `150` while we hold a kept
//! connection) connects anew to our listener.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use sluice_ftp::mode_e::{BlockHeader, Descriptor, HEADER_LEN};

use super::ftp::{set_mtime, with_ext, Conn, Fetch, INLINE_BUF};
use crate::error::{ClientError, Result};
use crate::ftp::control::{refused, Control};
use crate::ftp::data;
use crate::stats::Stats;
use sluice_ftp::reply::Reply;

/// The worker connection's MODE E channel for small files.
#[derive(Debug, Default)]
pub(super) struct KeptChannel {
    /// `MODE E` is set on the control connection.
    mode_e: bool,
    /// Our listener the server connects to (`None`: PORT is due).
    listener: Option<TcpListener>,
    /// The data connection the server keeps sending on.
    sock: Option<TcpStream>,
    /// The server refused `MODE E`: small files go the MODE S way.
    refused: bool,
    /// The `RETR`s sent ahead for the next files, in order (their
    /// replies come next).
    pub(super) pending: std::collections::VecDeque<String>,
}

impl KeptChannel {
    /// A channel for listings sent behind `MODE E` and PORT before their
    /// answers: the listener is kept whatever the mode (MODE S listings
    /// connect to it too, [`read_sent`]).
    pub(super) fn speculative(mode_e: bool, listener: TcpListener) -> KeptChannel {
        KeptChannel {
            mode_e,
            refused: !mode_e,
            listener: Some(listener),
            ..KeptChannel::default()
        }
    }

    /// `MODE E` is set on the control connection.
    pub(super) fn in_mode_e(&self) -> bool {
        self.mode_e
    }

    /// A channel whose `MODE E` (`mode_e`: taken, else refused) and PORT
    /// (`listener`) the caller sent already.
    pub(super) fn set_up(mode_e: bool, listener: Option<TcpListener>) -> KeptChannel {
        KeptChannel {
            mode_e,
            refused: !mode_e,
            listener: listener.filter(|_| mode_e),
            ..KeptChannel::default()
        }
    }

    /// Whether small files may go this way on `c`: a GridFTP server (FEAT
    /// `PARALLEL`), MODE E not refused, no TLS on data connections (the
    /// server keeps clear ones only).
    pub(super) fn usable(c: &Conn) -> bool {
        c.gridftp && !c.kept.refused && !c.extended && !c.ctl.is_tls()
    }

    /// Before a MODE S transfer on the same control connection: back to
    /// MODE S (which drops the server's kept connections).
    pub(super) fn leave(c: &mut Conn) -> Result<()> {
        if c.kept.mode_e {
            c.kept.mode_e = false;
            c.kept.listener = None;
            c.kept.sock = None;
            c.ctl.expect_ok("MODE S", "MODE S")?;
        }
        Ok(())
    }
}

/// An error after which the control or data connection is out of step
/// (a download or an upload on the kept channel): the connection is given
/// up (a network error) and the file retried on a new one.
pub(super) fn lost(e: ClientError) -> ClientError {
    match e {
        ClientError::Network { .. } => e,
        e => ClientError::net(
            "kept MODE E connection",
            std::io::Error::other(format!("dropped out of step: {e}")),
        ),
    }
}

/// Downloads small file `rel` (remote `remote`) on the kept channel.
/// `Ok(None)`: the server has no MODE E; the caller uses MODE S.
pub(super) fn fetch(
    c: &mut Conn,
    remote: &str,
    root: &Path,
    rel: &str,
    f: &Fetch,
    upcoming: &[String],
    stats: &Arc<Stats>,
) -> Result<Option<u64>> {
    if c.kept.pending.is_empty() && !c.kept.mode_e {
        // MODE E and PORT in one round trip.
        let (r, l) = data::active_after(&mut c.ctl, &["MODE E"])?;
        if !r.first().is_some_and(|r| r.code.is_completion()) {
            c.kept.refused = true;
            return Ok(None);
        }
        c.kept.mode_e = true;
        c.kept.sock = None;
        c.kept.listener = Some(l);
    }
    let path = root.join(rel);
    let part = with_ext(&path, ".part");
    // Before this file's RETR is sent or its reply taken: a local failure
    // leaves the connection in step (the caller discards a pending RETR).
    let mut file = File::create(&part)
        .map_err(|e| ClientError::local(format!("create {}", part.display()), e))?;
    match c.kept.pending.pop_front() {
        Some(p) if p == remote => {}
        Some(p) => {
            return Err(ClientError::Bug(format!(
                "pipelined RETR {p} is not the file due ({remote})"
            )))
        }
        None => {
            if c.kept.listener.is_none() {
                c.kept.sock = None;
                c.kept.listener = Some(data::active(&mut c.ctl)?);
            }
            c.ctl.send(&format!("RETR {remote}"))?;
        }
    }
    match start(&mut c.ctl, &mut c.kept).map_err(lost)? {
        Ok(()) => {}
        Err(r) => {
            c.kept.listener = None;
            drop(file);
            let _ = std::fs::remove_file(&part);
            return Err(refused("RETR", &r));
        }
    }
    Stats::add(&stats.streams, 1);
    // The next files' RETRs go out now (those not out yet): the server
    // answers each right behind the last one's 226 and sends its blocks on
    // the same connection, without waiting for our next request.
    if !upcoming.starts_with(c.kept.pending.make_contiguous()) {
        return Err(ClientError::Bug(
            "pipelined RETRs are not the files due next".into(),
        ));
    }
    let ahead: Vec<String> = upcoming[c.kept.pending.len()..]
        .iter()
        .map(|n| format!("RETR {n}"))
        .collect();
    c.ctl.send_lines(&ahead)?;
    c.kept
        .pending
        .extend(upcoming[c.kept.pending.len()..].iter().cloned());
    let sock = c.kept.sock.as_mut();
    let (got, closes) =
        read_blocks(sock, &mut c.buf, &mut file, &part, f.size, stats).map_err(lost)?;
    if closes {
        c.kept.sock = None;
    }
    let last = final_reply(&mut c.ctl).map_err(lost)?;
    if !last.code.is_completion() {
        return Err(lost(refused("transfer", &last)));
    }
    drop(file);
    std::fs::rename(&part, &path)
        .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
    set_mtime(&path, f.mtime);
    let _ = std::fs::remove_file(with_ext(&path, ".part.resume"));
    Ok(Some(got))
}

/// Reads the reply to a RETR or MLSD sent on the kept channel and makes
/// sure the data connection it announces is there: `125` is the kept one,
/// `150` a new one the server makes to our listener. A refusal (the file
/// is gone) is `Err(reply)`; the server then forgets its data channel
/// too (so do we, unless the caller reads more replies first).
fn start(ctl: &mut Control, kept: &mut KeptChannel) -> Result<std::result::Result<(), Reply>> {
    let r = ctl.read_reply()?;
    if !r.code.is_preliminary() {
        kept.sock = None;
        return Ok(Err(r));
    }
    if r.code.0 == 125 && kept.sock.is_none() {
        return Err(ClientError::Protocol(
            "125 (data connection open) but none is kept".into(),
        ));
    }
    if r.code.0 != 125 {
        // The server connects anew (the first file, or it dropped what it
        // kept): whatever we held is over.
        kept.sock = None;
        accept(ctl, kept)?;
    }
    Ok(Ok(()))
}

/// Takes the server's connection to our listener, within the timeout.
fn accept(ctl: &Control, kept: &mut KeptChannel) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let l = kept
        .listener
        .as_ref()
        .ok_or_else(|| ClientError::Bug("kept channel without a listener".into()))?;
    let ms = u16::try_from(ctl.timeout().as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, PollTimeout::from(ms))
        .map_err(|e| ClientError::net("wait for the data connection", e.into()))?;
    if ready == 0 {
        return Err(ClientError::net(
            "wait for the data connection",
            std::io::Error::from(std::io::ErrorKind::TimedOut),
        ));
    }
    let (tcp, _) = l
        .accept()
        .map_err(|e| ClientError::net("accept the data connection", e))?;
    let _ = tcp.set_read_timeout(Some(ctl.timeout()));
    kept.sock = Some(tcp);
    Ok(())
}

/// Reads one file's blocks up to its EOD: they must come in file order
/// and add up to `size` (one stream carries the whole file, and the EOF
/// must count exactly that stream). Returns the bytes and whether the
/// server closes the connection (CLOSE with the EOD).
fn read_blocks(
    kept: Option<&mut TcpStream>,
    buf: &mut Vec<u8>,
    file: &mut dyn Write,
    part: &Path,
    size: Option<u64>,
    stats: &Stats,
) -> Result<(u64, bool)> {
    if buf.len() < INLINE_BUF {
        buf.resize(INLINE_BUF, 0);
    }
    let sock = kept.ok_or_else(|| ClientError::Bug("kept channel without a connection".into()))?;
    let mut got = 0u64;
    let mut eof = None;
    let mut closes = false;
    loop {
        let mut hdr = [0u8; HEADER_LEN];
        sock.read_exact(&mut hdr)
            .map_err(|e| ClientError::net("read MODE E header", e))?;
        let (h, _) = BlockHeader::decode(&hdr)
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .ok_or_else(|| ClientError::Bug("a whole header did not decode".into()))?;
        let d = h.descriptor;
        if d.has(Descriptor::EOF) {
            eof = Some(h.offset);
        } else if h.count > 0 {
            if h.offset != got {
                return Err(ClientError::Protocol(format!(
                    "MODE E block at {} on a kept connection, expected {got}",
                    h.offset
                )));
            }
            if size.is_some_and(|s| h.count > s - got) {
                return Err(ClientError::Protocol(format!(
                    "MODE E block past the end ({} bytes at {got} of {})",
                    h.count,
                    size.unwrap_or(0)
                )));
            }
            let mut left = h.count;
            while left > 0 {
                let want = (left as usize).min(buf.len());
                sock.read_exact(&mut buf[..want])
                    .map_err(|e| ClientError::net("read MODE E data", e))?;
                file.write_all(&buf[..want])
                    .map_err(|e| ClientError::local(format!("write {}", part.display()), e))?;
                left -= want as u64;
                got += want as u64;
                Stats::add(&stats.bytes, want as u64);
                Stats::add(&stats.bytes_written, want as u64);
            }
        }
        if d.has(Descriptor::EOD) {
            if d.has(Descriptor::CLOSE) {
                // The server closes this one: the next transfer gets a new
                // one (its reply is 150).
                closes = true;
            }
            break;
        }
    }
    if eof != Some(1) {
        return Err(ClientError::Protocol(format!(
            "MODE E on one kept connection ended with EOF count {eof:?}, not 1"
        )));
    }
    if size.is_some_and(|s| s != got) {
        return Err(ClientError::Protocol(format!(
            "MODE E sent {got} bytes of a {} byte file",
            size.unwrap_or(0)
        )));
    }
    Ok((got, closes))
}

/// Reads and drops the transfers whose RETRs are pending (a file before
/// them failed). Any trouble is a network error: the connection is
/// given up rather than reused out of step.
pub(super) fn discard_pending(c: &mut Conn) -> Result<()> {
    while c.kept.pending.pop_front().is_some() {
        match start(&mut c.ctl, &mut c.kept).map_err(lost)? {
            Ok(()) => {}
            Err(_) => {
                // Refused (or 425 behind a refusal): PORT anew next time.
                c.kept.listener = None;
                continue;
            }
        }
        let sock = c.kept.sock.as_mut();
        let (_, closes) = read_blocks(
            sock,
            &mut c.buf,
            &mut std::io::sink(),
            Path::new("(discarded)"),
            None,
            &Stats::default(),
        )
        .map_err(lost)?;
        if closes {
            c.kept.sock = None;
        }
        final_reply(&mut c.ctl).map_err(lost)?;
    }
    Ok(())
}

/// MLSDs sent ahead of their replies on the kept channel.
const LIST_WINDOW: usize = 32;

/// A listing's bytes, refused past `max` (a hostile server).
struct Bounded {
    bytes: Vec<u8>,
    max: usize,
}

impl Write for Bounded {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + b.len() > self.max {
            return Err(std::io::Error::other(format!(
                "listing larger than {} bytes",
                self.max
            )));
        }
        self.bytes.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The MLSD listings of `paths` over the kept MODE E channel, pipelined:
/// up to [`LIST_WINDOW`] `MLSD`s go out before their replies are read,
/// and the server sends listing after listing on one data connection, so
/// a level of D directories costs about one round trip, not D times
/// three (EPSV, connect, MLSD). `Ok(None)`: the server has no MODE E.
/// A refused listing is `Err` in its place; a failure makes the server
/// forget its data channel, so the MLSDs sent behind it (answered 425)
/// are sent again on a new one.
pub(super) fn list_many(
    ctl: &mut Control,
    kept: &mut KeptChannel,
    paths: &[String],
    max: usize,
) -> Result<Option<Vec<Result<Vec<u8>>>>> {
    if kept.refused {
        return Ok(None);
    }
    if !kept.mode_e {
        // GridFTP servers take MODE E in TYPE I only. TYPE, MODE and PORT
        // in one round trip.
        let (r, l) = data::active_after(ctl, &["TYPE I", "MODE E"])?;
        if !r[0].code.is_completion() {
            return Err(refused("TYPE I", &r[0]));
        }
        if !r[1].code.is_completion() {
            kept.refused = true;
            return Ok(None);
        }
        kept.mode_e = true;
        kept.sock = None;
        kept.listener = Some(l);
    }
    let mut out: Vec<Option<Result<Vec<u8>>>> = (0..paths.len()).map(|_| None).collect();
    let mut todo: std::collections::VecDeque<usize> = (0..paths.len()).collect();
    let mut buf = Vec::new();
    while !todo.is_empty() {
        if kept.listener.is_none() {
            kept.sock = None;
            kept.listener = Some(data::active(ctl)?);
        }
        let batch: Vec<usize> = todo.drain(..todo.len().min(LIST_WINDOW)).collect();
        let lines: Vec<String> = batch
            .iter()
            .map(|&i| format!("MLSD {}", paths[i]))
            .collect();
        ctl.send_lines(&lines)?;
        let mut broken = false;
        for &i in &batch {
            let what = format!("MLSD {}", super::plan::shown(&paths[i]));
            match start(ctl, kept)? {
                // No data channel any more after a failure: again later.
                Err(r) if broken && r.code.0 == 425 => todo.push_back(i),
                Err(r) => {
                    out[i] = Some(Err(refused(&what, &r)));
                    broken = true;
                }
                Ok(()) => {
                    let bytes = read_mode_e_listing(kept, &mut buf, max)?;
                    let last = final_reply(ctl)?;
                    out[i] = Some(if last.code.is_completion() {
                        Ok(bytes)
                    } else {
                        broken = true;
                        Err(refused(&what, &last))
                    });
                }
            }
        }
        if broken {
            kept.listener = None;
            kept.sock = None;
        }
    }
    Ok(Some(
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClientError::Bug("listing not read".into()))))
            .collect(),
    ))
}

/// One listing's bytes (at most `max`) from the kept MODE E channel, to
/// its EOD; the channel is forgotten when the server closes it.
fn read_mode_e_listing(kept: &mut KeptChannel, buf: &mut Vec<u8>, max: usize) -> Result<Vec<u8>> {
    let mut sink = Bounded {
        bytes: Vec::new(),
        max,
    };
    let (_, closes) = read_blocks(
        kept.sock.as_mut(),
        buf,
        &mut sink,
        Path::new("(listing)"),
        None,
        &Stats::default(),
    )?;
    if closes {
        kept.sock = None;
    }
    Ok(sink.bytes)
}

/// The reply that ends a transfer, past any preliminary ones.
fn final_reply(ctl: &mut Control) -> Result<Reply> {
    loop {
        let r = ctl.read_reply()?;
        if !r.code.is_preliminary() {
            return Ok(r);
        }
    }
}

/// Reads the listings of `paths`, whose MLSDs went out already (behind
/// the login and a PORT to `kept`'s listener, before the server's FEAT
/// was known: `put -r --sync`). In MODE E (`kept` took it) as
/// [`list_many`] reads them; else each came in MODE S on its own
/// connection to the listener, read to its end. `None` in a path's place:
/// not listed because an earlier one failed (the server dropped its data
/// channel: 425), to be listed again.
pub(super) fn read_sent(
    ctl: &mut Control,
    kept: &mut KeptChannel,
    paths: &[String],
    max: usize,
) -> Result<Vec<Option<Result<Vec<u8>>>>> {
    let mut out = Vec::with_capacity(paths.len());
    let mut buf = Vec::new();
    let (mut broken, mut no_channel) = (false, false);
    for path in paths {
        let what = format!("MLSD {}", super::plan::shown(path));
        match start(ctl, kept)? {
            // No data channel (any more): listed again later, on a new
            // one.
            Err(r) if r.code.0 == 425 => {
                no_channel = true;
                out.push(None);
                continue;
            }
            Err(r) => {
                broken = true;
                out.push(Some(Err(refused(&what, &r))));
                continue;
            }
            Ok(()) => {}
        }
        let bytes = if kept.mode_e {
            read_mode_e_listing(kept, &mut buf, max)?
        } else {
            // MODE S: the listing is the connection's bytes to its end.
            let mut sock = kept
                .sock
                .take()
                .ok_or_else(|| ClientError::Bug("listing without a connection".into()))?;
            let mut sink = Bounded {
                bytes: Vec::new(),
                max,
            };
            std::io::copy(&mut sock, &mut sink)
                .map_err(|e| ClientError::net("read MLSD listing", e))?;
            sink.bytes
        };
        let last = final_reply(ctl)?;
        out.push(Some(if last.code.is_completion() {
            Ok(bytes)
        } else {
            broken = true;
            Err(refused(&what, &last))
        }));
    }
    if broken || no_channel || !kept.mode_e {
        kept.listener = None;
        kept.sock = None;
    }
    Ok(out)
}
