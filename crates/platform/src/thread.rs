//! Per-thread scheduling knobs.
//!
//! The receiver-bottleneck paper shows a loaded receiver that stops draining
//! its socket delays ACKs and inflates RTT; the client can lift its drain
//! thread above other work with a lower nice value.

use std::io;

use crate::sys::cvt;

/// Sets the nice value of the calling thread only.
///
/// Linux applies `setpriority(PRIO_PROCESS, tid)` to a single thread, not the
/// whole process. Lowering the value below the current one needs root or
/// CAP_SYS_NICE; the kernel's EACCES/EPERM comes back unchanged.
pub fn set_current_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain integer arguments; PRIO_PROCESS with a thread id is the
    // documented per-thread form on Linux.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) })?;
    Ok(())
}

/// Returns the nice value of the calling thread.
pub fn current_thread_nice() -> io::Result<i32> {
    // SAFETY: see above.
    let tid = unsafe { libc::gettid() };
    // getpriority can legitimately return -1, so errno is cleared first and
    // checked after, as getpriority(2) prescribes.
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: plain integer arguments.
    let v = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    let err = io::Error::last_os_error();
    if v == -1 && err.raw_os_error().unwrap_or(0) != 0 {
        return Err(err);
    }
    Ok(v)
}

/// Time the calling thread has spent runnable but waiting for a CPU (the
/// second field of `/proc/thread-self/schedstat`, Linux with
/// `CONFIG_SCHED_INFO`): how long the scheduler kept it from running.
pub fn current_thread_run_delay() -> io::Result<std::time::Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    parse_run_delay(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected schedstat format"))
}

/// The run-queue wait of a `schedstat` line (`run_ns wait_ns slices`).
pub fn parse_run_delay(text: &str) -> Option<std::time::Duration> {
    let ns = text.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_nice_affects_only_this_thread() {
        let main_before = current_thread_nice().unwrap();
        let child = std::thread::spawn(|| {
            let before = current_thread_nice().unwrap();
            // Raising the nice value (lowering priority) is always allowed.
            set_current_thread_nice(before + 1).unwrap();
            current_thread_nice().unwrap() - before
        })
        .join()
        .unwrap();
        assert_eq!(child, 1);
        assert_eq!(current_thread_nice().unwrap(), main_before);
    }

    #[test]
    fn run_delay_is_read_from_schedstat() {
        assert_eq!(
            parse_run_delay("153749117 339887264 76\n"),
            Some(std::time::Duration::from_nanos(339_887_264))
        );
        assert_eq!(parse_run_delay("12"), None);
        // Where the kernel has it, it is there for this thread.
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            current_thread_run_delay().unwrap();
        }
    }
}
