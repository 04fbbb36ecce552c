//! `sluice get -r ftp://...` and `sluice put -r DIR ftp://...`: the I/O
//! half of tree transfers over FTP. The tree is listed first on one
//! connection (MLSD, breadth first), its directories created, then its
//! files moved by [`jobs::run`] workers that each reuse one connection.
//! Uploads are in [`super::ftp_put`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub(super) use super::ftp_conn::{open_for, Conn, Prepare};
use super::ftp_kept::{self, KeptChannel};
pub(super) use super::ftp_list::{list_entries, mlsd, Lister};
use super::jobs;
use super::plan::{self, Action};
pub(crate) use super::summary::{finish, JobProgress};
use super::sync::{self, Notes};
use crate::checksum;
use crate::cli::GetArgs;
use crate::error::{ClientError, Result};
use crate::ftp::control::refused;
use crate::ftp::get::Dest;
use crate::ftp::{data, get, session};
use crate::stats::Stats;
use crate::url::FtpUrl;
use crate::writer::{self, Sink};
use std::sync::atomic::AtomicU64;

/// Largest MLSD listing we read for one directory.
pub(super) const MAX_LISTING: usize = 256 << 20;

/// `base` (the URL's path) joined with a relative path.
pub(super) fn remote_join(base: &str, rel: &str) -> String {
    let base = base.trim_end_matches('/');
    if rel.is_empty() {
        if base.is_empty() {
            "/".into()
        } else {
            base.into()
        }
    } else {
        format!("{base}/{rel}")
    }
}

/// A file to download.
pub(super) struct Fetch {
    pub(super) size: Option<u64>,
    pub(super) mtime: Option<i64>,
}

/// Creates directory `p` inside the tree; an existing directory is fine,
/// an existing symlink is not (it could lead out of the tree).
pub(super) fn make_dir(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ClientError::local(
            format!("create directory {}", p.display()),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a directory (symlinks are not followed)",
            ),
        )),
        Err(_) => std::fs::create_dir(p)
            .map_err(|e| ClientError::local(format!("create directory {}", p.display()), e)),
    }
}

pub(super) fn with_ext(p: &Path, ext: &str) -> PathBuf {
    let mut s = p.to_path_buf().into_os_string();
    s.push(ext);
    PathBuf::from(s)
}

