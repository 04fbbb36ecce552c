//! Where a file holds data and where it has holes (`SEEK_DATA` /
//! `SEEK_HOLE`): a hole reads as zeroes without a disk read, so neither an
//! upload's resume point nor a cache-miss count may take it for data.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Length of the data at the start of `file` before its first hole
/// (`SEEK_HOLE`; the file's length when it has none, or when the file
/// system does not report holes). Bytes past a hole were written out of
/// order (MODE E) around bytes that never came.
pub fn data_prefix_len(file: &File) -> io::Result<u64> {
    // SAFETY: lseek on a descriptor we borrow; no pointers involved.
    let r = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_HOLE) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            // Empty file (ENXIO) or no SEEK_HOLE support: no hole known.
            Some(libc::ENXIO) | Some(libc::EINVAL) => Ok(file.metadata()?.len()),
            _ => Err(e),
        };
    }
    Ok((r as u64).min(file.metadata()?.len()))
}

/// The data extents of `file` inside `[off, off + len)` (`SEEK_DATA` /
/// `SEEK_HOLE`), at most `max` of them; past the `max`th the rest of the
/// range counts as data. A file system that does not report holes gives the
/// whole range. Holes read as zeroes without touching a disk (tmpfs does not
/// even put a page in the cache for them), so whoever asks "is this range
/// cached?" must not count them as misses.
pub fn data_ranges(
    file: &File,
    off: u64,
    len: u64,
    max: usize,
) -> io::Result<Vec<std::ops::Range<u64>>> {
    let end = off.saturating_add(len);
    let mut out = Vec::new();
    let mut p = off;
    while p < end {
        if out.len() + 1 >= max.max(1) {
            out.push(p..end);
            break;
        }
        let Some(d) = seek(file, p, libc::SEEK_DATA)? else {
            break; // no data from `p` to the end of the file
        };
        if d >= end {
            break;
        }
        let h = seek(file, d, libc::SEEK_HOLE)?.unwrap_or(end).min(end);
        if h <= d {
            out.push(d..end); // cannot happen on a sane file system
            break;
        }
        out.push(d.max(p)..h);
        p = h;
    }
    Ok(out)
}

/// `lseek(fd, at, whence)`; `None` for ENXIO (no data, or past the end).
/// A file system without `SEEK_DATA` support (EINVAL) reports everything
/// as data: `SEEK_DATA` answers `at`, `SEEK_HOLE` the end.
fn seek(file: &File, at: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    // SAFETY: lseek on a descriptor we borrow; no pointers involved.
    let r = unsafe { libc::lseek(file.as_raw_fd(), at as libc::off_t, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(at)),
        Some(libc::EINVAL) => Ok(Some(u64::MAX)),
        _ => Err(e),
    }
}
