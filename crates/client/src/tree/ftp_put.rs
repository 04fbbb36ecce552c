//! `sluice put -r DIR ftp://...`: the local tree is walked, its
//! directories made with MKD (and, with `--sync`, the server's copy listed
//! with MLSD to send only what differs and, with `--delete`, remove what
//! the source lacks), then its files sent by [`jobs::run`] workers that
//! each reuse one connection.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::ftp::{
    finish, mlsd, open_for, remote_join, same_checksum, Conn, JobProgress, Prepare, MAX_LISTING,
};
use super::ftp_kept_put::{self, KeptUpload, Upfile};
use super::jobs;
use super::plan::{self, Action, Entry, Have, Kind};
use super::sync::Notes;
use crate::cli::PutArgs;
use crate::error::{ClientError, Result};
use crate::ftp::control::Control;
use crate::ftp::{put, session};
use crate::stats::Stats;
use crate::url::FtpUrl;

/// `--delete` on the server: DELE a file, or empty a directory (listed
/// with MLSD, names checked) and RMD it.
fn remove_remote(ctl: &mut Control, path: &str, kind: Kind) -> Result<()> {
    if kind != Kind::Dir {
        ctl.expect_ok(&format!("DELE {path}"), "DELE")?;
        return Ok(());
    }
    let raw = mlsd(ctl, path)?;
    let entries = plan::parse_mlsd(&raw).map_err(ClientError::Protocol)?;
    plan::plan_dir("", &entries)
        .map_err(|b| ClientError::Protocol(format!("{}: {b}", plan::shown(path))))?;
    for e in entries {
        remove_remote(ctl, &remote_join(path, &e.name), e.kind)?;
    }
    ctl.expect_ok(&format!("RMD {path}"), "RMD")?;
    Ok(())
}

/// A file to upload.
struct Send {
    local: PathBuf,
    size: u64,
    mtime: Option<i64>,
}

/// The local tree: directories (parents first), files, and the names in
/// each directory (links and special files included: `--delete` must not
/// remove what the source has but does not send).
struct LocalTree {
    dirs: Vec<String>,
    files: Vec<(String, Send)>,
    names: HashMap<String, HashSet<String>>,
    skipped: u64,
}

/// Lists the local tree under `root`: directories (parents first) and
/// files; symlinks, special files and names the protocol cannot carry
/// (not UTF-8, control characters) are skipped with a note.
fn walk_local(root: &Path) -> Result<LocalTree> {
    let mut names: HashMap<String, HashSet<String>> = HashMap::new();
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut skipped = 0;
    let mut todo = VecDeque::from([String::new()]);
    while let Some(dir) = todo.pop_front() {
        let here = root.join(&dir);
        let rd = std::fs::read_dir(&here)
            .map_err(|e| ClientError::local(format!("read directory {}", here.display()), e))?;
        let mut entries = Vec::new();
        for de in rd {
            let de = de.map_err(|e| ClientError::local(format!("read {}", here.display()), e))?;
            let Some(name) = de.file_name().to_str().map(str::to_string) else {
                skipped += 1;
                eprintln!("sluice: skipped {}: name is not UTF-8", de.path().display());
                continue;
            };
            if let Err(b) = plan::check_name(&name) {
                skipped += 1;
                eprintln!("sluice: skipped {}: {}", b.shown, b.why);
                continue;
            }
            let m = std::fs::symlink_metadata(de.path())
                .map_err(|e| ClientError::local(format!("stat {}", de.path().display()), e))?;
            let ft = m.file_type();
            entries.push(Entry {
                name,
                kind: if ft.is_symlink() {
                    Kind::Link
                } else if ft.is_dir() {
                    Kind::Dir
                } else if ft.is_file() {
                    Kind::File
                } else {
                    Kind::Other
                },
                size: Some(m.len()),
                mtime: m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map(|d| d.as_secs() as i64),
            });
        }
        names.insert(
            dir.clone(),
            entries.iter().map(|e| e.name.clone()).collect(),
        );
        let actions = plan::plan_dir(&dir, &entries)
            .map_err(|b| ClientError::Bug(format!("checked name refused: {b}")))?;
        for act in actions {
            match act {
                Action::Descend { rel } => {
                    dirs.push(rel.clone());
                    todo.push_back(rel);
                }
                Action::Copy { rel, mtime, size } => {
                    let local = root.join(&rel);
                    let size = size.unwrap_or(0);
                    files.push((rel, Send { local, size, mtime }));
                }
                Action::Skip { rel, why } => {
                    skipped += 1;
                    eprintln!("sluice: skipped {}: {why}", plan::shown(&rel));
                }
            }
        }
    }
    Ok(LocalTree {
        dirs,
        files,
        names,
        skipped,
    })
}

