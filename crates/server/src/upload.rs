//! Where an upload's bytes go, so that an existing file is never corrupted
//! and an interrupted upload can be resumed but is never presented as
//! complete.
//!
//! The rules (the crate README repeats them for operators):
//!
//! * Every upload writes to a file that is not the target: a fresh temp
//!   `.NAME.sluice-<unique>.part`, or the kept partial `.NAME.sluice-partial`
//!   (below). Only a complete upload is fsynced and renamed over `NAME`
//!   (`renameat`, atomic), so readers see the old file or the new one.
//! * An upload that fails or is aborted after receiving some bytes is kept
//!   as `.NAME.sluice-partial` in the same directory (replacing an older
//!   one). Nothing appears under `NAME`.
//! * `REST n` + `STOR NAME` and `APPE NAME` continue from the partial when
//!   there is one: REST truncates it to `n` (n must not exceed its size),
//!   APPE appends at its end. When there is no partial but `NAME` exists,
//!   its first `n` bytes (APPE: all of it) are copied into a new temp
//!   (`copy_file_range`, no user-space copy) and the upload continues there,
//!   so an interrupted APPE never damages `NAME`.
//! * `SIZE NAME` reports the partial's size when `NAME` does not exist,
//!   which is what `curl -C -` and `lftp put -c` ask before resuming.
//!   LIST/NLST/MLSD hide partials and temps.

use std::fs::File;
use std::io::{self};
use std::sync::Arc;

use sluice_ftp::path::VirtualPath;
use sluice_ftp::session::{OpError, StoreKind};
use sluice_platform::fs::{FileKind, ServedRoot, TempFile};

use crate::ops::op_error;

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

