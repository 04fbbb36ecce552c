//! Process-wide allocator settings.

/// Serves every allocation of at least `bytes` from a mapping of its own,
/// given back to the kernel when freed. glibc otherwise raises this
/// threshold by itself each time a large block is freed (up to 32 MiB), and
/// from then on 1 MiB read buffers and argon2's 19 MiB blocks come from
/// heap arenas that are rarely returned: after a burst of stalled clients
/// or failed logins the server kept holding gigabytes (outside probe,
/// 2026-11-22). Returns false where the allocator refused or is not glibc.
pub fn return_large_allocations(bytes: usize) -> bool {
    #[cfg(target_env = "gnu")]
    {
        let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes allocator parameters; it takes no
        // pointers and is safe to call at any time.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = bytes;
        false
    }
}

/// Gives memory the allocator holds free back to the kernel (glibc's
/// `malloc_trim(0)`: the top of each heap and whole free pages inside
/// them). Costs a walk of the heaps; for after a burst of connections
/// has gone, not for every free. Returns false where there is no such
/// call or nothing was returned.
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes no pointers and only releases memory
        // the allocator itself holds free; it is thread-safe.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_accepted() {
        if cfg!(target_env = "gnu") {
            assert!(return_large_allocations(256 << 10));
            // A large block now round-trips through its own mapping.
            drop(vec![1u8; 4 << 20]);
        }
    }
}
