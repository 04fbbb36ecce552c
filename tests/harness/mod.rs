//! Shared test machinery: deterministic files, servers under test and
//! peers, external clients with time limits, a raw FTP control client.

// Not every test module uses every helper.
#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod checks;
pub mod control;
pub mod corpus;
pub mod process;
pub mod servers;

pub use checks::*;
pub use control::{Control, Reply, Transfer};
pub use corpus::{compare_file, corpus, file_name, sha256_file, TestFile, BIG, SIZES};
pub use process::{
    python_script, require_debian_python_with, require_tool, run, run_with_timeout, sluice_bin,
    Output,
};
pub use servers::{FtpServer, Kind};
