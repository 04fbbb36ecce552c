//! File digests for `Want-Repr-Digest` / `Want-Digest` (see
//! `sluice_http::digest`): computed on an engine disk thread as
//! background work, never on the event loop, and cached by the file's
//! identity (device, inode, size, modification time) so a popular file is
//! hashed once: requests that arrive while it is being hashed wait for
//! that one computation instead of starting their own.
//!
//! The hash reads the very descriptor the response sends from; if the
//! file's size or time changed while it was read, the result is neither
//! sent nor kept.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::{Arc, Mutex};

use md5::Digest as _;
use sluice_engine::{Cancel, Engine, IoClass};
use sluice_http::digest::DigestAlg;
use tokio::sync::OnceCell;

/// Digests kept; the oldest goes first past this.
pub const MAX_CACHED: usize = 4096;

/// Bytes read per `pread` while hashing.
const READ: usize = 1 << 20;

/// What identifies one version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Identity {
    fn of(m: &std::fs::Metadata) -> Identity {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        }
    }
}

type Slot = Arc<OnceCell<Option<Vec<u8>>>>;

/// The cache; one per server.
#[derive(Debug, Default)]
pub struct Digests {
    inner: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    slots: HashMap<(Identity, DigestAlg), Slot>,
    order: VecDeque<(Identity, DigestAlg)>,
    /// Hashes computed (for tests: a popular file is hashed once).
    computed: u64,
}

impl Digests {
    /// The `alg` digest of `file` (raw bytes), from the cache or computed
    /// on a disk thread; `None` if the file could not be read whole or
    /// changed meanwhile.
    pub async fn get(&self, engine: &Engine, file: &Arc<File>, alg: DigestAlg) -> Option<Vec<u8>> {
        let f = Arc::clone(file);
        let id = engine
            .run_blocking_as(IoClass::Meta, &Cancel::new(), move || {
                f.metadata().map(|m| Identity::of(&m))
            })
            .await
            .ok()?
            .ok()?;
        let slot = {
            let mut c = self.inner.lock().ok()?;
            let key = (id, alg);
            if let Some(s) = c.slots.get(&key) {
                Arc::clone(s)
            } else {
                while c.order.len() >= MAX_CACHED {
                    if let Some(old) = c.order.pop_front() {
                        c.slots.remove(&old);
                    }
                }
                let s: Slot = Arc::default();
                c.slots.insert(key, Arc::clone(&s));
                c.order.push_back(key);
                s
            }
        };
        let d = slot
            .get_or_init(|| async {
                let f = Arc::clone(file);
                let r = engine
                    .run_blocking_as(IoClass::Background, &Cancel::new(), move || {
                        hash(&f, alg, id)
                    })
                    .await
                    .ok()
                    .flatten();
                if let Ok(mut c) = self.inner.lock() {
                    c.computed += 1;
                }
                r
            })
            .await
            .clone();
        if d.is_none() {
            // Not kept: a later request tries again.
            if let Ok(mut c) = self.inner.lock() {
                c.slots.remove(&(id, alg));
                c.order.retain(|k| *k != (id, alg));
            }
        }
        d
    }

    /// How many digests were computed (not served from the cache).
    pub fn computed(&self) -> u64 {
        self.inner.lock().map(|c| c.computed).unwrap_or(0)
    }
}

/// Hashes the whole of `file`; `None` on a read error or if the file is
/// not the version `id` any more.
fn hash(file: &File, alg: DigestAlg, id: Identity) -> Option<Vec<u8>> {
    enum H {
        Sha256(sha2::Sha256),
        Md5(md5::Md5),
        Adler(adler::Adler32),
    }
    let mut h = match alg {
        DigestAlg::Sha256 => H::Sha256(sha2::Sha256::new()),
        DigestAlg::Md5 => H::Md5(md5::Md5::new()),
        DigestAlg::Adler32 => H::Adler(adler::Adler32::new()),
    };
    let mut buf = vec![0u8; READ];
    let mut at = 0u64;
    while at < id.size {
        let want = usize::try_from((id.size - at).min(READ as u64)).ok()?;
        let n = file.read_at(&mut buf[..want], at).ok()?;
        if n == 0 {
            return None; // shorter than it said: changed
        }
        match &mut h {
            H::Sha256(s) => s.update(&buf[..n]),
            H::Md5(s) => s.update(&buf[..n]),
            H::Adler(s) => s.write_slice(&buf[..n]),
        }
        at += n as u64;
    }
    if Identity::of(&file.metadata().ok()?) != id {
        return None;
    }
    Some(match h {
        H::Sha256(s) => s.finalize().to_vec(),
        H::Md5(s) => s.finalize().to_vec(),
        H::Adler(s) => s.checksum().to_be_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashed_once_and_again_after_a_change() {
        let engine = Engine::new(sluice_engine::EngineConfig::default());
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let f = Arc::new(File::open(&p).unwrap());
        let cache = Digests::default();
        let (a, b) = tokio::join!(
            cache.get(&engine, &f, DigestAlg::Sha256),
            cache.get(&engine, &f, DigestAlg::Sha256)
        );
        let want = hex::decode("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
            .unwrap();
        assert_eq!(a.as_deref(), Some(&want[..]));
        assert_eq!(a, b);
        assert_eq!(cache.get(&engine, &f, DigestAlg::Sha256).await, a);
        assert_eq!(cache.computed(), 1);
        let adler = cache.get(&engine, &f, DigestAlg::Adler32).await.unwrap();
        assert_eq!(adler, 0x024d_0127u32.to_be_bytes());
        assert_eq!(cache.computed(), 2);
        // A new version (other size): hashed again.
        std::fs::write(&p, b"abcd").unwrap();
        let g = cache.get(&engine, &f, DigestAlg::Sha256).await.unwrap();
        assert_ne!(Some(g), a);
        assert_eq!(cache.computed(), 3);
    }
}
