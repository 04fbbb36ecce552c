//! The local side of `--sync`: what the destination already has, and
//! `--delete` of what the source no longer has.

use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

use super::plan::{self, Have};
use crate::error::{ClientError, Result};

/// Counts a tree job reports besides its transfers.
#[derive(Debug, Default)]
pub struct Notes {
    /// Links and special files left out.
    pub skipped: u64,
    /// Files already the same at the destination (`--sync`).
    pub uptodate: u64,
    /// Files the workers found the same by checksum (`--sync
    /// --checksum`), counted in the job's done files.
    pub same: u64,
    /// Entries deleted at the destination (`--delete`).
    pub deleted: u64,
}

/// Size and time of the regular file at `p` (a symlink is not followed:
/// it counts as absent, and the download replaces the link itself).
pub fn local_have(p: &Path) -> Option<Have> {
    let m = std::fs::symlink_metadata(p).ok().filter(|m| m.is_file())?;
    Some(Have {
        size: m.len(),
        mtime: m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64),
    })
}

/// `--delete`: removes each entry of local directory `dir` whose name the
/// source's listing (`keep`) lacks. Names come from our own directory, so
/// they cannot point elsewhere; a directory is removed with everything in
/// it (symlinks inside are removed, not followed).
pub fn delete_local_extras(dir: &Path, rel: &str, keep: &HashSet<String>) -> Result<u64> {
    let mut n = 0;
    let rd = std::fs::read_dir(dir)
        .map_err(|e| ClientError::local(format!("read directory {}", dir.display()), e))?;
    for de in rd.flatten() {
        let name = de.file_name();
        if name.to_str().is_some_and(|s| keep.contains(s)) {
            continue;
        }
        let p = de.path();
        let is_dir = de.file_type().is_ok_and(|t| t.is_dir());
        let r = if is_dir {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(|e| ClientError::local(format!("delete {}", p.display()), e))?;
        eprintln!(
            "sluice: deleted {}",
            plan::shown(&plan::join(rel, &name.to_string_lossy()))
        );
        n += 1;
    }
    Ok(n)
}
