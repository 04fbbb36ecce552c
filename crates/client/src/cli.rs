//! Command-line surface of `sluice get | put | ls`: argument structs that the
//! `sluice` binary flattens into its subcommands, and the `run_*` entry
//! points that turn a result into one error line and an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::error::ClientError;

/// Exit codes, shown in `--help` of each subcommand.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  internal error (a bug in sluice)
  2  usage error (bad arguments or URL)
  3  network error (cannot connect, connection lost, timeout)
  4  login refused by the server
  5  the server refused the request (no such file, permission, 4xx/5xx reply)
  6  local file error (cannot create, read or write a local file)
  7  protocol error (the server broke the protocol)
  8  checksum mismatch (--verify)
  9  --verify asked, but the server offers no checksum we know
A job of many files (-r, cp -f) that failed for some exits with the code of
the first failure; the summary lists every failed file and why.
A closed stdout pipe (DEST `-`) ends the command quietly with 0.
Errors print one line: `sluice: <url>: <what>: <cause>`.";

/// `--drs` unless given: on, measured (lab/results/drs-wan/final,
/// 2026-11-25, 3 runs, medians, server DRS on): 1 Gbit/s 100 ms, 1 GiB,
/// 99.7 MB/s against 95.2 with receive autotuning (ranges 99.2-100.1 and
/// 94.1-98.5; the server's verdict put 24 % on our window without it);
/// 100 Mbit/s 50 ms the same rate. It needs CAP_NET_ADMIN to go past
/// `net.core.rmem_max`, and stays off (autotuning) where it could not
/// reach autotuning's ceiling.
const DRS_DEFAULT: &str = "on";

/// How `--stats` prints.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsFormat {
    /// `stats: name value` lines and a `limited by ...` line.
    Text,
    /// One JSON object.
    Json,
}

/// `-p auto`: the value [`TransferOpts::parallel`] holds for it. Paths
/// that do not choose automatically treat it as one stream (it is not
/// greater than 1).
pub const AUTO_STREAMS: u32 = 0;

fn parse_parallel(s: &str) -> Result<u32, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(AUTO_STREAMS);
    }
    match s.trim().parse::<u32>() {
        Ok(n @ 1..=64) => Ok(n),
        _ => Err(format!(
            "{s:?}: expected auto or a stream count from 1 to 64"
        )),
    }
}

impl TransferOpts {
    /// No `-p N`: the stream count is chosen during the transfer.
    pub fn auto_streams(&self) -> bool {
        self.parallel == AUTO_STREAMS
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

/// Options shared by every transfer subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct TransferOpts {
    /// Parallel data streams: `auto` (the default) or a count from 1 to 64.
    /// `auto`: a download of one file starts with one connection and adds
    /// streams (HTTP range connections; FTP MODE E, restarted on the new
    /// count) while throughput grows and the path shows room (no loss
    /// with a standing queue), and sheds them when it does not (the count
    /// is in the summary and --stats); other transfers use one stream.
    /// It does not probe during the first stream's slow start nor for a
    /// file that would be done within seconds. Measured side by side at
    /// 400 Mbit/s 50 ms (lab/results/auto-streams): as fast as one stream
    /// on a clean path (5 s and 15 s downloads), 3-13x with 0.1 % loss. With
    /// N > 1 FTP uses GridFTP MODE E when the server supports it and falls
    /// back to one MODE S stream when it does not; HTTP opens N range
    /// requests.
    #[arg(short = 'p', long = "parallel", default_value = "auto",
          value_name = "N|auto", value_parser = parse_parallel)]
    pub parallel: u32,
    /// Print transfer counters (bytes, streams, receive stalls, ...) and
    /// what limited the transfer on stderr at the end; `--stats=json`
    /// prints them as one JSON object instead.
    #[arg(long, value_enum, value_name = "FORMAT", num_args = 0..=1,
          require_equals = true, default_missing_value = "text")]
    pub stats: Option<StatsFormat>,
    /// Dynamic right-sizing of download sockets' receive buffers: set
    /// large before the handshake (window scale), then kept near twice
    /// the path's bandwidth-delay product from TCP_INFO, beyond
    /// net.core.rmem_max with CAP_NET_ADMIN.
    #[arg(long, value_name = "on|off", default_value = DRS_DEFAULT,
          action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub drs: bool,
    /// No progress bar (the summary line is still printed).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// MODE E block size for uploads, in bytes.
    #[arg(long, default_value_t = 256 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=(64 << 20)))]
    pub block_size: u64,
    /// Most bytes the receive path may hold in memory before the drain
    /// thread waits for the disk writer (backpressure).
    #[arg(long, default_value_t = 256 << 20,
          value_parser = clap::value_parser!(u64).range((1 << 20)..=(1 << 34)))]
    pub mem_cap: u64,
    /// Seconds without any progress on the control or data connections
    /// before the transfer is abandoned (after an upload's last byte, the
    /// server's final reply gets five times this: it may be syncing).
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout: u64,
    /// TLS: --ca, --insecure.
    #[command(flatten)]
    pub tls: crate::tls::TlsOpts,
}

