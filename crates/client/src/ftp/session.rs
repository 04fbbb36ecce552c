//! Steps shared by get, put and ls: log in, pick MODE E or S, SIZE, CKSM.

use std::time::Duration;

use super::control::{is_unsupported, refused, Control};
use crate::checksum::{self, Algorithm};
use crate::error::{ClientError, Result};
use crate::url::FtpUrl;

/// Connects and logs in.
pub fn open(u: &FtpUrl, timeout: Duration) -> Result<Control> {
    let mut ctl = Control::connect(u, timeout)?;
    ctl.login(&u.user, &u.password)?;
    Ok(ctl)
}

/// Switches to MODE E if the server takes it; `false` means stay in MODE S.
/// (vsftpd answers 504, servers without GridFTP 500/502.)
pub fn try_mode_e(ctl: &mut Control) -> Result<bool> {
    let r = ctl.cmd("MODE E")?;
    if r.code.is_completion() {
        return Ok(true);
    }
    if r.code.is_failure() || is_unsupported(r.code) {
        return Ok(false);
    }
    Err(refused("MODE E", &r))
}

/// The server's size of `path` (SIZE, RFC 3659), if it will say.
pub fn size(ctl: &mut Control, path: &str) -> Result<Option<u64>> {
    let r = ctl.cmd(&format!("SIZE {path}"))?;
    if r.code.0 != 213 {
        return Ok(None);
    }
    r.text().trim().parse::<u64>().map(Some).map_err(|_| {
        ClientError::Protocol(format!(
            "SIZE reply `{}` is not a number",
            super::control::printable(r.text())
        ))
    })
}

/// Asks the server for a checksum of `path`, trying the algorithms we
/// know in order of strength: `CKSM <algo> 0 -1 <path>` (GridFTP).
pub fn server_checksum(ctl: &mut Control, path: &str) -> Result<(Algorithm, String)> {
    server_checksum_of(ctl, path, 0, None)
}

/// [`server_checksum`] of `len` bytes from `offset` (`None`: to the end):
/// `CKSM <algo> <offset> <len|-1> <path>`.
pub fn server_checksum_of(
    ctl: &mut Control,
    path: &str,
    offset: u64,
    len: Option<u64>,
) -> Result<(Algorithm, String)> {
    let mut last = String::from("the server has no CKSM command");
    let len = len.map_or_else(|| "-1".to_string(), |l| l.to_string());
    for algo in checksum::ALGORITHMS {
        let r = ctl.cmd(&format!("CKSM {} {offset} {len} {path}", algo.name()))?;
        if r.code.0 == 213 {
            let hex = r.text().trim().to_ascii_lowercase();
            // Some servers print ADLER32 without leading zeros.
            let padded = if algo == Algorithm::Adler32 && hex.len() < 8 {
                format!("{hex:0>8}")
            } else {
                hex.clone()
            };
            if !algo.plausible(&padded) {
                return Err(ClientError::Protocol(format!(
                    "CKSM {} answer `{}` is not a {} checksum",
                    algo.name(),
                    super::control::printable(&hex),
                    algo.name()
                )));
            }
            return Ok((algo, padded));
        }
        last = format!("CKSM {}: {}", algo.name(), super::control::one_line(&r));
        if !r.code.is_failure() {
            break;
        }
    }
    Err(ClientError::NoChecksum(last))
}

/// `--verify`: compares the server's checksum of `remote` with `local`.
pub fn verify(ctl: &mut Control, remote: &str, local: &std::path::Path) -> Result<String> {
    let (algo, server) = server_checksum(ctl, remote)?;
    let mine = checksum::file(local, algo)
        .map_err(|e| ClientError::local(format!("checksum {}", local.display()), e))?;
    if checksum::same(&server, &mine) {
        Ok(format!("{} {mine}", algo.name()))
    } else {
        Err(ClientError::ChecksumMismatch {
            algo: algo.name().into(),
            server,
            local: mine,
            advice: String::new(),
        })
    }
}

/// The server's FEAT lines (RFC 2389), upper-cased; `None` if it has no FEAT.
pub fn features(ctl: &mut Control) -> Result<Option<Vec<String>>> {
    features_after(ctl, &[])
}

/// [`features`] with the commands `before` (each must succeed: `TYPE I`)
/// sent in the same round trip: a tree worker's setup costs one round
/// trip, not one per command.
pub fn features_after(ctl: &mut Control, before: &[&str]) -> Result<Option<Vec<String>>> {
    let mut lines = before.to_vec();
    lines.push("FEAT");
    ctl.send_lines(&lines)?;
    let mut failed = None;
    for line in before {
        let r = ctl.read_reply()?;
        if !r.code.is_completion() && failed.is_none() {
            failed = Some(refused(line, &r));
        }
    }
    let r = ctl.read_reply()?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(parse_features(&r))
}

/// The lines of a FEAT reply, upper-cased; `None` if it is not `211`.
pub fn parse_features(r: &sluice_ftp::reply::Reply) -> Option<Vec<String>> {
    if r.code.0 != 211 {
        return None;
    }
    Some(
        r.lines
            .iter()
            .skip(1)
            .take(r.lines.len().saturating_sub(2))
            .map(|l| l.trim().to_ascii_uppercase())
            .collect(),
    )
}

/// `--verify` up front: fail before moving any data if the server's FEAT
/// shows it has no CKSM (vsftpd, most plain FTP servers).
pub fn require_cksm(ctl: &mut Control) -> Result<()> {
    match features(ctl)? {
        Some(f) if !f.iter().any(|l| l.starts_with("CKSM")) => Err(ClientError::NoChecksum(
            "the server does not offer CKSM (not in FEAT)".into(),
        )),
        _ => Ok(()),
    }
}