/// Files whose STOR and data go out ahead of the current file's replies
/// on a kept MODE E connection (at most [`jobs::AHEAD_BYTES`] of them):
/// as for downloads, enough bytes per worker to cover the path's
/// bandwidth-delay product over the automatic 4 workers.
const UPLOADS_AHEAD: usize = 4;

/// Reads the replies of the MKDs of `paths` (a refusal only noted: the
/// directory may be there already).
fn mkd_replies(ctl: &mut Control, paths: &[String]) -> Result<()> {
    for path in paths {
        let r = ctl.read_reply()?;
        if !r.code.is_completion() {
            tracing::debug!("MKD {path}: {}", crate::ftp::control::one_line(&r));
        }
    }
    Ok(())
}

/// Directories whose MLSDs a re-sync sends with the login (more are
/// listed after it, pipelined).
const LIST_AHEAD: usize = 32;

/// MKDs sent ahead of their replies.
const MKD_WINDOW: usize = 32;

/// `sluice put -r`.
pub fn put_tree(u: &FtpUrl, a: &PutArgs) -> Result<()> {
    if !a.file.is_dir() {
        return Err(ClientError::Usage(format!(
            "{} is not a directory (put -r sends a directory tree)",
            a.file.display()
        )));
    }
    let t0 = Instant::now();
    let LocalTree {
        dirs,
        mut files,
        names,
        skipped,
    } = walk_local(&a.file)?;
    let mut notes = Notes {
        skipped,
        ..Notes::default()
    };
    let timeout = Duration::from_secs(a.opts.timeout);
    let workers = jobs::Workers::from_flag(a.tree.files);
    // The first workers log in while the directories are made and listed.
    // Their kept MODE E channel too, when every file may go that way.
    let prep = match !a.tree.checksum && !a.resume {
        true => Prepare::Put,
        false => Prepare::Nothing,
    };
    let pre = {
        let (u, parallel) = (u.clone(), a.opts.parallel);
        jobs::Preopen::start(workers.initial, move || {
            open_for(&u, parallel, timeout, prep)
        })
    };
    let mut ctl = crate::ftp::control::Control::connect(u, timeout)?;
    let mut marks = vec![("connected", Instant::now())];
    // The target and every directory, parents first. A refusal is not an
    // error yet: the directory may exist; a STOR into it will tell.
    // Pipelined (a window of MKDs out before their replies): a parent's
    // MKD is answered before its child's, as servers take commands in
    // order, and a re-sync of D directories costs D / window round trips.
    let mkd: Vec<String> = std::iter::once("")
        .chain(dirs.iter().map(String::as_str))
        .map(|rel| remote_join(&u.path, rel))
        .filter(|p| p != "/")
        .collect();
    let mut windows = mkd.chunks(MKD_WINDOW);
    // The login, FEAT, the first window of MKDs and, for --sync, what a
    // pipelined MODE E listing needs (TYPE I, MODE E, PORT) go out in one
    // round trip after the greeting.
    let first = windows.next().unwrap_or_default();
    let setup = match a.tree.sync && !ctl.is_tls() {
        true => Some(super::ftp_list::listing_setup(&ctl)?),
        false => None,
    };
    let mut after = vec!["FEAT".to_string()];
    after.extend(first.iter().map(|p| format!("MKD {p}")));
    if let Some((_, lines)) = &setup {
        after.extend(lines.iter().cloned());
    }
    let set_up = 1 + first.len()..1 + first.len() + setup.as_ref().map_or(0, |(_, l)| l.len());
    if a.tree.sync {
        // After the set-up, whose replies are read by place.
        after.push(super::ftp_list::LISTING_FACTS.to_string());
    }
    // With every directory's MKD in that window and PORT in the set-up,
    // the re-sync's MLSDs go out too, behind the PORT (read below, in
    // MODE E or, if the server took no MODE E, MODE S): the listing
    // arrives a round trip after the login instead of three.
    let all: Vec<String> = std::iter::once(String::new())
        .chain(dirs.iter().cloned())
        .collect();
    // Only to a server that greets as a GridFTP one (the others may take
    // PORT and never connect: `Control::greets_as_gridftp`).
    let ahead = match &setup {
        Some((_, lines)) if lines.len() == 3 && mkd.len() <= MKD_WINDOW => {
            all.len() <= LIST_AHEAD && ctl.greets_as_gridftp()
        }
        _ => false,
    };
    let mlsds: Vec<String> = match ahead {
        true => all
            .iter()
            .map(|d| format!("MLSD {}", remote_join(&u.path, d)))
            .collect(),
        false => Vec::new(),
    };
    let lines: Vec<&str> = after.iter().map(String::as_str).collect();
    let replies = ctl.login_pipelined_then(&u.user, &u.password, &lines, &mlsds)?;
    marks.push(("logged-in", Instant::now()));
    let feat = session::parse_features(&replies[0]).unwrap_or_default();
    for (path, r) in first.iter().zip(&replies[1..]) {
        if !r.code.is_completion() {
            tracing::debug!("MKD {path}: {}", crate::ftp::control::one_line(r));
        }
    }
    let mut kept = match setup {
        Some((l, _)) if ahead => Some(super::ftp_list::speculative_channel(
            l,
            &replies[set_up.clone()],
        )?),
        Some((l, _)) => Some(super::ftp_list::listing_channel(
            l,
            &replies[set_up.clone()],
        )?),
        None => None,
    };
    // The listings sent ahead, read now (before any other command).
    let sent = match (ahead, kept.as_mut()) {
        (true, Some(k)) => {
            let paths: Vec<String> = all.iter().map(|d| remote_join(&u.path, d)).collect();
            Some(super::ftp_kept::read_sent(
                &mut ctl,
                k,
                &paths,
                MAX_LISTING,
            )?)
        }
        _ => None,
    };
    let has = |name: &str| {
        feat.iter()
            .any(|l| l.split_whitespace().next() == Some(name))
    };
    let mfmt = has("MFMT");
    for window in windows {
        let lines: Vec<String> = window.iter().map(|p| format!("MKD {p}")).collect();
        ctl.send_lines(&lines)?;
        mkd_replies(&mut ctl, window)?;
    }
    if a.tree.sync {
        let mut there = HashMap::new();
        // A GridFTP server lists them all pipelined on one kept MODE E
        // connection (a round trip per window, not three per directory);
        // those listed ahead are taken as they came, the others (after a
        // failure: 425) listed again.
        let sent = sent.unwrap_or_else(|| all.iter().map(|_| None).collect());
        let mut listed = match (has("PARALLEL"), kept.as_mut()) {
            (true, Some(kept)) => {
                let again: Vec<usize> = (0..all.len()).filter(|&k| sent[k].is_none()).collect();
                let paths: Vec<String> = again
                    .iter()
                    .map(|&k| remote_join(&u.path, &all[k]))
                    .collect();
                let mut relisted = match paths.is_empty() {
                    true => Some(Vec::new()),
                    false => super::ftp_kept::list_many(&mut ctl, kept, &paths, MAX_LISTING)?,
                };
                match relisted.as_mut() {
                    Some(r) => {
                        let mut r = std::mem::take(r).into_iter();
                        Some(
                            sent.into_iter()
                                .map(|s| s.unwrap_or_else(|| r.next().unwrap_or(Ok(Vec::new()))))
                                .collect::<Vec<Result<Vec<u8>>>>(),
                        )
                    }
                    None => None,
                }
            }
            (false, Some(kept)) if kept.in_mode_e() => {
                // A server that took MODE E but is no GridFTP one: its
                // listings in MODE S.
                ctl.expect_ok("MODE S", "MODE S")?;
                None
            }
            _ => None,
        };
        for (k, dir) in all.into_iter().enumerate() {
            let path = remote_join(&u.path, &dir);
            let raw = match listed.as_mut() {
                Some(v) => std::mem::replace(&mut v[k], Ok(Vec::new())),
                None => mlsd(&mut ctl, &path),
            };
            let entries = match raw {
                Ok(raw) => plan::parse_mlsd(&raw).map_err(ClientError::Protocol)?,
                // A directory MKD just made, or could not make: empty.
                Err(ClientError::Refused { .. }) => Vec::new(),
                Err(e) => return Err(e),
            };
            plan::plan_dir(&dir, &entries)
                .map_err(|b| ClientError::Protocol(format!("{}: {b}", plan::shown(&path))))?;
            let keep = names.get(&dir);
            for e in &entries {
                let rel = plan::join(&dir, &e.name);
                if a.tree.delete && !keep.is_some_and(|k| k.contains(&e.name)) {
                    remove_remote(&mut ctl, &remote_join(&u.path, &rel), e.kind)?;
                    eprintln!("sluice: deleted {}", plan::shown(&rel));
                    notes.deleted += 1;
                } else if e.kind == Kind::File {
                    there.insert(rel, e.clone());
                }
            }
        }
        marks.push(("listed", Instant::now()));
        files.retain(|(rel, s)| {
            let have = there.get(rel).and_then(|e| {
                e.size.map(|size| Have {
                    size,
                    mtime: e.mtime,
                })
            });
            let send = a.tree.checksum || plan::differs(Some(s.size), s.mtime, have, mfmt);
            if !send {
                notes.uptodate += 1;
            }
            send
        });
    }
    // The listing connection's QUIT waits for its 221 (a round trip) on
    // a thread of its own, not before the workers start.
    std::thread::spawn(move || ctl.quit());
    let same = AtomicU64::new(0);
    let total = files.len() + notes.uptodate as usize;
    let sizes: u64 = files.iter().map(|(_, s)| s.size).sum();
    let job = JobProgress::start(Some(sizes), files.len(), a.opts.quiet);
    // Without CKSMs or REST between files, a GridFTP server gets the
    // next files' STORs and data ahead on the kept MODE E connection;
    // other servers the next upload's EPSV.
    let lookahead = match !a.tree.checksum && !a.resume {
        true => jobs::Lookahead::files(UPLOADS_AHEAD),
        false => jobs::Lookahead::files(1),
    };
    let out = jobs::run_ahead(
        files,
        workers,
        lookahead,
        |s: &Send| s.size,
        &job.done,
        || {
            pre.take()
                .unwrap_or_else(|| open_for(u, a.opts.parallel, timeout, prep))
        },
        |c, rel, s, attempt, next| {
            let remote = remote_join(&u.path, rel);
            if a.tree.checksum && same_checksum(c, &remote, &s.local, Some(s.size))? {
                same.fetch_add(1, Relaxed);
                return Ok(0);
            }
            let resume = attempt > 0 || a.resume;
            if !a.tree.checksum && !resume && KeptUpload::usable(c) {
                let upcoming: Vec<Upfile> =
                    next.iter().map(|(r, n)| upfile(&u.path, r, n)).collect();
                let this = upfile(&u.path, rel, s);
                if let Some(n) =
                    ftp_kept_put::store(c, &this, &upcoming, a.opts.block_size, &job.stats)?
                {
                    return Ok(n);
                }
            }
            KeptUpload::leave(c)?;
            // The next upload's EPSV rides along only when nothing else
            // (CKSM) goes before its STOR.
            let more = !next.is_empty() && !a.tree.checksum;
            send(c, u, a, rel, s, resume, more, &job.stats)
        },
    );
    job.progress.finish();
    notes.same = same.into_inner();
    let mut out = out;
    out.timeline.marks = marks;
    finish("sent", out, total, &notes, t0, a.opts.stats.is_some())
}

