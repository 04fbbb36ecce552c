//! `sluice get ftp://...`: one file down, MODE S (one stream, passive) or
//! MODE E (`-p N`, active: the server connects N streams to us).
//!
//! ```text
//! TYPE I, SIZE, [MODE E, OPTS RETR Parallelism=N,N,N;]
//! MODE S: EPSV|PASV, connect, [REST k], RETR path
//! MODE E: PORT|EPRT (we listen), RETR path | ERET P k len path
//! 1xx (111/112 markers) ... 226, while the drain thread reads the data
//! ```

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sluice_ftp::markers::{parse_range_marker, PerfMarker};
use sluice_ftp::reply::Reply;

use super::control::{refused, Control};
use super::{data, session};
use crate::cli::GetArgs;
use crate::drain::{Drain, DrainConfig, DrainReport, Framing, Source};
use crate::error::{ClientError, Result};
use crate::progress::Progress;
use crate::stats::{self, Stats};
use crate::url::FtpUrl;
use crate::writer::{self, Sink, Writer, WriterConfig};

/// How often the control connection is checked while data flows.
const CONTROL_TICK: Duration = Duration::from_millis(200);

/// Where a download goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// Standard output, in order.
    Stdout,
    /// An existing device or FIFO (say /dev/null), written in order in
    /// place: renaming a `.part` over it would replace the device node.
    Device(PathBuf),
    /// A file, written as `part` and renamed to `path` when complete.
    File {
        /// Final name.
        path: PathBuf,
        /// Name while incomplete.
        part: PathBuf,
        /// Side file recording the resume point.
        resume: PathBuf,
    },
}

impl Dest {
    /// DEST argument + URL -> destination. A directory gets the URL's file
    /// name; no DEST means the URL's file name in the current directory.
    pub fn resolve(dest: Option<&Path>, remote_name: Option<&str>) -> Result<Dest> {
        let need_name = || {
            remote_name.ok_or_else(|| {
                ClientError::Usage("the URL names no file; give DEST or a file URL".into())
            })
        };
        let path = match dest {
            Some(d) if d == Path::new("-") => return Ok(Dest::Stdout),
            Some(d) if is_device(d) => return Ok(Dest::Device(d.to_path_buf())),
            Some(d) if d.is_dir() => d.join(need_name()?),
            // A symlink to a file (say /dev/stdout redirected to a file):
            // the download replaces the file it points to, not the link.
            Some(d) if d.is_symlink() => {
                std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf())
            }
            Some(d) => d.to_path_buf(),
            None => PathBuf::from(need_name()?),
        };
        let with = |ext: &str| {
            let mut s = path.clone().into_os_string();
            s.push(ext);
            PathBuf::from(s)
        };
        Ok(Dest::File {
            part: with(".part"),
            resume: with(".part.resume"),
            path,
        })
    }

    /// Standard output or a device: no `.part`, no resume, no checksum.
    pub fn is_stream(&self) -> bool {
        !matches!(self, Dest::File { .. })
    }
}

