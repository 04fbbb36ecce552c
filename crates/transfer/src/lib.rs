//! Sluice transfers (layer 2): one object per file transfer.
//!
//! Brief overview: a download is a [`SendSpec`] (file, byte ranges, [`Mode`])
//! handed to [`send`] with its data connections; an upload is
//! [`receive_stream`] (MODE S, one connection until the peer closes) or
//! [`receive_mode_e`] (MODE E, connections arriving on a channel until the
//! EOF block's EOD count is met; connections the sender keeps open for
//! the next transfer come back in the [`ReceiveSummary`]). All take the
//! shared [`Engine`], a [`Progress`] the session reads for markers, and a
//! [`Cancel`] token (ABOR). Byte ranges are `sluice_ftp::markers::RangeSet`.
//!
//! Both doors go through a [`Transfer`] (the `transfer` module): it holds
//! a transfer's progress, cancellation and stall policy, and sends FTP
//! downloads, uploads and listings and HTTP bodies (single range, whole
//! file, multipart, listing pieces) over a [`Conn`]. Errors are
//! [`TransferError`]s typed by whose fault they are ([`Fault`]); each door
//! maps the fault to its own answer (FTP reply codes, HTTP status or
//! close).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod conn;
mod error;
pub mod limits;
mod progress;
mod receive;
mod receive_stream;
pub(crate) mod send;
mod send_shared;
mod spec;
mod stall;
mod tls;
mod transfer;

pub use conn::Conn;
pub use error::{Fault, TransferError};
pub use progress::Progress;
pub use receive::{
    receive_mode_e, receive_mode_e_protected, receive_mode_e_relative, Protect, ReceiveSummary,
};
pub use receive_stream::receive_stream;
pub use send::{send, send_keeping, send_relative};
pub use sluice_engine::{Cancel, Engine, EngineConfig};
pub use spec::{ByteRange, Mode, SendSpec};
pub use tls::{receive_stream_tls, send_extended_tls, send_stream_tls};
pub use transfer::{Framing, Part, Transfer};
