//! The file-system side of session actions: queries, changes, listings and
//! checksums against a [`ServedRoot`]. All functions here block; the
//! session driver runs them with `spawn_blocking`.

use std::io::{Read, Seek, SeekFrom};
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(test)]
use sluice_ftp::listing::MlstFacts;
use sluice_ftp::listing::{self, EntryInfo, EntryKind, MlsxRole};
use sluice_ftp::path::VirtualPath;
use sluice_ftp::session::{
    Answer, Change, ChecksumAlgorithm, ListFormat, ListMatch, NamePattern, OpError, Query,
};
use sluice_platform::fs::{DirEntry, FileKind, FsError, Metadata, ServedRoot};

use crate::store::Store;
use crate::upload::{is_internal_name, partial_len, partial_path};

/// Most entries one listing sends; a directory larger than this is cut
/// (with a log line), bounding memory per LIST.
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Maps a platform error to the session's error. Anything unexpected is
/// logged here (with its `io::Error`) and becomes a plain 451.
pub fn op_error(e: FsError) -> OpError {
    match e {
        FsError::NotFound => OpError::NotFound,
        FsError::OutsideRoot | FsError::PermissionDenied => OpError::PermissionDenied,
        FsError::NotADirectory => OpError::NotADirectory,
        FsError::IsADirectory => OpError::NotAFile,
        FsError::AlreadyExists => OpError::AlreadyExists,
        FsError::NotEmpty => OpError::NotEmpty,
        FsError::NoSpace => OpError::NoSpace,
        FsError::InvalidPath => OpError::BadName,
        FsError::Io(e) => {
            tracing::warn!(error = %e, "file system error");
            OpError::Local
        }
    }
}

/// A path the client wrote as `name/` must be a directory: like open(2)
/// on a trailing slash (ENOTDIR), anything else is "Not a directory"
/// whatever the operation. Other paths pass.
pub fn check_names_dir(root: &ServedRoot, path: &VirtualPath) -> Result<(), OpError> {
    if path.names_dir() {
        must_be_dir(root, path)
    } else {
        Ok(())
    }
}

fn must_be_dir(root: &ServedRoot, path: &VirtualPath) -> Result<(), OpError> {
    match root.stat(path.as_str()).map_err(op_error)?.kind {
        FileKind::Dir => Ok(()),
        _ => Err(OpError::NotADirectory),
    }
}

/// Answers a [`Query`].
pub fn query(
    root: &ServedRoot,
    path: &VirtualPath,
    q: Query,
    writable: bool,
) -> Result<Answer, OpError> {
    check_names_dir(root, path)?;
    let stat = |p: &VirtualPath| root.stat(p.as_str()).map_err(op_error);
    match q {
        Query::ChangeDir => match stat(path)?.kind {
            FileKind::Dir => Ok(Answer::Done),
            _ => Err(OpError::NotADirectory),
        },
        Query::Exists => stat(path).map(|_| Answer::Done),
        Query::Size => match root.stat(path.as_str()) {
            Ok(m) if m.kind == FileKind::File => Ok(Answer::Size(m.size)),
            Ok(_) => Err(OpError::NotAFile),
            // A kept partial upload answers SIZE so clients can resume
            // (see upload.rs): its length up to its first hole. It is
            // never served by RETR or listed.
            Err(FsError::NotFound) => partial_len(root, path)
                .map(Answer::Size)
                .ok_or(OpError::NotFound),
            Err(e) => Err(op_error(e)),
        },
        Query::Modified => {
            let m = stat(path)?;
            if m.kind != FileKind::File {
                return Err(OpError::NotAFile);
            }
            Ok(Answer::Modified(unix_secs(m.mtime).max(0) as u64))
        }
        Query::Facts(selected) => {
            let m = stat(path)?;
            // `type=dir` for a directory: RFC 3659 keeps `cdir` for the
            // directory an MLSD lists (7.5.1); MLST names the object
            // itself, and clients (aioftp's rmdir) decide on `dir`. The
            // name is the full path (RFC 3659 7.2.1).
            let e = entry_info(path.as_str().as_bytes(), &m);
            let facts = listing::mlsx_selected_facts(&e, MlsxRole::Entry, writable, selected);
            Ok(Answer::Facts(facts))
        }
        Query::Status => {
            let out = listing_bytes(root, path, ListFormat::Long, writable)?;
            let text = String::from_utf8_lossy(&out);
            Ok(Answer::Lines(text.lines().map(str::to_string).collect()))
        }
    }
}

