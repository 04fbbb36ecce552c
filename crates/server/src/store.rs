//! The served root as both doors see it: a [`Store`] is one served root
//! with the policy both doors apply to it (one instance for the HTTP and
//! HTTPS doors, one for the FTP sessions of the served root, which keeps
//! its own lazily opened descriptor, one per `[[user]]` root), holding
//! - path resolution: every path is opened beneath the root by the kernel
//!   (`openat2(RESOLVE_BENEATH)` in `sluice_platform::fs::ServedRoot`):
//!   symlinks that stay inside are followed, anything that would leave
//!   the root is refused as [`FsError::OutsideRoot`]. A `..` component is
//!   refused here before the kernel sees it (neither door's normalised
//!   path has one; this is the second line, not the boundary), and a NUL
//!   byte is [`FsError::InvalidPath`];
//! - hidden names: upload temp files and kept partials
//!   (`.NAME.sluice-partial`, `.NAME.sluice-*.part`, see `crate::upload`)
//!   are not files yet. No download (RETR, GET) opens a path with such a
//!   component and no listing shows one ([`Store::shows`]);
//! - the open-file cache ([`open_files`]): the HTTP door's lookups go
//!   through it. The FTP door opens afresh each time (its RETR is not
//!   hot enough to need it, and a cached descriptor would see a
//!   permission change up to a second late).
//!
//! Each door maps [`FsError`] to its own answer (FTP: `ops::op_error`,
//! HTTP: `http::resolve`); an escape is reported like a missing file.
//! Everything here that touches the disk blocks: run it on an engine
//! disk thread.

pub mod open_files;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_engine::{Cancel, Engine};
use sluice_platform::fs::{DirEntry, DirReader, FsError, ServedRoot};

use crate::upload::is_internal_name;
use open_files::{Hit, OpenFiles, MAX_OPEN_FILES};

/// What a path names, opened.
#[derive(Debug)]
pub enum Opened {
    /// A regular file, with the length and mtime of its `fstat` (so what
    /// is sent and what is announced describe the same file).
    File {
        /// The open file (shared: the cache may hand it to later requests).
        file: Arc<File>,
        /// Its length.
        len: u64,
        /// Its modification time.
        mtime: SystemTime,
    },
    /// A directory, to be read a batch at a time.
    Dir(DirReader),
}

/// The served root of both doors; see the module docs.
#[derive(Debug)]
pub struct Store {
    root: Arc<ServedRoot>,
    files: OpenFiles,
}

impl Store {
    /// Opens `dir` as a store whose cached files live `open_cache` (zero:
    /// no cache).
    pub fn open(dir: &Path, open_cache: Duration) -> io::Result<Store> {
        Ok(Store::new(Arc::new(ServedRoot::open(dir)?), open_cache))
    }

    /// A store over an already open root.
    pub fn new(root: Arc<ServedRoot>, open_cache: Duration) -> Store {
        Store {
            root,
            files: OpenFiles::new(open_cache, MAX_OPEN_FILES),
        }
    }

    /// The root beneath which everything is resolved (for the operations
    /// that are not downloads: stat, mkdir, rename, uploads).
    pub fn root(&self) -> &Arc<ServedRoot> {
        &self.root
    }

    /// The open-file cache.
    pub fn files(&self) -> &OpenFiles {
        &self.files
    }

    /// True for a name no client sees (upload temps and partials).
    pub fn is_hidden(name: &[u8]) -> bool {
        is_internal_name(name)
    }

    /// True when any component of `rel` is hidden.
    pub fn is_hidden_path(rel: &str) -> bool {
        rel.split('/').any(|seg| Store::is_hidden(seg.as_bytes()))
    }

    /// Whether a listing shows `entry`.
    pub fn shows(entry: &DirEntry) -> bool {
        !Store::is_hidden(&entry.name)
    }

    /// Refuses what no download may name before the kernel walks it.
    fn check(rel: &str) -> Result<(), FsError> {
        if rel.as_bytes().contains(&0) {
            return Err(FsError::InvalidPath);
        }
        if rel.split('/').any(|seg| seg == "..") {
            return Err(FsError::OutsideRoot);
        }
        if Store::is_hidden_path(rel) {
            return Err(FsError::NotFound);
        }
        Ok(())
    }

