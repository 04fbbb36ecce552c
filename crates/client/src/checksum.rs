//! Local checksums for `--verify`, in the algorithms and text forms that
//! GridFTP's `CKSM` uses (lower-case hex; ADLER32 as 8 hex digits).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use md5::Digest as _;

/// Algorithms we can compute locally, in the order we ask the server.
pub const ALGORITHMS: [Algorithm; 3] = [Algorithm::Sha256, Algorithm::Md5, Algorithm::Adler32];

/// A checksum algorithm known to both us and Globus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// SHA-256.
    Sha256,
    /// MD5.
    Md5,
    /// Adler-32 (zlib).
    Adler32,
}

impl Algorithm {
    /// The name in a `CKSM` command.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "SHA256",
            Algorithm::Md5 => "MD5",
            Algorithm::Adler32 => "ADLER32",
        }
    }

    /// Whether a server's hex answer has the length this algorithm gives.
    pub fn plausible(self, hex: &str) -> bool {
        let want = match self {
            Algorithm::Sha256 => 64,
            Algorithm::Md5 => 32,
            Algorithm::Adler32 => 8,
        };
        hex.len() == want && hex.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

/// Incremental hasher for one algorithm.
pub enum Hasher {
    /// SHA-256 state.
    Sha256(sha2::Sha256),
    /// MD5 state.
    Md5(md5::Md5),
    /// Adler-32 state.
    Adler32(adler::Adler32),
}

impl Hasher {
    /// A fresh hasher.
    pub fn new(algo: Algorithm) -> Self {
        match algo {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Md5 => Hasher::Md5(md5::Md5::new()),
            Algorithm::Adler32 => Hasher::Adler32(adler::Adler32::new()),
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Md5(h) => h.update(data),
            Hasher::Adler32(h) => h.write_slice(data),
        }
    }

    /// Lower-case hex of the result.
    pub fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Md5(h) => hex::encode(h.finalize()),
            Hasher::Adler32(h) => format!("{:08x}", h.checksum()),
        }
    }
}

/// Checksum of a whole local file.
pub fn file(path: &Path, algo: Algorithm) -> std::io::Result<String> {
    prefix(&File::open(path)?, u64::MAX, algo)
}

/// Checksum of the first `len` bytes of `f` (fewer if it is shorter).
pub fn prefix(f: &File, len: u64, algo: Algorithm) -> std::io::Result<String> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::Start(0))?;
    let mut f = f.take(len);
    let mut h = Hasher::new(algo);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish())
}

/// Compares a server's answer with ours, ignoring case and leading zeros
/// (some servers print ADLER32 without them).
pub fn same(server: &str, local: &str) -> bool {
    let norm = |s: &str| s.trim().trim_start_matches('0').to_ascii_lowercase();
    norm(server) == norm(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(algo: Algorithm, data: &[u8]) -> String {
        let mut h = Hasher::new(algo);
        h.update(data);
        h.finish()
    }

    #[test]
    fn known_values() {
        assert_eq!(
            of(Algorithm::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(of(Algorithm::Md5, b""), "d41d8cd98f00b204e9800998ecf8427e");
        // zlib's adler32("Wikipedia") = 0x11E60398.
        assert_eq!(of(Algorithm::Adler32, b"Wikipedia"), "11e60398");
        assert_eq!(of(Algorithm::Adler32, b""), "00000001");
    }

    #[test]
    fn comparison_tolerates_case_and_leading_zeros() {
        assert!(same("1E60398", "01e60398"));
        assert!(!same("1e60399", "01e60398"));
    }

    #[test]
    fn plausible_lengths() {
        assert!(Algorithm::Adler32.plausible("0123abcd"));
        assert!(!Algorithm::Md5.plausible("0123abcd"));
        assert!(!Algorithm::Sha256.plausible(&"z".repeat(64)));
    }
}
