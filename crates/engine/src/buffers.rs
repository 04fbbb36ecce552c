//! A pool of equally sized byte buffers, reused so the copy path and uploads
//! do not allocate (and fault in fresh pages) per chunk.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// Idle buffers of one size, up to a maximum count.
#[derive(Debug)]
pub struct BufferPool {
    size: usize,
    max_idle: usize,
    idle: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A pool of `size`-byte buffers keeping at most `max_idle` for reuse.
    pub fn new(size: usize, max_idle: usize) -> Arc<Self> {
        Arc::new(BufferPool {
            size: size.max(1),
            max_idle,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Size in bytes of every buffer from this pool.
    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// Number of buffers waiting for reuse.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// Takes a buffer (reused when one is idle); it returns to the pool on drop.
    pub fn take(self: &Arc<Self>) -> PoolBuf {
        let reused = self.idle.lock().ok().and_then(|mut v| v.pop());
        let buf = reused.unwrap_or_else(|| vec![0u8; self.size]);
        PoolBuf {
            buf,
            pool: Arc::clone(self),
        }
    }
}

/// A buffer on loan from a [`BufferPool`]; always `buffer_size()` long.
#[derive(Debug)]
pub struct PoolBuf {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if let Ok(mut idle) = self.pool.idle.lock() {
            if idle.len() < self.pool.max_idle && buf.len() == self.pool.size {
                idle.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_up_to_the_limit() {
        let pool = BufferPool::new(1024, 1);
        let mut a = pool.take();
        a[0] = 9;
        let ptr = a.as_ptr();
        let b = pool.take();
        drop(a);
        drop(b);
        assert_eq!(pool.idle_count(), 1);
        let c = pool.take();
        assert_eq!(c.len(), 1024);
        assert!(c.as_ptr() == ptr || c[0] == 0);
    }
}
