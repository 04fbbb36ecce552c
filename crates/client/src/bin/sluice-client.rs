//! Stand-in for the `sluice` binary's client subcommands, for testing the
//! client before (and independently of) the server crate.
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sluice")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Download a file.
    Get(sluice_client::cli::GetArgs),
    /// Upload a file.
    Put(sluice_client::cli::PutArgs),
    /// List a directory.
    Ls(sluice_client::cli::LsArgs),
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Get(a) => sluice_client::cli::run_get(a),
        Cmd::Put(a) => sluice_client::cli::run_put(a),
        Cmd::Ls(a) => sluice_client::cli::run_ls(a),
    }
}
