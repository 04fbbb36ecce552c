//! A small cache of open files by request path (nginx's
//! `open_file_cache`, with a short validity): a hit costs one `fstat` on
//! the event loop instead of a trip to a disk thread for `openat2`,
//! `fstat`, two `fcntl`, another `fstat` and later a `close`.
//!
//! What a hit still checks, and why it is safe:
//! - `fstat` on the cached descriptor gives the length and mtime the
//!   response is built from, so the validators and the bytes sent always
//!   describe the same (current) file, as on a miss. `fstat` of a held
//!   descriptor on a local file system reads the in-memory inode and never
//!   waits for the disk.
//! - A file that was deleted or replaced by a rename (uploads commit that
//!   way) has no links left (`st_nlink == 0`): the entry is dropped and the
//!   path resolved again at once.
//! - What only a new path walk would see (a symlink pointed elsewhere, a
//!   file renamed away but still linked, a permission change) is seen
//!   after at most `valid` (default 1 s): entries older than that are
//!   resolved again. Path safety is unchanged: every cached descriptor was
//!   opened by `openat2(RESOLVE_BENEATH)` beneath the root.
//! - Nothing is held long unasked: [`OpenFiles::sweep`], run on a disk
//!   thread every `valid` (at most every [`MAX_SWEEP_PERIOD`]) by the
//!   server's timer (`crate::store::sweep_open_files`), drops expired entries and those
//!   whose file lost its last link. Without it a file downloaded once,
//!   then deleted or rotated away, stayed open (its blocks never freed)
//!   until its path was asked for again or the cache filled up. A timer
//!   costs nothing per request and works when no request comes at all.
//!
//! Directories are never cached (a listing is always read fresh).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most paths kept open at once (each holds one descriptor).
pub const MAX_OPEN_FILES: usize = 1024;

/// The longest time between two sweeps, whatever `valid` is: a deleted
/// file is let go within about this long even with a long-lived cache.
/// A sweep is at most [`MAX_OPEN_FILES`] `fstat`s on a disk thread.
pub const MAX_SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// A hit: the open file and the facts of its `fstat`.
#[derive(Debug)]
pub struct Hit {
    /// The shared descriptor (senders use positional reads only).
    pub file: Arc<File>,
    /// Length now.
    pub len: u64,
    /// Modification time now.
    pub mtime: SystemTime,
}

#[derive(Debug)]
struct Entry {
    file: Arc<File>,
    opened: Instant,
}

/// Open files by relative request path; see the module docs.
#[derive(Debug)]
pub struct OpenFiles {
    valid: Duration,
    max: usize,
    map: Mutex<HashMap<String, Entry>>,
}

