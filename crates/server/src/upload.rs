//! Where an upload's bytes go, so that an existing file is never corrupted,
//! an interrupted upload can be resumed, and no resume ever ends with a
//! wrong file under the final name and a success reply.
//!
//! # The resume protocol
//!
//! **The partial is the resumable object.** Every upload that is not an
//! append to a complete file writes into `.NAME.sluice-partial` in NAME's
//! directory, a name derived from NAME alone so that it is found again
//! after anything: a failed or aborted transfer, a client that died, a
//! server stopped (an upload still running when `--shutdown-timeout` is
//! over is aborted: crate::shutdown) or killed with `kill -9` (no random
//! temp is left that nothing can resume). The writer holds an exclusive `flock` on it for the whole
//! transfer; the lock dies with the process, and a second upload of the
//! same name meanwhile waits up to 5 s for it (the usual holder is a
//! session still committing what its dead client sent), then gets `450
//! Another upload of this name is in progress`. Only a complete upload is fsynced and renamed over NAME
//! (atomic), so readers see the old file or the new one, never a mix.
//!
//! **How much of a partial counts.** MODE S writes arrive in order, so
//! after a process kill the partial's length is exactly what was written
//! (the page cache belongs to the kernel, not to the dead process). MODE E
//! blocks arrive out of order and leave holes; a partial counts only up to
//! its first hole (`SEEK_HOLE`, [`data_prefix_len`]), and resuming it
//! truncates it there. A failed transfer fdatasyncs its partial before the
//! failure reply. After a machine crash (not a process kill) a file system
//! may keep a length whose tail never reached the disk: unallocated tails
//! are cut by the same hole rule, and `sluice put --continue` checks the
//! prefix with `CKSM` before trusting it; other clients trust the length.
//!
//! **What each command does** (P = a kept partial of NAME, F = a complete
//! file NAME; an empty partial counts as none):
//!
//! | command | no P, no F | no P, F | P, no F | P and F |
//! |---|---|---|---|---|
//! | STOR | write P from 0 | write P from 0 | P truncated to 0 | P truncated to 0 |
//! | REST n + STOR | 554 no partial | 554 no partial | P cut to n (n ≤ P, else 554) | 550 ambiguous |
//! | REST ranges + STOR (MODE E) | 554 | 554 | blocks into P (ranges within P) | same |
//! | APPE | write P from 0 | copy of F + data | P from its end | 550 ambiguous |
//! | ESTO A k | P from 0 (k = 0) else 554 | copy of F, blocks at k (k ≤ F) | P cut to k (k ≤ P) | 550 ambiguous |
//! | SIZE / CKSM | 550 | F | P | F |
//!
//! Why these: `curl -C -` and `lftp put -c` ask `SIZE` and then send from
//! that offset with APPE (curl) or REST + STOR (lftp), so SIZE and the
//! resuming command must speak of the same object. SIZE keeps describing
//! F when F exists (downloaders and segmenting clients such as aria2 plan
//! with it), so a client that read F's size and then says APPE or REST n
//! could mean F or the partial: with both present APPE, ESTO and REST +
//! STOR are refused with a clear 550 instead of guessing (a plain STOR
//! replaces both; so does the retention below). REST + STOR resumes only a
//! partial, never F: in Sluice F is always a complete file, never the head
//! of an interrupted upload, so "keep F's first n bytes and write the
//! rest" would splice an old file and a new one (the failure that
//! prompted this design). An
//! APPE (or ESTO) to F works on a private copy of F (`copy_file_range`)
//! that is discarded if the transfer fails: the client's retry re-reads
//! F's size and appends again. MODE E `REST` ranges (globus-url-copy
//! `-rst`) name ranges the server acknowledged with 111 markers, which are
//! sent only after the bytes are written, so they are in P even after a
//! server kill, and can only mean P (also when F exists); without a P
//! they are refused. What no server can catch is
//! a client resuming with a *different* source file than the interrupted
//! one; `sluice put --continue` compares the server's prefix with `CKSM
//! <alg> 0 <n>` first and restarts from 0 when it differs.
//!
//! vsftpd writes into NAME itself (an interrupted overwrite destroys the
//! old file and its REST + STOR resumes whatever is there); the Globus
//! GridFTP server also writes in place and trusts restart markers. Sluice
//! keeps the old file intact until the new one is complete, which is why
//! it needs the partial as a separate, findable object.
//!
//! **Retention** ([`PartialPolicy`]): an upload that fails because the disk
//! is full removes its partial (it would only keep the disk full for every
//! later upload; the client gets 452 and must send the whole file again).
//! When an upload starts in a directory, kept partials and leftover temps
//! there older than `partial_max_age`, and the oldest beyond
//! `partial_max_bytes` in total, are removed (never one being written).
//! LIST/NLST/MLSD hide partials and temps; RETR never serves them.

