//! The served root: every client path is resolved beneath it by the kernel.
//!
//! A [`ServedRoot`] holds an `O_PATH | O_DIRECTORY` descriptor of the
//! directory being served. Every path a client names is resolved relative to
//! that descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`:
//! symlinks that stay inside the root work, and anything that would leave it
//! (`..` past the root, an absolute symlink, a `/proc` magic link) is refused
//! by the kernel and reported as [`FsError::OutsideRoot`]. No string check
//! here is a security boundary; the few that exist only produce nicer errors.
//!
//! Operations on the final component (mkdir, unlink, rename, creating a
//! temporary upload file) first open the *parent* directory with `openat2`
//! and then act on a single name relative to that descriptor, so the name
//! itself can never walk anywhere.
//!
//! Paths given to this module are relative to the root: a leading `/` is
//! ignored, so the session's virtual path `/a/b` and `a/b` mean the same.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::sys::cvt_retry;

mod at;
mod extents;
mod temp_upload;

pub use at::unlock;
use at::{
    create_excl, fstat, fstatat_nofollow, openat2_beneath, regular_blocking, renameat, same_inode,
    sync_dir,
};
pub use extents::{data_prefix_len, data_ranges};
pub use temp_upload::TempFile;

/// Why a file-system operation on a client path failed. Each variant is
/// something a protocol layer can turn into a fixed reply; the wrapped
/// `io::Error` of [`FsError::Io`] is for logs only, never for clients.
#[derive(Debug)]
pub enum FsError {
    /// The path does not exist.
    NotFound,
    /// Resolving the path would leave the served root (ELOOP/EXDEV from
    /// `RESOLVE_BENEATH`, or a magic link).
    OutsideRoot,
    /// A directory was needed and something else was found.
    NotADirectory,
    /// A file was needed and a directory was found.
    IsADirectory,
    /// The kernel refused the operation (EACCES/EPERM/EROFS).
    PermissionDenied,
    /// The target name already exists.
    AlreadyExists,
    /// The directory is not empty (rmdir).
    NotEmpty,
    /// The disk or quota is full.
    NoSpace,
    /// The path is not acceptable (NUL byte, empty final component, `.`/`..`
    /// as the name to create or remove).
    InvalidPath,
    /// Anything else; log it, do not show it.
    Io(io::Error),
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsError::NotFound => f.write_str("not found"),
            FsError::OutsideRoot => f.write_str("outside the served root"),
            FsError::NotADirectory => f.write_str("not a directory"),
            FsError::IsADirectory => f.write_str("is a directory"),
            FsError::PermissionDenied => f.write_str("permission denied"),
            FsError::AlreadyExists => f.write_str("already exists"),
            FsError::NotEmpty => f.write_str("directory not empty"),
            FsError::NoSpace => f.write_str("no space left"),
            FsError::InvalidPath => f.write_str("invalid path"),
            FsError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FsError {}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound,
            // RESOLVE_BENEATH reports an escape as EXDEV; a magic link or a
            // symlink loop as ELOOP. Both mean "not a path we serve".
            Some(libc::EXDEV) | Some(libc::ELOOP) => FsError::OutsideRoot,
            Some(libc::ENOTDIR) => FsError::NotADirectory,
            Some(libc::EISDIR) => FsError::IsADirectory,
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => FsError::PermissionDenied,
            Some(libc::EEXIST) => FsError::AlreadyExists,
            Some(libc::ENOTEMPTY) => FsError::NotEmpty,
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => FsError::NoSpace,
            Some(libc::ENAMETOOLONG) | Some(libc::EINVAL) => FsError::InvalidPath,
            _ => FsError::Io(e),
        }
    }
}

/// What kind of object a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink whose target could not be resolved inside the root.
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

/// What `stat` tells about one object: enough for SIZE, MDTM, LIST and MLSx.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// Kind of object.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time.
    pub mtime: SystemTime,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// File type bits (`st_mode & S_IFMT`): tells FIFOs, sockets and
    /// devices apart where `kind` says only [`FileKind::Other`].
    pub file_type: u32,
    /// Hard link count.
    pub nlink: u64,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (raw bytes; Linux names need not be UTF-8).
    pub name: Vec<u8>,
    /// Its metadata; symlinks inside the root are followed.
    pub meta: Metadata,
}

/// A directory being read in batches ([`ServedRoot::open_dir`]): a
/// listing of any size is read, rendered and sent a batch at a time
/// instead of being held whole.
pub struct DirReader {
    path: String,
    iter: nix::dir::OwningIter,
    /// The directory again, for `fstatat` (the iterator owns its fd).
    dup: OwnedFd,
}

impl std::fmt::Debug for DirReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirReader")
            .field("path", &self.path)
            .finish()
    }
}