impl OpenFiles {
    /// A cache whose entries live `valid` (zero: never cache).
    pub fn new(valid: Duration, max: usize) -> OpenFiles {
        OpenFiles {
            valid,
            max,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// True when caching is switched off.
    pub fn is_off(&self) -> bool {
        self.valid.is_zero() || self.max == 0
    }

    /// How often [`OpenFiles::sweep`] should run (`None`: caching is
    /// off): every `valid`, at most [`MAX_SWEEP_PERIOD`]. An entry is
    /// then dropped at most about one period after it expired, or after
    /// its file was unlinked.
    pub fn sweep_every(&self) -> Option<Duration> {
        (!self.is_off()).then_some(self.valid.min(MAX_SWEEP_PERIOD))
    }

    /// Drops expired entries and entries whose file has no link left
    /// (deleted, or replaced by a rename), so their descriptors close and
    /// the disk space of a deleted file is freed. Returns how many went.
    ///
    /// Calls `fstat` on every live entry (in-memory inodes, at most
    /// [`MAX_OPEN_FILES`]) and may close the last descriptor of a deleted
    /// file, which can take a while for a big one: run it on a disk
    /// thread, not on an event loop. The `fstat`s happen without the lock,
    /// so requests are not held up by them.
    pub fn sweep(&self, now: Instant) -> usize {
        if self.is_off() {
            return 0;
        }
        let mut gone: Vec<Arc<File>> = Vec::new();
        let live: Vec<(String, Arc<File>)> = {
            let mut map = self.lock();
            let valid = self.valid;
            map.retain(|_, e| {
                let keep = now.saturating_duration_since(e.opened) < valid;
                if !keep {
                    gone.push(Arc::clone(&e.file));
                }
                keep
            });
            map.iter()
                .map(|(k, e)| (k.clone(), Arc::clone(&e.file)))
                .collect()
        };
        let unlinked: Vec<(String, Arc<File>)> = live
            .into_iter()
            .filter(|(_, f)| !f.metadata().is_ok_and(|m| m.nlink() > 0))
            .collect();
        if !unlinked.is_empty() {
            let mut map = self.lock();
            for (rel, file) in unlinked {
                // Only if a request did not put a fresh file there meanwhile.
                if map.get(&rel).is_some_and(|e| Arc::ptr_eq(&e.file, &file)) {
                    map.remove(&rel);
                    gone.push(file);
                }
            }
        }
        // The descriptors close here, outside the lock (unless a send
        // still holds one: then when it ends).
        gone.len()
    }

    /// The cached file for `rel`, re-checked with `fstat`; `None` on a
    /// miss, an expired entry or a file that lost its last link.
    pub fn get(&self, rel: &str, now: Instant) -> Option<Hit> {
        if self.is_off() {
            return None;
        }
        let file = {
            let mut map = self.lock();
            let e = map.get_mut(rel)?;
            if now.saturating_duration_since(e.opened) >= self.valid {
                // This caller resolves the path again (and `put`s or
                // `forget`s it); the others keep the entry meanwhile
                // rather than all sending the same open to a disk thread.
                e.opened = now;
                return None;
            }
            Arc::clone(&e.file)
        };
        match file.metadata() {
            Ok(m) if m.nlink() > 0 && m.is_file() => Some(Hit {
                len: m.len(),
                mtime: m.modified().unwrap_or(UNIX_EPOCH),
                file,
            }),
            _ => {
                self.remove(rel, &file);
                None
            }
        }
    }

    /// Remembers `file` (just opened beneath the root) for `rel`. When the
    /// cache is full, expired entries go; if it is still full the file is
    /// simply not cached (bounded, and the next miss tries again).
    pub fn put(&self, rel: &str, file: &Arc<File>, now: Instant) {
        if self.is_off() {
            return;
        }
        let mut map = self.lock();
        if map.len() >= self.max && !map.contains_key(rel) {
            let valid = self.valid;
            map.retain(|_, e| now.saturating_duration_since(e.opened) < valid);
            if map.len() >= self.max {
                return;
            }
        }
        map.insert(
            rel.to_owned(),
            Entry {
                file: Arc::clone(file),
                opened: now,
            },
        );
    }

    /// Drops `rel` (its path no longer names a file we serve).
    pub fn forget(&self, rel: &str) {
        if !self.is_off() {
            self.lock().remove(rel);
        }
    }

    /// Number of cached paths.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is cached (the sweep then has nothing to do).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Drops the entry for `rel` if it still holds `file`.
    fn remove(&self, rel: &str, file: &Arc<File>) {
        let mut map = self.lock();
        if map.get(rel).is_some_and(|e| Arc::ptr_eq(&e.file, file)) {
            map.remove(rel);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock leaves a plain map behind: keep using it.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &std::path::Path) -> Arc<File> {
        Arc::new(File::open(p).unwrap())
    }

    #[test]
    fn hits_follow_the_file_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello").unwrap();
        let c = OpenFiles::new(Duration::from_secs(1), 8);
        let t0 = Instant::now();
        assert!(c.get("a", t0).is_none());
        c.put("a", &open(&p), t0);
        let hit = c.get("a", t0).unwrap();
        assert_eq!(hit.len, 5);
        // Appended in place: the hit reports the new length (same inode).
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"!!").unwrap();
        assert_eq!(c.get("a", t0).unwrap().len, 7);
        // Old enough: this caller resolves again, the next ones still hit
        // until it puts the fresh file or forgets the path.
        let t1 = t0 + Duration::from_secs(1);
        assert!(c.get("a", t1).is_none());
        assert!(c.get("a", t1).is_some());
        c.forget("a");
        assert!(c.get("a", t1).is_none());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_replaced_or_deleted_file_is_a_miss_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"old").unwrap();
        let c = OpenFiles::new(Duration::from_secs(60), 8);
        let t0 = Instant::now();
        c.put("a", &open(&p), t0);
        // An upload commits by renaming over the name: the old inode has no link.
        let tmp = dir.path().join(".a.tmp");
        std::fs::write(&tmp, b"new!").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        assert!(c.get("a", t0).is_none());
        c.put("a", &open(&p), t0);
        assert_eq!(c.get("a", t0).unwrap().len, 4);
        std::fs::remove_file(&p).unwrap();
        assert!(c.get("a", t0).is_none());
    }