/// Options of tree transfers (`-r`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TreeOpts {
    /// Whole tree: get -r URL DIR downloads the directory URL into DIR
    /// (created; default: the URL's last name), put -r DIR URL uploads DIR's
    /// contents into the directory URL (created). Needs MLSD on FTP.
    /// Symlinks and special files are skipped with a note; a listing with
    /// a name that could leave DIR (`..`, `/`, control characters) stops
    /// the job. A failed file is retried with backoff and resumed; the
    /// others go on, and the summary lists what failed.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Files in flight at once with -r, each worker on one reused control
    /// connection (default: automatic, 4 doubling up to 32 while that
    /// raises the rate).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64),
          value_name = "N", requires = "recursive")]
    pub files: Option<u64>,
    /// With -r: move only files that differ (size or modification time;
    /// with --checksum, the server's CKSM) from the copy already there.
    #[arg(long, requires = "recursive")]
    pub sync: bool,
    /// With --sync: compare by checksum (FTP CKSM) instead of size and time.
    #[arg(long, requires = "sync")]
    pub checksum: bool,
    /// With --sync: delete what the destination has and the source does
    /// not (a true mirror).
    #[arg(long, requires = "sync")]
    pub delete: bool,
}

/// `sluice get URL [DEST]`: download a file.
#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct GetArgs {
    /// Source URL: ftp://[user[:password]@]host[:port]/path (percent-encoded;
    /// anonymous login when no user is given).
    pub url: String,
    /// Destination: a file, an existing directory (the file name comes from
    /// the URL) or `-` for stdout. Default: the URL's file name in the
    /// current directory. Data goes to DEST.part and is renamed on success.
    pub dest: Option<PathBuf>,
    /// Resume a partial download from DEST.part (REST, or ERET in MODE E).
    #[arg(short = 'c', long = "continue")]
    pub resume: bool,
    /// Compare the server's checksum (FTP: CKSM SHA256, else MD5, else
    /// ADLER32; HTTP: Repr-Digest sha-256, asked for with
    /// Want-Repr-Digest) with the downloaded file; fail on mismatch. Over
    /// HTTP a Repr-Digest the server sends unasked is checked too.
    #[arg(long)]
    pub verify: bool,
    /// Raise the scheduling priority of the thread that drains the data
    /// sockets (needs CAP_SYS_NICE or root). Off by default: measured with
    /// 10 busy loops on the client's core, it cut the drain thread's wait
    /// for a CPU about 3.6x but gained no throughput (docs/TUNING.md).
    #[arg(long)]
    pub drain_priority: bool,
    /// Options every transfer takes.
    #[command(flatten)]
    pub opts: TransferOpts,
    /// Tree transfers.
    #[command(flatten)]
    pub tree: TreeOpts,
}

