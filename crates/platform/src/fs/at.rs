//! The descriptor-relative calls the served root is built on: `openat2`
//! beneath a directory, exclusive create, `renameat`, a directory's fsync,
//! and `fstat`/`fstatat` without following the last symlink. Each acts on
//! one name relative to a descriptor the caller already holds.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, UNIX_EPOCH};

use super::{FileKind, FsError, Metadata};
use crate::sys::cvt_retry;

/// `struct open_how` as the kernel defines it (linux/openat2.h).
#[repr(C)]
pub(super) struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

pub(super) fn openat2_beneath(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
) -> Result<OwnedFd, FsError> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `how` is a live, correctly laid out `open_how` whose size we
    // pass; `path` is NUL-terminated; `dir` is a valid fd for the call.
    let ret = cvt_retry(|| unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })?;
    // SAFETY: the syscall returned a new fd that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

pub(super) fn create_excl(dir: BorrowedFd<'_>, name: &CStr) -> Result<File, FsError> {
    // SAFETY: valid dir fd and NUL-terminated single-component name; O_EXCL
    // with O_NOFOLLOW means we never open something that already exists.
    let fd = cvt_retry(|| unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    })?;
    // SAFETY: openat returned a new fd that nobody else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

pub(super) fn renameat(
    fdir: BorrowedFd<'_>,
    from: &CStr,
    tdir: BorrowedFd<'_>,
    to: &CStr,
) -> Result<(), FsError> {
    // SAFETY: valid dir fds and NUL-terminated single-component names.
    cvt_retry(|| unsafe {
        libc::renameat(
            fdir.as_raw_fd(),
            from.as_ptr(),
            tdir.as_raw_fd(),
            to.as_ptr(),
        )
    })?;
    Ok(())
}

pub(super) fn sync_dir(dir: BorrowedFd<'_>) {
    // An O_PATH fd cannot be fsynced; reopen the directory itself. Failing
    // to sync a directory is not worth failing an upload that is renamed.
    if let Ok(fd) = openat2_beneath(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY) {
        let _ = File::from(fd).sync_all();
    }
}

/// Clears O_NONBLOCK on a descriptor now known to be a regular file, so
/// reads and sendfile behave as on any file whatever the file system does
/// with the flag.
pub(super) fn regular_blocking(fd: OwnedFd) -> Result<OwnedFd, FsError> {
    // SAFETY: F_GETFL on a descriptor we own; no pointers involved.
    let flags = cvt_retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: F_SETFL with an integer argument on a descriptor we own.
    cvt_retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })?;
    Ok(fd)
}

/// Releases the `flock` [`ServedRoot::open_locked`] took, without waiting
/// for every clone of the descriptor to close (a transfer's helpers may
/// drop theirs a little later).
pub fn unlock(file: &File) {
    // SAFETY: flock on a descriptor we borrow; no pointers involved.
    let _ = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

pub(super) fn same_inode(file: &File, dir: BorrowedFd<'_>, name: &CStr) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = file.metadata() else { return false };
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, NUL-terminated name, live writable `stat`.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    r == 0 && st.st_ino == m.ino() && st.st_dev == m.dev()
}

pub(super) fn fstat(fd: BorrowedFd<'_>) -> Result<Metadata, FsError> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is valid and `st` is a live, writable `stat`.
    cvt_retry(|| unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(metadata(&st))
}

pub(super) fn fstatat_nofollow(dir: BorrowedFd<'_>, name: &CStr) -> Result<Metadata, FsError> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, NUL-terminated name, live writable `stat`.
    cvt_retry(|| unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(metadata(&st))
}

fn metadata(st: &libc::stat) -> Metadata {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        _ => FileKind::Other,
    };
    let mtime = if st.st_mtime >= 0 {
        UNIX_EPOCH
            + Duration::new(
                st.st_mtime as u64,
                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
            )
    } else {
        UNIX_EPOCH
    };
    Metadata {
        kind,
        size: st.st_size.max(0) as u64,
        mtime,
        mode: st.st_mode & 0o7777,
        file_type: st.st_mode & libc::S_IFMT,
        // st_nlink is u64 on x86_64, u32 on some other targets.
        #[allow(clippy::unnecessary_cast)]
        nlink: st.st_nlink as u64,
    }
}
