//! `sluice get http://...`: see the module overview in [`super`].
//!
//! Resume (`--continue`): the range starts at the recorded contiguous
//! prefix of `DEST.part` (or its length, for a part left by another
//! client), with `If-Range` carrying the ETag saved next to it in
//! `DEST.part.etag`: if the file changed, the server answers 200 with the
//! whole file and the download starts over instead of splicing two
//! versions together.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use std::io::Read;

use sluice_http::client::ChunkedDecoder;
use sluice_http::{ContentRange, Framing as BodyFraming, HttpUrl, Method};

use super::exchange::{self, refused, Exchange};
use crate::cli::GetArgs;
use crate::drain::{Drain, DrainConfig, Framing, Source};
use crate::error::{ClientError, Result};
use crate::ftp::get::Dest;
use crate::progress::Progress;
use crate::stats::{self, Stats};
use crate::writer::{self, Block, Sink, Writer, WriterConfig, WriterInput};

/// What `--verify` asks an HTTP server for (RFC 9530).
const WANT_DIGEST: &str = "Want-Repr-Digest: sha-256=10";

/// Smallest range worth its own connection: below this, the extra
/// round trips cost more than a second stream gains.
const MIN_PIECE: u64 = 1 << 20;

/// One response whose body is being received.
pub(super) struct Piece {
    pub(super) x: Exchange,
    /// File offset of the body's first byte.
    pub(super) start: u64,
    /// Body length, when the head says (Content-Range or Content-Length);
    /// `None`: until the server closes.
    pub(super) len: Option<u64>,
}

/// What the requests came to.
struct Fetch {
    pieces: Vec<Piece>,
    /// Total file size, when the server said.
    size: Option<u64>,
    /// Bytes kept from an earlier run.
    already: u64,
    etag: Option<String>,
    /// The file's SHA-256 from a `Repr-Digest` field, if the server sent
    /// one (asked for with `--verify`, or unasked).
    digest: Option<Vec<u8>>,
    /// The server takes ranges of this very file (HEAD said so and the
    /// GET came back with the same size and ETag): automatic streams may
    /// split the one piece.
    splittable: bool,
}