fn to_system_time(secs: i64) -> Option<SystemTime> {
    u64::try_from(secs)
        .ok()
        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

/// `sluice get -r`.
pub fn get_tree(u: &FtpUrl, a: &GetArgs) -> Result<()> {
    let root = match &a.dest {
        Some(d) => d.clone(),
        None => PathBuf::from(
            u.path
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .filter(|n| plan::check_name(n).is_ok())
                .unwrap_or("."),
        ),
    };
    if !root.is_dir() {
        std::fs::create_dir_all(&root)
            .map_err(|e| ClientError::local(format!("create directory {}", root.display()), e))?;
    }
    let timeout = Duration::from_secs(a.opts.timeout);
    let t0 = Instant::now();
    let workers = jobs::Workers::from_flag(a.tree.files);
    // The first workers log in while the tree is listed.
    let pre = {
        let (u, parallel) = (u.clone(), a.opts.parallel);
        jobs::Preopen::start(workers.initial, move || {
            open_for(&u, parallel, timeout, Prepare::Get)
        })
    };
    let mut ctl = crate::ftp::control::Control::connect(u, timeout)?;
    let mut marks = vec![("connected", Instant::now())];
    let mut files = Vec::new();
    let mut notes = Notes::default();
    let mut no_mlsd = false;
    let (mut lister, mut top) = Lister::login(&mut ctl, u)?;
    marks.push(("logged-in", Instant::now()));
    // Breadth first, a level at a time: a GridFTP server gets a level's
    // MLSDs pipelined on one kept MODE E connection.
    let mut level = vec![String::new()];
    while !level.is_empty() {
        let mut listed = match top.take() {
            // The first level, listed with the login.
            Some(raw) => Some(vec![Ok(raw)]),
            None => lister.list_level(&mut ctl, u, &level)?,
        };
        marks.push(("level", Instant::now()));
        let mut dirs = Vec::new();
        for (k, dir) in std::mem::take(&mut level).into_iter().enumerate() {
            let path = remote_join(&u.path, &dir);
            let entries = match listed.as_mut() {
                Some(v) => {
                    let raw = std::mem::replace(&mut v[k], Ok(Vec::new()))?;
                    plan::parse_mlsd(&raw).map_err(ClientError::Protocol)?
                }
                None => list_entries(&mut ctl, &path, &mut no_mlsd)?,
            };
            let actions = plan::plan_dir(&dir, &entries).map_err(|b| {
                ClientError::Protocol(format!(
                    "{}: {b}; refusing the whole tree",
                    plan::shown(&path)
                ))
            })?;
            if a.tree.delete {
                let keep = entries.iter().map(|e| e.name.clone()).collect();
                notes.deleted += sync::delete_local_extras(&root.join(&dir), &dir, &keep)?;
            }
            for act in actions {
                match act {
                    Action::Descend { rel } => {
                        make_dir(&root.join(&rel))?;
                        dirs.push(rel);
                    }
                    Action::Copy { rel, size, mtime } => {
                        let have = sync::local_have(&root.join(&rel));
                        if a.tree.sync
                            && !a.tree.checksum
                            && !plan::differs(size, mtime, have, true)
                        {
                            notes.uptodate += 1;
                            continue;
                        }
                        files.push((rel, Fetch { size, mtime }));
                    }
                    Action::Skip { rel, why } => {
                        notes.skipped += 1;
                        eprintln!("sluice: skipped {}: {why}", plan::shown(&rel));
                    }
                }
            }
        }
        level = dirs;
    }
    // The listing connection's QUIT waits for its 221 (a round trip) on
    // a thread of its own, not before the workers start.
    std::thread::spawn(move || ctl.quit());
    let same = AtomicU64::new(0);
    let total = files.len();
    let mut per_file = a.clone();
    per_file.opts.quiet = true;
    let sizes: Option<u64> = files.iter().map(|(_, f)| f.size).sum();
    let job = JobProgress::start(sizes, total, a.opts.quiet);
    // Pipelining sends the next file's commands early: only when nothing
    // else (CKSM, REST) goes between one file's commands and the next's.
    let lookahead = match !a.tree.checksum && !a.resume && a.opts.parallel <= 1 {
        true => jobs::Lookahead::files(PIPELINE_DEPTH),
        false => jobs::Lookahead::NONE,
    };
    let out = jobs::run_ahead(
        files,
        workers,
        lookahead,
        // A file of unknown size is not taken ahead.
        |f: &Fetch| f.size.unwrap_or(u64::MAX),
        &job.done,
        || {
            pre.take()
                .unwrap_or_else(|| open_for(u, a.opts.parallel, timeout, Prepare::Get))
        },
        |c, rel, f, attempt, next| {
            if a.tree.checksum
                && same_checksum(c, &remote_join(&u.path, rel), &root.join(rel), f.size)?
            {
                same.fetch_add(1, Relaxed);
                return Ok(0);
            }
            let resume = attempt > 0 || a.resume;
            let remote = remote_join(&u.path, rel);
            // Files of a known size on the MODE E channel kept open
            // between them (a small file costs one round trip, pipelined
            // away; a large one keeps the connection's window, as an HTTP
            // client's kept-alive connection does), else in MODE S.
            let use_kept = kept_ok(c, f, resume, a.verify);
            let kept = match use_kept {
                true => {
                    // The next files' RETRs go out too, as far as they go
                    // the same way.
                    let upcoming: Vec<String> = next
                        .iter()
                        .take_while(|(_, n)| kept_ok(c, n, false, a.verify))
                        .map(|(r, _)| remote_join(&u.path, r))
                        .collect();
                    ftp_kept::fetch(c, &remote, &root, rel, f, &upcoming, &job.stats)
                }
                false => Ok(None),
            };
            let r = match kept {
                Ok(Some(n)) => Ok(n),
                Err(e) => Err(e),
                Ok(None) => KeptChannel::leave(c).and_then(|()| {
                    if inline_ok(c, f, resume) {
                        let next = next
                            .first()
                            .filter(|(_, n)| c.epsv && inline_ok(c, n, false))
                            .map(|(r, _)| remote_join(&u.path, r));
                        fetch_inline(c, &remote, &root, rel, f, next, &job.stats)
                    } else {
                        fetch(c, u, &per_file, &root, rel, f, resume, &job.stats)
                    }
                }),
            };
            if r.is_err() && c.pending.is_some() {
                // The next file's commands are out: read their replies
                // (and data) so the connection stays in step, or give it up.
                discard_pending(c)?;
            }
            if r.is_err() && !c.kept.pending.is_empty() {
                ftp_kept::discard_pending(c)?;
            }
            r
        },
    );
    job.progress.finish();
    notes.same = same.into_inner();
    let mut out = out;
    out.timeline.marks = marks;
    finish(
        "received",
        out,
        total + notes.uptodate as usize,
        &notes,
        t0,
        a.opts.stats.is_some(),
    )
}

/// Downloads one file of the tree on a worker's connection.
#[allow(clippy::too_many_arguments)]
fn fetch(
    c: &mut Conn,
    u: &FtpUrl,
    a: &GetArgs,
    root: &Path,
    rel: &str,
    f: &Fetch,
    resume: bool,
    stats: &Arc<Stats>,
) -> Result<u64> {
    let path = root.join(rel);
    let part = with_ext(&path, ".part");
    let resume_file = with_ext(&path, ".part.resume");
    let mut already = if resume {
        get::resume_point(&part, &resume_file)
    } else {
        0
    };
    if f.size.is_some_and(|s| already > s) {
        already = 0;
    }
    let file = writer::open_part(&part, already)?;
    writer::save_prefix(&resume_file, already)?;
    if !(already > 0 && f.size == Some(already)) {
        let fu = FtpUrl {
            path: remote_join(&u.path, rel),
            ..u.clone()
        };
        let dest = Dest::File {
            path: path.clone(),
            part: part.clone(),
            resume: resume_file.clone(),
        };
        get::transfer(
            &mut c.ctl,
            &fu,
            a,
            c.extended,
            f.size,
            already,
            Sink::File(file),
            &dest,
            stats,
        )?;
    }
    std::fs::rename(&part, &path)
        .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
    let _ = std::fs::remove_file(&resume_file);
    set_mtime(&path, f.mtime);
    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
    Ok(len.saturating_sub(already))
}

/// Files a worker has asked for ahead of the one it reads (pipelined
/// RETRs): on a kept MODE E connection the server then sends file after
/// file without waiting a round trip for the next request, as long as
/// these files' bytes cover the path's bandwidth-delay product per
/// worker (4 x 64 KiB against 625 KB at 100 Mbit/s 50 ms over the
/// automatic 4 workers).
const PIPELINE_DEPTH: usize = 4;

/// Files up to this size are downloaded inline (below); larger ones
/// get the drain and writer threads of a single download, whose
/// overlap of network and disk pays off only over many round trips.
const INLINE_MAX: u64 = 4 << 20;

/// Read size of inline downloads.
pub(super) const INLINE_BUF: usize = 256 << 10;

/// Whether file `f` goes the kept MODE E way on this connection: a
/// GridFTP server, a known size, not resuming (`ftp_kept`).
fn kept_ok(c: &Conn, f: &Fetch, resume: bool, verify: bool) -> bool {
    // --verify's checksum after the data is the MODE S path's: large
    // files keep it.
    KeptChannel::usable(c) && !resume && f.size.is_some_and(|s| !(verify && s > INLINE_MAX))
}

/// Whether file `f` goes the inline way on this connection: MODE S, a
/// known small size, not resuming.
fn inline_ok(c: &Conn, f: &Fetch, resume: bool) -> bool {
    !c.extended && !resume && f.size.is_some_and(|s| s <= INLINE_MAX)
}

/// Downloads one small file on the worker's own thread: `EPSV`, connect,
/// `RETR`, read to the end into `.part`, rename. No drain or writer
/// thread: a thread start and two hand-offs per file cost more than the
/// file on a busy machine. With `next`, that file's `EPSV` and `RETR` go
/// out as soon as this file's `150` is in, before its data and `226`, so
/// the server starts on it without waiting a round trip for us.
fn fetch_inline(
    c: &mut Conn,
    remote: &str,
    root: &Path,
    rel: &str,
    f: &Fetch,
    next: Option<String>,
    stats: &Arc<Stats>,
) -> Result<u64> {
    use std::io::{Read, Write};
    let path = root.join(rel);
    let part = with_ext(&path, ".part");
    // Before this file's pipelined reply is taken: a local failure leaves
    // it pending, to be read and dropped by the caller.
    let mut file = File::create(&part)
        .map_err(|e| ClientError::local(format!("create {}", part.display()), e))?;
    let to = match c.pending.take() {
        Some(p) if p == remote => passive_reply(c)?,
        Some(p) => {
            return Err(ClientError::Bug(format!(
                "pipelined RETR {} is not the file due ({remote})",
                plan::shown(&p)
            )))
        }
        None if c.epsv => {
            request(c, remote)?;
            passive_reply(c)?
        }
        None => {
            let to = data::passive(&mut c.ctl)?;
            c.ctl.send(&format!("RETR {remote}"))?;
            to
        }
    };
    let tcp = data::connect(to, c.ctl.timeout())?;
    let _ = tcp.set_read_timeout(Some(c.ctl.timeout()));
    let mut sock = c.ctl.data_sock(tcp)?;
    let first = c.ctl.read_reply()?;
    if !first.code.is_preliminary() {
        drop(file);
        let _ = std::fs::remove_file(&part);
        return Err(refused("RETR", &first));
    }
    Stats::add(&stats.streams, 1);
    // The next file's EPSV and RETR go out now, while this file's data
    // flows: the server answers them right behind this file's 226, which
    // a server that sees them sends as soon as its data is out (Sluice's;
    // vsftpd and globus-gridftp-server answer them after their 226 as
    // usual). Sent after the data had ended, they cost every file another
    // round trip.
    if let Some(n) = next {
        request(c, &n)?;
        c.pending = Some(n);
    }
    if c.buf.len() < INLINE_BUF {
        c.buf.resize(INLINE_BUF, 0);
    }
    let mut got = 0u64;
    let data = (|| loop {
        let n = match sock.read(&mut c.buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ClientError::net("read data", e)),
        };
        file.write_all(&c.buf[..n])
            .map_err(|e| ClientError::local(format!("write {}", part.display()), e))?;
        got += n as u64;
        Stats::add(&stats.bytes, n as u64);
        Stats::add(&stats.bytes_written, n as u64);
    })();
    drop(sock);
    let last = data.and_then(|()| loop {
        let r = c.ctl.read_reply()?;
        if !r.code.is_preliminary() {
            break Ok(r);
        }
    });
    // This file's final reply is unread and the next file's commands are
    // out: the connection cannot be brought back in step cheaply, so it
    // is given up (a network error) and the file retried on a new one.
    let last = match last {
        Err(e) if c.pending.take().is_some() => {
            return Err(ClientError::net(
                "pipelined transfer",
                std::io::Error::other(format!("dropped out of step: {e}")),
            ))
        }
        r => r?,
    };
    if !last.code.is_completion() {
        return Err(refused("transfer", &last));
    }
    if let Some(t) = f.mtime.and_then(to_system_time) {
        let _ = file.set_modified(t);
    }
    drop(file);
    std::fs::rename(&part, &path)
        .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
    let _ = std::fs::remove_file(with_ext(&path, ".part.resume"));
    Ok(got)
}

