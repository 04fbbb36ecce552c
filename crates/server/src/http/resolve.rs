//! From a request path to a [`Resource`]: open through the shared
//! [`Store`] (beneath the served root, the kernel refuses escapes; hidden
//! upload partials are not found), `fstat` the open file, or read the
//! directory, and map the store's refusals to HTTP's answers. Runs on an
//! engine disk thread: `openat2`, `fstat` and `getdents` may all wait on
//! the disk.

use std::fs::File;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_http::listing::Renderer;
use sluice_http::{
    chunk, listing_framing, DirEntry, EntryKind, ListingFraming, Resource, VirtualPath, LAST_CHUNK,
};
use sluice_platform::fs::DirReader;
use sluice_platform::fs::{FileKind, FsError};

use crate::store::{Opened, Store};

/// What was found, and the open file when it is one (its length and
/// mtime in the resource come from this descriptor's `fstat`, so the
/// bytes sent and the validators describe the same file).
#[derive(Debug)]
pub struct Found {
    /// The facts `respond` decides on.
    pub resource: Resource,
    /// The open file, for `Resource::File` (shared: the open-file cache
    /// may hand the same descriptor to later requests).
    pub file: Option<Arc<File>>,
    /// The open directory, for `Resource::StreamedDirectory`.
    pub dir: Option<DirReader>,
}

/// Resolves `path` through `store`.
pub fn resolve(store: &Store, path: &VirtualPath) -> Found {
    let rel = path.relative();
    match store.lookup(rel) {
        Ok(Opened::File { file, len, mtime }) => Found {
            resource: Resource::File { len, mtime },
            file: Some(file),
            dir: None,
        },
        // Read and sent a batch at a time by the connection
        // (crate::listing), never whole.
        Ok(Opened::Dir(dir)) => Found {
            resource: Resource::StreamedDirectory,
            file: None,
            dir: Some(dir),
        },
        Err(e) => Found {
            resource: refusal(rel, e),
            file: None,
            dir: None,
        },
    }
}

/// HTML or JSON listing pieces for crate::listing, framed for the wire
/// (chunks, or raw bytes until close).
pub struct HttpListing {
    render: Renderer,
    framing: ListingFraming,
}

impl HttpListing {
    /// A listing of `dir` for `req`.
    pub fn new(req: &sluice_http::Request) -> HttpListing {
        HttpListing {
            render: Renderer::new(&req.path, req.wants_json()),
            framing: listing_framing(req),
        }
    }

    fn frame(&self, bytes: Vec<u8>, out: &mut Vec<u8>) {
        match self.framing {
            ListingFraming::Chunked => chunk(&bytes, out),
            ListingFraming::UntilClose => out.extend_from_slice(&bytes),
        }
    }
}

impl crate::listing::Render for HttpListing {
    fn batch(&mut self, entries: Vec<sluice_platform::fs::DirEntry>, out: &mut Vec<u8>) {
        let entries: Vec<DirEntry> = entries.into_iter().filter_map(entry).collect();
        let mut bytes = Vec::new();
        self.render.batch(&entries, &mut bytes);
        self.frame(bytes, out);
    }

    fn end(&mut self, in_order: bool, out: &mut Vec<u8>) {
        if !in_order {
            self.render.set_unordered();
        }
        let mut bytes = Vec::new();
        self.render.end(&mut bytes);
        self.frame(bytes, out);
        if self.framing == ListingFraming::Chunked {
            out.extend_from_slice(LAST_CHUNK);
        }
    }

    fn is_full(&self) -> bool {
        self.render.is_full()
    }
}

/// A platform entry as the listing shows it. Upload temp files and kept
/// partials are left out (the store's hidden names). Names that are not UTF-8 are left out (no
/// request could name them; `sluice_http::listing` leaves out names with
/// control bytes for the same reason); so are symlinks that escape the
/// root (`FileKind::Symlink`): they could not be followed and their own
/// metadata is no business of the client's.
fn entry(e: sluice_platform::fs::DirEntry) -> Option<DirEntry> {
    if !Store::shows(&e) {
        return None;
    }
    let name = String::from_utf8(e.name).ok()?;
    let kind = match e.meta.kind {
        FileKind::File => EntryKind::File,
        FileKind::Dir => EntryKind::Dir,
        FileKind::Symlink => return None,
        // FIFOs, sockets and devices: a request for one answers 403, so
        // a link to it would only ever fail (FTP leaves them out of
        // downloads the same way).
        FileKind::Other => return None,
    };
    Some(DirEntry {
        name,
        kind,
        size: if kind == EntryKind::File {
            e.meta.size
        } else {
            0
        },
        mtime: Some(e.meta.mtime).filter(|t| *t > UNIX_EPOCH && *t < far_future()),
    })
}