/// Runs one download.
pub fn run(a: &GetArgs) -> Result<()> {
    let u = HttpUrl::parse(&a.url).map_err(|e| ClientError::Usage(e.to_string()))?;
    let dest = Dest::resolve(a.dest.as_deref(), u.file_name().as_deref())?;
    if dest.is_stream() && (a.resume || a.verify) {
        return Err(ClientError::Usage(
            "--continue and --verify need a regular file DEST, not `-` or a device".into(),
        ));
    }
    let timeout = Duration::from_secs(a.opts.timeout);
    let (mut already, saved_etag) = match &dest {
        Dest::File { part, resume, .. } if a.resume => {
            // Never past what the `.part` holds (a side file newer than
            // the data, or a `.part` cut short): the gap would become zeros.
            let at = crate::ftp::get::resume_point(part, resume);
            (at, std::fs::read_to_string(etag_file(part)).ok())
        }
        _ => (0, None),
    };
    if already == 0 {
        // An ETag without a part to go with it says nothing.
        if let Dest::File { part, .. } = &dest {
            let _ = std::fs::remove_file(etag_file(part));
        }
    }
    let saved_etag = saved_etag
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    // A device is opened first: one that takes positional writes
    // (/dev/null) can take parallel ranges, a FIFO only one in-order stream.
    let device = match &dest {
        Dest::Device(p) => Some(writer::device_sink(p)?),
        _ => None,
    };
    let positional = match &dest {
        Dest::File { .. } => true,
        _ => matches!(device, Some(Sink::File(_))),
    };
    let streams = if positional { a.opts.parallel } else { 1 };
    // One file on its own (a tree's files already run side by side).
    let auto = a.opts.auto_streams() && positional && !a.tree.recursive;

    let t0 = Instant::now();
    let want = a.verify.then_some(WANT_DIGEST);
    let fetch = if streams > 1 {
        parallel(
            &u,
            streams,
            already,
            saved_etag.as_deref(),
            want,
            timeout,
            a.opts.drs,
        )?
    } else {
        // Automatic streams ask for `bytes=already-` even from 0: a 206
        // says ranges work and gives the size, with no HEAD round trip.
        single(
            &u,
            already,
            auto,
            saved_etag.as_deref(),
            want,
            timeout,
            a.opts.drs,
        )?
    };
    already = fetch.already;
    if a.verify && fetch.digest.is_none() {
        return Err(ClientError::NoChecksum(
            "the server sent no Repr-Digest (RFC 9530) with sha-256".into(),
        ));
    }
    let digest = fetch.digest.clone();

    let (sink, prefix_file) = match (&dest, device) {
        (Dest::File { part, resume, .. }, _) => {
            let f = writer::open_part(part, already)?;
            writer::save_prefix(resume, already)?;
            match &fetch.etag {
                Some(e) => std::fs::write(etag_file(part), e)
                    .map_err(|err| ClientError::local("write the ETag file", err))?,
                None => {
                    let _ = std::fs::remove_file(etag_file(part));
                }
            }
            (Sink::File(f), Some(resume.clone()))
        }
        (_, Some(device)) => (device, None),
        (_, None) => (Sink::Stdout, None),
    };
    // Kept on the file, as wget does (a later `get -r --sync` compares it).
    let last_modified = fetch
        .pieces
        .first()
        .and_then(|p| p.x.head.field("last-modified"))
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let stats = Arc::new(Stats::default());
    let n_streams = fetch.pieces.len();
    let r = receive(a, &u, auto, fetch, sink, prefix_file, &stats, timeout);
    if let Err(e) = r {
        if let Dest::File { part, resume, .. } = &dest {
            if already == 0 && stats.bytes_written.load(Relaxed) == 0 {
                // Nothing to resume from: leave no empty `.part` behind.
                for p in [part.clone(), resume.clone(), etag_file(part)] {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        return Err(e);
    }
    let elapsed = t0.elapsed();
    let mut verified = String::new();
    if let Dest::File { path, part, resume } = &dest {
        if let Some(d) = &digest {
            // Checked whenever the server sent one, asked or not: it
            // costs one read of the file here, and catches bytes changed
            // on the way.
            verified = verify(part, d).map_err(|e| {
                e.with_advice(|| {
                    format!(
                        "what arrived is kept in {}; --continue cannot repair it: \
                         download again without --continue",
                        part.display()
                    )
                })
            })?;
        }
        std::fs::rename(part, path)
            .map_err(|e| ClientError::local(format!("rename to {}", path.display()), e))?;
        let _ = std::fs::remove_file(resume);
        let _ = std::fs::remove_file(etag_file(part));
        if let Some(t) = last_modified {
            let _ = std::fs::File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_modified(t));
        }
    }
    let auto_count = stats.streams_auto.load(Relaxed);
    let mut detail = if auto_count > 0 {
        format!(
            "HTTP, auto {auto_count} stream{} (peak {}, {} changes)",
            if auto_count == 1 { "" } else { "s" },
            stats.streams_peak.load(Relaxed),
            stats.streams_changes.load(Relaxed)
        )
    } else {
        format!(
            "HTTP, {n_streams} stream{}",
            if n_streams == 1 { "" } else { "s" }
        )
    };
    if already > 0 {
        detail.push_str(&format!(", resumed at {already}"));
    }
    if !verified.is_empty() {
        detail.push_str(&format!(", verified {verified}"));
    }
    let bytes = stats.bytes.load(Relaxed);
    // A file of a tree (`-r`) is counted in the tree's one summary.
    if !a.tree.recursive {
        eprintln!("{}", stats::summary("received", bytes, elapsed, &detail));
    }
    stats.print_end(a.opts.stats, "HTTP", elapsed);
    Ok(())
}

/// Compares the SHA-256 of `part` with the server's `Repr-Digest`;
/// `SHA256 <hex>` when they agree.
fn verify(part: &Path, server: &[u8]) -> Result<String> {
    let algo = crate::checksum::Algorithm::Sha256;
    let mine = crate::checksum::file(part, algo)
        .map_err(|e| ClientError::local(format!("checksum {}", part.display()), e))?;
    let server = hex::encode(server);
    if crate::checksum::same(&server, &mine) {
        Ok(format!("SHA256 {mine} (Repr-Digest)"))
    } else {
        Err(ClientError::ChecksumMismatch {
            algo: "SHA256 (Repr-Digest)".into(),
            server,
            local: mine,
            advice: String::new(),
        })
    }
}

/// The SHA-256 in a response's `Repr-Digest` field, if any.
fn repr_digest(h: &sluice_http::ResponseHead) -> Option<Vec<u8>> {
    h.field("repr-digest")
        .and_then(sluice_http::digest::repr_sha256)
}

/// One GET, ranged from `already` when resuming.
fn single(
    u: &HttpUrl,
    already: u64,
    ranged: bool,
    etag: Option<&str>,
    want: Option<&'static str>,
    timeout: Duration,
    drs: bool,
) -> Result<Fetch> {
    let ranged = ranged || already > 0;
    let range = ranged.then_some((already, None));
    let x = exchange::request_full(u, Method::Get, range, etag, want, timeout, drs)?;
    check_coding(&x.head)?;
    let h = &x.head;
    let digest = repr_digest(h);
    match (h.status, h.content_range) {
        (
            206,
            Some(ContentRange::Bytes {
                first,
                last,
                complete,
            }),
        ) if first == already => {
            let len = range_body_len(h, first, last)?;
            Ok(Fetch {
                size: complete,
                already,
                etag: h.etag().map(str::to_owned),
                digest,
                // The whole rest of a file of known size, in ranges.
                splittable: complete == Some(already + len),
                pieces: vec![Piece {
                    len: Some(len),
                    x,
                    start: already,
                }],
            })
        }
        (206, _) => Err(ClientError::Protocol(format!(
            "asked for bytes from {already}, got Content-Range {:?}",
            h.field("content-range")
        ))),
        (200, _) => {
            if already > 0 {
                tracing::info!(
                    "the server sent the whole file (changed or no ranges): starting over"
                );
            }
            Ok(Fetch {
                size: h.content_length,
                already: 0,
                etag: h.etag().map(str::to_owned),
                digest,
                splittable: false,
                pieces: vec![Piece {
                    len: h.content_length,
                    x,
                    start: 0,
                }],
            })
        }
        // Resuming a file we already have in full.
        // (Or an empty file asked for from 0.)
        (416, Some(ContentRange::Unsatisfied { complete })) if ranged && complete == already => {
            Ok(Fetch {
                size: Some(complete),
                already,
                etag: etag.map(str::to_owned),
                digest,
                splittable: false,
                pieces: Vec::new(),
            })
        }
        _ => Err(refused("GET", h)),
    }
}

/// HEAD for size and validators, then `n` ranged GETs over what is left.
fn parallel(
    u: &HttpUrl,
    n: u32,
    mut already: u64,
    saved_etag: Option<&str>,
    want: Option<&'static str>,
    timeout: Duration,
    drs: bool,
) -> Result<Fetch> {
    let probe = exchange::request_with(u, Method::Head, None, None, want, timeout)?;
    let h = probe.head;
    if h.status != 200 {
        return Err(refused("HEAD", &h));
    }
    let etag = h.etag().map(str::to_owned);
    let digest = repr_digest(&h);
    let size = match h.content_length {
        Some(s) if h.accepts_ranges() => s,
        _ => return single(u, already, false, saved_etag, want, timeout, drs),
    };
    if already > size || (already > 0 && saved_etag.is_some() && saved_etag != etag.as_deref()) {
        // The file changed since the part was written: start over.
        already = 0;
    }
    let left = size - already;
    if left == 0 {
        return Ok(Fetch {
            pieces: Vec::new(),
            size: Some(size),
            already,
            etag,
            digest,
            splittable: false,
        });
    }
    let count = (left / MIN_PIECE).clamp(1, u64::from(n));
    if count == 1 {
        return single(
            u,
            already,
            false,
            etag.as_deref().or(saved_etag),
            want,
            timeout,
            drs,
        );
    }
    let mut pieces = Vec::new();
    for i in 0..count {
        let a = already + left * i / count;
        let b = already + left * (i + 1) / count;
        pieces.push(ranged(u, a..b, size, etag.as_deref(), timeout, drs)?);
    }
    Ok(Fetch {
        pieces,
        size: Some(size),
        already,
        etag,
        digest,
        splittable: false,
    })
}

/// GET of bytes `r` of a file of `size` bytes with ETag `etag`. The
/// request names the version it wants: a file replaced since the HEAD
/// comes back 200, not a wrong slice, and that is an error.
pub(super) fn ranged(
    u: &HttpUrl,
    r: std::ops::Range<u64>,
    size: u64,
    etag: Option<&str>,
    timeout: Duration,
    drs: bool,
) -> Result<Piece> {
    let (a, b) = (r.start, r.end);
    let x = exchange::request_full(
        u,
        Method::Get,
        Some((a, Some(b - 1))),
        etag,
        None,
        timeout,
        drs,
    )?;
    check_coding(&x.head)?;
    let ok = matches!(x.head.content_range,
        Some(ContentRange::Bytes { first, last, complete })
            if first == a && last == b - 1 && complete.is_none_or(|c| c == size));
    match x.head.status {
        206 if ok && x.head.etag() == etag => {
            let len = range_body_len(&x.head, a, b - 1)?;
            Ok(Piece {
                len: Some(len),
                x,
                start: a,
            })
        }
        206 | 200 => Err(ClientError::Protocol(format!(
            "range {a}-{} came back as {} {:?} (the file changed during the download?)",
            b - 1,
            x.head.status,
            x.head.field("content-range")
        ))),
        _ => Err(refused("GET", &x.head)),
    }
}

/// The body length of a 206 for bytes `first..=last`: a Content-Length
/// that disagrees would put bytes of the wrong offsets into the file.
fn range_body_len(h: &sluice_http::ResponseHead, first: u64, last: u64) -> Result<u64> {
    let len = last - first + 1;
    match h.content_length {
        Some(cl) if cl != len => Err(ClientError::Protocol(format!(
            "206 response: Content-Length {cl} does not match Content-Range bytes {first}-{last}"
        ))),
        _ => Ok(len),
    }
}

/// The only transfer coding we decode is chunked, and we never ask for
/// others (no TE field): a body in any other coding (`gzip`, or `gzip,
/// chunked`) would be saved still encoded, a wrong file.
fn check_coding(h: &sluice_http::ResponseHead) -> Result<()> {
    let mut codings = h
        .headers
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(c), None) if c.eq_ignore_ascii_case("chunked") => Ok(()),
        _ => Err(ClientError::Protocol(format!(
            "unsupported Transfer-Encoding `{}` (only chunked is decoded)",
            crate::ftp::control::printable(h.field("transfer-encoding").unwrap_or(""))
        ))),
    }
}

