//! The splice data path's mover: file pages into a pipe of our own, then
//! from the pipe into the socket, with `sendfile`'s contract (bytes the
//! socket took, `WouldBlock` when it is full, `Ok(0)` at end of file).
//!
//! Why not `sendfile`: it splices through a hidden 16-page pipe, so the
//! socket gets 64 KiB per pass; a megabyte pipe hands it 16 times as much
//! per `tcp_sendmsg`. The cost is two descriptors and a pipe per transfer.

use std::io;
use std::os::fd::BorrowedFd;

use sluice_platform::pipe::Pipe;
use sluice_platform::sendfile::{splice, SpliceFlags};

/// How big a pipe each splice transfer asks for.
pub(crate) const PIPE_BYTES: usize = 1 << 20;

/// One transfer's pipe and what it holds between calls.
#[derive(Debug)]
pub(crate) struct SplicePump {
    pipe: Pipe,
    /// Bytes spliced from the file that the socket has not taken yet.
    held: usize,
}

impl SplicePump {
    pub(crate) fn new() -> io::Result<SplicePump> {
        Ok(SplicePump {
            pipe: Pipe::with_capacity(PIPE_BYTES)?,
            held: 0,
        })
    }

    /// Moves up to `want` bytes of `file` from `*offset` into `sock`, and
    /// advances `*offset` by what the socket took. Bytes already in the pipe
    /// (from a call the socket cut short) go first; they are the bytes at
    /// `*offset`, because the pipe only ever holds the file's next bytes.
    pub(crate) fn send(
        &mut self,
        sock: BorrowedFd<'_>,
        file: BorrowedFd<'_>,
        offset: &mut u64,
        want: usize,
    ) -> io::Result<usize> {
        if self.held == 0 {
            let mut from = *offset;
            let len = want.min(self.pipe.capacity());
            // The pipe is empty, so only the file side can hold this call up,
            // and callers hand us only page-cache-resident ranges.
            let flags = SpliceFlags {
                nonblock: true,
                more: false,
                move_pages: false,
            };
            let n = splice(
                file,
                Some(&mut from),
                self.pipe.write_end(),
                None,
                len,
                flags,
            )?;
            if n == 0 {
                return Ok(0);
            }
            self.held = n;
        }
        let flags = SpliceFlags {
            nonblock: true,
            more: false,
            move_pages: false,
        };
        let n = splice(
            self.pipe.read_end(),
            None,
            sock,
            None,
            self.held.min(want.max(1)),
            flags,
        )?;
        self.held -= n;
        *offset += n as u64;
        Ok(n)
    }

    /// Bytes waiting in the pipe (the socket has not taken them yet). While
    /// there are any, the next bytes must come from here, not another path.
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn moves_a_file_range_through_a_full_socket_without_losing_bytes() {
        let data = pattern(5_000_000);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let tx = TcpStream::connect(addr).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        // A small, non-blocking send buffer: the socket fills long before
        // the file is sent, so bytes wait in the pipe between calls.
        nix::sys::socket::setsockopt(&tx, nix::sys::socket::sockopt::SndBuf, &(64 * 1024)).unwrap();
        tx.set_nonblocking(true).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).unwrap();
            got
        });
        let mut pump = SplicePump::new().unwrap();
        let (start, end) = (123u64, data.len() as u64 - 77);
        let mut off = start;
        let mut saw_held = false;
        while off < end {
            let want = (end - off) as usize;
            match pump.send(tx.as_fd(), f.as_fd(), &mut off, want) {
                Ok(0) => panic!("unexpected end of file at {off}"),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    saw_held |= pump.held() > 0;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(off, end);
        drop(tx);
        let got = reader.join().unwrap();
        assert_eq!(got.len() as u64, end - start);
        assert!(got == data[start as usize..end as usize], "bytes differ");
        assert!(
            saw_held,
            "the socket never filled: the test did not test the pipe's leftovers"
        );
    }

    #[test]
    fn end_of_file_is_zero() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"abc").unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _rx = l.accept().unwrap();
        let mut pump = SplicePump::new().unwrap();
        let mut off = 3;
        assert_eq!(pump.send(tx.as_fd(), f.as_fd(), &mut off, 10).unwrap(), 0);
        assert_eq!(off, 3);
    }
}