impl DirReader {
    /// Up to `max` more entries (with metadata, as
    /// [`ServedRoot::list_dir`] gives them) in directory order; empty at
    /// the end. `.` and `..` are left out; `root` resolves symlinks.
    pub fn next_batch(&mut self, root: &ServedRoot, max: usize) -> Result<Vec<DirEntry>, FsError> {
        loop {
            // Empty only at the end, even if a whole batch raced with deletes.
            let (out, read) = self.next_batch_matching(root, max, &|_| true)?;
            if !out.is_empty() || read == 0 {
                return Ok(out);
            }
        }
    }

    /// Reads up to `max` more names and returns those `keep` accepts (with
    /// metadata; the others are not stat'ed) and how many names were read:
    /// 0 only at the end.
    pub fn next_batch_matching(
        &mut self,
        root: &ServedRoot,
        max: usize,
        keep: &dyn Fn(&[u8]) -> bool,
    ) -> Result<(Vec<DirEntry>, usize), FsError> {
        let mut out = Vec::new();
        let mut read = 0;
        while read < max {
            let Some(entry) = self.iter.next() else {
                break;
            };
            let entry = entry.map_err(|e| FsError::from(io::Error::from(e)))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            read += 1;
            if !keep(name) {
                continue;
            }
            let Ok(meta) = fstatat_nofollow(self.dup.as_fd(), entry.file_name()) else {
                continue; // raced with a delete
            };
            let meta = if meta.kind == FileKind::Symlink {
                let child = join(&self.path, name);
                root.stat(&child).unwrap_or(meta)
            } else {
                meta
            };
            out.push(DirEntry {
                name: name.to_vec(),
                meta,
            });
        }
        Ok((out, read))
    }
}

/// A directory served to clients; see the module docs.
#[derive(Debug)]
pub struct ServedRoot {
    fd: OwnedFd,
}

impl ServedRoot {
    /// Opens `dir` as the served root. Fails if it is not a directory.
    pub fn open(dir: &Path) -> io::Result<ServedRoot> {
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `c` is a valid NUL-terminated string; open has no other
        // preconditions and the returned fd is checked before use.
        let fd = cvt_retry(|| unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ServedRoot { fd })
    }

    /// Opens an existing regular file for reading.
    pub fn open_read(&self, path: &str) -> Result<File, FsError> {
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
        // writer and hold a thread; the type check below refuses it anyway.
        let fd = self.resolve(path, libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK)?;
        let meta = fstat(fd.as_fd())?;
        match meta.kind {
            FileKind::File => Ok(File::from(regular_blocking(fd)?)),
            FileKind::Dir => Err(FsError::IsADirectory),
            _ => Err(FsError::PermissionDenied),
        }
    }

    /// Opens an existing regular file for writing (no truncation, no
    /// creation). Used to continue a kept partial upload.
    pub fn open_write(&self, path: &str) -> Result<File, FsError> {
        // O_NONBLOCK for the same reason as open_read (a FIFO without a
        // reader fails with ENXIO instead of waiting).
        let fd = self.resolve(path, libc::O_WRONLY | libc::O_NOCTTY | libc::O_NONBLOCK)?;
        match fstat(fd.as_fd())?.kind {
            FileKind::File => Ok(File::from(regular_blocking(fd)?)),
            FileKind::Dir => Err(FsError::IsADirectory),
            _ => Err(FsError::PermissionDenied),
        }
    }

    /// Stats a path, following symlinks that stay inside the root.
    pub fn stat(&self, path: &str) -> Result<Metadata, FsError> {
        let fd = self.resolve(path, libc::O_PATH)?;
        fstat(fd.as_fd())
    }

    /// Lists a directory, sorted by name. `.` and `..` are left out.
    /// Symlinks inside the root show their target's metadata; symlinks that
    /// escape show as [`FileKind::Symlink`] with the link's own metadata, so
    /// nothing about outside files leaks into a listing. Holds the whole
    /// directory: listings sent to clients read it in batches
    /// ([`ServedRoot::open_dir`]).
    pub fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let mut dir = self.open_dir(path)?;
        let mut out = Vec::new();
        loop {
            let batch = dir.next_batch(self, 4096)?;
            if batch.is_empty() {
                break;
            }
            out.extend(batch);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Opens a directory for reading in batches, in directory order
    /// (see [`DirReader::next_batch`]).
    pub fn open_dir(&self, path: &str) -> Result<DirReader, FsError> {
        let fd = self.resolve(path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let raw = fd.as_raw_fd();
        // nix's Dir takes ownership of the fd; keep a duplicate for fstatat.
        let dup = fd.try_clone()?;
        std::mem::forget(fd);
        let dir = nix::dir::Dir::from_fd(raw).map_err(|e| FsError::from(io::Error::from(e)))?;
        Ok(DirReader {
            path: path.to_owned(),
            iter: dir.into_iter(),
            dup,
        })
    }

    /// Creates a directory (mode 0755 before umask).
    pub fn mkdir(&self, path: &str) -> Result<(), FsError> {
        let (parent, name) = self.parent(path)?;
        // SAFETY: valid dir fd and NUL-terminated single-component name.
        cvt_retry(|| unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) })?;
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<(), FsError> {
        let (parent, name) = self.parent(path)?;
        // SAFETY: valid dir fd and NUL-terminated single-component name.
        cvt_retry(|| unsafe {
            libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR)
        })?;
        Ok(())
    }

