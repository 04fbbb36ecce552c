//! How much memory the read-ahead budget may use: what the process's memory
//! cgroup still allows beside the memory that is not page cache (cgroup v1
//! `memory.limit_in_bytes`, v2 `memory.max`), else `MemAvailable`.
//!
//! The page cache is where the planner's reads wait for `sendfile`: a
//! budget larger than the memory left for it makes the kernel evict
//! read-ahead before it is sent (measured in tpf-mixed-rates: 172 MB evicted
//! unused with a fixed 256 MiB budget inside a 256 MiB cgroup).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Limits at or above this are "unlimited" (cgroup v1 reports ~2^63).
const UNLIMITED: u64 = 1 << 60;

/// Bytes of page cache the process can hold now: the cgroup limit minus
/// the cgroup's usage that is not page cache, or `MemAvailable` outside a
/// limited cgroup. `None` if neither can be read.
pub(crate) fn cache_room() -> Option<u64> {
    cache_room_and_use().map(|r| r.room)
}

/// The room for page cache and how much of it the page cache fills now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    /// See [`cache_room`].
    pub(crate) room: u64,
    /// The cgroup's page cache now (0 outside a limited cgroup: unknown).
    pub(crate) cache: u64,
}

/// [`cache_room`] together with the page cache in it.
pub(crate) fn cache_room_and_use() -> Option<Room> {
    let cgroup = fs::read_to_string("/proc/self/cgroup").ok();
    if let (Some(root), Some(c)) = (cgroup_fs(), cgroup.as_deref()) {
        if let Some(room) = cgroup_room(root, c) {
            return Some(room);
        }
    }
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&meminfo).map(|room| Room { room, cache: 0 })
}

/// Where the cgroup file systems can be read, found once. `ip netns exec`
/// (how the lab starts servers) mounts a fresh /sys without them; then the
/// first ancestor process still in the outer mount namespace shows them
/// under `/proc/PID/root` (init's may be closed to us).
fn cgroup_fs() -> Option<&'static Path> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let here = PathBuf::from("/sys/fs/cgroup");
        if here.join("memory").exists() || here.join("cgroup.controllers").exists() {
            return Some(here);
        }
        let mut pid = std::process::id();
        for _ in 0..16 {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            pid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))?
                .trim()
                .parse()
                .ok()?;
            if pid <= 1 {
                return None;
            }
            let there = PathBuf::from(format!("/proc/{pid}/root/sys/fs/cgroup"));
            if there.join("memory").exists() || there.join("cgroup.controllers").exists() {
                return Some(there);
            }
        }
        None
    })
    .as_deref()
}

/// The room in the memory cgroup named in `proc_cgroup` (the text of
/// `/proc/self/cgroup`), under the cgroup file systems mounted at `root`.
fn cgroup_room(root: &Path, proc_cgroup: &str) -> Option<Room> {
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if ctrl.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(rel);
            let limit = read_u64(&dir.join("memory.limit_in_bytes"))?;
            let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
            let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
            let cache = stat_field(&stat, "total_cache").or_else(|| stat_field(&stat, "cache"))?;
            return room(limit, usage, cache);
        }
    }
    // cgroup v2: the single "0::/path" line.
    let path = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir: PathBuf = root.join(path.trim_start_matches('/'));
    let max = fs::read_to_string(dir.join("memory.max")).ok()?;
    let limit = if max.trim() == "max" {
        u64::MAX
    } else {
        max.trim().parse().ok()?
    };
    let usage = read_u64(&dir.join("memory.current"))?;
    let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
    room(limit, usage, stat_field(&stat, "file")?)
}

/// Share of the room the read-ahead budget may use (the rest is for sent
/// pages not yet dropped, metadata and the binary).
const BUDGET_OF_ROOM: f64 = 0.7;
/// Share of the room *not filled by cache the planner does not know of*
/// that the budget may use: pages a receiver on the same host still pins
/// (veth, loopback) or sent pages not dropped yet. Above that the cgroup
/// reaches its limit and reclaim takes unsent read-ahead too; the twentieth
/// left over absorbs what grows between two measurements (queued reads
/// count against the budget before they take memory: in tpf-mixed-rates at
/// 0.9 the cgroup peaked 65 MiB below its limit).
///
/// Opt-in (`--prefetch-budget-of-free 0.95`, `EngineConfig::prefetch_budget_of_free`), not the default: at full
/// tpf-mixed-rates size it took evicted-unused from ~10 MB to 0.03 MB but
/// the 1 Mbit/s class from 99.4 % to 91.4 % of its rate (one run each).
// The value to pass to `--prefetch-budget-of-free` (the engine reads the
// setting, not this constant).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const BUDGET_OF_FREE: f64 = 0.95;