use std::fs::File;
use std::io;
use std::sync::Arc;

use sluice_ftp::path::VirtualPath;
use sluice_ftp::session::{OpError, StoreKind};
use sluice_platform::fs::{data_prefix_len, unlock, FileKind, FsError, ServedRoot, TempFile};

use crate::ops::op_error;

mod retention;
pub use retention::PartialPolicy;
use retention::{sweep, sweep_due};

/// Suffix of kept partial uploads.
pub const PARTIAL_SUFFIX: &str = ".sluice-partial";

/// True for names this module creates, which listings hide.
pub fn is_internal_name(name: &[u8]) -> bool {
    name.starts_with(b".")
        && (name.ends_with(PARTIAL_SUFFIX.as_bytes())
            || (name.ends_with(b".part") && name.windows(8).any(|w| w == b".sluice-")))
}

/// The partial name that belongs to `path`, or `None` for `/`.
pub fn partial_path(path: &VirtualPath) -> Option<VirtualPath> {
    let name = path.file_name()?;
    path.parent()
        .resolve(&format!(".{name}{PARTIAL_SUFFIX}"))
        .ok()
}

/// The trustworthy length of `path`'s kept partial (see the module
/// comment), or `None` when there is none or it is empty. For SIZE/CKSM of
/// a name that does not exist.
pub fn partial_len(root: &ServedRoot, path: &VirtualPath) -> Option<u64> {
    let p = partial_path(path)?;
    let f = root.open_read(p.as_str()).ok()?;
    data_prefix_len(&f).ok().filter(|&n| n > 0)
}

enum Target {
    /// The locked partial.
    Partial {
        file: Arc<File>,
        partial: VirtualPath,
    },
    /// A private copy of a complete file (APPE/ESTO to it): never resumed,
    /// discarded on failure.
    Copy(TempFile),
}

/// An upload's destination, ready for bytes at [`Upload::start`].
pub struct Upload {
    target: Target,
    path: VirtualPath,
    /// Offset where received bytes begin.
    pub start: u64,
}

