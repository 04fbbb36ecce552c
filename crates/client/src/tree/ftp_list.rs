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
use sluice_ftp::reply::Reply;

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

/// The MLSD facts a tree job reads (RFC 3659 7.9), asked for with its
/// login: a line is about a third shorter without `perm`, `UNIX.mode`
/// and the like, and the listings of a level on a new data connection
/// are past its initial window sooner (an answer other than 200 changes
/// nothing: the server lists what it lists).
pub(super) const LISTING_FACTS: &str = "OPTS MLST type;size;modify;";

/// Lists directories on the tree's control connection: pipelined on a
/// kept MODE E channel when the server is a GridFTP one (FEAT
/// `PARALLEL`) in clear, else one MLSD (or LIST) at a time.
pub(super) struct Lister {
    kept: Option<KeptChannel>,
}

impl Lister {
    /// Logs in on `ctl` (connected) with FEAT and, in case the server is
    /// a GridFTP one, what a pipelined MODE E listing needs (TYPE I, MODE
    /// E, PORT), all in one round trip after the greeting. The MLSD of
    /// `u`'s own directory goes out with them (behind the PORT, before
    /// the server is known): its listing, when it came whole, is the
    /// second value, a round trip sooner than a listing asked for after
    /// the login. (Refused or not sent: `None`, and the directory is
    /// listed the usual way, which says why or falls back to LIST.)
    pub(super) fn login(ctl: &mut Control, u: &FtpUrl) -> Result<(Lister, Option<Vec<u8>>)> {
        let setup = match ctl.is_tls() {
            false => Some(listing_setup(ctl)?),
            true => None,
        };
        let mut after = vec!["FEAT"];
        if let Some((_, lines)) = &setup {
            after.extend(lines.iter().map(String::as_str));
        }
        // After the set-up, whose replies are read by place.
        after.push(LISTING_FACTS);
        let set_up = 1..1 + setup.as_ref().map_or(0, |(_, lines)| lines.len());
        // Only behind a PORT (IPv4: EPRT's answer is read before) and to
        // a server that greets as a GridFTP one.
        let ahead =
            ctl.greets_as_gridftp() && matches!(&setup, Some((_, lines)) if lines.len() == 3);
        let top = remote_join(&u.path, "");
        let then: Vec<String> = match ahead {
            true => vec![format!("MLSD {top}")],
            false => Vec::new(),
        };
        let replies = ctl.login_pipelined_then(&u.user, &u.password, &after, &then)?;
        let feat = session::parse_features(&replies[0]).unwrap_or_default();
        let (kept, listed) = match setup {
            Some((l, _)) if ahead => {
                let mut k = speculative_channel(l, &replies[set_up])?;
                let sent = ftp_kept::read_sent(ctl, &mut k, &[top], MAX_LISTING)?;
                let listed = sent.into_iter().next().flatten().and_then(|r| r.ok());
                (Some(k), listed)
            }
            Some((l, _)) => (Some(listing_channel(l, &replies[set_up])?), None),
            None => (None, None),
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
        Ok((Lister { kept }, listed))
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

/// The commands a pipelined listing on a kept MODE E channel needs
/// (`TYPE I`, `MODE E` and, on IPv4, `PORT`), to go out with others, and
/// the listener PORT names ([`listing_channel`] reads their replies).
pub(super) fn listing_setup(ctl: &Control) -> Result<(std::net::TcpListener, Vec<String>)> {
    let ip = ctl.local.ip();
    let l = std::net::TcpListener::bind(std::net::SocketAddr::new(ip, 0))
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    let me = l
        .local_addr()
        .map_err(|e| ClientError::net("listen for data connections", e))?;
    let mut lines = vec!["TYPE I".to_string(), "MODE E".to_string()];
    if let std::net::SocketAddr::V4(v4) = me {
        lines.push(format!("PORT {}", sluice_ftp::addr::format_port(v4)));
    }
    Ok((l, lines))
}

/// The kept channel from the replies to [`listing_setup`]'s commands
/// (MODE E refused: one that says so; PORT refused or not sent: the
/// listing asks again).
pub(super) fn listing_channel(l: std::net::TcpListener, replies: &[Reply]) -> Result<KeptChannel> {
    let (Some(t), Some(m)) = (replies.first(), replies.get(1)) else {
        return Err(ClientError::Bug("listing set-up replies missing".into()));
    };
    if !t.code.is_completion() {
        return Err(refused("TYPE I", t));
    }
    let ported = replies.get(2).is_some_and(|p| p.code.is_completion());
    Ok(KeptChannel::set_up(
        m.code.is_completion(),
        ported.then_some(l),
    ))
}

/// [`listing_channel`] for MLSDs sent behind the set-up before its
/// answers: the listener stays whatever the server said to MODE E.
pub(super) fn speculative_channel(
    l: std::net::TcpListener,
    replies: &[Reply],
) -> Result<KeptChannel> {
    let (Some(t), Some(m)) = (replies.first(), replies.get(1)) else {
        return Err(ClientError::Bug("listing set-up replies missing".into()));
    };
    if !t.code.is_completion() {
        return Err(refused("TYPE I", t));
    }
    Ok(KeptChannel::speculative(m.code.is_completion(), l))
}
