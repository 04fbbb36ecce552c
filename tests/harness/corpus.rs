//! Deterministic test files, generated once per test process, and sha256.
//!
//! The sizes are chosen for the edges a transfer path gets wrong: nothing,
//! one byte, one byte short of a page, a block-size boundary plus an odd
//! tail, and a file large enough to take many buffers and several MODE E
//! blocks per stream.

use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tempfile::TempDir;

/// Every size the transfer tests cover.
pub const SIZES: [u64; 5] = [0, 1, 4095, (1 << 20) + 7, 64 << 20];

/// The largest test file's size.
pub const BIG: u64 = 64 << 20;

/// One generated file.
#[derive(Debug)]
pub struct TestFile {
    pub name: String,
    pub size: u64,
    pub path: PathBuf,
    pub sha256: String,
}

/// The generated files, in a directory that lives as long as the process.
pub struct Corpus {
    dir: TempDir,
    files: Vec<TestFile>,
}

impl Corpus {
    pub fn files(&self) -> &[TestFile] {
        &self.files
    }

    pub fn file(&self, size: u64) -> &TestFile {
        self.files
            .iter()
            .find(|f| f.size == size)
            .unwrap_or_else(|| panic!("no corpus file of {size} bytes"))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The name a file of `size` bytes has in every served root.
pub fn file_name(size: u64) -> String {
    format!("f{size}.bin")
}

/// The process-wide corpus, generated on first use.
pub fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| {
        // A static is never dropped, so the directory outlives the process:
        // name it after the pid and remove those of processes that are gone.
        remove_stale_corpora();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{CORPUS_PREFIX}{}-", std::process::id()))
            .tempdir()
            .expect("corpus dir");
        // Peer servers drop privileges to `ftp`: they must be able to read.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod corpus");
        let files = SIZES
            .iter()
            .map(|&size| {
                let name = file_name(size);
                let path = dir.path().join(&name);
                write_pseudo_random(&path, size, size ^ 0x5eed);
                fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
                TestFile {
                    sha256: sha256_file(&path),
                    name,
                    size,
                    path,
                }
            })
            .collect();
        Corpus { dir, files }
    })
}

const CORPUS_PREFIX: &str = "sluice-corpus-";

/// Removes corpus directories left by earlier test processes that have
/// exited (`sluice-corpus-PID-xxxx` with no /proc/PID).
fn remove_stale_corpora() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(CORPUS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// splitmix64: tiny, fast, and the same everywhere, so a failing byte
/// offset means the same thing on every machine.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `size` pseudo-random bytes in memory, for tests that script a server
/// themselves (same generator as the files).
pub fn pseudo_random_bytes(size: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64(seed);
    let mut v: Vec<u8> = (0..size.div_ceil(8))
        .flat_map(|_| rng.next().to_le_bytes())
        .collect();
    v.truncate(size);
    v
}

/// Writes `size` pseudo-random bytes from `seed` to `path`.
pub fn write_pseudo_random(path: &Path, size: u64, seed: u64) {
    let mut rng = SplitMix64(seed);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).expect("create test file"));
    let mut chunk = vec![0u8; 1 << 16];
    let mut left = size;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next().to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..n]).expect("write test file");
        left -= n as u64;
    }
    w.flush().expect("flush test file");
}

/// Hex sha256 of a file's contents.
pub fn sha256_file(path: &Path) -> String {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex::encode(h.finalize())
}

/// Hex sha256 of bytes.
pub fn sha256_bytes(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Checks that `path` holds exactly the bytes of `expected`. Returns a
/// description of the difference (size, first differing offset) if not.
pub fn compare_file(path: &Path, expected: &TestFile) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() != expected.size {
        return Err(format!(
            "{}: size {} instead of {}{}",
            path.display(),
            meta.len(),
            expected.size,
            first_difference(path, &expected.path)
                .map(|o| format!(", first difference at byte {o}"))
                .unwrap_or_default()
        ));
    }
    let got = sha256_file(path);
    if got != expected.sha256 {
        return Err(format!(
            "{}: sha256 {got} instead of {}, first difference at byte {:?}",
            path.display(),
            expected.sha256,
            first_difference(path, &expected.path)
        ));
    }
    Ok(())
}

/// Offset of the first byte where two files differ (within the shorter).
fn first_difference(a: &Path, b: &Path) -> Option<u64> {
    let (mut fa, mut fb) = (File::open(a).ok()?, File::open(b).ok()?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut offset = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        let n = na.min(nb);
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            return Some(offset + i as u64);
        }
        if na != nb {
            return Some(offset + n as u64);
        }
        if n == 0 {
            return None;
        }
        offset += n as u64;
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Places every corpus file in `dir`: hard links when the server only reads
/// (cheap, and 64 MiB per server adds up), copies when it may write.
pub fn populate(dir: &Path, writable: bool) {
    for f in corpus().files() {
        let dest = dir.join(&f.name);
        if writable {
            fs::copy(&f.path, &dest).expect("copy corpus file");
            // Peers write as `ftp`, not as the owner (root).
            fs::set_permissions(&dest, fs::Permissions::from_mode(0o666)).expect("chmod");
        } else if fs::hard_link(&f.path, &dest).is_err() {
            fs::copy(&f.path, &dest).expect("copy corpus file");
        }
    }
}

/// A small directory tree for mirror tests, under `dir/tree`. Returns the
/// (relative path, corpus file) pairs it holds.
pub fn populate_tree(dir: &Path) -> Vec<(String, &'static TestFile)> {
    let c = corpus();
    let entries = [
        ("tree/f0.bin", 0),
        ("tree/a/f1.bin", 1),
        ("tree/a/deeper/f4095.bin", 4095),
        ("tree/b/f1048583.bin", (1 << 20) + 7),
        ("tree/b/c/f4095-again.bin", 4095),
    ];
    let mut out = Vec::new();
    for (rel, size) in entries {
        let dest = dir.join(rel);
        fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir tree");
        let f = c.file(size);
        if fs::hard_link(&f.path, &dest).is_err() {
            fs::copy(&f.path, &dest).expect("copy tree file");
        }
        out.push((rel.to_string(), f));
    }
    fs::create_dir_all(dir.join("tree/empty-dir")).expect("mkdir empty-dir");
    for d in [
        "tree",
        "tree/a",
        "tree/a/deeper",
        "tree/b",
        "tree/b/c",
        "tree/empty-dir",
    ] {
        fs::set_permissions(dir.join(d), fs::Permissions::from_mode(0o755)).expect("chmod tree");
    }
    out
}

/// Writes the first `len` bytes of `src` to `dest` (mode 0666, so a peer
/// server running as `ftp` may append to it).
pub fn write_prefix(src: &Path, dest: &Path, len: u64) {
    let mut data = Vec::new();
    File::open(src)
        .expect("open src")
        .take(len)
        .read_to_end(&mut data)
        .expect("read prefix");
    fs::write(dest, &data).expect("write prefix");
    fs::set_permissions(dest, fs::Permissions::from_mode(0o666)).expect("chmod prefix");
}