/// `sluice put FILE URL`: upload a file.
#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct PutArgs {
    /// Local file to send.
    pub file: PathBuf,
    /// Target URL: ftp://[user[:password]@]host[:port]/path. A URL ending
    /// in `/` names a directory; the local file name is appended.
    pub url: String,
    /// Resume a partial upload: ask the server for the size it has (SIZE),
    /// check that those bytes are the start of FILE (CKSM with offset and
    /// length) and send the rest (APPE, or ESTO in MODE E); when they
    /// differ, send all of FILE. A server without CKSM is resumed
    /// unchecked (and the client says so).
    #[arg(short = 'c', long = "continue")]
    pub resume: bool,
    /// Compare the server's checksum of the uploaded file with the local
    /// file; fail on mismatch.
    #[arg(long)]
    pub verify: bool,
    /// Options every transfer takes.
    #[command(flatten)]
    pub opts: TransferOpts,
    /// Tree transfers.
    #[command(flatten)]
    pub tree: TreeOpts,
}

/// `sluice cp SRC DST`: copy between any pair of URL and local path.
#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct CpArgs {
    /// Source: a URL (ftp://, http://) or a local path.
    #[arg(required_unless_present = "list")]
    pub src: Option<String>,
    /// Destination: a URL (ftp://) or a local path. With two ftp:// URLs the
    /// servers move the data between them (third party: PASV on the
    /// destination, PORT on the source; with -p N both go to MODE E and the
    /// source opens N connections); a DST ending in `/` gets SRC's name.
    #[arg(required_unless_present = "list")]
    pub dst: Option<String>,
    /// Read SRC DST pairs from LIST, one pair a line (`#` starts a comment;
    /// a field with spaces in double quotes), and copy them --files N at a
    /// time with retries; the summary lists what failed.
    #[arg(short = 'f', long = "from-file", value_name = "LIST", conflicts_with_all = ["src", "dst"])]
    pub list: Option<PathBuf>,
    /// Compare checksums after the copy (CKSM on both servers for a third-party copy).
    #[arg(long)]
    pub verify: bool,
    /// Options every transfer takes.
    #[command(flatten)]
    pub opts: TransferOpts,
    /// Tree transfers (URL and local path only).
    #[command(flatten)]
    pub tree: TreeOpts,
}

/// `sluice ls URL`: list a directory.
#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct LsArgs {
    /// Directory (or file) URL: ftp://[user[:password]@]host[:port]/path
    pub url: String,
    /// Names only (NLST) instead of the server's long listing (LIST).
    #[arg(short = '1', long)]
    pub names: bool,
    /// Seconds without progress before giving up.
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout: u64,
    /// TLS: --ca, --insecure.
    #[command(flatten)]
    pub tls: crate::tls::TlsOpts,
}

/// Runs `sluice get`.
pub fn run_get(args: GetArgs) -> ExitCode {
    let url = args.url.clone();
    let r = crate::tls::configure(&args.opts.tls).and_then(|()| crate::get(args));
    finish(&url, r)
}

/// Runs `sluice put`.
pub fn run_put(args: PutArgs) -> ExitCode {
    let url = args.url.clone();
    let r = crate::tls::configure(&args.opts.tls).and_then(|()| crate::put(args));
    finish(&url, r)
}

/// Runs `sluice cp`.
pub fn run_cp(args: CpArgs) -> ExitCode {
    let url = match (&args.src, &args.dst, &args.list) {
        (Some(s), _, _) if s.contains("://") => s.clone(),
        (_, Some(d), _) => d.clone(),
        (_, _, Some(l)) => l.display().to_string(),
        _ => String::new(),
    };
    let r = crate::tls::configure(&args.opts.tls).and_then(|()| crate::cp::run(args));
    finish(&url, r)
}

/// Runs `sluice ls`.
pub fn run_ls(args: LsArgs) -> ExitCode {
    let url = args.url.clone();
    let r = crate::tls::configure(&args.tls).and_then(|()| crate::ls(args));
    finish(&url, r)
}

