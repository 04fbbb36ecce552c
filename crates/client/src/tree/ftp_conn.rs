//! A tree worker's connection ([`Conn`]) and its login: USER, PASS,
//! TYPE I, FEAT and, for a GridFTP server, the kept MODE E channel's
//! set-up (MODE E with PORT for downloads, with EPSV and the data
//! connection for uploads) in one round trip after the greeting.

use std::time::Duration;

use super::ftp_kept::KeptChannel;
use super::ftp_kept_put::KeptUpload;
use crate::error::{ClientError, Result};
use crate::ftp::control::{refused, Control};
use crate::ftp::{data, session};
use crate::url::FtpUrl;

/// A worker's connection: logged in, TYPE I, MODE E when `-p N` > 1 and
/// the server has it.
pub(super) struct Conn {
    pub(super) ctl: Control,
    pub(super) extended: bool,
    pub(super) mfmt: bool,
    /// The server lists EPSV in FEAT: the next file's `EPSV` and `RETR`
    /// may go out before the current file's final reply (pipelining).
    pub(super) epsv: bool,
    /// The server lists GridFTP's `PARALLEL` in FEAT: it has MODE E (and
    /// a plain FTP server that answers 200 to anything is not asked).
    pub(super) gridftp: bool,
    /// The remote path whose `EPSV` + `RETR` are sent and not yet
    /// answered: the next replies on the control connection are theirs.
    pub(super) pending: Option<String>,
    /// A passive address the server opened for the next upload (its
    /// `EPSV` went out with the last upload's end): no round trip for it.
    pub(super) next_passive: Option<std::net::SocketAddr>,
    /// Read buffer of inline downloads, kept for the connection's files.
    pub(super) buf: Vec<u8>,
    /// Small files' MODE E channel kept open between files.
    pub(super) kept: KeptChannel,
    /// Uploads' MODE E channel kept open between files.
    pub(super) up: super::ftp_kept_put::KeptUpload,
}

/// What a worker connection is opened for: its kept MODE E channel is
/// set up with the login when the server turns out to be a GridFTP one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prepare {
    /// Nothing beyond the login (TYPE I, FEAT).
    Nothing,
    /// MODE E and PORT: `get -r`'s kept channel.
    Get,
    /// MODE E, EPSV and the data connection: `put -r`'s kept channel.
    Put,
}

/// A worker's connection, its channel set up as `prep` says. MODE E
/// goes out before FEAT's answer is in: a server that takes it but has
/// no `PARALLEL` is put back in MODE S, one that refuses it is noted.
pub(super) fn open_for(
    u: &FtpUrl,
    parallel: u32,
    timeout: Duration,
    prep: Prepare,
) -> Result<Conn> {
    let mut ctl = Control::connect(u, timeout)?;
    let prep = match parallel <= 1 && !ctl.is_tls() {
        true => prep,
        false => Prepare::Nothing,
    };
    let mut after = vec!["TYPE I".to_string(), "FEAT".to_string()];
    let mut listener = None;
    match prep {
        Prepare::Nothing => {}
        Prepare::Get => {
            // PORT needs our address: IPv4 only here (EPRT goes the
            // usual way later).
            let l = std::net::TcpListener::bind(std::net::SocketAddr::new(ctl.local.ip(), 0))
                .map_err(|e| ClientError::net("listen for data connections", e))?;
            let me = l
                .local_addr()
                .map_err(|e| ClientError::net("listen for data connections", e))?;
            after.push("MODE E".into());
            if let std::net::SocketAddr::V4(v4) = me {
                after.push(format!("PORT {}", sluice_ftp::addr::format_port(v4)));
                listener = Some(l);
            }
        }
        Prepare::Put => {
            after.push("MODE E".into());
            after.push("EPSV".into());
        }
    }
    let lines: Vec<&str> = after.iter().map(String::as_str).collect();
    let replies = ctl.login_pipelined(&u.user, &u.password, &lines)?;
    if !replies[0].code.is_completion() {
        return Err(refused("TYPE I", &replies[0]));
    }
    let feat = session::parse_features(&replies[1]).unwrap_or_default();
    let has = |name: &str| {
        feat.iter()
            .any(|l| l.split_whitespace().next() == Some(name))
    };
    let (mfmt, epsv, gridftp) = (has("MFMT"), has("EPSV"), has("PARALLEL"));
    let mut kept = KeptChannel::default();
    let mut up = KeptUpload::default();
    if prep != Prepare::Nothing {
        let mode_e = replies[2].code.is_completion();
        if mode_e && !gridftp {
            ctl.expect_ok("MODE S", "MODE S")?;
        }
        let usable = mode_e && gridftp;
        match prep {
            Prepare::Get => {
                let ported = replies.get(3).is_some_and(|r| r.code.is_completion());
                kept = KeptChannel::set_up(usable, listener.filter(|_| ported));
            }
            Prepare::Put => {
                let to = match (usable, replies[3].code.0) {
                    (true, 229) => sluice_ftp::addr::parse_229(replies[3].text())
                        .ok()
                        .map(|port| std::net::SocketAddr::new(ctl.peer.ip(), port)),
                    _ => None,
                };
                // Connected now, while the tree's directories are made:
                // the first STOR goes out on it at once.
                let sock = match to {
                    Some(a) => Some(data::connect(a, ctl.timeout())?),
                    None => None,
                };
                up = KeptUpload::set_up(usable, sock, ctl.timeout());
            }
            Prepare::Nothing => {}
        }
    }
    let extended = parallel > 1 && session::try_mode_e(&mut ctl)?;
    Ok(Conn {
        ctl,
        extended,
        mfmt,
        epsv,
        gridftp,
        pending: None,
        next_passive: None,
        buf: Vec::new(),
        kept,
        up,
    })
}
