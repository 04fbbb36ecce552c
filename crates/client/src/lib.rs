//! Sluice transfer client: `sluice get | put | ls`.
//!
//! # Brief overview
//!
//! [`cli`] holds the argument structs the `sluice` binary flattens into its
//! subcommands and the `run_*` entry points. [`url`] parses the URL; its
//! scheme picks a protocol module ([`ftp`] today, `http` later). A download
//! runs on three threads:
//!
//! ```text
//!  data sockets ──► drain thread ──► blocks (offset, bytes) ──► writer thread
//!  (1..n streams)   poll + read,       bounded by --mem-cap      pwrite at offset
//!                   MODE E decode      (stall counted when full)  into DEST.part
//!        control connection (main thread): commands, 1xx markers, 226
//! ```
//!
//! The drain thread never touches the disk, so a slow disk does not stop it
//! from reading the sockets (the "Linux TCP receiver bottleneck" lesson):
//! it only waits when the memory cap is reached, and each wait is counted
//! as a receive stall in `--stats`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod autostreams;
pub mod checksum;
pub mod cli;
pub mod cp;
pub mod drain;
pub mod error;
pub mod ftp;
pub mod http;
pub mod priority;
pub mod progress;
pub mod reassembly;
pub mod stats;
pub mod tls;
pub mod tree;
pub mod url;
pub mod writer;

use error::Result;

/// `sluice get`: picks the protocol by URL scheme.
pub fn get(args: cli::GetArgs) -> Result<()> {
    if args.tree.recursive && http::is_http(&args.url) {
        return tree::http::get_tree(&args);
    }
    if http::is_http(&args.url) {
        return http::get::run(&args);
    }
    match url::parse(&args.url)? {
        url::Target::Ftp(u) if args.tree.recursive => tree::ftp::get_tree(&u, &args),
        url::Target::Ftp(u) => ftp::get::run(&u, &args),
    }
}

/// `sluice put`: picks the protocol by URL scheme.
pub fn put(args: cli::PutArgs) -> Result<()> {
    match url::parse(&args.url)? {
        url::Target::Ftp(u) if args.tree.recursive => tree::ftp_put::put_tree(&u, &args),
        url::Target::Ftp(u) => ftp::put::run(&u, &args),
    }
}

/// `sluice ls`: picks the protocol by URL scheme.
pub fn ls(args: cli::LsArgs) -> Result<()> {
    match url::parse(&args.url)? {
        url::Target::Ftp(u) => ftp::ls::run(&u, &args),
    }
}