enum Target {
    Temp(TempFile),
    Partial {
        file: Arc<File>,
        partial: VirtualPath,
    },
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
    ) -> Result<Upload, OpError> {
        let partial = partial_path(path).ok_or(OpError::BadName)?;
        match root.stat(path.as_str()) {
            Ok(m) if m.kind != FileKind::File => return Err(OpError::NotAFile),
            Ok(_) | Err(sluice_platform::fs::FsError::NotFound) => {}
            Err(e) => return Err(op_error(e)),
        }
        let existing = |p: &VirtualPath| match root.stat(p.as_str()) {
            Ok(m) if m.kind == FileKind::File => Some(m.size),
            _ => None,
        };
        let temp = |start: u64| -> Result<Upload, OpError> {
            let t = root.create_temp(path.as_str()).map_err(op_error)?;
            Ok(Upload {
                target: Target::Temp(t),
                path: path.clone(),
                start,
            })
        };
        if kind == StoreKind::Replace {
            return temp(0);
        }
        if let Some(size) = existing(&partial) {
            let start = match kind {
                StoreKind::Restart(n) if n > size => return Err(OpError::OffsetBeyondEof),
                StoreKind::Restart(n) | StoreKind::Adjusted(n) => n,
                StoreKind::Append => size,
                StoreKind::Replace => 0,
            };
            let file = root.open_write(partial.as_str()).map_err(op_error)?;
            if let StoreKind::Restart(n) = kind {
                file.set_len(n).map_err(|e| op_error(e.into()))?;
            }
            return Ok(Upload {
                target: Target::Partial {
                    file: Arc::new(file),
                    partial,
                },
                path: path.clone(),
                start,
            });
        }
        let size = existing(path);
        let (keep, start) = match (kind, size) {
            (StoreKind::Restart(n), Some(s)) if n > s => return Err(OpError::OffsetBeyondEof),
            (StoreKind::Restart(n), None) if n > 0 => return Err(OpError::OffsetBeyondEof),
            (StoreKind::Restart(n), _) => (n, n),
            (StoreKind::Append, s) => (s.unwrap_or(0), s.unwrap_or(0)),
            (StoreKind::Adjusted(n), s) => (s.unwrap_or(0), n),
            (StoreKind::Replace, _) => (0, 0),
        };
        let up = temp(start)?;
        if keep > 0 {
            let src = root.open_read(path.as_str()).map_err(op_error)?;
            if let Target::Temp(t) = &up.target {
                copy_prefix(&src, t.file(), keep).map_err(|e| op_error(e.into()))?;
            }
        }
        Ok(up)
    }

    /// The file to write into.
    pub fn file(&self) -> Arc<File> {
        match &self.target {
            Target::Temp(t) => Arc::clone(t.file()),
            Target::Partial { file, .. } => Arc::clone(file),
        }
    }

    /// Success: fsync and rename over the target; drop a stale partial.
    /// Blocking.
    pub fn commit(self, root: &ServedRoot) -> Result<(), OpError> {
        match self.target {
            Target::Temp(t) => {
                t.commit().map_err(op_error)?;
                if let Some(p) = partial_path(&self.path) {
                    let _ = root.unlink(p.as_str());
                }
                Ok(())
            }
            Target::Partial { file, partial } => {
                file.sync_all().map_err(|e| op_error(e.into()))?;
                root.rename(partial.as_str(), self.path.as_str())
                    .map_err(op_error)
            }
        }
    }

    /// Failure: keep what arrived as the partial (if anything did).
    /// Blocking.
    pub fn keep_partial(self) {
        match self.target {
            Target::Temp(t) => {
                let received = t.file().metadata().map(|m| m.len()).unwrap_or(0);
                let name = self
                    .path
                    .file_name()
                    .map(|n| format!(".{n}{PARTIAL_SUFFIX}"));
                match name {
                    Some(name) if received > 0 => {
                        if let Err(e) = t.keep_as(&name) {
                            tracing::warn!(error = %e, "cannot keep partial upload");
                        }
                    }
                    _ => {
                        let _ = t.discard();
                    }
                }
            }
            Target::Partial { file, .. } => {
                let _ = file.sync_data();
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

    #[test]
    fn failed_replace_keeps_partial_and_never_touches_target() {
        let (d, r) = setup();
        let up = Upload::prepare(&r, &vp("/f"), StoreKind::Replace).unwrap();
        up.file().write_all_at(b"new!", 0).unwrap();
        up.keep_partial();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789");
        assert_eq!(
            std::fs::read(d.path().join(".f.sluice-partial")).unwrap(),
            b"new!"
        );
        // REST 2 + STOR continues the partial, then renames it over f.
        let up = Upload::prepare(&r, &vp("/f"), StoreKind::Restart(2)).unwrap();
        assert_eq!(up.start, 2);
        up.file().write_all_at(b"XY", 2).unwrap();
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"neXY");
        assert!(!d.path().join(".f.sluice-partial").exists());
    }

    #[test]
    fn append_copies_existing_file_into_temp() {
        let (d, r) = setup();
        let up = Upload::prepare(&r, &vp("/f"), StoreKind::Append).unwrap();
        assert_eq!(up.start, 10);
        up.file().write_all_at(b"ab", 10).unwrap();
        // Until commit, f is untouched.
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789");
        up.commit(&r).unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"0123456789ab");
    }

    #[test]
    fn restart_beyond_end_and_directories_refused() {
        let (d, r) = setup();
        assert!(matches!(
            Upload::prepare(&r, &vp("/f"), StoreKind::Restart(11)),
            Err(OpError::OffsetBeyondEof)
        ));
        std::fs::create_dir(d.path().join("dir")).unwrap();
        assert!(matches!(
            Upload::prepare(&r, &vp("/dir"), StoreKind::Replace),
            Err(OpError::NotAFile)
        ));
        // An empty failed upload leaves nothing behind.
        let up = Upload::prepare(&r, &vp("/g"), StoreKind::Replace).unwrap();
        up.keep_partial();
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(is_internal_name(b".g.sluice-partial"));
        assert!(is_internal_name(b".g.sluice-1a2b.part"));
        assert!(!is_internal_name(b".profile"));
    }
}
