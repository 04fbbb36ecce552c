//! Files of `sluice put -r` over one kept MODE E data connection per
//! worker (GridFTP data channel caching, the upload side of
//! [`super::ftp_kept`]): `MODE E` and `EPSV`/`PASV` once, one connection
//! to the server, then each file is a `STOR` whose blocks end with
//! EOD|EOF (count 1) but without CLOSE, so the receiver keeps the
//! connection for the next `STOR` on the same channel (Sluice's server:
//! `Event::Kept`; globus-gridftp-server does the same for
//! globus-url-copy `-pp`). No connection setup, no slow start per file.
//!
//! Pipelined: the next files' `STOR`s (and `MFMT`s) and their data go out
//! before this file's replies are read, so the connection never waits a
//! round trip for a `125` between files. The server reads each file's
//! blocks exactly to its EOD (the next file's bytes wait in the socket
//! until their `STOR` takes the connection). Because data is ahead of
//! the server's answer, a refused `STOR` with files behind it gives the
//! whole connection up: a server that kept the channel across the
//! refusal would have taken the refused file's bytes for the next name,
//! and the retry of every file behind it, on a new connection, writes
//! them right.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use sluice_ftp::mode_e::{BlockHeader, HEADER_LEN};

use super::ftp::Conn;
use super::ftp_kept::lost;
use crate::error::{ClientError, Result};
use crate::ftp::control::{one_line, refused};
use crate::ftp::data;
use crate::stats::Stats;
use sluice_ftp::reply::Reply;

/// A worker connection's kept MODE E upload channel.
#[derive(Debug, Default)]
pub(super) struct KeptUpload {
    /// `MODE E` is set on the control connection.
    mode_e: bool,
    /// Our connection to the server's passive listener, kept.
    sock: Option<TcpStream>,
    /// The server refused `MODE E`: files go the MODE S way.
    refused: bool,
    /// Files whose `STOR` and data are out, in order (their replies come
    /// next on the control connection).
    pending: VecDeque<Sent>,
}

/// A file whose `STOR` (and maybe `MFMT`) and data went out.
#[derive(Debug)]
struct Sent {
    remote: String,
    len: u64,
    mfmt: bool,
}

/// One file to send: remote path, local path, modification time.
pub(super) struct Upfile<'a> {
    pub(super) remote: String,
    pub(super) local: &'a Path,
    pub(super) mtime: Option<i64>,
}

impl KeptUpload {
    /// A channel whose `MODE E` (`mode_e`: taken, else refused) and data
    /// connection (`sock`, if made) the login set up.
    pub(super) fn set_up(
        mode_e: bool,
        sock: Option<TcpStream>,
        timeout: std::time::Duration,
    ) -> KeptUpload {
        let sock = sock.filter(|_| mode_e);
        if let Some(s) = &sock {
            let _ = s.set_write_timeout(Some(timeout));
        }
        KeptUpload {
            mode_e,
            refused: !mode_e,
            sock,
            ..KeptUpload::default()
        }
    }

    /// Whether files may go this way on `c`: a GridFTP server (FEAT
    /// `PARALLEL`), MODE E not refused, one stream per file (`-p 1`), no
    /// TLS on data connections (kept connections are clear ones).
    pub(super) fn usable(c: &Conn) -> bool {
        c.gridftp && !c.up.refused && !c.extended && !c.ctl.is_tls()
    }

    /// Before a MODE S transfer on the same control connection: back to
    /// MODE S (which makes the server drop what it kept).
    pub(super) fn leave(c: &mut Conn) -> Result<()> {
        if c.up.mode_e {
            if !c.up.pending.is_empty() {
                return Err(ClientError::Bug(
                    "MODE S with pipelined MODE E uploads out".into(),
                ));
            }
            c.up.mode_e = false;
            c.up.sock = None;
            c.ctl.expect_ok("MODE S", "MODE S")?;
        }
        Ok(())
    }
}

/// Uploads `this` on the kept channel, with the `upcoming` files' STORs
/// and data sent ahead of its replies. Returns its bytes; `Ok(None)`:
/// the server has no MODE E, the caller uses MODE S.
pub(super) fn store(
    c: &mut Conn,
    this: &Upfile,
    upcoming: &[Upfile],
    block: u64,
    stats: &Arc<Stats>,
) -> Result<Option<u64>> {
    // This file's first reply, when read before the files behind it went
    // out.
    let mut first = None;
    match c.up.pending.front() {
        Some(p) if p.remote == this.remote => {}
        Some(p) => {
            return Err(ClientError::Bug(format!(
                "pipelined STOR {} is not the file due ({})",
                p.remote, this.remote
            )))
        }
        None => {
            if c.up.refused {
                return Ok(None);
            }
            // Opened before anything goes out: a local failure leaves the
            // connection in step.
            let file = open(this.local)?;
            let mut to = None;
            if !c.up.mode_e {
                // MODE E and EPSV in one round trip.
                let (r, a) = data::passive_after(&mut c.ctl, &["MODE E"])?;
                if !r.first().is_some_and(|r| r.code.is_completion()) {
                    c.up.refused = true;
                    return Ok(None);
                }
                c.up.mode_e = true;
                c.up.sock = None;
                to = Some(a);
            }
            send_one(c, this, &file, to, block, stats).map_err(lost)?;
            // Nothing is out behind this file (a worker's first file, or
            // the first after a refusal): its answer comes before the next
            // files' data, so a refused file (a whole tree refused, say)
            // is refused alone and the connection stays in step. One round
            // trip per run of files, not per file.
            first = Some(c.ctl.read_reply().map_err(lost)?);
            if first.as_ref().is_some_and(|r| !r.code.is_preliminary()) {
                return finish(c, first, false);
            }
        }
    }
    let behind: Vec<&str> =
        c.up.pending
            .iter()
            .skip(1)
            .map(|p| p.remote.as_str())
            .collect();
    if behind.len() > upcoming.len() || behind.iter().zip(upcoming).any(|(b, u)| *b != u.remote) {
        return Err(ClientError::Bug(
            "pipelined STORs are not the files due next".into(),
        ));
    }
    for n in &upcoming[behind.len()..] {
        // A file that cannot be opened now fails in its own turn.
        let Ok(file) = open(n.local) else { break };
        send_one(c, n, &file, None, block, stats).map_err(lost)?;
    }
    finish(c, first, true)
}