impl Upload {
    /// Prepares the destination for `kind` (blocking: call off the loop).
    pub fn prepare(
        root: &ServedRoot,
        path: &VirtualPath,
        kind: StoreKind,
        policy: &PartialPolicy,
    ) -> Result<Upload, OpError> {
        let partial = partial_path(path).ok_or(OpError::BadName)?;
        // A client's own bytes under a partial's name could be committed
        // by someone else's upload of the name it belongs to.
        if path
            .file_name()
            .is_some_and(|n| is_internal_name(n.as_bytes()))
        {
            return Err(OpError::BadName);
        }
        let complete = match root.stat(path.as_str()) {
            Ok(m) if m.kind != FileKind::File => return Err(OpError::NotAFile),
            Ok(m) => Some(m.size),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(op_error(e)),
        };
        if sweep_due(&path.parent()) {
            sweep(root, path, policy);
        }
        let pending =
            matches!(root.stat(partial.as_str()), Ok(m) if m.kind == FileKind::File && m.size > 0);
        let lock = || -> Result<Arc<File>, OpError> {
            match root.open_locked(partial.as_str()).map_err(op_error)? {
                Some(f) => Ok(Arc::new(f)),
                None => Err(OpError::Busy),
            }
        };
        // Opens the partial and cuts it to `at` (bounded by `limit`).
        let resume = |at: Option<u64>| -> Result<Upload, OpError> {
            let file = lock()?;
            let trusted = data_prefix_len(&file).map_err(|e| op_error(e.into()))?;
            let at = at.unwrap_or(trusted);
            if at > trusted {
                return Err(OpError::OffsetBeyondEof);
            }
            file.set_len(at).map_err(|e| op_error(e.into()))?;
            Ok(Upload {
                target: Target::Partial {
                    file,
                    partial: partial.clone(),
                },
                path: path.clone(),
                start: at,
            })
        };
        let copy_of_complete = |size: u64, start: u64| -> Result<Upload, OpError> {
            let t = root.create_temp(path.as_str()).map_err(op_error)?;
            let src = root.open_read(path.as_str()).map_err(op_error)?;
            if let Err(e) = copy_prefix(&src, t.file(), size) {
                let _ = t.discard();
                return Err(op_error(e.into()));
            }
            Ok(Upload {
                target: Target::Copy(t),
                path: path.clone(),
                start,
            })
        };
        match kind {
            StoreKind::Replace => resume(Some(0)),
            StoreKind::Restart(_) | StoreKind::Append | StoreKind::Adjusted(_)
                if pending && complete.is_some() =>
            {
                Err(OpError::PartialPending)
            }
            StoreKind::Restart(n) if pending => resume(Some(n)),
            StoreKind::Restart(_) => Err(OpError::NoPartial),
            StoreKind::RestartRanges(0) => resume(Some(0)),
            StoreKind::RestartRanges(end) if pending => {
                // The ranges may lie past holes of P: keep all of it.
                let file = lock()?;
                let len = file.metadata().map_err(|e| op_error(e.into()))?.len();
                if end > len {
                    return Err(OpError::OffsetBeyondEof);
                }
                Ok(Upload {
                    target: Target::Partial { file, partial },
                    path: path.clone(),
                    start: 0,
                })
            }
            StoreKind::RestartRanges(_) => Err(OpError::NoPartial),
            StoreKind::Append if pending => resume(None),
            StoreKind::Adjusted(k) if pending => resume(Some(k)),
            StoreKind::Append => match complete {
                Some(size) => copy_of_complete(size, size),
                None => resume(Some(0)),
            },
            StoreKind::Adjusted(k) => match complete {
                Some(size) if k > size => Err(OpError::OffsetBeyondEof),
                Some(size) => copy_of_complete(size, k),
                None if k > 0 => Err(OpError::NoPartial),
                None => resume(Some(0)),
            },
        }
    }

    /// The file to write into.
    pub fn file(&self) -> Arc<File> {
        match &self.target {
            Target::Copy(t) => Arc::clone(t.file()),
            Target::Partial { file, .. } => Arc::clone(file),
        }
    }

    /// Success: fdatasync and rename over the target. Blocking.
    pub fn commit(self, root: &ServedRoot) -> Result<(), OpError> {
        self.finish(root, false)
    }

    /// Success when the file's data was already fdatasynced after its
    /// last write (a MODE S upload syncs while it watches the control
    /// connection): only the rename is left. Blocking.
    pub fn commit_synced(self, root: &ServedRoot) -> Result<(), OpError> {
        self.finish(root, true)
    }

    fn finish(self, root: &ServedRoot, synced: bool) -> Result<(), OpError> {
        match self.target {
            Target::Copy(t) => t.commit().map_err(op_error),
            Target::Partial { file, partial } => {
                // One sync per upload, before the rename: what the name
                // promises is that the file it points at has all its data
                // on disk, and fdatasync writes the data and the size (the
                // metadata needed to read it back). A second fsync after
                // it only wrote the timestamps (an extra journal commit,
                // 15-20 ms a file on the lab's disk, for a value MFMT
                // usually replaces at once). The rename itself is atomic
                // (readers see the old file or the new one) and reaches
                // the disk with the directory's next journal commit, as
                // before.
                if !synced {
                    file.sync_data().map_err(|e| op_error(e.into()))?;
                }
                // Renamed while still locked: nobody else can be writing it.
                let r = root
                    .rename(partial.as_str(), self.path.as_str())
                    .map_err(op_error);
                unlock(&file);
                r
            }
        }
    }

    /// Failure (`why`): keep what arrived as the partial, durable, unless
    /// nothing did or the disk is full. Blocking.
    pub fn fail(self, root: &ServedRoot, why: OpError) {
        match self.target {
            Target::Copy(t) => {
                let _ = t.discard();
            }
            Target::Partial { file, partial } => {
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len == 0 || why == OpError::NoSpace {
                    // Still locked, so the name is still this file.
                    if let Err(e) = root.unlink(partial.as_str()) {
                        tracing::warn!(error = %e, "cannot remove partial upload");
                    }
                } else if let Err(e) = file.sync_data() {
                    tracing::warn!(error = %e, "cannot sync partial upload");
                }
                unlock(&file);
            }
        }
    }
}