fn upfile<'a>(base: &str, rel: &str, s: &'a Send) -> Upfile<'a> {
    Upfile {
        remote: remote_join(base, rel),
        local: &s.local,
        mtime: s.mtime,
    }
}

/// Uploads one file of the tree on a worker's connection; a retry resumes
/// after the server's bytes when its checksum shows they are ours.
#[allow(clippy::too_many_arguments)]
fn send(
    c: &mut Conn,
    u: &FtpUrl,
    a: &PutArgs,
    rel: &str,
    s: &Send,
    resume: bool,
    more: bool,
    stats: &Arc<Stats>,
) -> Result<u64> {
    let file = File::open(&s.local)
        .map_err(|e| ClientError::local(format!("open {}", s.local.display()), e))?;
    let len = file
        .metadata()
        .map_err(|e| ClientError::local(format!("stat {}", s.local.display()), e))?
        .len();
    let remote = remote_join(&u.path, rel);
    if !c.extended && !resume {
        return send_pipelined(c, &file, len, &remote, s.mtime, more, stats);
    }
    // A passive address opened ahead is replaced by this path's own.
    c.next_passive = None;
    let offset = if resume {
        put::resume_offset(&mut c.ctl, &remote, &file, len, &s.local)?.0
    } else {
        0
    };
    // Sent even when the server already has every byte (offset == len):
    // SIZE also reports an interrupted upload's partial, which only the
    // end of a transfer (here an APPE of nothing) turns into the file.
    if c.extended {
        put::send_extended(&mut c.ctl, &file, len, offset, &remote, a, stats)?;
    } else {
        put::send_stream(&mut c.ctl, &file, len, offset, &remote, stats)?;
    }
    if c.mfmt {
        if let Some(t) = s.mtime {
            // Keeps the modification time on the server (a later --sync
            // compares it); a refusal only costs that.
            let r = c
                .ctl
                .cmd(&format!("MFMT {} {remote}", sluice_ftp::listing::mdtm(t)))?;
            if !r.code.is_completion() {
                tracing::info!("MFMT refused: {}", crate::ftp::control::one_line(&r));
            }
        }
    }
    Ok(len - offset.min(len))
}

