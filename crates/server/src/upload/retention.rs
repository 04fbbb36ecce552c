//! Retention of kept partial uploads: how old and how big they may get
//! before they are removed (docs/SECURITY.md, "Partial uploads and
//! resuming"). A partial that failed for lack of space is removed at once
//! by [`super::Upload::fail`].

use std::time::{Duration, SystemTime};

use sluice_ftp::path::VirtualPath;
use sluice_platform::fs::{FileKind, ServedRoot};

use super::{is_internal_name, partial_path, PARTIAL_SUFFIX};

/// How long kept partials live and how much space they may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialPolicy {
    /// Partials (and leftover temps) older than this are removed when an
    /// upload starts in their directory; `None`: kept until resumed.
    pub max_age: Option<Duration>,
    /// Most bytes of partials per directory; the oldest go first.
    /// `None`: no limit.
    pub max_bytes: Option<u64>,
}

impl Default for PartialPolicy {
    fn default() -> Self {
        PartialPolicy {
            max_age: Some(Duration::from_secs(DEFAULT_PARTIAL_MAX_AGE_SECS)),
            max_bytes: None,
        }
    }
}

/// Default `partial_max_age`: one week (a resume normally follows within
/// minutes; a week covers a long weekend of a broken link).
pub const DEFAULT_PARTIAL_MAX_AGE_SECS: u64 = 7 * 24 * 3600;

/// Sweeps one directory at most this often: a sweep lists the directory,
/// which must not happen for every upload into one with 100,000 entries.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// True when `dir` has not been swept for [`SWEEP_EVERY`] (and notes that
/// it is being swept now). Remembers at most [`SWEEP_MEMORY`] directories.
pub(super) fn sweep_due(dir: &VirtualPath) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Instant;
    static LAST: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
    let Ok(mut guard) = LAST.lock() else {
        return true;
    };
    let map = guard.get_or_insert_with(HashMap::new);
    let now = Instant::now();
    if map
        .get(dir.as_str())
        .is_some_and(|t| now.duration_since(*t) < SWEEP_EVERY)
    {
        return false;
    }
    if map.len() >= SWEEP_MEMORY {
        map.retain(|_, t| now.duration_since(*t) < SWEEP_EVERY);
        if map.len() >= SWEEP_MEMORY {
            map.clear();
        }
    }
    map.insert(dir.as_str().to_string(), now);
    true
}

/// Most directories [`sweep_due`] remembers.
const SWEEP_MEMORY: usize = 4096;

/// Removes kept partials and leftover temps in `path`'s directory that
/// the policy no longer keeps (never one whose writer holds its lock, nor
/// `path`'s own partial, which the caller is about to resume or replace).
pub fn sweep(root: &ServedRoot, path: &VirtualPath, policy: &PartialPolicy) {
    if policy.max_age.is_none() && policy.max_bytes.is_none() {
        return;
    }
    let dir = path.parent();
    let own = partial_path(path);
    let Ok(entries) = root.list_dir(dir.as_str()) else {
        return;
    };
    let now = SystemTime::now();
    let mut kept: Vec<(SystemTime, u64, VirtualPath)> = Vec::new();
    for e in entries {
        if e.meta.kind != FileKind::File || !is_internal_name(&e.name) {
            continue;
        }
        let Ok(name) = std::str::from_utf8(&e.name) else {
            continue;
        };
        let Ok(p) = dir.resolve(name) else { continue };
        if Some(&p) == own.as_ref() {
            continue;
        }
        let age = now.duration_since(e.meta.mtime).unwrap_or_default();
        if policy.max_age.is_some_and(|max| age > max) {
            remove_unless_busy(root, &p);
        } else {
            kept.push((e.meta.mtime, e.meta.size, p));
        }
    }
    if let Some(max) = policy.max_bytes {
        kept.sort_by_key(|k| k.0);
        let mut total: u64 = kept.iter().map(|k| k.1).sum();
        for (_, size, p) in &kept {
            if total <= max {
                break;
            }
            if remove_unless_busy(root, p) {
                total -= size;
            }
        }
    }
}

/// Removes `p` if nobody holds its lock (a partial being written does).
fn remove_unless_busy(root: &ServedRoot, p: &VirtualPath) -> bool {
    let name = p.file_name().unwrap_or("");
    if name.ends_with(PARTIAL_SUFFIX) {
        // Taking the lock proves no upload writes it; unlink while held.
        match root.open_locked(p.as_str()) {
            Ok(Some(_lock)) => {}
            _ => return false,
        }
    }
    match root.unlink(p.as_str()) {
        Ok(()) => {
            tracing::info!(path = p.as_str(), "removed an expired partial upload");
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    fn vp(s: &str) -> VirtualPath {
        VirtualPath::root().resolve(s).unwrap()
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
    fn old_partials_expire_and_the_oldest_go_past_the_size_cap() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"0123456789").unwrap();
        let r = ServedRoot::open(d.path()).unwrap();
        // Expired partials and leftover temps of other names go; a locked
        // one (an upload writing it) stays.
        std::fs::write(d.path().join(".a.sluice-partial"), b"abc").unwrap();
        std::fs::write(d.path().join(".b.sluice-1234.part"), b"abc").unwrap();
        let busy = r.open_locked("/.c.sluice-partial").unwrap().unwrap();
        busy.write_all_at(b"x", 0).unwrap();
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        for n in [
            ".a.sluice-partial",
            ".b.sluice-1234.part",
            ".c.sluice-partial",
        ] {
            let f = File::options().write(true).open(d.path().join(n)).unwrap();
            f.set_modified(an_hour_ago).unwrap();
        }
        let expire_all = PartialPolicy {
            max_age: Some(Duration::ZERO),
            max_bytes: None,
        };
        sweep(&r, &vp("/f"), &expire_all);
        assert_eq!(names(&d), [".c.sluice-partial", "f"]);
        // The size cap removes the oldest first.
        std::fs::write(d.path().join(".a.sluice-partial"), b"abc").unwrap();
        let cap = PartialPolicy {
            max_age: None,
            max_bytes: Some(3),
        };
        drop(busy);
        sweep(&r, &vp("/f"), &cap);
        assert_eq!(names(&d), [".a.sluice-partial", "f"]);
        // One sweep a minute per directory.
        assert!(sweep_due(&vp("/swept")));
        assert!(!sweep_due(&vp("/swept")));
    }
}