    #[test]
    fn a_sweep_closes_expired_and_unlinked_files_without_a_request_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let c = OpenFiles::new(Duration::from_secs(10), 8);
        let t0 = Instant::now();
        let mut weak = Vec::new();
        for name in ["old", "deleted", "kept"] {
            let p = dir.path().join(name);
            std::fs::write(&p, name).unwrap();
            let f = open(&p);
            weak.push(Arc::downgrade(&f));
            let opened = if name == "old" {
                t0
            } else {
                t0 + Duration::from_secs(5)
            };
            c.put(name, &f, opened);
        }
        std::fs::remove_file(dir.path().join("deleted")).unwrap();
        // Nothing expired and nothing unlinked yet at t0 + 5 s... except
        // "deleted", which goes at once.
        assert_eq!(c.sweep(t0 + Duration::from_secs(5)), 1);
        assert_eq!(c.len(), 2);
        // "old" is past its 10 s; "kept" (opened at 5 s) is not.
        assert_eq!(c.sweep(t0 + Duration::from_secs(10)), 1);
        assert_eq!(c.len(), 1);
        assert!(c.get("kept", t0 + Duration::from_secs(10)).is_some());
        // The cache held the only references: the descriptors are closed.
        let open_now: Vec<bool> = weak.iter().map(|w| w.upgrade().is_some()).collect();
        assert_eq!(open_now, [false, false, true]);
        assert_eq!(c.sweep(t0 + Duration::from_secs(15)), 1);
        assert_eq!(c.len(), 0);
        assert!(weak[2].upgrade().is_none());
        // Off: nothing to sweep, no timer wanted.
        let off = OpenFiles::new(Duration::ZERO, 8);
        assert_eq!(off.sweep(t0), 0);
        assert_eq!(off.sweep_every(), None);
        assert_eq!(c.sweep_every(), Some(MAX_SWEEP_PERIOD));
        let short = OpenFiles::new(Duration::from_millis(300), 8);
        assert_eq!(short.sweep_every(), Some(Duration::from_millis(300)));
    }

    #[test]
    fn bounded_and_switchable() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"x").unwrap();
        let t0 = Instant::now();
        let c = OpenFiles::new(Duration::from_secs(1), 2);
        for name in ["a", "b", "c"] {
            c.put(name, &open(&p), t0);
        }
        assert_eq!(c.len(), 2);
        assert!(c.get("c", t0).is_none());
        // Once the others expire, a new path gets their room.
        c.put("c", &open(&p), t0 + Duration::from_secs(2));
        assert_eq!(c.len(), 1);
        assert!(c.get("c", t0 + Duration::from_secs(2)).is_some());
        let off = OpenFiles::new(Duration::ZERO, 8);
        off.put("a", &open(&p), t0);
        assert!(off.get("a", t0).is_none());
        assert_eq!(off.len(), 0);
    }
}
