//! Listing a remote tree for `sluice get -r` / `put -r`: one MLSD (or,
//! without MLSD, `LIST -a`) at a time in MODE S, or a level's MLSDs
//! pipelined on a kept MODE E connection ([`Lister`], `ftp_kept`).

use super::ftp::{remote_join, MAX_LISTING};
use super::ftp_kept::{self, KeptChannel};
use super::plan;
use crate::error::{ClientError, Result};
use crate::ftp::control::{refused, Control};
use crate::ftp::{data, session};
use crate::url::FtpUrl;

/// Reads the MLSD listing of `path`.
pub(super) fn mlsd(ctl: &mut Control, path: &str) -> Result<Vec<u8>> {
    read_listing(ctl, "MLSD", path)
}

/// The entries of directory `path`: MLSD, or, from a server without it
/// (vsftpd: `500 Unknown command`), `LIST -a` read as `ls -l` lines.
/// `no_mlsd` remembers the answer for the next directories.
pub(super) fn list_entries(
    ctl: &mut Control,
    path: &str,
    no_mlsd: &mut bool,
) -> Result<Vec<plan::Entry>> {
    if !*no_mlsd {
        match mlsd(ctl, path) {
            Ok(raw) => return plan::parse_mlsd(&raw).map_err(ClientError::Protocol),
            Err(ClientError::Refused { what, .. }) if what.starts_with("MLSD (") => {
                tracing::info!("the server has no MLSD: listing with LIST");
                *no_mlsd = true;
            }
            Err(e) => return Err(e),
        }
    }
    let raw = read_listing(ctl, "LIST -a", path)?;
    plan::parse_list(&raw).map_err(ClientError::Protocol)
}

/// Runs listing command `verb` on `path` and reads its data.
fn read_listing(ctl: &mut Control, verb: &str, path: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let to = data::passive(ctl)?;
    let mut sock = ctl.data_sock(data::connect(to, ctl.timeout())?)?;
    let first = ctl.cmd(&format!("{verb} {path}"))?;
    if verb == "MLSD" && crate::ftp::control::is_unsupported(first.code) {
        return Err(ClientError::Refused {
            what: "MLSD (a tree transfer needs RFC 3659 machine listings)".into(),
            reply: crate::ftp::control::one_line(&first),
        });
    }
    if !first.code.is_preliminary() {
        return Err(refused(&format!("{verb} {}", plan::shown(path)), &first));
    }
    let _ = sock.tcp().set_read_timeout(Some(ctl.timeout()));
    let mut raw = Vec::new();
    (&mut sock)
        .take(MAX_LISTING as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| ClientError::net(format!("read {verb} listing"), e))?;
    drop(sock);
    if raw.len() > MAX_LISTING {
        return Err(ClientError::Protocol(format!(
            "{verb} listing of {} is larger than {MAX_LISTING} bytes",
            plan::shown(path)
        )));
    }
    let last = ctl.read_reply()?;
    if !last.code.is_completion() {
        return Err(refused(verb, &last));
    }
    Ok(raw)
}

/// Lists directories on the tree's control connection: pipelined on a
/// kept MODE E channel when the server is a GridFTP one (FEAT
/// `PARALLEL`) in clear, else one MLSD (or LIST) at a time.
pub(super) struct Lister {
    kept: Option<KeptChannel>,
}

impl Lister {
    pub(super) fn new(ctl: &mut Control) -> Result<Lister> {
        let feat = session::features(ctl)?.unwrap_or_default();
        let gridftp = feat
            .iter()
            .any(|l| l.split_whitespace().next() == Some("PARALLEL"));
        Ok(Lister {
            kept: (gridftp && !ctl.is_tls()).then(KeptChannel::default),
        })
    }

    /// The MLSD listings of the directories `rels` under `u`'s path, in
    /// their order; `None`: list them one at a time ([`list_entries`]).
    pub(super) fn list_level(
        &mut self,
        ctl: &mut Control,
        u: &FtpUrl,
        rels: &[String],
    ) -> Result<Option<Vec<Result<Vec<u8>>>>> {
        let Some(kept) = self.kept.as_mut() else {
            return Ok(None);
        };
        let paths: Vec<String> = rels.iter().map(|r| remote_join(&u.path, r)).collect();
        ftp_kept::list_many(ctl, kept, &paths, MAX_LISTING)
    }
}
