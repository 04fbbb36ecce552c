//! The transfer half of the session's inputs: a transfer started (150,
//! or 125 on kept MODE E connections), its markers, its end (226 or the
//! error's reply), and the data specification a transfer command gets.

use std::time::Instant;

use super::*;

impl Session {
    /// The shell opened the file and is about to move data: sends 150.
    /// `size` (bytes to send, when known) goes into the reply text, where
    /// some clients read it.
    pub fn handle_transfer_started(&mut self, size: Option<u64>) {
        self.transfer_started(size, false);
    }

    /// The transfer started on data connections kept open from the last
    /// MODE E transfer: 125 (data connection already open) instead of 150,
    /// as globus-gridftp-server answers ("reusing existing data
    /// connection").
    pub fn handle_transfer_started_reusing(&mut self, size: Option<u64>) {
        self.transfer_started(size, true);
    }

    pub(super) fn transfer_started(&mut self, size: Option<u64>, reusing: bool) {
        let State::AwaitTransfer(t) = &mut self.state else {
            return;
        };
        if t.started {
            return;
        }
        t.started = true;
        let kind = if self.ascii { "ASCII" } else { "BINARY" };
        let (code, text) = match (reusing, size) {
            (true, Some(n)) => (
                ReplyCode::DATA_ALREADY_OPEN,
                format!("Reusing existing data connection; transfer starting ({n} bytes)."),
            ),
            (true, None) => (
                ReplyCode::DATA_ALREADY_OPEN,
                "Reusing existing data connection; transfer starting.".to_string(),
            ),
            (false, Some(n)) => (
                ReplyCode::OPENING_DATA,
                format!("Opening {kind} mode data connection ({n} bytes)."),
            ),
            (false, None) => (
                ReplyCode::OPENING_DATA,
                format!("Opening {kind} mode data connection."),
            ),
        };
        self.reply(code, &text);
    }

    /// A 111 restart marker or 112 performance marker to send while a
    /// transfer runs (built with [`crate::markers`]). Ignored otherwise.
    pub fn handle_marker(&mut self, marker: &Reply) {
        let State::AwaitTransfer(t) = &self.state else {
            return;
        };
        if t.started
            && (marker.code == ReplyCode::RANGE_MARKER || marker.code == ReplyCode::PERF_MARKER)
        {
            self.push(marker);
        }
    }

    /// The transfer ended: `Ok(bytes)` sends 226, an error its reply.
    pub fn handle_transfer_done(&mut self, now: Instant, result: Result<u64, OpError>) {
        let State::AwaitTransfer(t) = std::mem::replace(&mut self.state, State::Ready) else {
            return;
        };
        self.last_activity = Some(now);
        // MODE S: a data connection serves one transfer. MODE E keeps the
        // data channel set up (GridFTP data channel caching: globus-url-copy
        // -fast sends the next RETR without a new PORT/PASV), so the shell
        // may reconnect to the same PORT address or keep its listener.
        if self.mode == TransferMode::Stream || result.is_err() {
            if self.data == DataSetup::Passive {
                self.actions.push_back(Action::ClosePassive);
            }
            self.data = DataSetup::None;
            self.drop_kept();
        } else {
            self.kept = true;
        }
        match result {
            Ok(_) => self.reply(ReplyCode::TRANSFER_COMPLETE, "Transfer complete."),
            Err(e) => self.push(&e.reply()),
        }
        if t.abor_sent {
            // RFC 959 4.1.3: after the 426 for the transfer, a 226 for ABOR.
            self.reply(ReplyCode::TRANSFER_COMPLETE, "ABOR successful.");
        }
        if t.quit_after {
            self.reply(ReplyCode::CLOSING, "Goodbye.");
            self.close();
        }
    }

    /// The data channel or mode changed (or a transfer failed): any
    /// connections kept from the last MODE E transfer are closed.
    pub(super) fn drop_kept(&mut self) {
        if std::mem::take(&mut self.kept) {
            self.actions.push_back(Action::DropKept);
        }
    }

    pub(super) fn is_busy(&self) -> bool {
        matches!(
            self.state,
            State::AwaitLogin
                | State::AwaitTls { .. }
                | State::AwaitPassive { .. }
                | State::AwaitResult(_)
                | State::AwaitTransfer(_)
        )
    }

    pub(super) fn in_transfer(&self) -> bool {
        matches!(self.state, State::AwaitTransfer(_))
    }

    pub(super) fn close(&mut self) {
        if !matches!(self.state, State::Closed) {
            self.state = State::Closed;
            self.actions.push_back(Action::Close);
        }
    }

    pub(super) fn reply(&mut self, code: ReplyCode, text: &str) {
        Reply::new(code, text).encode(&mut self.out);
    }

    pub(super) fn push(&mut self, reply: &Reply) {
        reply.encode(&mut self.out);
    }

    pub(super) fn data_spec(&self) -> Option<DataSpec> {
        let channel = match self.data {
            DataSetup::None => return None,
            DataSetup::Passive => DataChannel::Passive,
            DataSetup::Active(a) => DataChannel::Active(a),
        };
        let parallelism = match self.mode {
            TransferMode::Stream => 1,
            TransferMode::ExtendedBlock => self.parallelism,
        };
        Some(DataSpec {
            channel,
            protected: self.prot_private,
            mode: self.mode,
            ascii: self.ascii,
            parallelism,
            buffer: self.buffer,
            marker_interval_secs: self.marker_secs,
        })
    }

    pub(super) fn set_marker_secs(&mut self, secs: u32) {
        self.marker_secs = secs.clamp(1, MAX_MARKER_SECS);
    }
}