fn finish(url: &str, result: Result<(), ClientError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(ClientError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {}: {}", crate::url::redact(url), e);
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    enum Cmd {
        Get(GetArgs),
        Put(PutArgs),
        Ls(LsArgs),
    }

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cmd::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
    }

    #[test]
    fn get_with_everything() {
        let Cmd::Get(g) = parse(&[
            "get",
            "-p",
            "4",
            "--continue",
            "--verify",
            "--stats",
            "--drain-priority",
            "ftp://h/f",
            "out",
        ])
        .unwrap() else {
            panic!("not get")
        };
        assert_eq!(g.opts.parallel, 4);
        assert!(g.resume && g.verify && g.drain_priority);
        assert_eq!(g.opts.stats, Some(StatsFormat::Text));
        assert_eq!(g.dest.as_deref(), Some(std::path::Path::new("out")));
    }

    #[test]
    fn stats_takes_an_optional_format_and_drs_a_switch() {
        let Cmd::Get(g) = parse(&["get", "--stats=json", "--drs", "on", "ftp://h/f"]).unwrap()
        else {
            panic!("not get")
        };
        assert_eq!(g.opts.stats, Some(StatsFormat::Json));
        assert!(g.opts.drs);
        // A bare --stats does not swallow the URL.
        let Cmd::Get(g) = parse(&["get", "--stats", "ftp://h/f"]).unwrap() else {
            panic!("not get")
        };
        assert_eq!(g.opts.stats, Some(StatsFormat::Text));
        assert_eq!(g.url, "ftp://h/f");
        assert!(parse(&["get", "--stats=xml", "ftp://h/f"]).is_err());
        assert!(parse(&["get", "--drs", "maybe", "ftp://h/f"]).is_err());
    }

    #[test]
    fn defaults() {
        let Cmd::Get(g) = parse(&["get", "ftp://h/f"]).unwrap() else {
            panic!("not get")
        };
        assert!(g.opts.auto_streams());
        assert!(!g.resume && !g.verify);
        assert!(g.dest.is_none());
    }

    #[test]
    fn parallelism_is_bounded() {
        assert!(parse(&["get", "-p", "0", "ftp://h/f"]).is_err());
        assert!(parse(&["get", "-p", "65", "ftp://h/f"]).is_err());
        assert!(parse(&["get", "-p", "64", "ftp://h/f"]).is_ok());
        let Cmd::Get(g) = parse(&["get", "-p", "1", "ftp://h/f"]).unwrap() else {
            panic!("not get")
        };
        assert!(!g.opts.auto_streams());
        let Cmd::Get(g) = parse(&["get", "-p", "AUTO", "ftp://h/f"]).unwrap() else {
            panic!("not get")
        };
        assert!(g.opts.auto_streams());
        assert!(parse(&["put", "-p", "x", "f", "ftp://h/f"]).is_err());
    }

    #[test]
    fn put_needs_file_and_url_ls_needs_url() {
        assert!(parse(&["put", "f"]).is_err());
        assert!(parse(&["ls"]).is_err());
        let Cmd::Ls(l) = parse(&["ls", "-1", "ftp://h/"]).unwrap() else {
            panic!("not ls")
        };
        assert!(l.names);
    }

    #[test]
    fn bad_url_is_exit_2() {
        let e = crate::get(GetArgs {
            url: "gopher://h/x".into(),
            dest: None,
            resume: false,
            verify: false,
            drain_priority: false,
            opts: TransferOpts {
                parallel: 1,
                stats: None,
                drs: false,
                quiet: true,
                block_size: 1,
                mem_cap: 1 << 20,
                timeout: 1,
                tls: Default::default(),
            },
            tree: TreeOpts::default(),
        })
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn help_documents_exit_codes() {
        let e = parse(&["get", "--help"]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("Exit codes:"), "{text}");
        assert!(text.contains("8  checksum mismatch"), "{text}");
    }
}
