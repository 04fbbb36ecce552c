//! Kernel TLS (linux Documentation/networking/tls.rst): the `tls` upper
//! layer protocol on a TCP socket, its traffic keys, and records of a type
//! other than application data (a close_notify alert). The key hand-over
//! of a real connection is the `ktls` crate's; these calls serve the
//! server's start-up probe and the engine's close.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::cvt;

/// `setsockopt(SOL_TLS, ...)` direction: keys for what we send.
pub const TLS_TX: libc::c_int = 1;
/// `setsockopt(SOL_TLS, ...)` direction: keys for what we receive.
pub const TLS_RX: libc::c_int = 2;
/// `SOL_TLS` control message setting the type of the record sent.
const TLS_SET_RECORD_TYPE: libc::c_int = 1;
/// TLS record type of an alert.
const RECORD_ALERT: u8 = 21;

/// Puts the `tls` upper layer protocol on a connected TCP socket; fails
/// with ENOENT when the kernel has no `tls` module.
pub fn set_ulp_tls(fd: BorrowedFd<'_>) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: `name` is a live buffer of the length given; the fd is borrowed.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Gives the socket its keys for direction `dir` ([`TLS_TX`] or
/// [`TLS_RX`]); `info` is a `tls12_crypto_info_*` struct as the kernel
/// lays it out (see [`zero_crypto_info`]).
pub fn set_tls_keys(fd: BorrowedFd<'_>, dir: libc::c_int, info: &[u8]) -> io::Result<()> {
    // SAFETY: `info` is a live buffer of the length given; the kernel
    // checks the length against the cipher type it names.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_TLS,
            dir,
            info.as_ptr().cast(),
            info.len() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// A zero-keyed `tls12_crypto_info_aes_gcm_{128,256}` (version and cipher
/// type as u16 in native order, iv[8], key[16|32], salt[4], rec_seq[8]):
/// enough to ask the kernel whether it takes a cipher.
pub fn zero_crypto_info(version: u16, cipher: u16, key_len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + 8 + key_len + 4 + 8);
    b.extend_from_slice(&version.to_ne_bytes());
    b.extend_from_slice(&cipher.to_ne_bytes());
    b.resize(4 + 8 + key_len + 4 + 8, 0);
    b
}

/// Sends `payload` as one alert record (a close_notify is `[1, 0]`):
/// `sendmsg` with a control message setting the record type. Does not
/// wait: a full send buffer is an error (`WouldBlock`). Only for a socket
/// with its TX keys set: a plain TCP socket ignores the control message
/// and would send the payload as data.
pub fn send_tls_alert(fd: BorrowedFd<'_>, payload: &[u8]) -> io::Result<()> {
    let mut data = payload.to_vec();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // Room for one control message of one byte, aligned for cmsghdr.
    let mut space = [0u64; 4];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let cmsg_space = unsafe { libc::CMSG_SPACE(1) } as usize;
    assert!(cmsg_space <= std::mem::size_of_val(&space));
    // SAFETY: an all-zero msghdr is valid (no name, no iov, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space as _;
    // SAFETY: msg_control points at `space`, which holds CMSG_SPACE(1)
    // bytes (asserted), so the first header and its one data byte are
    // inside it; `msg`, `iov`, `data` and `space` outlive the sendmsg.
    cvt(unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(cmsg) = RECORD_ALERT;
        libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The kernel's struct sizes: 40 bytes for AES-GCM-128, 56 for 256.
    #[test]
    fn crypto_info_has_the_kernel_layout() {
        let b = zero_crypto_info(0x0304, 51, 16);
        assert_eq!(b.len(), 40);
        assert_eq!(&b[..4], &[0x04, 0x03, 51, 0]);
        assert_eq!(zero_crypto_info(0x0303, 52, 32).len(), 56);
    }

    /// On a socket without the `tls` layer the kernel refuses keys (an
    /// error, never a crash).
    #[test]
    fn without_the_tls_layer_keys_are_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let info = zero_crypto_info(0x0304, 51, 16);
        assert!(set_tls_keys(s.as_fd(), TLS_TX, &info).is_err());
        drop(c);
    }
}
