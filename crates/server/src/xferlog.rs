//! One log line per transfer, in the field order of wu-ftpd's xferlog(5):
//!
//! ```text
//! transfer-time remote-host file-size filename transfer-type special-action
//! direction access-mode username service-name authentication-method
//! authenticated-user-id completion-status
//! ```
//!
//! The leading `current-time` field of xferlog is left out because tracing
//! timestamps every line itself. The line goes to the `xferlog` tracing
//! target at info level, so `RUST_LOG=xferlog=info` selects just these.
//! Spaces in file names are written as `_`, as wu-ftpd does, so fields
//! stay splittable.
//!
//! Extension: a download that finished carries one more field after the
//! completion status, what limited it from the kernel's accounting of its
//! data connections (`sluice_engine::verdict`), e.g.
//! `limit=receiver_window:71,network:25,sender:4`.

use std::net::IpAddr;
use std::time::Duration;

/// Direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Server to client (RETR, ERET, LIST).
    Outgoing,
    /// Client to server (STOR, APPE, ESTO).
    Incoming,
}

/// What one transfer did.
#[derive(Debug)]
pub struct XferRecord<'a> {
    /// Wall time from the command to the end.
    pub elapsed: Duration,
    /// Client address.
    pub peer: IpAddr,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Virtual path.
    pub path: &'a str,
    /// TYPE A (true) or I.
    pub ascii: bool,
    /// Direction.
    pub direction: Direction,
    /// Anonymous login.
    pub anonymous: bool,
    /// Login name.
    pub user: &'a str,
    /// Completed (true) or incomplete.
    pub complete: bool,
    /// What limited it (`limit=...`), appended after the status.
    pub limit: Option<String>,
}

impl XferRecord<'_> {
    /// The xferlog line (without the leading time).
    pub fn line(&self) -> String {
        let secs = self.elapsed.as_secs().max(1);
        let path: String = self
            .path
            .chars()
            .map(|c| {
                if c.is_whitespace() || c.is_control() {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        let mut line = format!(
            "{secs} {} {} {path} {} _ {} {} {} ftp 0 * {}",
            self.peer,
            self.bytes,
            if self.ascii { 'a' } else { 'b' },
            match self.direction {
                Direction::Outgoing => 'o',
                Direction::Incoming => 'i',
            },
            if self.anonymous { 'a' } else { 'r' },
            self.user
                .replace(|c: char| c.is_whitespace() || c.is_control(), "_"),
            if self.complete { 'c' } else { 'i' },
        );
        if let Some(l) = &self.limit {
            line.push(' ');
            line.push_str(l);
        }
        line
    }

    /// Writes the line to the `xferlog` target.
    pub fn log(&self) {
        tracing::info!(target: "xferlog", "{}", self.line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_xferlog_order() {
        let r = XferRecord {
            elapsed: Duration::from_millis(2500),
            peer: [127, 0, 0, 1].into(),
            bytes: 1234,
            path: "/dir/a file",
            ascii: false,
            direction: Direction::Incoming,
            anonymous: true,
            user: "anonymous",
            complete: false,
            limit: None,
        };
        assert_eq!(
            r.line(),
            "2 127.0.0.1 1234 /dir/a_file b _ i a anonymous ftp 0 * i"
        );
        let r = XferRecord {
            limit: Some("limit=network:90,sender:10".into()),
            complete: true,
            ..r
        };
        assert_eq!(
            r.line(),
            "2 127.0.0.1 1234 /dir/a_file b _ i a anonymous ftp 0 * c limit=network:90,sender:10"
        );
    }
}
