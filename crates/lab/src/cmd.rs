//! Running external tools (`ip`, `tc`, `ss`, peers) with errors that say what failed.

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Runs `prog args...`, returns its stdout; a non-zero exit is an error carrying stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {prog} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            prog,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`run`] but ignores failure (cleanup of things that may not exist).
pub fn run_quiet(prog: &str, args: &[&str]) {
    let _ = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs a shell snippet with `sh -c`.
pub fn sh(script: &str) -> Result<String> {
    run("sh", &["-c", script])
}

/// True when `prog` is found on PATH.
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}
