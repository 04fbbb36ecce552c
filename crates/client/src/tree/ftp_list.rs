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
        // FEAT and, in case the server is a GridFTP one, what a pipelined
        // MODE E listing needs (TYPE I, MODE E, PORT), in one round trip.
        ctl.send("FEAT")?;
        let listen = match ctl.is_tls() {
            false => Some(listing_setup(ctl)?),
            true => None,
        };
        let feat = session::parse_features(&ctl.read_reply()?).unwrap_or_default();
        let kept = match listen {
            Some(l) => Some(listing_replies(ctl, l)?),
            None => None,
        };
        let gridftp = feat
            .iter()
            .any(|l| l.split_whitespace().next() == Some("PARALLEL"));
        let kept = match kept {
            Some(k) if gridftp => Some(k),
            Some(k) if k.in_mode_e() => {
                // It took MODE E but is no GridFTP server: MODE S listings.
                ctl.expect_ok("MODE S", "MODE S")?;
                None
            }
            _ => None,
        };
        Ok(Lister { kept })
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

/// Sends `TYPE I`, `MODE E` and (IPv4) `PORT` for a pipelined listing
/// on a kept MODE E channel, without reading their replies
/// ([`listing_replies`]): the listener.
pub(super) fn listing_setup(ctl: &mut Control) -> Result<(std::net::TcpListener, bool)> {
    let ip = ctl.local.ip();
    let l = std::net::TcpListener::bind(std::net::SocketAddr::new(ip, 0))
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    let me = l
        .local_addr()
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    ctl.send("TYPE I")?;
    ctl.send("MODE E")?;
    let port = match me {
        std::net::SocketAddr::V4(v4) => {
            ctl.send(&format!("PORT {}", sluice_ftp::addr::format_port(v4)))?;
            true
        }
        std::net::SocketAddr::V6(_) => false,
    };
    Ok((l, port))
}

/// The replies to [`listing_setup`]'s commands: the kept channel (MODE E
/// refused: one that says so; PORT refused: the listing asks again).
pub(super) fn listing_replies(
    ctl: &mut Control,
    (l, port): (std::net::TcpListener, bool),
) -> Result<KeptChannel> {
    let t = ctl.read_reply()?;
    let m = ctl.read_reply()?;
    let p = match port {
        true => Some(ctl.read_reply()?),
        false => None,
    };
    if !t.code.is_completion() {
        return Err(crate::ftp::control::refused("TYPE I", &t));
    }
    let ported = p.is_some_and(|p| p.code.is_completion());
    Ok(KeptChannel::set_up(
        m.code.is_completion(),
        ported.then_some(l),
    ))
}
