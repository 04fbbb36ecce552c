//! `sluice ls ftp://...`: LIST (or NLST with `-1`) over one passive MODE S
//! connection, copied to stdout.

use std::io::Write;
use std::time::Duration;

use super::control::refused;
use super::{data, session};
use crate::cli::LsArgs;
use crate::error::{ClientError, Result};
use crate::url::FtpUrl;

/// Runs one listing.
pub fn run(u: &FtpUrl, a: &LsArgs) -> Result<()> {
    let timeout = Duration::from_secs(a.timeout);
    let mut ctl = session::open(u, timeout)?;
    let to = data::passive(&mut ctl)?;
    let mut sock = data::connect(to, timeout)?;
    let verb = if a.names { "NLST" } else { "LIST" };
    let first = ctl.cmd(&format!("{verb} {}", u.path))?;
    if !first.code.is_preliminary() {
        return Err(refused(verb, &first));
    }
    let _ = sock.set_read_timeout(Some(timeout));
    let mut out = std::io::stdout().lock();
    std::io::copy(&mut sock, &mut out).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            ClientError::BrokenPipe
        } else {
            ClientError::net("read listing", e)
        }
    })?;
    out.flush()
        .map_err(|e| ClientError::local("write to stdout", e))?;
    drop(sock);
    let last = ctl.read_reply()?;
    if !last.code.is_completion() {
        return Err(refused(verb, &last));
    }
    ctl.quit();
    Ok(())
}
