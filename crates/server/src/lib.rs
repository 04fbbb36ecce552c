//! The server shell behind `sluice serve` (the `sluice` binary, src/main.rs,
//! adds the command line and the client subcommands).
//!
//! Brief overview: [`config`] merges flags and the TOML file into a
//! `ServeConfig`; [`auth`] checks logins; [`ftp`] is the FTP front door
//! (listener, session tasks driving `sluice_ftp::session::Session`, data
//! transfers through `sluice_transfer`); [`ops`] and [`upload`] are the
//! file-system side, always through `sluice_platform::fs::ServedRoot`;
//! [`data`] opens data connections; [`xferlog`] writes one line per
//! transfer. Both front doors accept through [`listener`] and list
//! directories through [`listing`]. [`runtime`] lays out the event loops (`--runtime per-core`
//! or `shared`); [`logbuf`] is the stderr writer that batches access and
//! transfer lines; [`shutdown`] is the stop (SIGTERM: drain, then cut),
//! [`reload`] the SIGHUP reload, [`signals`] the signals both act on.
#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod data;
pub mod ftp;
pub mod http;
pub mod ktls;
pub mod listener;
pub mod listing;
pub mod logbuf;
pub mod loops;
pub mod metrics;
pub mod ops;
pub mod privileges;
pub mod reload;
pub mod runtime;
pub mod shutdown;
pub mod signals;
pub mod store;
pub mod tls;
pub mod transport;
pub mod upload;
pub mod xferlog;
