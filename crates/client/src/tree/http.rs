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
    let workers = jobs::Workers::from_flag(a.tree.files);
    let job = super::ftp::JobProgress::start(None, files.len(), a.opts.quiet);
    let out = jobs::run(
        files,
        workers,
        &job.done,
        || Ok(Keep::default()),
        |k, rel, f, attempt| {
            let resume = attempt > 0 || a.resume;
            if !resume && !a.verify {
                if let Some(n) = fetch_kept(k, &base, &root, rel, f, timeout)? {
                    Stats::add(&job.stats.bytes, n);
                    return Ok(n);
                }
            }
            let n = fetch(a, &base, &root, rel, f, resume)?;
            // The single-file download keeps its own counters: the
            // display moves file by file.
            Stats::add(&job.stats.bytes, n);
            Ok(n)
        },
    );
    job.progress.finish();
    super::ftp::finish("received", out, total, &notes, t0, a.opts.stats.is_some())
}

/// A worker's keep-alive connection for the files of a tree.
#[derive(Default)]
struct Keep {
    sock: Option<crate::tls::DataSock>,
    buf: Vec<u8>,
}

/// Read size of kept-connection downloads.
const KEPT_BUF: usize = 256 << 10;

/// Downloads one file on the worker's keep-alive connection (one request,
/// one response, no new connection, drain or writer thread per file: a
/// tree of small files is bound by those, not by bytes). `None` when the
/// response is not a plain `200` with a length (a redirect, an error,
/// chunked): the connection is dropped and the single-file download,
/// which knows every case, does this file.
fn fetch_kept(
    k: &mut Keep,
    base: &str,
    root: &Path,
    rel: &str,
    f: &Fetch,
    timeout: Duration,
) -> Result<Option<u64>> {
    use std::io::Write;
    let u = HttpUrl::parse(&file_url(base, rel)).map_err(|e| ClientError::Usage(e.to_string()))?;
    let fresh = k.sock.is_none();
    let r = exchange_kept(k, &u, timeout);
    let (head, early) = match r {
        Ok(x) => x,
        // A kept connection the server closed since the last file: one
        // more try on a new one.
        Err(ClientError::Network { .. }) if !fresh => {
            k.sock = None;
            exchange_kept(k, &u, timeout)?
        }
        Err(e) => {
            k.sock = None;
            return Err(e);
        }
    };
    let len = match head.content_length {
        Some(n) if head.status == 200 && !head.chunked && early.len() as u64 <= n => n,
        _ => {
            k.sock = None;
            return Ok(None);
        }
    };
    let path = root.join(rel);
    let part = {
        let mut s = path.clone().into_os_string();
        s.push(".part");
        PathBuf::from(s)
    };
    let mut file = std::fs::File::create(&part)
        .map_err(|e| ClientError::local(format!("create {}", part.display()), e))?;
    let Some(sock) = k.sock.as_mut() else {
        return Err(ClientError::Bug("kept connection gone".into()));
    };
    file.write_all(&early)
        .map_err(|e| ClientError::local(format!("write {}", part.display()), e))?;
    let mut left = len - early.len() as u64;
    if k.buf.len() < KEPT_BUF {
        k.buf.resize(KEPT_BUF, 0);
    }
    while left > 0 {
        let want = (left as usize).min(k.buf.len());
        let n = match sock.read(&mut k.buf[..want]) {
            Ok(0) => {
                k.sock = None;
                return Err(ClientError::net(
                    "read body",
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed before the whole body",
                    ),
                ));
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                k.sock = None;
                return Err(ClientError::net("read body", e));
            }
        };
        file.write_all(&k.buf[..n])
            .map_err(|e| ClientError::local(format!("write {}", part.display()), e))?;
        left -= n as u64;
    }
    if !head.keep_alive {
        k.sock = None;
    }
    let mtime = f.mtime.or_else(|| {
        head.field("last-modified")
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64)
    });
    if let Some(t) = mtime
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s))
    {
        let _ = file.set_modified(t);
    }
    drop(file);
    std::fs::rename(&part, &path)
        .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
    Ok(Some(len))
}

/// Sends a keep-alive GET for `u` on the worker's connection (made first
/// if there is none) and reads the response head: the head and the body
/// bytes read with it.
fn exchange_kept(
    k: &mut Keep,
    u: &HttpUrl,
    timeout: Duration,
) -> Result<(sluice_http::ResponseHead, Vec<u8>)> {
    use std::io::Write;
    let host = u.host_field();
    let req = sluice_http::ClientRequest {
        method: Method::Get,
        host: &host,
        target: &u.target,
        range: None,
        if_range: None,
        keep_alive: true,
        user_agent: exchange::USER_AGENT,
    }
    .encode()
    .map_err(|e| ClientError::Usage(format!("cannot build the request: {e}")))?;
    if k.sock.is_none() {
        let tcp = exchange::connect(u, timeout)?;
        tcp.set_read_timeout(Some(timeout))
            .and_then(|()| tcp.set_write_timeout(Some(timeout)))
            .map_err(|e| ClientError::net("set socket timeout", e))?;
        k.sock = Some(if u.tls {
            let mut s = crate::tls::DataSock::tls(tcp, &u.host, Some(b"http/1.1"))?;
            s.handshake(&host)?;
            s
        } else {
            crate::tls::DataSock::Plain(tcp)
        });
    }
    let Some(sock) = k.sock.as_mut() else {
        return Err(ClientError::Bug("no connection".into()));
    };
    sock.write_all(&req)
        .and_then(|()| sock.flush())
        .map_err(|e| ClientError::net("send request", e))?;
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    loop {
        let have = buf.len();
        buf.resize(have + (16 << 10), 0);
        let n = match sock.read(&mut buf[have..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                buf.truncate(have);
                continue;
            }
            Err(e) => return Err(ClientError::net("read response head", e)),
        };
        buf.truncate(have + n);
        if n == 0 {
            return Err(ClientError::net(
                "read response head",
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed before a complete response head",
                ),
            ));
        }
        if let Some((head, used)) = sluice_http::parse_response_head(&buf)
            .map_err(|e| ClientError::Protocol(e.to_string()))?
        {
            if (100..200).contains(&head.status) {
                // Not asked for (no Expect): treat as an odd response.
                k.sock = None;
                return Err(ClientError::Protocol(format!(
                    "interim response {} to a GET",
                    head.status
                )));
            }
            let early = buf.split_off(used);
            return Ok((head, early));
        }
        if buf.len() > 64 << 10 {
            return Err(ClientError::Protocol("response head too large".into()));
        }
    }
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
