//! `sluice cp SRC DST`: a URL and a local path in either order (a
//! download or an upload, `-r` for trees), or two `ftp://` URLs: a
//! third-party copy, where the destination server listens (EPSV/PASV),
//! the source server connects to it (PORT/EPRT) and the data never passes
//! through this client.
//!
//! ```text
//!  dst: TYPE I, EPSV|PASV -> port      src: TYPE I, PORT|EPRT dst:port
//!  dst: STOR path (reply not awaited)  src: RETR path -> 150
//!  both: ... 226
//! ```
//!
//! With `-p N` (N > 1) both servers go to MODE E first and the source is
//! told `OPTS RETR Parallelism=N,N,N;`: it opens N connections to the
//! destination's one passive port, and the destination reassembles the
//! blocks by offset (GridFTP: the sender of MODE E is the active side, so
//! the roles are the same as in MODE S).

use std::time::{Duration, Instant};

use sluice_ftp::addr;
use sluice_ftp::reply::Reply;

use crate::cli::{CpArgs, GetArgs, PutArgs};
use crate::error::{ClientError, Result};
use crate::ftp::control::{is_unsupported, refused, Control};
use crate::ftp::{data, session};
use crate::tree::jobs;
use crate::tree::sync::Notes;
use crate::url::{self, FtpUrl, Target};

fn is_url(s: &str) -> bool {
    s.contains("://")
}

/// Runs `sluice cp`.
pub fn run(a: CpArgs) -> Result<()> {
    if let Some(list) = &a.list {
        return run_list(list, &a);
    }
    let (Some(src), Some(dst)) = (a.src.clone(), a.dst.clone()) else {
        return Err(ClientError::Usage("give SRC and DST, or -f LIST".into()));
    };
    one(src, dst, a, false)
}

/// Splits one line of a `-f` list into its fields: whitespace-separated,
/// a field in double quotes may hold spaces. Sans-I/O.
pub fn list_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// `-f LIST`: every pair a job on the tree runner (retries, summary).
fn run_list(list: &std::path::Path, a: &CpArgs) -> Result<()> {
    let text = std::fs::read_to_string(list)
        .map_err(|e| ClientError::local(format!("read {}", list.display()), e))?;
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match list_fields(line).as_slice() {
            // The name in the summary, without passwords.
            [s, d] => jobs.push((
                format!("{} -> {}", url::redact(s), url::redact(d)),
                (s.clone(), d.clone()),
            )),
            _ => {
                return Err(ClientError::Usage(format!(
                    "{} line {}: expected `SRC DST`",
                    list.display(),
                    i + 1
                )))
            }
        }
    }
    let t0 = Instant::now();
    let total = jobs.len();
    let workers = jobs::Workers::from_flag(a.tree.files);
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut each = a.clone();
    each.opts.quiet = true;
    let out = jobs::run(
        jobs,
        workers,
        &done,
        || Ok(()),
        |_, _, (s, d), attempt| {
            one(s.clone(), d.clone(), each.clone(), attempt > 0)?;
            Ok(0)
        },
    );
    crate::tree::ftp::finish(
        "copied",
        out,
        total,
        &Notes::default(),
        t0,
        a.opts.stats.is_some(),
    )
}

/// One copy; `resume` continues a download or upload a failed try began.
fn one(src: String, dst: String, a: CpArgs, resume: bool) -> Result<()> {
    match (is_url(&src), is_url(&dst)) {
        (true, false) => crate::get(GetArgs {
            url: src,
            dest: Some(dst.into()),
            resume,
            verify: a.verify,
            drain_priority: false,
            opts: a.opts,
            tree: a.tree,
        }),
        (false, true) => crate::put(PutArgs {
            file: src.into(),
            url: dst,
            resume,
            verify: a.verify,
            opts: a.opts,
            tree: a.tree,
        }),
        (false, false) => Err(ClientError::Usage(
            "SRC and DST are both local paths: use cp(1)".into(),
        )),
        (true, true) => {
            let (Ok(Target::Ftp(s)), Ok(Target::Ftp(d))) = (url::parse(&src), url::parse(&dst))
            else {
                return Err(ClientError::Usage(
                    "a server-to-server copy needs two ftp:// URLs".into(),
                ));
            };
            if a.tree.recursive {
                return Err(ClientError::Usage(
                    "server-to-server copies move one file at a time for now (no -r)".into(),
                ));
            }
            third_party(&s, &d, &a)
        }
    }
}

/// The final reply to a transfer command, skipping 1xx markers; waits at
/// most `idle` between replies.
fn final_reply(ctl: &mut Control, idle: Duration) -> Result<Reply> {
    loop {
        match ctl.poll_reply(idle)? {
            Some(r) if r.code.is_preliminary() => continue,
            Some(r) => return Ok(r),
            None => {
                return Err(ClientError::net(
                    "waiting for the end of a server-to-server transfer",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                ))
            }
        }
    }
}