    /// Opens the regular file `rel` for a download (RETR). Blocks.
    pub fn open_read(&self, rel: &str) -> Result<File, FsError> {
        Store::check(rel)?;
        self.root.open_read(rel)
    }

    /// Opens what `rel` names for a download or a listing (GET): a
    /// regular file with its `fstat`, or a directory. Blocks.
    pub fn lookup(&self, rel: &str) -> Result<Opened, FsError> {
        Store::check(rel)?;
        match self.root.open_read(rel) {
            Ok(file) => {
                let m = file.metadata()?;
                Ok(Opened::File {
                    file: Arc::new(file),
                    len: m.len(),
                    mtime: m.modified().unwrap_or(UNIX_EPOCH),
                })
            }
            Err(FsError::IsADirectory) => self.root.open_dir(rel).map(Opened::Dir),
            Err(e) => Err(e),
        }
    }

    /// The cached file for `rel`, re-checked with one `fstat` (which does
    /// not wait for the disk: fine on an event loop); `None` on a miss.
    pub fn cached(&self, rel: &str, now: Instant) -> Option<Hit> {
        self.files.get(rel, now)
    }

    /// Remembers what [`Store::lookup`] found for `rel`: a file is cached,
    /// anything else drops the path from the cache.
    pub fn remember(&self, rel: &str, found: Option<&Arc<File>>, now: Instant) {
        match found {
            Some(f) => self.files.put(rel, f, now),
            None => self.files.forget(rel),
        }
    }
}