/// Bytes read from the socket per call for a chunked body.
const READ_CHUNK: usize = 128 << 10;

/// Where the validator of a `.part` is kept for `--continue`.
fn etag_file(part: &Path) -> PathBuf {
    let mut s = part.as_os_str().to_owned();
    s.push(".etag");
    PathBuf::from(s)
}

/// Receiving the body into the writer.
mod receive;
use receive::receive;
pub(super) use receive::start_drain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_file_sits_next_to_the_part() {
        assert_eq!(
            etag_file(Path::new("/t/a.bin.part")),
            PathBuf::from("/t/a.bin.part.etag")
        );
    }

    fn head(raw: &str) -> sluice_http::ResponseHead {
        sluice_http::parse_response_head(raw.as_bytes())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn only_plain_chunked_transfer_coding_is_taken() {
        for ok in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n",
        ] {
            assert!(check_coding(&head(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(
                matches!(check_coding(&head(bad)), Err(ClientError::Protocol(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn range_body_length_comes_from_content_range_and_must_match_content_length() {
        let h =
            head("HTTP/1.1 206 P\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(range_body_len(&h, 10, 19).unwrap(), 10);
        let h = head("HTTP/1.1 206 P\r\nContent-Range: bytes 10-19/100\r\n\r\n");
        assert_eq!(range_body_len(&h, 10, 19).unwrap(), 10);
        let h =
            head("HTTP/1.1 206 P\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 15\r\n\r\n");
        assert!(matches!(
            range_body_len(&h, 10, 19),
            Err(ClientError::Protocol(m)) if m.contains("Content-Length 15")
        ));
    }
}
