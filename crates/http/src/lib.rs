//! placeholder
#![forbid(unsafe_code)]
