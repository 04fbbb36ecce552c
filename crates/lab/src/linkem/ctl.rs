//! The control socket: a Unix stream socket taking one command per line.
//!
//! - `set ab|ba|both key=value ...` changes link parameters (see `LinkParams::set`)
//! - `show` prints the parameters of both directions as JSON
//! - `stats` prints the counters of both directions as JSON
//!
//! Every command gets one line back: `ok`, a JSON object, or `error: ...`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::forward::Shared;

/// Longest command line accepted.
const MAX_LINE: usize = 4096;

/// Serves the control socket at `path` forever (run it on its own thread).
pub fn serve(path: &Path, ab: Arc<Shared>, ba: Arc<Shared>) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .with_context(|| format!("binding control socket {}", path.display()))?;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let (ab, ba) = (ab.clone(), ba.clone());
        std::thread::spawn(move || {
            let _ = handle(conn, &ab, &ba);
        });
    }
    Ok(())
}

fn handle(conn: UnixStream, ab: &Shared, ba: &Shared) -> Result<()> {
    let mut w = conn.try_clone()?;
    let reader = BufReader::new(conn);
    for line in reader.lines() {
        let line = line?;
        let reply = if line.len() > MAX_LINE {
            "error: line too long".to_string()
        } else {
            match command(&line, ab, ba) {
                Ok(r) => r,
                Err(e) => format!("error: {e:#}"),
            }
        };
        writeln!(w, "{reply}")?;
    }
    Ok(())
}

/// Executes one command line and returns the reply line.
pub fn command(line: &str, ab: &Shared, ba: &Shared) -> Result<String> {
    let mut words = line.trim().splitn(2, char::is_whitespace);
    match words.next().unwrap_or("") {
        "set" => {
            let rest = words.next().unwrap_or("").trim();
            let (dir, settings) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let targets: Vec<&Shared> = match dir {
                "ab" => vec![ab],
                "ba" => vec![ba],
                "both" => vec![ab, ba],
                _ => bail!("set needs a direction: ab, ba or both"),
            };
            // Validate once before touching anything, so a bad line changes nothing.
            let mut probe = super::LinkParams::default();
            probe.apply(settings)?;
            for t in targets {
                t.update(|p| p.apply(settings))?;
            }
            Ok("ok".into())
        }
        "show" => {
            let a = ab
                .params
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .clone();
            let b = ba
                .params
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .clone();
            Ok(serde_json::json!({"ab": a, "ba": b}).to_string())
        }
        "stats" => {
            let a = ab
                .stats
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .clone();
            let b = ba
                .stats
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .clone();
            Ok(serde_json::json!({"ab": a, "ba": b}).to_string())
        }
        other => bail!("unknown command {other:?} (set, show, stats)"),
    }
}

/// Sends one command to a running linkem and returns its reply line.
pub fn send(path: &Path, cmd: &str) -> Result<String> {
    let mut s = UnixStream::connect(path)
        .with_context(|| format!("connecting to linkem at {}", path.display()))?;
    writeln!(s, "{cmd}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    let line = line.trim().to_string();
    if let Some(e) = line.strip_prefix("error: ") {
        bail!("linkem: {e}");
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linkem::LinkParams;
    use std::time::Duration;

    #[test]
    fn set_changes_only_the_named_direction() {
        let ab = Shared::new(LinkParams::default());
        let ba = Shared::new(LinkParams::default());
        assert_eq!(command("set ab delay=5ms", &ab, &ba).unwrap(), "ok");
        assert_eq!(ab.params.lock().unwrap().delay, Duration::from_millis(5));
        assert_eq!(ba.params.lock().unwrap().delay, Duration::ZERO);
        command("set both rate=10mbit", &ab, &ba).unwrap();
        assert_eq!(ba.params.lock().unwrap().rate_bps, 10_000_000);
        assert!(command("set sideways delay=1ms", &ab, &ba).is_err());
        assert!(command("set ab delay=1ms bogus=3", &ab, &ba).is_err());
        // The bad line above changed nothing.
        assert_eq!(ab.params.lock().unwrap().delay, Duration::from_millis(5));
        assert!(command("show", &ab, &ba).unwrap().contains("\"ab\""));
    }
}
