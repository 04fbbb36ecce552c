//! `sluice ls ftp://...`: LIST (or NLST with `-1`) over one passive MODE S
//! connection, copied to stdout.

use std::io::{Read, Write};
use std::time::Duration;

use super::control::refused;
use super::{data, session};
use crate::cli::LsArgs;
use crate::error::{ClientError, Result};
use crate::url::FtpUrl;

/// Runs one listing.
pub fn run(u: &FtpUrl, a: &LsArgs) -> Result<()> {
    let timeout = Duration::from_secs(a.timeout);
    let mut ctl = session::open(u, timeout)?;
    let to = data::passive(&mut ctl)?;
    let mut sock = ctl.data_sock(data::connect(to, timeout)?)?;
    let verb = if a.names { "NLST" } else { "LIST" };
    let first = ctl.cmd(&format!("{verb} {}", u.path))?;
    if !first.code.is_preliminary() {
        return Err(refused(verb, &first));
    }
    let _ = sock.tcp().set_read_timeout(Some(timeout));
    let mut out = std::io::stdout().lock();
    let mut filter = ListingFilter::default();
    let mut buf = vec![0u8; 64 << 10];
    let mut clean = Vec::with_capacity(buf.len() + 64);
    loop {
        let n = match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ClientError::net("read listing", e)),
        };
        clean.clear();
        filter.feed(&buf[..n], &mut clean);
        write_out(&mut out, &clean)?;
    }
    clean.clear();
    filter.finish(&mut clean);
    write_out(&mut out, &clean)?;
    out.flush()
        .map_err(|e| ClientError::local("write to stdout", e))?;
    drop(sock);
    let last = ctl.read_reply()?;
    if !last.code.is_completion() {
        return Err(refused(verb, &last));
    }
    ctl.quit();
    Ok(())
}

fn write_out(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            ClientError::BrokenPipe
        } else {
            ClientError::local("write to stdout", e)
        }
    })
}

/// Makes a listing from the server safe to print: a file name is the
/// server's to choose, and one holding ESC or other control characters
/// would otherwise drive the user's terminal (set its title, clear the
/// screen, fake output). CRLF (and CR CR LF) line ends become LF; C0 controls other than
/// tab and newline, DEL, and the C1 controls (U+0080..U+009F, which some
/// terminals also obey) are written as `\xNN`. Sans-I/O: bytes in, bytes
/// out, with the state for a CR or a UTF-8 lead byte split across reads.
#[derive(Debug, Default)]
pub struct ListingFilter {
    /// CRs just seen (dropped if a LF follows: some servers end lines
    /// with CR CR LF).
    cr: u64,
    /// A 0xC2 lead byte was the last byte seen (C1 control if 0x80..0x9F follows).
    c2: bool,
}

impl ListingFilter {
    /// Filters `input`, appending to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            if self.cr > 0 && b != b'\r' {
                if b != b'\n' {
                    for _ in 0..self.cr {
                        escape(b'\r', out);
                    }
                }
                self.cr = 0;
            }
            if self.c2 {
                self.c2 = false;
                if (0x80..=0x9f).contains(&b) {
                    escape(0xc2, out);
                    escape(b, out);
                    continue;
                }
                out.push(0xc2);
            }
            match b {
                b'\r' => self.cr += 1,
                0xc2 => self.c2 = true,
                b'\n' | b'\t' => out.push(b),
                0..=0x1f | 0x7f => escape(b, out),
                _ => out.push(b),
            }
        }
    }

    /// Flushes a held byte at the end of the listing.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        for _ in 0..std::mem::take(&mut self.cr) {
            escape(b'\r', out);
        }
        if std::mem::take(&mut self.c2) {
            out.push(0xc2);
        }
    }
}

fn escape(b: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter_in_pieces(input: &[u8], piece: usize) -> Vec<u8> {
        let mut f = ListingFilter::default();
        let mut out = Vec::new();
        for p in input.chunks(piece) {
            f.feed(p, &mut out);
        }
        f.finish(&mut out);
        out
    }

    #[test]
    fn control_characters_in_names_are_escaped() {
        let raw = b"-rw 1 a a 5 Jan 1 00:00 \x1b]0;pwned\x07evil\x1b[2J\r\nok\r\r\nz\r\n";
        let want = b"-rw 1 a a 5 Jan 1 00:00 \\x1b]0;pwned\\x07evil\\x1b[2J\nok\nz\n";
        for piece in [1, 2, 3, 1000] {
            assert_eq!(filter_in_pieces(raw, piece), want.to_vec(), "piece {piece}");
        }
    }

    #[test]
    fn c1_controls_are_escaped_and_other_utf8_kept() {
        // U+009B (CSI) and a lone CR are escaped; "é" (C3 A9), "¢" (C2 A2)
        // and a tab pass.
        let raw = "a\u{9b}2Jb\t\u{e9}\u{a2}\rx\r".as_bytes();
        let want = b"a\\xc2\\x9b2Jb\t\xc3\xa9\xc2\xa2\\x0dx\\x0d";
        for piece in [1, 4, 100] {
            assert_eq!(filter_in_pieces(raw, piece), want.to_vec(), "piece {piece}");
        }
    }
}
