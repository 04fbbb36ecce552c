//! cgroup v1 groups for the server under test: `cpuacct` (CPU time of the
//! server and every process it forks), `memory` (limit including page cache)
//! and `blkio` (read bandwidth and IOPS throttles on the data disk).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

const ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 3] = ["cpuacct", "memory", "blkio"];

/// A set of same-named groups under each controller.
pub struct Group {
    name: String,
}

/// Limits to apply to a group.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// `memory.limit_in_bytes` (None: unlimited).
    pub memory_bytes: Option<u64>,
    /// Device "MAJ:MIN" of the data disk, required for the blkio throttles.
    pub device: Option<String>,
    /// `blkio.throttle.read_bps_device`.
    pub read_bps: Option<u64>,
    /// `blkio.throttle.read_iops_device`.
    pub read_iops: Option<u64>,
}

/// What a group used.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Usage {
    /// CPU time in seconds (cpuacct.usage).
    pub cpu_s: f64,
    /// Bytes read from the throttled device (blkio.throttle.io_service_bytes).
    pub disk_read_bytes: u64,
    /// memory.max_usage_in_bytes.
    pub mem_max_bytes: u64,
}

/// Checks that the cgroup v1 controllers the lab needs are mounted.
pub fn check() -> Result<()> {
    for c in CONTROLLERS {
        if !Path::new(ROOT).join(c).join("cgroup.procs").exists() {
            bail!("cgroup v1 controller {c} is not mounted at {ROOT}/{c}");
        }
    }
    Ok(())
}

/// `name` with every character a shell or a path could misread replaced by `-`.
fn group_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl Group {
    /// Creates (or resets) the groups `sluice-lab/NAME`. Characters other than
    /// letters, digits, `-` and `_` become `-`: the name ends up in a shell
    /// redirection (`enter_prefix`), and server rows are named freely
    /// ("sluice drs on").
    pub fn create(name: &str, limits: &Limits) -> Result<Group> {
        let g = Group {
            name: format!("sluice-lab/{}", group_name(name)),
        };
        g.destroy_quiet();
        for c in CONTROLLERS {
            fs::create_dir_all(g.dir(c))
                .with_context(|| format!("creating cgroup {}", g.dir(c).display()))?;
        }
        if let Some(m) = limits.memory_bytes {
            write(
                &g.dir("memory").join("memory.limit_in_bytes"),
                &m.to_string(),
            )?;
        }
        if let Some(dev) = &limits.device {
            if let Some(b) = limits.read_bps {
                write(
                    &g.dir("blkio").join("blkio.throttle.read_bps_device"),
                    &format!("{dev} {b}"),
                )?;
            }
            if let Some(i) = limits.read_iops {
                write(
                    &g.dir("blkio").join("blkio.throttle.read_iops_device"),
                    &format!("{dev} {i}"),
                )?;
            }
        } else if limits.read_bps.is_some() || limits.read_iops.is_some() {
            bail!("a disk throttle needs the device of the data directory");
        }
        Ok(g)
    }

    fn dir(&self, controller: &str) -> PathBuf {
        Path::new(ROOT).join(controller).join(&self.name)
    }

    /// Shell prefix that moves the shell into every group and then `exec`s the
    /// command, so the server and all its children are accounted from the start.
    pub fn enter_prefix(&self) -> String {
        CONTROLLERS
            .iter()
            .map(|c| format!("echo $$ > {}/cgroup.procs && ", self.dir(c).display()))
            .collect()
    }

    /// Current usage counters.
    pub fn usage(&self, device: Option<&str>) -> Result<Usage> {
        let cpu_ns: u64 = read(&self.dir("cpuacct").join("cpuacct.usage"))?
            .trim()
            .parse()?;
        let mem: u64 = read(&self.dir("memory").join("memory.max_usage_in_bytes"))?
            .trim()
            .parse()?;
        let mut disk = 0;
        let svc = read(&self.dir("blkio").join("blkio.throttle.io_service_bytes"))?;
        for l in svc.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() == 3 && f[1] == "Read" && device.is_none_or(|d| d == f[0]) {
                disk += f[2].parse::<u64>().unwrap_or(0);
            }
        }
        Ok(Usage {
            cpu_s: cpu_ns as f64 / 1e9,
            disk_read_bytes: disk,
            mem_max_bytes: mem,
        })
    }

    /// The file listing the group's processes.
    pub fn procs_file(&self) -> PathBuf {
        self.dir("cpuacct").join("cgroup.procs")
    }

    /// Process ids currently in the group.
    pub fn pids(&self) -> Vec<u32> {
        read(&self.dir("cpuacct").join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills what is left in the group and removes it.
    pub fn destroy_quiet(&self) {
        for c in CONTROLLERS {
            let d = self.dir(c);
            if let Ok(p) = fs::read_to_string(d.join("cgroup.procs")) {
                for pid in p.lines() {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", pid.trim()])
                        .status();
                }
            }
            // Empty the page cache charged here before removing the group.
            let _ = fs::write(d.join("memory.force_empty"), "0");
            let _ = fs::remove_dir(&d);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.destroy_quiet();
    }
}

fn write(p: &Path, v: &str) -> Result<()> {
    fs::write(p, v).with_context(|| format!("writing {v:?} to {}", p.display()))
}

fn read(p: &Path) -> Result<String> {
    fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// "MAJ:MIN" of the block device holding `path`, from /proc/self/mountinfo
/// (st_dev of an ext4 file on /dev/vda is 254:0, which is also the blkio key).
pub fn device_of(path: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(path)?.dev();
    let (maj, min) = (
        ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
        (dev & 0xff) | ((dev >> 12) & !0xff),
    );
    let want = format!("{maj}:{min}");
    let mi = read(Path::new("/proc/self/mountinfo"))?;
    if mi
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some(want.as_str()))
    {
        Ok(want)
    } else {
        bail!(
            "device {want} of {} not found in /proc/self/mountinfo",
            path.display()
        )
    }
}

/// Drops the page cache (cold-cache runs).
pub fn drop_caches() -> Result<()> {
    let _ = std::process::Command::new("sync").status();
    write(Path::new("/proc/sys/vm/drop_caches"), "1")
}

/// Reads `path` to warm the page cache (warm runs).
pub fn warm(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_device_of_the_root_filesystem() {
        let d = device_of(Path::new("/")).unwrap();
        assert!(d.contains(':'));
    }

    #[test]
    fn row_names_with_spaces_make_one_shell_word() {
        assert_eq!(group_name("srv-sluice drs on"), "srv-sluice-drs-on");
        assert_eq!(group_name("a/b;c'd"), "a-b-c-d");
        let g = Group {
            name: format!("sluice-lab/{}", group_name("srv-x y")),
        };
        assert!(g
            .enter_prefix()
            .contains("/sluice-lab/srv-x-y/cgroup.procs &&"));
    }
}