/// An existing path that is neither a regular file nor a directory.
fn is_device(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Runs one download.
pub fn run(u: &FtpUrl, a: &GetArgs) -> Result<()> {
    let dest = Dest::resolve(a.dest.as_deref(), u.file_name())?;
    if dest.is_stream() && (a.resume || a.verify) {
        return Err(ClientError::Usage(
            "--continue and --verify need a regular file DEST, not `-` or a device".into(),
        ));
    }
    let timeout = Duration::from_secs(a.opts.timeout);
    let mut ctl = session::open(u, timeout)?;
    ctl.expect_ok("TYPE I", "TYPE I")?;
    if a.verify {
        session::require_cksm(&mut ctl)?;
    }
    let size = session::size(&mut ctl, &u.path)?;
    // No -p: one file big enough to be worth more than one stream, into a
    // file (ranges land at their offsets), lets MODE E choose the count.
    let auto = a.opts.auto_streams()
        && !a.tree.recursive
        && !matches!(dest, Dest::Stdout)
        && size.is_some_and(|s| s >= 2 * super::auto::MIN_LEFT);
    let extended = (a.opts.parallel > 1 || auto) && session::try_mode_e(&mut ctl)?;

    // Resume point and destination file.
    let (sink, already) = match &dest {
        Dest::Stdout => (Sink::Stdout, 0),
        Dest::Device(p) => (writer::device_sink(p)?, 0),
        Dest::File { part, resume, .. } => {
            let mut already = if a.resume {
                resume_point(part, resume)
            } else {
                0
            };
            if size.is_some_and(|s| already > s) {
                // The local part is longer than the file: it is not a prefix
                // of this file. Start again.
                already = 0;
            }
            let f = writer::open_part(part, already)?;
            writer::save_prefix(resume, already)?;
            (Sink::File(f), already)
        }
    };

    let stats = Arc::new(Stats::default());
    let t0 = Instant::now();
    let mut report = DrainReport::default();
    let remaining = size.map(|s| s - already);
    // Only a resumed download that already has every byte skips RETR; a
    // 0-byte file still goes through the protocol (and proves readable).
    if !(already > 0 && remaining == Some(0)) {
        let r = match (&sink, size, &dest) {
            // A file, or a device that takes writes at offsets (/dev/null).
            (Sink::File(f), Some(size), _)
                if auto && extended && size - already >= 2 * super::auto::MIN_LEFT =>
            {
                let resume = match &dest {
                    Dest::File { resume, .. } => Some(resume.clone()),
                    _ => None,
                };
                super::auto::transfer(&mut ctl, u, a, size, already, f, resume, &stats)
            }
            _ => transfer(&mut ctl, u, a, extended, size, already, sink, &dest, &stats),
        };
        match (r, &dest) {
            (Ok(r), _) => report = r,
            (Err(e), Dest::File { part, resume, .. }) => {
                // Nothing to resume from: leave no empty `.part` behind.
                if already == 0
                    && stats
                        .bytes_written
                        .load(std::sync::atomic::Ordering::Relaxed)
                        == 0
                {
                    let _ = std::fs::remove_file(part);
                    let _ = std::fs::remove_file(resume);
                }
                return Err(e);
            }
            (Err(e), _) => return Err(e),
        }
    }
    let elapsed = t0.elapsed();

    let mut verified = String::new();
    if let Dest::File { path, part, resume } = &dest {
        if a.verify {
            // The bytes are kept (nothing is thrown away on failure), but
            // they differ from the server's somewhere: resuming from them
            // would end in the same mismatch.
            verified = session::verify(&mut ctl, &u.path, part).map_err(|e| {
                e.with_advice(|| {
                    format!(
                        "what arrived is kept in {}; --continue cannot repair it: \
                         download again without --continue",
                        part.display()
                    )
                })
            })?;
        }
        std::fs::rename(part, path)
            .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
        let _ = std::fs::remove_file(resume);
    }
    ctl.quit();

    let mode = if extended { "MODE E" } else { "MODE S" };
    let auto_count = stats
        .streams_auto
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut detail = if auto_count > 0 {
        format!(
            "{mode}, auto {auto_count} stream{} (peak {}, {} changes)",
            if auto_count == 1 { "" } else { "s" },
            stats
                .streams_peak
                .load(std::sync::atomic::Ordering::Relaxed),
            stats
                .streams_changes
                .load(std::sync::atomic::Ordering::Relaxed)
        )
    } else {
        format!(
            "{mode}, {} stream{}",
            report.streams,
            if report.streams == 1 { "" } else { "s" }
        )
    };
    if already > 0 {
        detail.push_str(&format!(", resumed at {already}"));
    }
    if !verified.is_empty() {
        detail.push_str(&format!(", verified {verified}"));
    }
    eprintln!(
        "{}",
        stats::summary("received", report.bytes, elapsed, &detail)
    );
    stats.print_end(a.opts.stats, mode, elapsed);
    Ok(())
}

/// Where to resume: the recorded prefix if we wrote this `.part`, else the
/// length of a `.part` left by a stream-mode client.
pub(crate) fn resume_point(part: &Path, resume: &Path) -> u64 {
    let len = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    match writer::load_prefix(resume) {
        // Never more than the file holds (a deleted or truncated .part).
        Some(p) => p.min(len),
        None => len,
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn transfer(
    ctl: &mut Control,
    u: &FtpUrl,
    a: &GetArgs,
    extended: bool,
    size: Option<u64>,
    already: u64,
    sink: Sink,
    dest: &Dest,
    stats: &Arc<Stats>,
) -> Result<DrainReport> {
    // `-p auto` where the count is not chosen: one stream.
    let n = a.opts.parallel.max(1);
    let timeout = ctl.timeout();
    // Data connection first, then the command that uses it.
    let (source, framing) = if extended {
        let r = ctl.cmd(&format!("OPTS RETR Parallelism={n},{n},{n};"))?;
        if !r.code.is_completion() {
            tracing::info!(
                "server refused parallelism: {}",
                super::control::printable(r.text())
            );
        }
        let listener = data::active_receiving(ctl, a.opts.drs)?;
        // ERET P numbers its blocks from the start of the range.
        let base = if already > 0 && size.is_some() {
            already
        } else {
            0
        };
        (
            Source::Listen {
                listener,
                max: n as usize,
                from: ctl.peer.ip(),
                tls_host: ctl.tls_host(),
            },
            Framing::Extended { base },
        )
    } else {
        let to = data::passive(ctl)?;
        (
            Source::Connected(ctl.data_sock(data::connect_receiving(to, timeout, a.opts.drs)?)?),
            Framing::Stream { base: already },
        )
    };
    let retr = if already == 0 {
        format!("RETR {}", u.path)
    } else if extended {
        match size {
            Some(s) => format!("ERET P {already} {} {}", s - already, u.path),
            None => {
                ctl.expect_ok(&format!("REST 0-{already}"), "REST")?;
                format!("RETR {}", u.path)
            }
        }
    } else {
        let r = ctl.cmd(&format!("REST {already}"))?;
        if r.code.0 != 350 {
            return Err(refused("REST (resume)", &r));
        }
        format!("RETR {}", u.path)
    };
    let first = ctl.cmd(&retr)?;
    if !first.code.is_preliminary() {
        return Err(refused("RETR", &first));
    }

    let (recycle_tx, recycle_rx) = mpsc::sync_channel(writer::RECYCLE_SLOTS);
    let prefix_file = match dest {
        Dest::File { resume, .. } => Some(resume.clone()),
        Dest::Stdout | Dest::Device(_) => None,
    };
    let w = Writer::start(
        WriterConfig {
            sink,
            already,
            size,
            mem_cap: a.opts.mem_cap,
            prefix_file,
            recycle: Some(recycle_tx),
        },
        stats.clone(),
    )?;
    let drain = Drain::start(
        DrainConfig {
            framing,
            idle_timeout: timeout,
            raise_priority: a.drain_priority,
            drs: a.opts.drs,
            span: None,
        },
        source,
        w.input(),
        recycle_rx,
        stats.clone(),
    )?;
    let progress = Progress::start(stats.clone(), size, already, a.opts.quiet);
    let outcome = follow(ctl, drain, stats, timeout);
    progress.finish();
    let wrote = w.finish();
    // The writer's failure (disk full, bad block) explains a drain failure.
    let wrote = wrote?;
    let (report, last) = outcome?;
    if !last.code.is_completion() {
        return Err(refused("transfer", &last));
    }
    if !wrote.gaps.is_empty() {
        return Err(ClientError::Protocol(format!(
            "server reported success but {} range(s) are missing, first {:?}",
            wrote.gaps.len(),
            wrote.gaps[0]
        )));
    }
    if size.is_none() && extended && wrote.prefix != wrote.end {
        return Err(ClientError::Protocol(format!(
            "data has a hole at {} (received up to {})",
            wrote.prefix, wrote.end
        )));
    }
    Ok(report)
}

/// Reads control replies (markers, then the final one) while the drain
/// thread works; returns when both are done or either failed.
fn follow(
    ctl: &mut Control,
    drain: Drain,
    stats: &Stats,
    timeout: Duration,
) -> Result<(DrainReport, Reply)> {
    let mut drain = Some(drain);
    let mut report = None;
    let mut last: Option<Reply> = None;
    let mut drained_at: Option<Instant> = None;
    loop {
        if let Some(d) = drain.take_if(|d| d.is_finished()) {
            // A failed drain ends the transfer now: the server may be
            // waiting on a connection we gave up.
            report = Some(d.join()?);
            drained_at = Some(Instant::now());
        }
        if let (Some(r), Some(l)) = (&report, &last) {
            return Ok((r.clone(), l.clone()));
        }
        if let Some(l) = &last {
            if !l.code.is_completion() {
                if let Some(d) = drain.take() {
                    d.cancel();
                }
                return Err(refused("transfer", l));
            }
        }
        if last.is_none() {
            if let Some(r) = ctl.poll_reply(CONTROL_TICK)? {
                match r.code.0 {
                    111 => {
                        Stats::add(&stats.restart_markers, 1);
                        let _ = parse_range_marker(&r);
                    }
                    112 => {
                        Stats::add(&stats.perf_markers, 1);
                        if let Ok(m) = PerfMarker::parse(&r) {
                            stats
                                .server_reported_bytes
                                .store(m.stripe_bytes, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    c if c < 200 => {}
                    _ => last = Some(r),
                }
            }
            if drained_at.is_some_and(|t| t.elapsed() > timeout) {
                return Err(ClientError::net(
                    "waiting for the end-of-transfer reply",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                ));
            }
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_defaults_to_url_name() {
        let d = Dest::resolve(None, Some("f.bin")).unwrap();
        assert_eq!(
            d,
            Dest::File {
                path: "f.bin".into(),
                part: "f.bin.part".into(),
                resume: "f.bin.part.resume".into()
            }
        );
    }

    #[test]
    fn dest_directory_gets_url_name() {
        let dir = tempfile::tempdir().unwrap();
        match Dest::resolve(Some(dir.path()), Some("x")).unwrap() {
            Dest::File { path, .. } => assert_eq!(path, dir.path().join("x")),
            other => panic!("not a file: {other:?}"),
        }
    }

    #[test]
    fn dest_symlink_names_the_file_it_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.bin");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        match Dest::resolve(Some(&link), Some("x")).unwrap() {
            Dest::File { path, part, .. } => {
                assert_eq!(path, std::fs::canonicalize(&real).unwrap());
                assert_eq!(part.file_name().unwrap(), "real.bin.part");
            }
            other => panic!("not a file: {other:?}"),
        }
    }

    #[test]
    fn dest_device_is_written_in_place() {
        let null = Path::new("/dev/null");
        if !null.exists() {
            return;
        }
        let d = Dest::resolve(Some(null), Some("x")).unwrap();
        assert_eq!(d, Dest::Device(null.to_path_buf()));
        assert!(d.is_stream());
    }

    #[test]
    fn dest_dash_is_stdout_and_no_name_is_usage_error() {
        assert_eq!(
            Dest::resolve(Some(Path::new("-")), None).unwrap(),
            Dest::Stdout
        );
        assert!(matches!(
            Dest::resolve(None, None),
            Err(ClientError::Usage(_))
        ));
    }

    #[test]
    fn resume_point_prefers_the_side_file() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("a.part");
        let side = dir.path().join("a.part.resume");
        std::fs::write(&part, vec![0u8; 100]).unwrap();
        assert_eq!(resume_point(&part, &side), 100);
        writer::save_prefix(&side, 40).unwrap();
        assert_eq!(resume_point(&part, &side), 40);
        writer::save_prefix(&side, 500).unwrap();
        assert_eq!(resume_point(&part, &side), 100);
        std::fs::remove_file(&part).unwrap();
        assert_eq!(resume_point(&part, &side), 0);
    }
}