/// Sends `EPSV` and `RETR remote` without waiting between them (the
/// server answers `RETR` once it has the passive listener up).
fn request(c: &mut Conn, remote: &str) -> Result<()> {
    c.ctl
        .send_lines(&["EPSV".to_string(), format!("RETR {remote}")])
}

/// Reads the `229` of a pipelined `EPSV`: the address to connect to. A
/// refusal is followed by the `RETR`'s own (failing) reply, read too so
/// the connection stays in step.
fn passive_reply(c: &mut Conn) -> Result<std::net::SocketAddr> {
    let r = c.ctl.read_reply()?;
    if r.code.0 != 229 {
        let _ = c.ctl.read_reply()?;
        return Err(refused("EPSV", &r));
    }
    let port = sluice_ftp::addr::parse_229(r.text())
        .map_err(|e| ClientError::Protocol(format!("EPSV reply: {e}")))?;
    Ok(std::net::SocketAddr::new(c.ctl.peer.ip(), port))
}

/// Reads and drops the transfer whose commands are pending (its file
/// failed locally, or the file before it failed). Any trouble is a
/// network error: the connection is given up, not reused out of step.
fn discard_pending(c: &mut Conn) -> Result<()> {
    c.pending = None;
    let lost = |e: ClientError| {
        ClientError::net(
            "pipelined transfer",
            std::io::Error::other(format!("dropped out of step: {e}")),
        )
    };
    let to = match passive_reply(c) {
        Ok(to) => to,
        Err(ClientError::Refused { .. }) => return Ok(()),
        Err(e) => return Err(lost(e)),
    };
    let tcp = data::connect(to, c.ctl.timeout()).map_err(lost)?;
    let _ = tcp.set_read_timeout(Some(c.ctl.timeout()));
    let first = c.ctl.read_reply().map_err(lost)?;
    if first.code.is_preliminary() {
        let mut sock = c.ctl.data_sock(tcp).map_err(lost)?;
        std::io::copy(&mut sock, &mut std::io::sink())
            .map_err(|e| lost(ClientError::net("read data", e)))?;
        drop(sock);
        loop {
            let r = c.ctl.read_reply().map_err(lost)?;
            if !r.code.is_preliminary() {
                break;
            }
        }
    }
    Ok(())
}

