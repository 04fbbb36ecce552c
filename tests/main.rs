//! Integration tests: the `sluice` binary against real clients and servers.
//!
//! Run with `cargo test -p sluice-server --test integration` (or
//! `cargo test --workspace`). Peer tools (curl, wget, lftp, aria2c,
//! python3, globus-url-copy, globus-gridftp-server, vsftpd, tnftp, aioftp,
//! gfal-sum) are installed by `.ci/deps`; a test whose tool is missing is
//! skipped with a printed reason, unless SLUICE_REQUIRE_PEERS=1 (CI), which
//! makes it fail.
//! SLUICE_ITEST_SERVER=vsftpd runs the server-side suites against vsftpd
//! instead of `sluice serve`, to check the harness against a known server.

#![forbid(unsafe_code)]

/// Shared machinery: test files, servers and peers, client runner, raw
/// control connection.
mod harness;

/// The harness checked against peers alone: vsftpd and globus-gridftp-server
/// start and serve the corpus to curl and globus-url-copy.
mod peers;

/// Downloads from `sluice serve`, every file size, sha256 compared: curl
/// (passive, active), wget, lftp (get, pget, mirror), Python ftplib, aria2c,
/// globus-url-copy (stream, -p 1, -p 4 / MODE E); six clients of one big
/// file at once; curl over IPv6 loopback (EPSV/EPRT).
mod downloads;

/// Uploads to `sluice serve --writable` (curl, ftplib, globus-url-copy),
/// download and upload resume with `curl -C -`, concurrent uploads (never
/// a mixed file), a download during an overwrite, and a read-only server
/// refusing writes.
mod uploads;

mod uploads_resume;

/// MODE E uploads cut by kill -9 and resumed by REST ranges (scripted and
/// globus-url-copy -rst).
mod uploads_resume_ranges;

/// MLST `type=dir` (aioftp removes a tree by it), MFMT (and `sluice put
/// -r` keeping times with it), CKSM SHA1 and CRC32C.
mod ftp_facts;

/// NLST/LIST wildcards (`mget *.dat`): Python ftplib (also against
/// vsftpd) and tnftp.
mod wildcards;

/// HTTP digests on request (Want-Repr-Digest, Want-Digest) with curl and
/// gfal2's gfal-sum, and `sluice get` checking Repr-Digest (a fake server
/// sends a wrong one).
mod http_digests;

/// The `sluice get/put/ls` client against vsftpd (MODE S), against
/// globus-gridftp-server (MODE E, -p 4), and against `sluice serve`,
/// with `--verify`, `--continue`, IPv6, `--stats`, `--mem-cap`, stdout or
/// directory DEST, and the exit codes for refused connection, login,
/// request and an unavailable checksum.
mod client;

/// Stream counts of `sluice get`: chosen automatically without `-p`
/// (HTTP ranges added and cut while the file comes in), forced by `-p N`.
mod client_streams;

/// `sluice get -r` / `put -r`: trees up and down against `sluice serve`
/// (and down from vsftpd, which has no MLSD: LIST fallback)
/// (sha256 of every file), `--sync --delete`, `cp`, peers.
mod trees;

/// Trees with the server killed mid-job and restarted: `get -r` and
/// `put -r` retry and resume; `put --continue` commits a full partial.
mod tree_restarts;

/// `get -r` against scripted servers: hostile listings (FTP and HTTP
/// JSON) refused, a refused file, pipelining in step, keep-alive HTTP.
mod tree_fakes;

/// GridFTP data channel caching: globus-url-copy -pp -r (and -cc 4)
/// downloads a tree of small files on kept MODE E connections (125).
mod kept_channels;

/// `sluice get` against a GridFTP server scripted in the test: MODE E
/// blocks out of order, duplicated, with split headers; a block missing
/// despite 226 (exit 7); a checksum mismatch (exit 8); URL credentials.
mod fake_gridftp;

/// The HTTP/1.1 front door with real clients: curl, wget, aria2c, Python
/// urllib, `sluice get http://` (also against nginx), headless Chromium.
mod http;

/// HTTP/1.1 on raw sockets: ranges, conditionals, keep-alive, listings,
/// the open-file cache.
mod http_requests;

/// HTTP/1.1 on raw sockets, hostile and over the limits: bad requests,
/// stalled heads and readers, 503 over the connection limit, HTTP off.
mod http_hostile;

/// The `auto` data path: copy to a client on this host, sendfile to one in
/// another network namespace (root only).
mod data_path;

/// Circus sharing (`--sharing circus`): one file downloaded at once by
/// MODE E clients of every kind (`sluice get -p 4/-p 1`, globus-url-copy
/// -p 1/-p 4), sha256 compared, and the engine's disk-read counter showing
/// the file read about once for eight readers.
mod sharing;

/// Cue: a capped download holds its cap roughly and arrives intact
/// (curl and `sluice get`, sha256); two classes 3:1 under a server cap.
mod cue;

/// Hostile and malformed control input on raw TCP (overlong lines, logins,
/// traversal, symlinks, control characters, pipelining, many idle
/// sessions): each test checks the replies and that the server still
/// serves a fresh session.
mod bad_inputs;

/// Hostile data-channel input on raw TCP (PORT/EPRT bounces, bad REST,
/// ABOR, vanishing and stalled clients, broken MODE E uploads), each
/// followed by a fresh session served.
mod bad_data_channels;

/// TLS on both doors: HTTPS (curl, wget, aria2c, `sluice get https://`),
/// kernel TLS, broken handshakes, bad, wrong-host and expired
/// certificates, certificate reload.
mod tls;

/// FTPS: explicit (curl --ssl-reqd, lftp, Python ftplib FTP_TLS, `sluice
/// get/ls/put ftpes://`) and implicit, `require_tls`, broken AUTH TLS.
mod ftps;
/// More peers over TLS: headless Chromium over HTTPS trusting a test CA
/// (not an exception), rclone's FTP backend with explicit TLS.
mod tls_peers;

// Both front doors' listener: backlog, running out of descriptors.
mod listener;

// Big directory listings over both doors: complete, streamed, bounded.
mod listings;

/// What limited a transfer: a slow reader makes the server's xferlog say
/// receiver window; a paced server makes `sluice get --stats=json` say
/// network or sender (issue 13, part 4).
mod limits;

/// Operating the server: SIGTERM/SIGINT (running transfers finish, new
/// connections are refused, uploads cut at the timeout stay resumable
/// partials), SIGHUP reload, SIGUSR1 log reopen.
mod operations;

/// `serve --check-config`, `--run-as`, man pages and completions, the
/// systemd unit.
mod operations_install;
