//! Why a control line could not become a [`Command`](super::Command),
//! and the one reply each reason gets.

use crate::reply::{Reply, ReplyCode};
use std::fmt;

/// Why a line could not become a [`Command`](super::Command). Each maps to one reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// No terminator within [`MAX_LINE`](crate::limits::MAX_LINE) bytes. Framing is lost: reply,
    /// then close the control connection.
    LineTooLong,
    /// A line of only spaces (a bare line end never gets here: the
    /// session ignores it): answered with 500, as vsftpd does.
    Empty,
    /// A verb that is not letters, or too long. Carries a clipped, escaped
    /// echo of the input.
    UnknownCommand(String),
    /// The verb needs an argument.
    MissingArgument(&'static str),
    /// The argument is malformed.
    BadArgument(&'static str),
    /// The argument is well-formed but not supported (`MODE B`, `TYPE E`).
    Unsupported(&'static str),
    /// A path longer than [`crate::limits::MAX_PATH`], or a user/password over its bound.
    TooLong(&'static str),
    /// A path that is not UTF-8 or contains NUL, CR or LF.
    BadPath(&'static str),
    /// A USER/ACCT name that is not UTF-8 or holds a control character.
    BadName(&'static str),
    /// EPRT with a network protocol other than 1 or 2.
    UnsupportedProtocol,
}

impl CommandError {
    /// The reply to send for this error. Text is fixed and short; only
    /// [`CommandError::UnknownCommand`] echoes (a clipped, escaped slice).
    pub fn reply(&self) -> Reply {
        use ReplyCode as C;
        match self {
            Self::LineTooLong => Reply::new(C::SYNTAX_ERROR, "Input line too long."),
            Self::Empty => Reply::new(C::SYNTAX_ERROR, "Empty command."),
            Self::UnknownCommand(echo) => {
                Reply::new(C::SYNTAX_ERROR, format!("Unknown command '{echo}'."))
            }
            Self::MissingArgument(v) => {
                Reply::new(C::BAD_ARGUMENTS, format!("{v} needs an argument."))
            }
            Self::BadArgument(v) => Reply::new(C::BAD_ARGUMENTS, format!("Bad {v} argument.")),
            Self::Unsupported(v) => Reply::new(
                C::PARAMETER_NOT_IMPLEMENTED,
                format!("{v} parameter not supported."),
            ),
            Self::TooLong(v) => Reply::new(C::BAD_ARGUMENTS, format!("{v} argument too long.")),
            Self::BadPath(v) => {
                Reply::new(C::BAD_FILE_NAME, format!("{v}: file name not allowed."))
            }
            Self::BadName("ACCT") => Reply::new(C::BAD_ARGUMENTS, "Invalid account name."),
            Self::BadName(_) => Reply::new(C::BAD_ARGUMENTS, "Invalid user name."),
            Self::UnsupportedProtocol => Reply::new(
                C::BAD_NETWORK_PROTOCOL,
                "Network protocol not supported, use (1,2)",
            ),
        }
    }

    /// The verb whose argument was refused, when the error is about one.
    pub fn verb(&self) -> Option<&'static str> {
        match self {
            Self::MissingArgument(v)
            | Self::BadArgument(v)
            | Self::Unsupported(v)
            | Self::TooLong(v)
            | Self::BadPath(v)
            | Self::BadName(v) => Some(v),
            Self::LineTooLong
            | Self::Empty
            | Self::UnknownCommand(_)
            | Self::UnsupportedProtocol => None,
        }
    }

    /// Whether the control connection must be closed after the reply
    /// (framing lost).
    pub fn closes_connection(&self) -> bool {
        matches!(self, Self::LineTooLong)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.reply();
        write!(f, "{} {}", r.code, r.text())
    }
}

impl std::error::Error for CommandError {}