/// Performs a [`Change`].
pub fn change(root: &ServedRoot, c: &Change) -> Result<Answer, OpError> {
    match c {
        // mkdir(2) and rmdir(2) take `d/` as `d`.
        Change::Mkdir(_) | Change::Rmdir(_) => {}
        Change::Delete(p) => check_names_dir(root, p)?,
        // rename(2) with a trailing slash on either name needs a directory
        // to move.
        Change::Rename { from, to } if from.names_dir() || to.names_dir() => {
            must_be_dir(root, from)?
        }
        Change::Rename { .. } => {}
        Change::SetModified { path, .. } => {
            check_names_dir(root, path)?;
            if path
                .file_name()
                .is_some_and(|n| is_internal_name(n.as_bytes()))
            {
                return Err(OpError::NotFound);
            }
        }
    }
    // Only uploads create partials and temps: a client that put its own
    // bytes under such a name could have them committed by someone else's
    // upload (crate::upload).
    if let Change::Rename { to, .. } = c {
        if to
            .file_name()
            .is_some_and(|n| is_internal_name(n.as_bytes()))
        {
            return Err(OpError::BadName);
        }
    }
    let r = match c {
        Change::Mkdir(p) => root.mkdir(p.as_str()),
        Change::Rmdir(p) => root.rmdir(p.as_str()),
        Change::Delete(p) => root.unlink(p.as_str()),
        Change::Rename { from, to } => root.rename(from.as_str(), to.as_str()),
        Change::SetModified { path, secs } => return set_modified(root, path, *secs),
    };
    r.map(|()| Answer::Done).map_err(op_error)
}

/// MFMT: a regular file's modification time, through a descriptor opened
/// beneath the root (`futimens`; no path is resolved twice).
fn set_modified(root: &ServedRoot, path: &VirtualPath, secs: i64) -> Result<Answer, OpError> {
    let file = root.open_read(path.as_str()).map_err(op_error)?;
    let meta = file.metadata().map_err(|e| op_error(e.into()))?;
    if !meta.is_file() {
        return Err(OpError::NotAFile);
    }
    let when = if secs >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_secs(secs.unsigned_abs())
    };
    file.set_modified(when).map_err(|e| op_error(e.into()))?;
    Ok(Answer::Done)
}

/// A listing of `path` (a directory, or one file) in `format`, CRLF lines.
pub fn listing_bytes(
    root: &ServedRoot,
    path: &VirtualPath,
    format: ListFormat,
    writable: bool,
) -> Result<Vec<u8>, OpError> {
    check_names_dir(root, path)?;
    let meta = root.stat(path.as_str()).map_err(op_error)?;
    let entries: Vec<DirEntry> = if meta.kind == FileKind::Dir {
        let mut all = root.list_dir(path.as_str()).map_err(op_error)?;
        all.retain(Store::shows);
        if all.len() > MAX_LIST_ENTRIES {
            tracing::info!(
                entries = all.len(),
                "listing cut to {MAX_LIST_ENTRIES} entries"
            );
            all.truncate(MAX_LIST_ENTRIES);
        }
        all
    } else {
        let name = path.file_name().unwrap_or("").as_bytes().to_vec();
        vec![DirEntry {
            name,
            meta: meta.clone(),
        }]
    };
    let now = unix_secs(SystemTime::now());
    let mut out = Vec::with_capacity(entries.len() * 64);
    if let (ListFormat::Machine(facts), FileKind::Dir) = (format, meta.kind) {
        let cdir = entry_info(b".", &meta);
        listing::mlsd_line(&cdir, MlsxRole::Cdir, writable, facts, &mut out);
    }
    for e in &entries {
        let info = entry_info(&e.name, &e.meta);
        match format {
            ListFormat::Long => listing::list_line(&info, now, &mut out),
            ListFormat::Names => listing::nlst_line(&info, &mut out),
            ListFormat::Machine(facts) => {
                listing::mlsd_line(&info, MlsxRole::Entry, writable, facts, &mut out)
            }
        }
    }
    Ok(out)
}

