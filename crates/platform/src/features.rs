//! Run-time probe of the kernel features the engine may use, so it degrades
//! (falls back to a slower path) instead of failing on an older kernel.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;

/// Whether one kernel feature works here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// The feature worked when probed.
    Supported,
    /// The probe failed; callers use their fallback.
    Unsupported,
}

impl Support {
    /// True for `Supported`.
    pub fn is_supported(self) -> bool {
        self == Support::Supported
    }

    fn from_ok<T, E>(r: Result<T, E>) -> Self {
        if r.is_ok() {
            Support::Supported
        } else {
            Support::Unsupported
        }
    }
}

/// What the running kernel offers, probed once at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `sendfile(2)` from a regular file to a TCP socket.
    pub sendfile: Support,
    /// `TCP_NOTSENT_LOWAT` socket option.
    pub notsent_lowat: Support,
    /// `TCP_INFO` with the delivery-rate fields.
    pub tcp_info: Support,
    /// `cachestat(2)` page-cache residency queries (Linux 6.5+).
    pub cachestat: Support,
    /// io_uring is enabled (`/proc/sys/kernel/io_uring_disabled` is 0).
    pub io_uring: Support,
}

impl Features {
    /// Probes each feature on a throw-away loopback connection and temp file.
    /// Never fails: anything that cannot be probed is reported `Unsupported`.
    pub fn probe() -> Features {
        let mut f = Features {
            sendfile: Support::Unsupported,
            notsent_lowat: Support::Unsupported,
            tcp_info: Support::Unsupported,
            cachestat: Support::Unsupported,
            io_uring: Self::probe_io_uring(),
        };
        let Ok(mut tmp) = probe_file() else { return f };
        let _ = std::io::Write::write_all(&mut tmp, b"probe");
        f.cachestat = Support::from_ok(crate::fadvise::cachestat(tmp.as_fd(), 0, 0));
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
            return f;
        };
        let Ok(addr) = listener.local_addr() else {
            return f;
        };
        let Ok(client) = TcpStream::connect(addr) else {
            return f;
        };
        let Ok((_server, _)) = listener.accept() else {
            return f;
        };
        f.notsent_lowat = Support::from_ok(crate::tcp::set_notsent_lowat(client.as_fd(), 1 << 20));
        f.tcp_info = Support::from_ok(crate::tcp::tcp_info(client.as_fd()));
        let mut off = 0u64;
        f.sendfile = match crate::sendfile::sendfile(client.as_fd(), tmp.as_fd(), &mut off, 5) {
            Ok(5) => Support::Supported,
            _ => Support::Unsupported,
        };
        f
    }

    fn probe_io_uring() -> Support {
        match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
            Ok(s) if s.trim() == "0" => Support::Supported,
            // Missing knob (kernel before 6.6) or disabled: do not risk it.
            _ => Support::Unsupported,
        }
    }
}

/// An unnamed temporary file (`O_TMPFILE`): no name in /tmp that another
/// user could pre-create as a symlink. Falls back to `O_EXCL` creation.
fn probe_file() -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    let unnamed = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(&dir);
    if let Ok(f) = unnamed {
        return Ok(f);
    }
    let path = dir.join(format!(".sluice-probe-{}", std::process::id()));
    // create_new = O_EXCL: never follows or reuses an existing name.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    let _ = std::fs::remove_file(&path);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_finds_the_basics_on_this_kernel() {
        let f = Features::probe();
        // Linux >= 4.x has all three; the lab runs 6.x.
        assert!(f.sendfile.is_supported());
        assert!(f.notsent_lowat.is_supported());
        assert!(f.tcp_info.is_supported());
    }
}
