//! Tree transfers: `sluice get -r` and `sluice put -r`.
//!
//! [`plan`] is sans-I/O (a listing in, actions out, every name checked so
//! a hostile server cannot make us write outside DEST), [`jobs`] runs the
//! files on `--files N` workers with retries, [`ftp`] and [`http`] do the I/O
//! ([`http_listing`] reads HTTP directory listings).
pub mod ftp;
mod ftp_conn;
mod ftp_kept;
mod ftp_kept_put;
mod ftp_list;
pub mod ftp_put;
pub mod http;
pub mod http_listing;
pub mod jobs;
pub mod plan;
mod summary;
pub mod sync;