/// What a LIST/NLST/MLSD sends: a file's line, whole, or a directory to
/// stream ([`crate::listing`]).
pub enum ListSource {
    /// The listing of one file.
    Bytes(Vec<u8>),
    /// An open directory and its own metadata (MLSD's `cdir` line).
    Dir(sluice_platform::fs::DirReader, Metadata),
    /// An open directory whose entries matching a pattern are listed.
    Matching(sluice_platform::fs::DirReader, ListMatch),
}

/// Opens what a listing of `path` sends (blocks: run it off the loop).
/// With `matching` (a wildcard last component), an entry of that very
/// name is listed as it is (ProFTPD does the same: `[1].dat` can be a
/// name); otherwise the matching entries of `matching.dir` are.
pub fn open_listing(
    root: &ServedRoot,
    path: &VirtualPath,
    format: ListFormat,
    writable: bool,
    matching: Option<ListMatch>,
) -> Result<ListSource, OpError> {
    if let Some(m) = matching {
        let literal =
            check_names_dir(root, path).and_then(|()| root.stat(path.as_str()).map_err(op_error));
        match (literal, &m.pattern) {
            (Ok(meta), _) if meta.kind != FileKind::Dir && format == ListFormat::Names => {
                let mut out = prefixed(&m.prefix);
                let name = path.file_name().unwrap_or("");
                listing::nlst_line(&entry_info(name.as_bytes(), &meta), &mut out);
                return Ok(ListSource::Bytes(out));
            }
            (Ok(_), _) => {}
            (Err(e), NamePattern::Exact) => return Err(e),
            // Longer than any name: nothing matches.
            (Err(_), NamePattern::TooLong) => return Ok(ListSource::Bytes(Vec::new())),
            (Err(_), NamePattern::Glob(_)) => {
                must_be_dir(root, &m.dir)?;
                let dir = root.open_dir(m.dir.as_str()).map_err(op_error)?;
                return Ok(ListSource::Matching(dir, m));
            }
        }
    }
    check_names_dir(root, path)?;
    let meta = root.stat(path.as_str()).map_err(op_error)?;
    if meta.kind == FileKind::Dir {
        let dir = root.open_dir(path.as_str()).map_err(op_error)?;
        return Ok(ListSource::Dir(dir, meta));
    }
    listing_bytes(root, path, format, writable).map(ListSource::Bytes)
}

/// FTP listing lines for a streamed directory listing: upload temp files
/// and kept partials left out, at most [`MAX_LIST_ENTRIES`] entries.
pub struct FtpLines {
    format: ListFormat,
    writable: bool,
    now: i64,
    count: usize,
    /// MLSD's `cdir` line, sent before the first entry.
    cdir: Option<Metadata>,
    /// Only entries matching this pattern, NLST names with its prefix.
    matching: Option<ListMatch>,
}

impl FtpLines {
    /// Lines in `format` for a directory whose own metadata is `dir`.
    pub fn new(format: ListFormat, writable: bool, dir: Metadata) -> FtpLines {
        FtpLines {
            format,
            writable,
            now: unix_secs(SystemTime::now()),
            count: 0,
            cdir: matches!(format, ListFormat::Machine(_)).then_some(dir),
            matching: None,
        }
    }

    /// Lines in `format` (LIST or NLST) for the entries `m` matches.
    pub fn matching(format: ListFormat, writable: bool, m: ListMatch) -> FtpLines {
        FtpLines {
            format,
            writable,
            now: unix_secs(SystemTime::now()),
            count: 0,
            cdir: None,
            matching: Some(m),
        }
    }
}

impl crate::listing::Render for FtpLines {
    fn batch(&mut self, entries: Vec<DirEntry>, out: &mut Vec<u8>) {
        if let (Some(m), ListFormat::Machine(facts)) = (self.cdir.take(), self.format) {
            let cdir = entry_info(b".", &m);
            listing::mlsd_line(&cdir, MlsxRole::Cdir, self.writable, facts, out);
        }
        for e in entries.iter().filter(|e| Store::shows(e)) {
            if self.count >= MAX_LIST_ENTRIES {
                tracing::info!("listing cut to {MAX_LIST_ENTRIES} entries");
                return;
            }
            self.count += 1;
            let info = entry_info(&e.name, &e.meta);
            match self.format {
                ListFormat::Long => listing::list_line(&info, self.now, out),
                ListFormat::Names => {
                    if let Some(m) = &self.matching {
                        out.extend(prefixed(&m.prefix));
                    }
                    listing::nlst_line(&info, out)
                }
                ListFormat::Machine(facts) => {
                    listing::mlsd_line(&info, MlsxRole::Entry, self.writable, facts, out)
                }
            }
        }
    }