/// Every `every`, drops stale entries of the open-file cache (see
/// `open_files.rs`: a deleted file must not stay open just because no
/// one asked for its path again). The sweep runs on a disk thread: it
/// `fstat`s the cached files and may close a deleted one's last
/// descriptor, which frees its blocks. Ends with the store.
pub async fn sweep_open_files(store: Weak<Store>, engine: Engine, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = store.upgrade() else { return };
        if s.files.is_empty() {
            // Nothing cached (an FTP-only load, an idle server): no disk job.
            continue;
        }
        let job = move || s.files.sweep(Instant::now());
        match engine.run_blocking(&Cancel::new(), job).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(closed = n, "open-file cache swept"),
            Err(e) => tracing::warn!(error = %e, "cannot sweep the open-file cache"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), b"hello").unwrap();
        let s = Store::open(dir.path(), Duration::ZERO).unwrap();
        (dir, s)
    }

    fn file_len(s: &Store, rel: &str) -> Result<u64, FsError> {
        match s.lookup(rel)? {
            Opened::File { len, .. } => Ok(len),
            Opened::Dir(_) => Err(FsError::IsADirectory),
        }
    }

    #[test]
    fn files_directories_and_misses() {
        let (_d, s) = store();
        assert_eq!(file_len(&s, "sub/a.txt").unwrap(), 5);
        assert_eq!(file_len(&s, "/sub/a.txt").unwrap(), 5);
        assert!(matches!(s.lookup("sub"), Ok(Opened::Dir(_))));
        assert!(matches!(s.lookup(""), Ok(Opened::Dir(_))));
        assert!(matches!(s.lookup("nope"), Err(FsError::NotFound)));
        assert!(matches!(
            s.lookup("sub/a.txt/x"),
            Err(FsError::NotADirectory)
        ));
        assert!(matches!(s.open_read("sub"), Err(FsError::IsADirectory)));
        assert!(s.open_read("sub/a.txt").is_ok());
    }

    /// `..`, however it is spelled, a NUL byte, and a literal `%2e%2e`
    /// name (no decoding here: the doors decode) never leave the root.
    #[test]
    fn hostile_paths_stay_beneath_the_root() {
        let (d, s) = store();
        let outside = d.path().parent().unwrap().join("sluice-store-outside");
        let _ = std::fs::write(&outside, b"secret");
        let name = outside.file_name().unwrap().to_str().unwrap().to_owned();
        for rel in [
            format!("../{name}"),
            format!("sub/../../{name}"),
            format!("/../{name}"),
            "sub/..".to_owned(),
        ] {
            assert!(
                matches!(s.lookup(&rel), Err(FsError::OutsideRoot)),
                "{rel}: {:?}",
                s.lookup(&rel)
            );
            assert!(
                matches!(s.open_read(&rel), Err(FsError::OutsideRoot)),
                "{rel}"
            );
        }
        assert!(matches!(s.lookup("%2e%2e/x"), Err(FsError::NotFound)));
        assert!(matches!(s.lookup("sub/a.txt\0"), Err(FsError::InvalidPath)));
        assert!(matches!(s.open_read("\0"), Err(FsError::InvalidPath)));
        // Through the doors' own normalisers: decoded, clamped at the root.
        let http = sluice_http::normalize(&format!("/%2e%2e/%2E%2E/{name}")).unwrap();
        assert!(matches!(s.lookup(http.relative()), Err(FsError::NotFound)));
        assert!(sluice_http::normalize("/a%00b").is_err());
        let ftp = sluice_ftp::path::VirtualPath::root()
            .resolve(&format!("../../{name}"))
            .unwrap();
        assert!(matches!(s.open_read(ftp.as_str()), Err(FsError::NotFound)));
        let _ = std::fs::remove_file(outside);
    }

    #[test]
    fn symlinks_inside_are_followed_and_out_of_the_root_refused() {
        let (d, s) = store();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("sub/leak"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
        std::os::unix::fs::symlink("a.txt", d.path().join("sub/inside")).unwrap();
        std::os::unix::fs::symlink("../sub", d.path().join("sub/up")).unwrap();
        assert!(matches!(s.lookup("sub/leak"), Err(FsError::OutsideRoot)));
        assert!(matches!(s.open_read("sub/leak"), Err(FsError::OutsideRoot)));
        assert!(matches!(s.lookup("out/secret"), Err(FsError::OutsideRoot)));
        assert!(matches!(s.lookup("out"), Err(FsError::OutsideRoot)));
        assert_eq!(file_len(&s, "sub/inside").unwrap(), 5);
        assert_eq!(file_len(&s, "sub/up/a.txt").unwrap(), 5);
    }

    #[test]
    fn upload_partials_and_temps_are_hidden_from_downloads_and_listings() {
        let (d, s) = store();
        std::fs::write(d.path().join("sub/.b.bin.sluice-partial"), b"half").unwrap();
        std::fs::write(d.path().join("sub/.c.sluice-1234.part"), b"tmp").unwrap();
        std::fs::create_dir(d.path().join(".d.sluice-partial")).unwrap();
        std::fs::write(d.path().join(".d.sluice-partial/x"), b"x").unwrap();
        std::fs::write(d.path().join("sub/.profile"), b"p").unwrap();
        for rel in [
            "sub/.b.bin.sluice-partial",
            "sub/.c.sluice-1234.part",
            ".d.sluice-partial",
            ".d.sluice-partial/x",
        ] {
            assert!(matches!(s.lookup(rel), Err(FsError::NotFound)), "{rel}");
            assert!(matches!(s.open_read(rel), Err(FsError::NotFound)), "{rel}");
        }
        // A dot file of the client's own is an ordinary file.
        assert_eq!(file_len(&s, "sub/.profile").unwrap(), 1);
        let Opened::Dir(mut dir) = s.lookup("sub").unwrap() else {
            panic!("a directory")
        };
        let mut names: Vec<_> = dir
            .next_batch(s.root(), usize::MAX)
            .unwrap()
            .into_iter()
            .filter(Store::shows)
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".profile", "a.txt"]);
    }

    #[test]
    fn the_cache_remembers_files_and_forgets_the_rest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"abc").unwrap();
        let s = Store::open(d.path(), Duration::from_secs(60)).unwrap();
        let now = Instant::now();
        assert!(s.cached("f", now).is_none());
        let Opened::File { file, .. } = s.lookup("f").unwrap() else {
            panic!("a file")
        };
        s.remember("f", Some(&file), now);
        assert_eq!(s.cached("f", now).unwrap().len, 3);
        s.remember("f", None, now);
        assert!(s.cached("f", now).is_none());
    }
}