/// Copies the first `len` bytes of `src` into `dst` at offset 0 with
/// `copy_file_range` (std's `io::copy` between files uses it), so the bytes
/// never pass through user space.
fn copy_prefix(src: &File, dst: &File, len: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut s = src;
    let mut d = dst;
    s.seek(SeekFrom::Start(0))?;
    d.seek(SeekFrom::Start(0))?;
    let copied = io::copy(&mut s.take(len), &mut d)?;
    if copied != len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn setup() -> (tempfile::TempDir, ServedRoot) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"0123456789").unwrap();
        let r = ServedRoot::open(d.path()).unwrap();
        (d, r)
    }

    fn vp(s: &str) -> VirtualPath {
        VirtualPath::root().resolve(s).unwrap()
    }

    fn prep(r: &ServedRoot, p: &str, kind: StoreKind) -> Result<Upload, OpError> {
        Upload::prepare(r, &vp(p), kind, &PartialPolicy::default())
    }

    fn names(d: &tempfile::TempDir) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn failed_replace_keeps_partial_and_never_touches_target() {
        let (d, r) = setup();
        let up = prep(&r, "/f", StoreKind::Replace).unwrap();
        let writer = up.file(); // a helper that lets go of it late
        writer.write_all_at(b"new!", 0).unwrap();
        up.fail(&r, OpError::ConnectionLost);
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789");
        assert_eq!(
            std::fs::read(d.path().join(".f.sluice-partial")).unwrap(),
            b"new!"
        );
        // f and a partial: REST + STOR is ambiguous, STOR replaces both.
        assert!(matches!(
            prep(&r, "/f", StoreKind::Restart(2)),
            Err(OpError::PartialPending)
        ));
        let up = prep(&r, "/f", StoreKind::Replace).unwrap();
        up.file().write_all_at(b"XY", 0).unwrap();
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"XY");
        assert!(!d.path().join(".f.sluice-partial").exists());
        // Without f, REST 2 + STOR continues the partial, then renames it.
        std::fs::write(d.path().join(".g.sluice-partial"), b"new!").unwrap();
        let up = prep(&r, "/g", StoreKind::Restart(2)).unwrap();
        assert_eq!(up.start, 2);
        up.file().write_all_at(b"XY", 2).unwrap();
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("g")).unwrap(), b"neXY");
        drop(writer);
    }

    #[test]
    fn a_writer_that_dies_leaves_the_partial_under_its_own_name() {
        // kill -9 of the server = the Upload is dropped without fail().
        let (d, r) = setup();
        let up = prep(&r, "/g", StoreKind::Replace).unwrap();
        up.file().write_all_at(b"abc", 0).unwrap();
        // While it is being written, nobody else may take it.
        assert!(matches!(
            prep(&r, "/g", StoreKind::Replace),
            Err(OpError::Busy)
        ));
        assert!(matches!(
            prep(&r, "/g", StoreKind::Append),
            Err(OpError::Busy)
        ));
        drop(up);
        assert_eq!(names(&d), [".g.sluice-partial", "f"]);
        let up = prep(&r, "/g", StoreKind::Restart(3)).unwrap();
        assert_eq!(up.start, 3);
    }

    #[test]
    fn rest_stor_resumes_only_a_partial() {
        let (d, r) = setup();
        // f is complete: its first bytes are not the head of an upload.
        assert!(matches!(
            prep(&r, "/f", StoreKind::Restart(4)),
            Err(OpError::NoPartial)
        ));
        assert!(matches!(
            prep(&r, "/new", StoreKind::Restart(4)),
            Err(OpError::NoPartial)
        ));
        assert!(matches!(
            prep(&r, "/f", StoreKind::RestartRanges(4)),
            Err(OpError::NoPartial)
        ));
        assert!(matches!(
            prep(&r, "/new", StoreKind::Adjusted(4)),
            Err(OpError::NoPartial)
        ));
        // A partial shorter than the offset is refused, not padded.
        std::fs::write(d.path().join(".new.sluice-partial"), b"abc").unwrap();
        assert!(matches!(
            prep(&r, "/new", StoreKind::Restart(4)),
            Err(OpError::OffsetBeyondEof)
        ));
        assert!(matches!(
            prep(&r, "/new", StoreKind::RestartRanges(4)),
            Err(OpError::OffsetBeyondEof)
        ));
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789");
    }

    #[test]
    fn append_to_a_complete_file_while_a_partial_is_pending_is_refused() {
        let (d, r) = setup();
        std::fs::write(d.path().join(".f.sluice-partial"), b"abc").unwrap();
        assert!(matches!(
            prep(&r, "/f", StoreKind::Append),
            Err(OpError::PartialPending)
        ));
        assert!(matches!(
            prep(&r, "/f", StoreKind::Adjusted(3)),
            Err(OpError::PartialPending)
        ));
        assert!(matches!(
            prep(&r, "/f", StoreKind::Restart(3)),
            Err(OpError::PartialPending)
        ));
        // MODE E restart ranges can only mean the partial.
        assert_eq!(
            prep(&r, "/f", StoreKind::RestartRanges(3)).unwrap().start,
            0
        );
        // Without the complete file, APPE continues the partial.
        std::fs::write(d.path().join(".g.sluice-partial"), b"abc").unwrap();
        let up = prep(&r, "/g", StoreKind::Append).unwrap();
        assert_eq!(up.start, 3);
        up.file().write_all_at(b"de", 3).unwrap();
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("g")).unwrap(), b"abcde");
    }

    #[test]
    fn append_copies_existing_file_and_a_failure_keeps_nothing() {
        let (d, r) = setup();
        let up = prep(&r, "/f", StoreKind::Append).unwrap();
        assert_eq!(up.start, 10);
        up.file().write_all_at(b"ab", 10).unwrap();
        // A failed append leaves f as it was and nothing to resume: the
        // retry asks SIZE f again and appends from there.
        up.fail(&r, OpError::ConnectionLost);
        assert_eq!(names(&d), ["f"]);
        let up = prep(&r, "/f", StoreKind::Append).unwrap();
        up.file().write_all_at(b"ab", 10).unwrap();
        // Until commit, f is untouched.
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789");
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789ab");
    }

    #[test]
    fn a_partial_counts_up_to_its_first_hole() {
        let (d, r) = setup();
        // MODE E wrote a block at 1 MiB but the one at 0 only in part.
        let up = prep(&r, "/m", StoreKind::Replace).unwrap();
        up.file().write_all_at(&[7u8; 8192], 0).unwrap();
        up.file().write_all_at(&[9u8; 4096], 1 << 20).unwrap();
        drop(up); // killed
        let len = partial_len(&r, &vp("/m")).unwrap();
        // tmpfs and ext4 report the hole; a file system that cannot
        // says the whole length.
        assert!(len == 8192 || len == (1 << 20) + 4096, "{len}");
        if len == 8192 {
            let up = prep(&r, "/m", StoreKind::Append).unwrap();
            assert_eq!(up.start, 8192);
            assert_eq!(up.file().metadata().unwrap().len(), 8192);
            // globus-url-copy -rst names its ranges: the holes are kept.
            drop(up);
            std::fs::OpenOptions::new()
                .write(true)
                .open(d.path().join(".m.sluice-partial"))
                .unwrap()
                .write_all_at(&[9u8; 4096], 1 << 20)
                .unwrap();
            let up = prep(&r, "/m", StoreKind::RestartRanges((1 << 20) + 4096)).unwrap();
            assert_eq!(up.start, 0);
            assert_eq!(up.file().metadata().unwrap().len(), (1 << 20) + 4096);
        }
    }

    #[test]
    fn disk_full_drops_the_partial() {
        let (d, r) = setup();
        let up = prep(&r, "/f", StoreKind::Replace).unwrap();
        up.file().write_all_at(b"abc", 0).unwrap();
        up.fail(&r, OpError::NoSpace);
        assert_eq!(names(&d), ["f"]);
    }

    #[test]
    fn directories_refused_and_empty_failures_leave_nothing() {
        let (d, r) = setup();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        assert!(matches!(
            prep(&r, "/dir", StoreKind::Replace),
            Err(OpError::NotAFile)
        ));
        let up = prep(&r, "/g", StoreKind::Replace).unwrap();
        up.fail(&r, OpError::DataConnection);
        assert_eq!(names(&d), ["dir", "f"]);
        assert!(matches!(
            prep(&r, "/.f.sluice-partial", StoreKind::Replace),
            Err(OpError::BadName)
        ));
        assert!(is_internal_name(b".g.sluice-partial"));
        assert!(is_internal_name(b".g.sluice-1a2b.part"));
        assert!(!is_internal_name(b".profile"));
    }
}