/// Reads the rest of the pending head file's replies (after `first`, if
/// read already) and its MFMT's: its bytes, or its refusal. With files
/// behind it (`ahead`: their data is out), a refusal gives the
/// connection up (see the module's note).
fn finish(c: &mut Conn, first: Option<Reply>, ahead: bool) -> Result<Option<u64>> {
    let sent =
        c.up.pending
            .pop_front()
            .ok_or_else(|| ClientError::Bug("no pipelined STOR for this file".into()))?;
    let mut r = match first {
        Some(r) => r,
        None => c.ctl.read_reply().map_err(lost)?,
    };
    while r.code.is_preliminary() {
        r = c.ctl.read_reply().map_err(lost)?;
    }
    if sent.mfmt {
        // Keeps the modification time on the server (a later --sync
        // compares it); a refusal only costs that.
        let m = c.ctl.read_reply().map_err(lost)?;
        if !m.code.is_completion() {
            tracing::info!("MFMT refused: {}", one_line(&m));
        }
    }
    if !r.code.is_completion() {
        let e = refused("STOR", &r);
        if ahead && !c.up.pending.is_empty() {
            return Err(lost(e));
        }
        // The server forgets its data channel after a failed transfer: a
        // new one (EPSV, connect) for the next file.
        c.up.sock = None;
        return Err(e);
    }
    Ok(Some(sent.len))
}

fn open(p: &Path) -> Result<File> {
    File::open(p).map_err(|e| ClientError::local(format!("open {}", p.display()), e))
}

/// Sends `f`'s `STOR` (and `MFMT`) and its blocks on the kept connection
/// (made first when there is none, to `to` if the passive address is in
/// already), and notes it pending.
fn send_one(
    c: &mut Conn,
    f: &Upfile,
    file: &File,
    to: Option<std::net::SocketAddr>,
    block: u64,
    stats: &Stats,
) -> Result<()> {
    let len = file
        .metadata()
        .map_err(|e| ClientError::local(format!("stat {}", f.local.display()), e))?
        .len();
    let to = match (&c.up.sock, to) {
        (Some(_), _) => None,
        (None, Some(a)) => Some(a),
        (None, None) => Some(data::passive(&mut c.ctl)?),
    };
    let mut lines = vec![format!("STOR {}", f.remote)];
    let mfmt = f.mtime.filter(|_| c.mfmt);
    if let Some(t) = mfmt {
        lines.push(format!(
            "MFMT {} {}",
            sluice_ftp::listing::mdtm(t),
            f.remote
        ));
    }
    c.ctl.send_lines(&lines)?;
    if let Some(to) = to {
        let tcp = data::connect(to, c.ctl.timeout())?;
        let _ = tcp.set_write_timeout(Some(c.ctl.timeout()));
        c.up.sock = Some(tcp);
        Stats::add(&stats.streams, 1);
    }
    let sock =
        c.up.sock
            .as_mut()
            .ok_or_else(|| ClientError::Bug("kept upload without a connection".into()))?;
    write_blocks(sock, &mut c.buf, file, f.local, len, block, stats)?;
    c.up.pending.push_back(Sent {
        remote: f.remote.clone(),
        len,
        mfmt: mfmt.is_some(),
    });
    Ok(())
}

/// Writes `len` bytes of `file` as MODE E blocks of at most `block`
/// bytes, each header and its payload in one write, the last with
/// EOD|EOF (count 1: this one connection carries the whole file) and no
/// CLOSE, so the receiver keeps the connection.
fn write_blocks(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    file: &File,
    local: &Path,
    len: u64,
    block: u64,
    stats: &Stats,
) -> Result<()> {
    let end = BlockHeader::eod_eof(1).encode();
    let mut at = 0u64;
    loop {
        let n = (len - at).min(block.max(1));
        let last = at + n == len;
        buf.clear();
        buf.extend_from_slice(&BlockHeader::data(at, n).encode());
        buf.resize(HEADER_LEN + n as usize, 0);
        file.read_exact_at(&mut buf[HEADER_LEN..], at)
            .map_err(|e| {
                ClientError::local(format!("read {} (changed while sent?)", local.display()), e)
            })?;
        if last {
            buf.extend_from_slice(&end);
        }
        if n > 0 || last {
            // A zero-length file is only the end header (its data block
            // of 0 bytes is dropped).
            let from = if n == 0 { HEADER_LEN } else { 0 };
            sock.write_all(&buf[from..])
                .map_err(|e| ClientError::net("send MODE E data", e))?;
        }
        at += n;
        Stats::add(&stats.bytes, n);
        if last {
            return Ok(());
        }
    }
}
