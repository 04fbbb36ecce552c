//! FTP/GridFTP client: control connection, data connections, MODE S and E.
//!
//! [`control`] speaks the control channel, [`data`] opens data connections,
//! [`session`] holds steps every command shares (login, MODE E, SIZE,
//! CKSM). [`get`], [`put`] and [`ls`] are the three commands.
pub mod auto;
pub mod control;
pub mod data;
pub mod get;
pub mod ls;
pub mod put;
pub mod session;
