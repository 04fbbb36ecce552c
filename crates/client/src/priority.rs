//! `--drain-priority`: raise the calling thread's scheduling priority.
//!
//! nix 0.29 has no `setpriority`, and only crates/platform may call libc
//! directly, so this asks `renice(1)` to change the thread (Linux applies
//! `setpriority(PRIO_PROCESS, tid)` to one thread). A platform helper would
//! do it without a process; until then this is the safe way.

use std::process::Command;

/// Nice value asked for. -10 puts the drain thread well ahead of ordinary
/// work without starving the system.
const NICE: i32 = -10;

/// Raises the current thread's priority; the error says why it could not.
pub fn raise_current_thread() -> Result<(), String> {
    let tid = nix::unistd::gettid();
    let out = Command::new("renice")
        .args(["-n", &NICE.to_string(), "-p", &tid.to_string()])
        .output()
        .map_err(|e| format!("cannot run renice: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "renice failed (needs root or CAP_SYS_NICE): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