    /// Removes a file (or symlink; never follows it).
    pub fn unlink(&self, path: &str) -> Result<(), FsError> {
        let (parent, name) = self.parent(path)?;
        if fstatat_nofollow(parent.as_fd(), &name)?.kind == FileKind::Dir {
            return Err(FsError::IsADirectory);
        }
        // SAFETY: valid dir fd and NUL-terminated single-component name.
        cvt_retry(|| unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) })?;
        Ok(())
    }

    /// Renames `from` to `to`, replacing `to` if it is a file.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let (fparent, fname) = self.parent(from)?;
        let (tparent, tname) = self.parent(to)?;
        renameat(fparent.as_fd(), &fname, tparent.as_fd(), &tname)
    }

    /// Creates a new, empty temporary file in the directory of `target`,
    /// named `.NAME.sluice-<unique>.part`. It becomes visible under the
    /// target name only through [`TempFile::commit`].
    pub fn create_temp(&self, target: &str) -> Result<TempFile, FsError> {
        let (parent, name) = self.parent(target)?;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            let mut tmp = b".".to_vec();
            tmp.extend_from_slice(name.to_bytes());
            tmp.extend_from_slice(
                format!(".sluice-{:x}{:x}{:x}.part", std::process::id(), n, nanos).as_bytes(),
            );
            let tmp = CString::new(tmp).map_err(|_| FsError::InvalidPath)?;
            match create_excl(parent.as_fd(), &tmp) {
                Ok(file) => {
                    return Ok(TempFile {
                        file: Arc::new(file),
                        dir: parent,
                        temp_name: tmp,
                        final_name: name,
                    })
                }
                Err(FsError::AlreadyExists) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(FsError::AlreadyExists)
    }

    /// Opens (creating it if needed, never following a symlink) the file
    /// `path` for reading and writing and takes an exclusive `flock` on it
    /// without waiting. `Ok(None)`: another holder has the lock. Upload
    /// partials use this: the lock dies with the process (a `kill -9`
    /// frees the name for the resume), and the name is checked to still
    /// lead to the locked file, so a file renamed away by its last holder
    /// (a committed upload) is never taken for the partial.
    pub fn open_locked(&self, path: &str) -> Result<Option<File>, FsError> {
        let (parent, name) = self.parent(path)?;
        for _ in 0..4 {
            // SAFETY: valid dir fd and NUL-terminated single-component name.
            let fd = cvt_retry(|| unsafe {
                libc::openat(
                    parent.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC
                        | libc::O_NONBLOCK,
                    0o644 as libc::c_uint,
                )
            })?;
            // SAFETY: openat returned a new fd that nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            if fstat(fd.as_fd())?.kind != FileKind::File {
                return Err(FsError::PermissionDenied);
            }
            let file = File::from(regular_blocking(fd)?);
            // SAFETY: flock on a descriptor we own; no pointers involved.
            if let Err(e) = cvt_retry(|| unsafe {
                libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)
            }) {
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Ok(None);
                }
                return Err(e.into());
            }
            if same_inode(&file, parent.as_fd(), &name) {
                return Ok(Some(file));
            }
        }
        Ok(None)
    }

    /// Resolves `path` beneath the root with `openat2`.
    fn resolve(&self, path: &str, flags: libc::c_int) -> Result<OwnedFd, FsError> {
        let rel = relative(path);
        let c = CString::new(rel).map_err(|_| FsError::InvalidPath)?;
        openat2_beneath(self.fd.as_fd(), &c, flags)
    }

    /// Opens the parent directory of `path` and returns it with the final
    /// component, which must be a real name (not empty, `.` or `..`).
    fn parent(&self, path: &str) -> Result<(OwnedFd, CString), FsError> {
        let rel = relative(path).trim_end_matches('/');
        let (dir, name) = match rel.rfind('/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (".", rel),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(FsError::InvalidPath);
        }
        let name = CString::new(name).map_err(|_| FsError::InvalidPath)?;
        let dir = if dir.is_empty() { "." } else { dir };
        let c = CString::new(dir).map_err(|_| FsError::InvalidPath)?;
        let fd = openat2_beneath(self.fd.as_fd(), &c, libc::O_PATH | libc::O_DIRECTORY)?;
        Ok((fd, name))
    }
}

/// Turns a virtual path into one relative to the root: leading slashes go,
/// and the root itself becomes `.`.
fn relative(path: &str) -> &str {
    let p = path.trim_start_matches('/');
    if p.is_empty() {
        "."
    } else {
        p
    }
}

fn join(dir: &str, name: &[u8]) -> String {
    let mut s = relative(dir).to_string();
    if s == "." {
        s.clear();
    } else if !s.ends_with('/') {
        s.push('/');
    }
    s.push_str(&String::from_utf8_lossy(name));
    s
}

#[cfg(test)]
mod tests;
