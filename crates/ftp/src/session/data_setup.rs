//! The data side of the session: PASV/EPSV and PORT/EPRT, and the
//! transfer commands (LIST/NLST/MLSD, RETR/ERET, STOR/APPE/ESTO) turned
//! into a data specification and the action that starts the transfer.

use std::net::SocketAddr;

use super::dispatch::{canonical, strip_ls_flags};
use super::{
    Action, DataSetup, ListFormat, ListMatch, NamePattern, Session, State, StoreKind, Transfer,
};
use crate::reply::ReplyCode as C;

impl Session {
    /// IP family number as RFC 2428 writes it.
    pub(super) fn family(&self) -> u8 {
        if self.config.local_addr.is_ipv4() {
            1
        } else {
            2
        }
    }

    pub(super) fn passive(&mut self, extended: bool) {
        if self.epsv_all && !extended {
            self.reply(C::BAD_SEQUENCE, "EPSV ALL in effect; use EPSV.");
            return;
        }
        self.state = State::AwaitPassive { extended };
        self.drop_kept();
        self.actions.push_back(Action::OpenPassive { extended });
    }

    pub(super) fn active(&mut self, addr: SocketAddr) {
        if self.epsv_all {
            self.reply(C::BAD_SEQUENCE, "EPSV ALL in effect; use EPSV.");
            return;
        }
        let foreign_ok = self.login.is_some_and(|l| l.allow_foreign_data_host);
        let same_host = canonical(addr) == canonical(self.config.peer_addr);
        // vsftpd's rule: no FTP bounce. Data goes to the control peer, to
        // an unprivileged port; third-party transfers lift only the host rule.
        if (!foreign_ok && !same_host) || addr.port() < 1024 {
            self.reply(
                C::BAD_ARGUMENTS,
                "Data connection only to your own address, port >= 1024.",
            );
            return;
        }
        if self.data == DataSetup::Passive {
            self.actions.push_back(Action::ClosePassive);
        }
        // A new PORT, even to the same address, is a new listener on the
        // client's side: what we kept was connected to the old one.
        self.drop_kept();
        self.data = DataSetup::Active(addr);
        self.reply(C::OK, "PORT command successful. Consider using PASV.");
    }

    pub(super) fn list(&mut self, arg: Option<String>, format: ListFormat) {
        let arg = arg.as_deref().map(strip_ls_flags).unwrap_or("");
        let Some(path) = self.resolve(arg) else {
            return;
        };
        let matching = match self.list_match(arg, format) {
            Ok(m) => m,
            Err(()) => return,
        };
        self.transfer(|data| Action::List {
            path,
            format,
            data,
            matching,
        });
    }

    /// LIST/NLST of `dir/pattern` with a wildcard in the last component
    /// (MLSD names a directory, RFC 3659 7.1, and takes none).
    pub(super) fn list_match(
        &mut self,
        arg: &str,
        format: ListFormat,
    ) -> Result<Option<ListMatch>, ()> {
        let (prefix, last) = match arg.rfind('/') {
            Some(i) => arg.split_at(i + 1),
            None => ("", arg),
        };
        let pattern = if matches!(format, ListFormat::Machine(_)) {
            return Ok(None);
        } else if crate::glob::is_glob(last) {
            crate::glob::Glob::new(last).map_or(NamePattern::TooLong, NamePattern::Glob)
        } else if format == ListFormat::Names && !prefix.is_empty() {
            NamePattern::Exact
        } else {
            return Ok(None);
        };
        let dir = self.resolve(prefix).ok_or(())?.without_dir_flag();
        Ok(Some(ListMatch {
            dir,
            pattern,
            prefix: prefix.to_string(),
        }))
    }

    pub(super) fn retr(
        &mut self,
        arg: &str,
        offset: u64,
        len: Option<u64>,
        skip: Vec<std::ops::Range<u64>>,
    ) {
        let Some(path) = self.resolve(arg) else {
            return;
        };
        self.transfer(|data| Action::StartRetr {
            path,
            offset,
            len,
            skip,
            data,
        });
    }

    pub(super) fn stor(&mut self, arg: &str, kind: StoreKind) {
        let Some(path) = self.writable_target(arg, C::BAD_FILE_NAME, "File name not allowed.")
        else {
            return;
        };
        if path.names_dir() {
            // `name/` names a directory, which no upload writes (vsftpd:
            // 553, open(2) gives EISDIR).
            self.reply(C::BAD_FILE_NAME, "File name not allowed.");
            return;
        }
        self.transfer(|data| Action::StartStor { path, kind, data });
    }

    /// Starts the transfer `make` describes on the data channel set up
    /// with PORT/PASV, or answers 425 if there is none.
    pub(super) fn transfer(&mut self, make: impl FnOnce(super::DataSpec) -> Action) {
        let Some(data) = self.data_spec() else {
            self.reply(C::CANT_OPEN_DATA, "Use PORT or PASV first.");
            return;
        };
        self.begin_transfer();
        self.actions.push_back(make(data));
    }

    pub(super) fn begin_transfer(&mut self) {
        self.state = State::AwaitTransfer(Transfer {
            started: false,
            abort_requested: false,
            abor_sent: false,
            quit_after: false,
        });
    }
}