/// Gives a downloaded file the server's modification time (best effort:
/// a file system that refuses only loses the time).
pub(super) fn set_mtime(path: &Path, mtime: Option<i64>) {
    if let Some(t) = mtime.and_then(to_system_time) {
        let _ = File::options()
            .write(true)
            .open(path)
            .and_then(|h| h.set_modified(t));
    }
}

/// `--sync --checksum`: whether the server's `remote` and the local
/// `local` have the same size and CKSM (the strongest both know).
pub(super) fn same_checksum(
    c: &mut Conn,
    remote: &str,
    local: &Path,
    size: Option<u64>,
) -> Result<bool> {
    let Some(have) = sync::local_have(local) else {
        return Ok(false);
    };
    if size != Some(have.size) {
        return Ok(false);
    }
    let (algo, theirs) = session::server_checksum(&mut c.ctl, remote)?;
    let mine = checksum::file(local, algo)
        .map_err(|e| ClientError::local(format!("checksum {}", local.display()), e))?;
    Ok(checksum::same(&theirs, &mine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_join() {
        assert_eq!(remote_join("/", ""), "/");
        assert_eq!(remote_join("/", "a b/c"), "/a b/c");
        assert_eq!(remote_join("/d/", "x"), "/d/x");
        assert_eq!(remote_join("/d", ""), "/d");
    }
}
