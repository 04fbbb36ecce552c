//! Questions and changes to the file system: client paths resolved (and
//! checked for writing), the `Query`/`Change` actions that ask the host,
//! and the replies to the host's answers.

use super::{Action, Answer, Change, Pending, Query, Session, State};
use crate::path::{PathError, VirtualPath};
use crate::reply::{quote_257, Reply, ReplyCode as C};

impl Session {
    /// The answer to a `Query`/`Change`/`Checksum` that succeeded.
    pub(super) fn answer(&mut self, pending: Pending, answer: Answer) {
        match (pending, answer) {
            (
                Pending::Query {
                    path,
                    query: Query::ChangeDir,
                },
                Answer::Done,
            ) => {
                // Known to be a directory now; `CWD d/` leaves no flag behind.
                self.cwd = path.without_dir_flag();
                self.reply(C::FILE_ACTION_OK, "Directory successfully changed.");
            }
            (
                Pending::Query {
                    query: Query::Exists,
                    ..
                },
                Answer::Done,
            ) => self.reply(C::PENDING, "Ready for RNTO."),
            (
                Pending::Query {
                    query: Query::Size, ..
                },
                Answer::Size(n),
            ) => self.reply(C::FILE_STATUS, &n.to_string()),
            (
                Pending::Query {
                    query: Query::Modified,
                    ..
                },
                Answer::Modified(t),
            ) => self.reply(
                C::FILE_STATUS,
                &crate::listing::mdtm(t.min(i64::MAX as u64) as i64),
            ),
            (
                Pending::Query {
                    query: Query::Facts(_),
                    ..
                },
                Answer::Facts(f),
            ) => {
                let lines = vec!["Listing".to_string(), f, "End".to_string()];
                self.push(&Reply::multi(C::FILE_ACTION_OK, lines));
            }
            (
                Pending::Query {
                    query: Query::Status,
                    ..
                },
                Answer::Lines(l),
            ) => {
                let mut lines = vec!["Status follows:".to_string()];
                lines.extend(l);
                lines.push("End of status".into());
                self.push(&Reply::multi(C::FILE_STATUS, lines));
            }
            (Pending::Change(Change::Mkdir(p)), Answer::Done) => {
                let text = format!("{} created", quote_257(p.as_str()));
                self.reply(C::PATHNAME, &text);
            }
            (Pending::Change(Change::Rmdir(_)), Answer::Done) => {
                self.reply(C::FILE_ACTION_OK, "Remove directory operation successful.")
            }
            (Pending::Change(Change::Delete(_)), Answer::Done) => {
                self.reply(C::FILE_ACTION_OK, "Delete operation successful.")
            }
            (Pending::Change(Change::SetModified { path, secs }), Answer::Done) => {
                // draft-somers-ftp-mfxx 3.1: the time set, then the path.
                let text = format!("Modify={}; {}", crate::listing::mdtm(secs), path.as_str());
                self.reply(C::FILE_STATUS, &text)
            }
            (Pending::Change(Change::Rename { .. }), Answer::Done) => {
                self.reply(C::FILE_ACTION_OK, "Rename successful.")
            }
            (Pending::Checksum, Answer::Checksum(hex)) => self.reply(C::FILE_STATUS, &hex),
            // The shell answered a different question: our bug, not the
            // peer's. Say so without detail and carry on.
            _ => self.reply(C::LOCAL_ERROR, "Internal error."),
        }
    }

    pub(super) fn writable(&mut self) -> bool {
        if self.login.is_some_and(|l| l.writable) {
            true
        } else {
            self.reply(C::FILE_UNAVAILABLE, "Permission denied.");
            false
        }
    }

    /// Resolves a client path, replying on failure.
    pub(super) fn resolve(&mut self, arg: &str) -> Option<VirtualPath> {
        match self.cwd.resolve(arg) {
            Ok(p) => Some(p),
            Err(PathError::TooLong) => {
                self.reply(C::BAD_FILE_NAME, "File name too long.");
                None
            }
            Err(PathError::Nul) => {
                self.reply(C::BAD_FILE_NAME, "File name not allowed.");
                None
            }
        }
    }

    /// A path the login may write: resolved, and not `/` (which gets
    /// `root_code`/`root_text`). Replies on failure.
    pub(super) fn writable_target(
        &mut self,
        arg: &str,
        root_code: C,
        root_text: &str,
    ) -> Option<VirtualPath> {
        if !self.writable() {
            return None;
        }
        let path = self.resolve(arg)?;
        if path.is_root() {
            self.reply(root_code, root_text);
            return None;
        }
        Some(path)
    }

    pub(super) fn query(&mut self, arg: &str, query: Query) {
        if let Some(path) = self.resolve(arg) {
            self.ask(path, query);
        }
    }

    pub(super) fn ask(&mut self, path: VirtualPath, query: Query) {
        self.state = State::AwaitResult(Pending::Query {
            path: path.clone(),
            query,
        });
        self.actions.push_back(Action::Query { path, query });
    }

    pub(super) fn change(&mut self, arg: &str, make: impl FnOnce(VirtualPath) -> Change) {
        let Some(path) = self.writable_target(arg, C::FILE_UNAVAILABLE, "Permission denied.")
        else {
            return;
        };
        let change = make(path);
        self.state = State::AwaitResult(Pending::Change(change.clone()));
        self.actions.push_back(Action::Change(change));
    }
}