/// A MODE S upload from the start with its round trips folded: `STOR`
/// goes out as the data connection is made (to a passive address opened
/// with the previous upload when there is one), and once the data has
/// ended, `MFMT` for this file and `EPSV` for the next (`more`) go out
/// before the `226` is read. A server that sees the client talk right
/// after the data ends knows the upload is complete and not a dead
/// client's (Sluice waits a moment for that otherwise).
fn send_pipelined(
    c: &mut Conn,
    file: &File,
    len: u64,
    remote: &str,
    mtime: Option<i64>,
    more: bool,
    stats: &Stats,
) -> Result<u64> {
    use std::io::{Read, Write};
    let to = match c.next_passive.take() {
        Some(a) => a,
        None => crate::ftp::data::passive(&mut c.ctl)?,
    };
    c.ctl.send(&format!("STOR {remote}"))?;
    let tcp = crate::ftp::data::connect(to, c.ctl.timeout())?;
    let mut sock = c.ctl.data_sock(tcp)?;
    let first = c.ctl.read_reply()?;
    if !first.code.is_preliminary() {
        return Err(crate::ftp::control::refused("STOR", &first));
    }
    Stats::add(&stats.streams, 1);
    let _ = sock.tcp().set_write_timeout(Some(c.ctl.timeout()));
    let _ = sock.tcp().set_read_timeout(Some(c.ctl.timeout()));
    // std::io::copy from a File to a TcpStream uses sendfile on Linux.
    let sent = std::io::copy(&mut file.take(len), &mut sock)
        .map_err(|e| ClientError::net("send data", e))?;
    if sent != len {
        return Err(ClientError::local(
            "read",
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "file shrank while sending",
            ),
        ));
    }
    Stats::add(&stats.bytes, sent);
    let _ = sock.flush();
    sock.finish();
    drop(sock);
    let mfmt = mtime.filter(|_| c.mfmt);
    let mut lines = Vec::new();
    if let Some(t) = mfmt {
        // Keeps the modification time on the server (a later --sync
        // compares it); a refusal only costs that.
        lines.push(format!("MFMT {} {remote}", sluice_ftp::listing::mdtm(t)));
    }
    let ahead = more && c.epsv;
    if ahead {
        lines.push("EPSV".to_string());
    }
    c.ctl.send_lines(&lines)?;
    let last = loop {
        let r = c.ctl.read_reply()?;
        if !r.code.is_preliminary() {
            break r;
        }
    };
    if mfmt.is_some() {
        let r = c.ctl.read_reply()?;
        if !r.code.is_completion() {
            tracing::info!("MFMT refused: {}", crate::ftp::control::one_line(&r));
        }
    }
    if ahead {
        // A refused EPSV costs only the early start: the next upload
        // asks again.
        let r = c.ctl.read_reply()?;
        if r.code.0 == 229 {
            let port = sluice_ftp::addr::parse_229(r.text())
                .map_err(|e| ClientError::Protocol(format!("EPSV reply: {e}")))?;
            c.next_passive = Some(std::net::SocketAddr::new(c.ctl.peer.ip(), port));
        }
    }
    if !last.code.is_completion() {
        return Err(crate::ftp::control::refused("transfer", &last));
    }
    Ok(len)
}