fn third_party(s: &FtpUrl, d: &FtpUrl, a: &CpArgs) -> Result<()> {
    let timeout = Duration::from_secs(a.opts.timeout);
    let dst_path = if d.path.ends_with('/') {
        let name = s
            .file_name()
            .ok_or_else(|| ClientError::Usage("the source URL names no file".into()))?;
        format!("{}{name}", d.path)
    } else {
        d.path.clone()
    };
    let mut src = session::open(s, timeout)?;
    let mut dst = session::open(d, timeout)?;
    src.expect_ok("TYPE I", "TYPE I (source)")?;
    dst.expect_ok("TYPE I", "TYPE I (destination)")?;
    if a.verify {
        session::require_cksm(&mut src)?;
        session::require_cksm(&mut dst)?;
    }
    let size = session::size(&mut src, &s.path)?;
    // `-p auto` cannot choose here (no byte passes through this client to
    // measure): it is one stream, as `-p 1`.
    let streams = a.opts.parallel.max(1);
    if streams > 1 {
        dst.expect_ok(
            "MODE E",
            "MODE E (destination; -p N needs GridFTP's MODE E)",
        )?;
        src.expect_ok("MODE E", "MODE E (source; -p N needs GridFTP's MODE E)")?;
        src.expect_ok(
            &format!("OPTS RETR Parallelism={streams},{streams},{streams};"),
            "OPTS RETR Parallelism (source)",
        )?;
    }
    let t0 = Instant::now();
    // The destination's address as we reach it: its passive reply's port
    // on the host we connected to (a PASV host could name anything).
    let to = data::passive(&mut dst)?;
    let port_cmd = match to {
        std::net::SocketAddr::V4(v4) => format!("PORT {}", addr::format_port(v4)),
        v6 => format!("EPRT {}", addr::format_eprt(v6)),
    };
    let r = src.cmd(&port_cmd)?;
    if !r.code.is_completion() {
        if is_unsupported(r.code) && port_cmd.starts_with("PORT") {
            src.expect_ok(&format!("EPRT {}", addr::format_eprt(to)), "EPRT (source)")?;
        } else {
            return Err(refused(
                "PORT (source; a server may refuse a foreign data host)",
                &r,
            ));
        }
    }
    // STOR without waiting for its 150: globus-gridftp-server answers a
    // passive STOR only once the data connection is up, which needs the
    // source's RETR.
    dst.send(&format!("STOR {dst_path}"))?;
    let r = src.cmd(&format!("RETR {}", s.path))?;
    if !r.code.is_preliminary() {
        let _ = dst.send("ABOR");
        return Err(refused("RETR (source)", &r));
    }
    // No byte passes here, so no progress to watch: wait five idle
    // timeouts for each side's end-of-transfer reply.
    let idle = timeout * 5;
    let src_last = final_reply(&mut src, idle)?;
    let dst_last = final_reply(&mut dst, idle)?;
    // A refused STOR also fails the source's transfer (no one took its
    // connection): the destination's reply is the cause.
    if !dst_last.code.is_completion() {
        return Err(refused("STOR (destination)", &dst_last));
    }
    if !src_last.code.is_completion() {
        return Err(refused("RETR (source)", &src_last));
    }
    let elapsed = t0.elapsed();
    let mut detail = match streams {
        1 => "third party, MODE S, 1 stream".to_string(),
        n => format!("third party, MODE E, {n} streams"),
    };
    if a.verify {
        let (algo, theirs) = session::server_checksum(&mut src, &s.path)?;
        let r = dst.cmd(&format!("CKSM {} 0 -1 {dst_path}", algo.name()))?;
        let mine = r.text().trim().to_ascii_lowercase();
        if r.code.0 != 213 || !crate::checksum::same(&theirs, &mine) {
            return Err(ClientError::ChecksumMismatch {
                algo: algo.name().into(),
                server: theirs,
                local: format!(
                    "{} (destination server)",
                    crate::ftp::control::printable(&mine)
                ),
                advice: String::new(),
            });
        }
        detail.push_str(&format!(", verified {} {theirs}", algo.name()));
    }
    src.quit();
    dst.quit();
    eprintln!(
        "{}",
        crate::stats::summary("copied", size.unwrap_or(0), elapsed, &detail)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_lines_split_with_quotes() {
        let f = super::list_fields;
        assert_eq!(f("ftp://h/a  /tmp/a"), ["ftp://h/a", "/tmp/a"]);
        assert_eq!(
            f("\"/tmp/with space\" ftp://h/x%20y"),
            ["/tmp/with space", "ftp://h/x%20y"]
        );
        assert_eq!(f("a \"\""), ["a", ""]);
        assert!(f("   ").is_empty());
    }
}
