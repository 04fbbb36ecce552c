//! Sans-I/O FTP core for Sluice: RFC 959/2389/2428/3659 and the GridFTP
//! extensions (OGF GFD.20). No sockets, no clocks: bytes in, events out.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod command;
pub mod glob;
pub mod limits;
pub mod listing;
pub mod markers;
pub mod mode_e;
pub mod path;
pub mod reply;
pub mod session;
