//! TUN devices (`/dev/net/tun`, `TUNSETIFF`): the lab's link emulator owns one
//! in each of two network namespaces and forwards IP packets between them.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::sys::cvt;

/// `_IOW('T', 202, int)`: attach the open file to a (new) network interface.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// Layer-3 device: reads and writes carry bare IP packets.
const IFF_TUN: libc::c_short = 0x0001;
/// No 4-byte packet-information header in front of each packet.
const IFF_NO_PI: libc::c_short = 0x1000;
/// Longest interface name the kernel accepts (IFNAMSIZ minus the NUL).
pub const MAX_NAME_LEN: usize = 15;

/// The part of `struct ifreq` that `TUNSETIFF` reads and writes.
#[repr(C)]
struct IfReqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    // `struct ifreq` is 40 bytes on Linux: the union after the name is 24.
    _pad: [u8; 22],
}

/// An open TUN device: each `read` returns one IP packet, each `write` injects one.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates (or attaches to) the TUN interface `name` in the caller's network
    /// namespace. The interface disappears when the returned value is dropped
    /// (it is not made persistent). With `nonblocking`, reads return
    /// `WouldBlock` when no packet is queued.
    pub fn create(name: &str, nonblocking: bool) -> io::Result<Tun> {
        if name.is_empty() || name.len() > MAX_NAME_LEN || name.bytes().any(|b| b == 0 || b == b'/')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad TUN interface name",
            ));
        }
        let mut opts = OpenOptions::new();
        opts.read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | if nonblocking { libc::O_NONBLOCK } else { 0 });
        let file = opts.open("/dev/net/tun")?;
        let mut req = IfReqFlags {
            name: [0; 16],
            flags: IFF_TUN | IFF_NO_PI,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: the fd is open and owned by `file`; TUNSETIFF reads and writes a
        // `struct ifreq`, and `req` is a properly sized (40-byte), initialised,
        // exclusively borrowed buffer with that layout that outlives the call.
        cvt(unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                TUNSETIFF as _,
                &mut req as *mut IfReqFlags,
            )
        })?;
        let end = req
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(req.name.len());
        let name = String::from_utf8_lossy(&req.name[..end]).into_owned();
        Ok(Tun { file, name })
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying file: `read`/`write` move one packet each.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// A second handle to the same device, e.g. for a writer thread.
    pub fn try_clone(&self) -> io::Result<Tun> {
        Ok(Tun {
            file: self.file.try_clone()?,
            name: self.name.clone(),
        })
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        assert!(Tun::create("", false).is_err());
        assert!(Tun::create("much-too-long-name-x", false).is_err());
        assert!(Tun::create("a/b", false).is_err());
    }

    #[test]
    fn ifreq_layout_is_40_bytes() {
        assert_eq!(std::mem::size_of::<IfReqFlags>(), 40);
    }

    #[test]
    fn creates_a_device_when_permitted() {
        // Needs CAP_NET_ADMIN and /dev/net/tun; elsewhere the error must be a
        // permission or missing-device error, not a panic.
        match Tun::create("sltuntest0", true) {
            Ok(t) => {
                assert_eq!(t.name(), "sltuntest0");
                let mut buf = [0u8; 64];
                // Interface is down: nothing to read, and the fd is non-blocking.
                let err = std::io::Read::read(&mut &t.file, &mut buf).unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
            }
            Err(e) => assert!(matches!(
                e.raw_os_error(),
                Some(libc::EPERM) | Some(libc::ENOENT) | Some(libc::EACCES)
            )),
        }
    }
}
