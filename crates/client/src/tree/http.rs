//! `sluice get -r http://...`: the tree is listed breadth first (Sluice's
//! JSON listing, asked for with `?format=json`; an HTML index page from
//! other servers, which ignore the query), then its files are fetched by
//! [`jobs::run`] workers with the single-file HTTP download, which
//! resumes a retried file with a Range request.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_http::client::ChunkedDecoder;
use sluice_http::path::encode_segment;
use sluice_http::{Framing, HttpUrl, Method};

use super::http_listing::{self, MAX_LISTING};
use super::jobs;
use super::plan::{self, Action, Entry};
use super::sync::{self, Notes};
use crate::cli::GetArgs;
use crate::error::{ClientError, Result};
use crate::http::exchange;
use crate::stats::Stats;

/// The URL of directory `rel` under `base` (which ends with `/`).
fn dir_url(base: &str, rel: &str) -> String {
    let mut u = base.to_string();
    for seg in rel.split('/').filter(|s| !s.is_empty()) {
        u.push_str(&encode_segment(seg));
        u.push('/');
    }
    u
}

/// The URL of file `rel` under `base`.
fn file_url(base: &str, rel: &str) -> String {
    let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    format!("{}{}", dir_url(base, dir), encode_segment(name))
}

/// GETs `url` and returns its Content-Type and body (at most
/// [`MAX_LISTING`] bytes).
fn fetch_body(url: &str, timeout: Duration) -> Result<(String, Vec<u8>)> {
    let u = HttpUrl::parse(url).map_err(|e| ClientError::Usage(e.to_string()))?;
    let x = exchange::request(&u, Method::Get, None, None, timeout)?;
    if x.head.status != 200 {
        return Err(exchange::refused("GET (listing)", &x.head));
    }
    let ctype = x
        .head
        .field("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let framing = x.head.framing(Method::Get);
    let mut raw = x.early;
    let mut sock = x.sock;
    (&mut sock)
        .take((MAX_LISTING + 1 - raw.len().min(MAX_LISTING)) as u64)
        .read_to_end(&mut raw)
        .map_err(|e| ClientError::net("read listing", e))?;
    if raw.len() > MAX_LISTING {
        return Err(ClientError::Protocol(format!(
            "listing larger than {MAX_LISTING} bytes"
        )));
    }
    let body = match framing {
        Framing::Length(n) if (raw.len() as u64) < n => {
            return Err(ClientError::Protocol(format!(
                "listing cut short: {} of {n} bytes",
                raw.len()
            )))
        }
        Framing::Length(n) => {
            raw.truncate(n as usize);
            raw
        }
        Framing::Chunked => {
            let mut dec = ChunkedDecoder::new();
            let mut out = Vec::new();
            let mut i = 0;
            while i < raw.len() && !dec.is_done() {
                let (used, data) = dec
                    .decode(&raw[i..])
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                if let Some(r) = data {
                    out.extend_from_slice(&raw[i..][r]);
                }
                i += used;
            }
            if !dec.is_done() {
                return Err(ClientError::Protocol("chunked listing cut short".into()));
            }
            out
        }
        Framing::None | Framing::UntilClose => raw,
    };
    Ok((ctype, body))
}

/// The entries of directory `url`: JSON when the server speaks it, else
/// the links of its HTML page.
fn list(url: &str, timeout: Duration) -> Result<(Vec<Entry>, bool)> {
    let (ctype, body) = fetch_body(&format!("{url}?format=json"), timeout)?;
    if ctype.starts_with("application/json") {
        let e = http_listing::parse_json(&body).map_err(ClientError::Protocol)?;
        return Ok((e, true));
    }
    if ctype.starts_with("text/html") || ctype.is_empty() {
        let (e, bad) = http_listing::parse_html(&String::from_utf8_lossy(&body));
        for b in bad {
            eprintln!("sluice: skipped link `{b}` in {url}: unsafe name");
        }
        return Ok((e, false));
    }
    Err(ClientError::Protocol(format!(
        "{url} is not a directory listing (Content-Type {})",
        crate::ftp::control::printable(&ctype)
    )))
}

struct Fetch {
    mtime: Option<i64>,
}

/// `sluice get -r http://...`.
pub fn get_tree(a: &GetArgs) -> Result<()> {
    if a.tree.checksum {
        return Err(ClientError::Usage(
            "--checksum needs ftp:// (HTTP has no checksum command)".into(),
        ));
    }
    let mut base = a.url.split(['?', '#']).next().unwrap_or("").to_string();
    if !base.ends_with('/') {
        base.push('/');
    }
    HttpUrl::parse(&base).map_err(|e| ClientError::Usage(e.to_string()))?;
    let root = match &a.dest {
        Some(d) => d.clone(),
        None => {
            let last = base.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            let name = percent_encoding::percent_decode_str(last)
                .decode_utf8()
                .ok()
                .filter(|n| plan::check_name(n).is_ok() && !base.ends_with("//"))
                .map(|n| n.into_owned());
            PathBuf::from(name.unwrap_or_else(|| ".".into()))
        }
    };
    if !root.is_dir() {
        std::fs::create_dir_all(&root)
            .map_err(|e| ClientError::local(format!("create directory {}", root.display()), e))?;
    }
    let timeout = Duration::from_secs(a.opts.timeout);
    let t0 = Instant::now();
    let mut dirs = VecDeque::from([String::new()]);
    let mut files = Vec::new();
    let mut notes = Notes::default();
    while let Some(dir) = dirs.pop_front() {
        let url = dir_url(&base, &dir);
        let (entries, _json) = list(&url, timeout)?;
        let actions = plan::plan_dir(&dir, &entries)
            .map_err(|b| ClientError::Protocol(format!("{url}: {b}; refusing the whole tree")))?;
        if a.tree.delete {
            let keep = entries.iter().map(|e| e.name.clone()).collect();
            notes.deleted += sync::delete_local_extras(&root.join(&dir), &dir, &keep)?;
        }
        for act in actions {
            match act {
                Action::Descend { rel } => {
                    super::ftp::make_dir(&root.join(&rel))?;
                    dirs.push_back(rel);
                }
                Action::Copy { rel, mtime, size } => {
                    // An HTML index gives neither size nor time: every
                    // file differs.
                    let have = sync::local_have(&root.join(&rel));
                    if a.tree.sync && !plan::differs(size, mtime, have, true) {
                        notes.uptodate += 1;
                        continue;
                    }
                    files.push((rel, Fetch { mtime }))
                }
                Action::Skip { rel, why } => {
                    notes.skipped += 1;
                    eprintln!("sluice: skipped {}: {why}", plan::shown(&rel));
                }
            }
        }
    }
    let total = files.len() + notes.uptodate as usize;
    let workers = a.tree.files.map_or(jobs::DEFAULT_FILES, |n| n as usize);
    let job = super::ftp::JobProgress::start(None, files.len(), a.opts.quiet);
    let out = jobs::run(
        files,
        workers,
        &job.done,
        || Ok(()),
        |_, rel, f, attempt| {
            let n = fetch(a, &base, &root, rel, f, attempt > 0 || a.resume)?;
            // The single-file download keeps its own counters: the
            // display moves file by file.
            Stats::add(&job.stats.bytes, n);
            Ok(n)
        },
    );
    job.progress.finish();
    super::ftp::finish("received", out, total, &notes, t0, a.opts.stats)
}

fn fetch(a: &GetArgs, base: &str, root: &Path, rel: &str, f: &Fetch, resume: bool) -> Result<u64> {
    let path = root.join(rel);
    let mut fa = a.clone();
    fa.url = file_url(base, rel);
    fa.dest = Some(path.clone());
    fa.resume = resume;
    fa.opts.quiet = true;
    crate::http::get::run(&fa)?;
    super::ftp::set_mtime(&path, f.mtime);
    Ok(std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_each_segment() {
        let b = "http://h:1/top/";
        assert_eq!(dir_url(b, ""), b);
        assert_eq!(dir_url(b, "a b/ü"), "http://h:1/top/a%20b/%C3%BC/");
        assert_eq!(file_url(b, "a b/x?y#z"), "http://h:1/top/a%20b/x%3Fy%23z");
        assert_eq!(file_url(b, "f"), "http://h:1/top/f");
    }
}