/// The read-ahead budget (read-ahead held plus socket-pinned pages) for
/// `r`, when the planner knows of `tracked` bytes of the page cache (its
/// cached read-ahead and the pages in its sockets); at most `cap`.
/// `of_free`: the share of room left by untracked cache (e.g.
/// `BUDGET_OF_FREE`), or `None` to leave untracked cache out of it.
pub(crate) fn budget_for(r: Room, tracked: u64, cap: u64, of_free: Option<f64>) -> u64 {
    let by_room = r.room as f64 * BUDGET_OF_ROOM;
    let by_free = of_free.map_or(f64::INFINITY, |share| {
        let untracked = r.cache.saturating_sub(tracked);
        r.room.saturating_sub(untracked) as f64 * share
    });
    cap.min(by_room.min(by_free) as u64)
}

/// Limit minus non-cache usage; `None` when the group is unlimited.
fn room(limit: u64, usage: u64, cache: u64) -> Option<Room> {
    if limit >= UNLIMITED {
        return None;
    }
    let room = limit.saturating_sub(usage.saturating_sub(cache));
    Some(Room {
        room,
        cache: cache.min(room),
    })
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// `name value` from a `memory.stat` text.
fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `MemAvailable` from a `/proc/meminfo` text, in bytes.
fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_room_is_the_limit_minus_memory_that_is_not_cache() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("memory/lab/srv");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("memory.limit_in_bytes"), "268435456\n").unwrap();
        fs::write(dir.join("memory.usage_in_bytes"), "200000000\n").unwrap();
        fs::write(
            dir.join("memory.stat"),
            "cache 5\nrss 7\ntotal_cache 150000000\n",
        )
        .unwrap();
        let pc = "9:pids:/\n4:memory:/lab/srv\n0::/\n";
        let r = cgroup_room(root.path(), pc).expect("limited");
        assert_eq!(r.room, 268_435_456 - 50_000_000);
        assert_eq!(r.cache, 150_000_000);
    }

    #[test]
    fn v1_unlimited_and_v2_groups() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("memory/big");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        fs::write(dir.join("memory.usage_in_bytes"), "1000\n").unwrap();
        fs::write(dir.join("memory.stat"), "total_cache 10\n").unwrap();
        assert_eq!(cgroup_room(root.path(), "4:memory:/big\n"), None);
        let v2 = root.path().join("svc");
        fs::create_dir_all(&v2).unwrap();
        fs::write(v2.join("memory.max"), "1000000\n").unwrap();
        fs::write(v2.join("memory.current"), "600000\n").unwrap();
        fs::write(v2.join("memory.stat"), "anon 1\nfile 400000\n").unwrap();
        assert_eq!(
            cgroup_room(root.path(), "0::/svc\n"),
            Some(Room {
                room: 800_000,
                cache: 400_000
            })
        );
        fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_room(root.path(), "0::/svc\n"), None);
    }

    #[test]
    fn cache_the_planner_does_not_know_of_shrinks_the_budget() {
        let r = Room {
            room: 1000,
            cache: 300,
        };
        // All cache is the planner's: the room rule alone.
        assert_eq!(budget_for(r, 300, u64::MAX, Some(BUDGET_OF_FREE)), 700);
        // 400 bytes of cache it knows nothing of (pinned by receivers or
        // not dropped): 95 % of the 600 left.
        let r = Room {
            room: 1000,
            cache: 500,
        };
        assert_eq!(budget_for(r, 100, u64::MAX, Some(BUDGET_OF_FREE)), 570);
        assert_eq!(
            budget_for(r, 100, u64::MAX, None),
            700,
            "untracked cache left out"
        );
        assert_eq!(
            budget_for(r, 100, 200, Some(BUDGET_OF_FREE)),
            200,
            "the configured cap"
        );
        // More tracked than cached (in-flight reads, counts lagging).
        assert_eq!(
            budget_for(
                Room {
                    room: 1000,
                    cache: 0
                },
                500,
                u64::MAX,
                Some(BUDGET_OF_FREE)
            ),
            700
        );
    }

    #[test]
    fn meminfo_available_is_in_bytes() {
        let m = "MemTotal:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(meminfo_available(m), Some(2 << 20));
        assert!(cache_room().is_some());
    }
}
