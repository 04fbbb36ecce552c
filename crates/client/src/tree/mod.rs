//! Tree transfers: `sluice get -r` and `sluice put -r`.
//!
//! [`plan`] is sans-I/O (a listing in, actions out, every name checked so
//! a hostile server cannot make us write outside DEST), [`jobs`] runs the
//! files on `--files N` workers with retries, [`ftp`] does the I/O.
pub mod ftp;
pub mod jobs;
pub mod plan;