fn far_future() -> SystemTime {
    SystemTime::now() + std::time::Duration::from_secs(100 * 365 * 86_400)
}

/// The answer for a path that cannot be served. An escape looks exactly
/// like a missing file, so probing tells nothing about what is outside.
fn refusal(rel: &str, e: FsError) -> Resource {
    match e {
        FsError::NotFound
        | FsError::OutsideRoot
        | FsError::NotADirectory
        | FsError::InvalidPath => Resource::NotFound,
        FsError::PermissionDenied | FsError::IsADirectory => Resource::Forbidden,
        FsError::Io(ref io) if io.raw_os_error().is_some_and(is_fd_exhaustion) => {
            tracing::warn!(path = rel, error = %e, "out of file descriptors");
            Resource::Unavailable
        }
        other => {
            tracing::warn!(path = rel, error = %other, "cannot open");
            Resource::Error
        }
    }
}

/// EMFILE (24) or ENFILE (23): the process or system is out of
/// descriptors, a passing condition worth a 503, not a 500.
fn is_fd_exhaustion(errno: i32) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    errno == EMFILE || errno == ENFILE
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_http::normalize;

    fn root() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), b"hello").unwrap();
        let r = Store::open(dir.path(), std::time::Duration::ZERO).unwrap();
        (dir, r)
    }

    /// The entries a listing of `path` shows (read whole).
    fn listed(r: &Store, path: &str) -> Vec<DirEntry> {
        let f = resolve(r, &normalize(path).unwrap());
        assert_eq!(f.resource, Resource::StreamedDirectory);
        let mut dir = f.dir.expect("an open directory");
        let mut all = dir.next_batch(r.root(), usize::MAX).unwrap();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.into_iter().filter_map(entry).collect()
    }

    #[test]
    fn files_directories_and_misses() {
        let (dir, r) = root();
        let f = resolve(&r, &normalize("/sub/a.txt").unwrap());
        assert!(matches!(f.resource, Resource::File { len: 5, .. }));
        assert!(f.file.is_some());
        let entries = listed(&r, "/sub/");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].name, "a.txt");
        assert_eq!(entries[0].size, 5);
        assert!(matches!(
            resolve(&r, &normalize("/").unwrap()).resource,
            Resource::StreamedDirectory
        ));
        assert_eq!(
            resolve(&r, &normalize("/nope").unwrap()).resource,
            Resource::NotFound
        );
        assert_eq!(
            resolve(&r, &normalize("/sub/a.txt/x").unwrap()).resource,
            Resource::NotFound
        );
        drop(dir);
    }

    #[test]
    fn upload_partials_are_neither_served_nor_listed() {
        let (dir, r) = root();
        std::fs::write(dir.path().join("sub/.b.bin.sluice-partial"), b"half").unwrap();
        std::fs::write(dir.path().join("sub/.c.sluice-1234.part"), b"tmp").unwrap();
        assert_eq!(
            resolve(&r, &normalize("/sub/.b.bin.sluice-partial").unwrap()).resource,
            Resource::NotFound
        );
        assert_eq!(
            resolve(&r, &normalize("/sub/.c.sluice-1234.part").unwrap()).resource,
            Resource::NotFound
        );
        let entries = listed(&r, "/sub/");
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.txt"]);
    }

    #[test]
    fn a_symlink_out_of_the_root_is_not_found_and_not_listed() {
        let (dir, r) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("sub/leak"))
            .unwrap();
        std::os::unix::fs::symlink("a.txt", dir.path().join("sub/inside")).unwrap();
        assert_eq!(
            resolve(&r, &normalize("/sub/leak").unwrap()).resource,
            Resource::NotFound
        );
        assert!(matches!(
            resolve(&r, &normalize("/sub/inside").unwrap()).resource,
            Resource::File { len: 5, .. }
        ));
        let entries = listed(&r, "/sub/");
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "inside"]);
    }
}
