//! Platform layer: thin safe wrappers over the Linux calls Sluice needs.
//! This is the only crate in the workspace that contains `unsafe`; every
//! block carries a `// SAFETY:` comment.
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod fadvise;
pub mod features;
pub mod fileio;
pub mod fs;
pub mod ktls;
pub mod memory;
pub mod pipe;
pub mod sendfile;
pub mod sockbuf;
pub mod sys;
pub mod tcp;
pub mod thread;
pub mod tun;
