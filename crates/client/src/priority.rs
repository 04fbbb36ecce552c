//! `--drain-priority`: raise the drain thread's scheduling priority, so a
//! loaded receiver keeps draining its sockets (receiver-bottleneck paper).

/// Nice value asked for. -10 puts the drain thread well ahead of ordinary
/// work without starving the system.
const NICE: i32 = -10;

/// Raises the current thread's priority; the error says why it could not.
pub fn raise_current_thread() -> Result<(), String> {
    sluice_platform::thread::set_current_thread_nice(NICE).map_err(|e| {
        format!("cannot set nice {NICE} on the drain thread (needs root or CAP_SYS_NICE): {e}")
    })
}

/// Says once per process that the priority could not be raised (a
/// download may start many drain threads).
pub fn note_refused(why: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("sluice: --drain-priority: {why}"));
}