    fn wants(&self, name: &[u8]) -> bool {
        self.matching
            .as_ref()
            .is_none_or(|m| m.pattern.matches(name))
    }

    fn end(&mut self, _in_order: bool, out: &mut Vec<u8>) {
        // An empty directory's MLSD still has its cdir line.
        self.batch(Vec::new(), out);
    }

    fn is_full(&self) -> bool {
        self.count >= MAX_LIST_ENTRIES
    }
}

/// An NLST name prefix as the client wrote it, control characters as `?`
/// (as in names: they would break the line).
fn prefixed(prefix: &str) -> Vec<u8> {
    prefix
        .bytes()
        .map(|b| if b.is_ascii_control() { b'?' } else { b })
        .collect()
}

fn entry_info(name: &[u8], m: &Metadata) -> EntryInfo {
    EntryInfo {
        name: String::from_utf8_lossy(name).into_owned(),
        kind: match m.kind {
            FileKind::File => EntryKind::File,
            FileKind::Dir => EntryKind::Dir,
            FileKind::Symlink => EntryKind::Symlink,
            // FIFOs, sockets and devices: p/s/c/b as ls shows them (`?`
            // for anything else), never `-`.
            FileKind::Other => EntryKind::from_mode(m.file_type),
        },
        size: m.size,
        mtime: unix_secs(m.mtime),
        mode: m.mode,
        nlink: m.nlink,
        owner: None,
        group: None,
    }
}

fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// CKSM: the digest of `len` bytes (or to the end) from `offset`, in hex.
pub fn checksum(
    root: &ServedRoot,
    path: &VirtualPath,
    alg: ChecksumAlgorithm,
    offset: u64,
    len: Option<u64>,
) -> Result<Answer, OpError> {
    use md5::Digest as _;
    check_names_dir(root, path)?;
    // Like SIZE, a name that does not exist answers for its kept partial
    // (up to its first hole), so `sluice put --continue` can check the
    // prefix it is about to keep.
    let (mut file, size) = match root.open_read(path.as_str()) {
        Ok(f) => {
            let size = f.metadata().map_err(|e| op_error(e.into()))?.len();
            (f, size)
        }
        Err(FsError::NotFound) => match (partial_path(path), partial_len(root, path)) {
            (Some(p), Some(n)) => (root.open_read(p.as_str()).map_err(op_error)?, n),
            _ => return Err(OpError::NotFound),
        },
        Err(e) => return Err(op_error(e)),
    };
    if offset > size {
        return Err(OpError::OffsetBeyondEof);
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| op_error(e.into()))?;
    let mut reader = file.take(len.unwrap_or(u64::MAX).min(size - offset));
    let mut buf = vec![0u8; 1 << 20];
    enum H {
        A(adler::Adler32),
        M(md5::Md5),
        S(sha2::Sha256),
        S1(sha1::Sha1),
        C(u32),
    }
    let mut h = match alg {
        ChecksumAlgorithm::Adler32 => H::A(adler::Adler32::new()),
        ChecksumAlgorithm::Md5 => H::M(md5::Md5::new()),
        ChecksumAlgorithm::Sha256 => H::S(sha2::Sha256::new()),
        ChecksumAlgorithm::Sha1 => H::S1(sha1::Sha1::new()),
        ChecksumAlgorithm::Crc32c => H::C(0),
    };
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(op_error(e.into())),
        };
        match &mut h {
            H::A(a) => a.write_slice(&buf[..n]),
            H::M(m) => m.update(&buf[..n]),
            H::S(s) => s.update(&buf[..n]),
            H::S1(s) => s.update(&buf[..n]),
            H::C(c) => *c = crc32c::crc32c_append(*c, &buf[..n]),
        }
    }
    Ok(Answer::Checksum(match h {
        H::A(a) => format!("{:08x}", a.checksum()),
        H::M(m) => hex::encode(m.finalize()),
        H::S(s) => hex::encode(s.finalize()),
        H::S1(s) => hex::encode(s.finalize()),
        H::C(c) => format!("{c:08x}"),
    }))
}

#[cfg(test)]
mod tests;
