//! An upload written under a temporary name and renamed over its target
//! only when complete, so readers never see a half-written file.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::{renameat, sync_dir, FsError};
use crate::sys::cvt_retry;

/// An upload in progress under a temporary name next to its target.
/// Dropping it without [`commit`](TempFile::commit) or
/// [`keep_as`](TempFile::keep_as) leaves the temp file in place; call
/// [`discard`](TempFile::discard) to remove it.
#[derive(Debug)]
pub struct TempFile {
    pub(super) file: Arc<File>,
    pub(super) dir: OwnedFd,
    pub(super) temp_name: CString,
    pub(super) final_name: CString,
}

impl TempFile {
    /// The open file to write into (shared, for writers on other threads).
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// The temp file's own name (one component, in the target's directory).
    pub fn temp_name(&self) -> &OsStr {
        OsStr::from_bytes(self.temp_name.to_bytes())
    }

    /// fsyncs the data, then renames the temp over the target name and
    /// fsyncs the directory, so a crash leaves either the old or the new
    /// file under the target name, never a mix.
    pub fn commit(self) -> Result<(), FsError> {
        self.file.sync_all()?;
        renameat(
            self.dir.as_fd(),
            &self.temp_name,
            self.dir.as_fd(),
            &self.final_name,
        )?;
        sync_dir(self.dir.as_fd());
        Ok(())
    }

    /// fsyncs the data and renames the temp to `name` (one component in the
    /// same directory), replacing what was there. Used to keep the prefix of
    /// an interrupted upload under a well-known partial name.
    pub fn keep_as(self, name: &str) -> Result<(), FsError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(FsError::InvalidPath);
        }
        let to = CString::new(name).map_err(|_| FsError::InvalidPath)?;
        let _ = self.file.sync_data();
        renameat(self.dir.as_fd(), &self.temp_name, self.dir.as_fd(), &to)
    }

    /// Removes the temp file.
    pub fn discard(self) -> Result<(), FsError> {
        // SAFETY: valid dir fd and NUL-terminated single-component name.
        cvt_retry(|| unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.temp_name.as_ptr(), 0) })?;
        Ok(())
    }
}
