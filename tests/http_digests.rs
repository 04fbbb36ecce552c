//! Checksums on request over HTTP: `Want-Repr-Digest` / `Repr-Digest`
//! (RFC 9530) and `Want-Digest` / `Digest` (RFC 3230) from `sluice
//! serve`, checked against Python's hashlib/zlib; none unasked; and
//! `sluice get` checking a received file against `Repr-Digest`, with a
//! fake server whose digest is wrong (exit 8, the file kept as `.part`);
//! gfal2's `gfal-sum` (the grid's checksum client, via davix) reading
//! ADLER32 and MD5 from `Want-Digest`.

use crate::harness::process::ProcessGuard;
use crate::harness::servers::{self, ServeOptions};
use crate::harness::*;
use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// `sluice serve` and its HTTP port.
fn sluice_http() -> (FtpServer, u16) {
    let ftp = servers::sluice(ServeOptions::default());
    let log = ftp.log_tail();
    let port = log
        .lines()
        .find_map(|l| {
            let rest = &l[l.find("http listening on ")? + "http listening on ".len()..];
            rest.trim().rsplit(':').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `http listening on` line\n{log}"));
    (ftp, port)
}

/// The digests of `path` as Python computes them: Repr-Digest's base64
/// SHA-256, MD5 base64, adler32 hex.
fn python_digests(path: &std::path::Path) -> (String, String, String) {
    let script = r#"
import base64, hashlib, sys, zlib
d = open(sys.argv[1], 'rb').read()
print(base64.b64encode(hashlib.sha256(d).digest()).decode())
print(base64.b64encode(hashlib.md5(d).digest()).decode())
print('%08x' % (zlib.adler32(d) & 0xffffffff))
"#;
    let out = run(Command::new("python3").args(["-c", script]).arg(path));
    out.assert_success();
    let l: Vec<String> = out.stdout.lines().map(String::from).collect();
    (l[0].clone(), l[1].clone(), l[2].clone())
}

fn head_fields(port: u16, rel: &str, headers: &[&str]) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "60"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = run(cmd.arg(format!("http://127.0.0.1:{port}/{rel}")));
    out.assert_success();
    out.stdout.to_ascii_lowercase()
}

#[test]
fn digests_on_request_only() {
    if !require_tool("curl") || !require_tool("python3") {
        return;
    }
    let (server, port) = sluice_http();
    let name = corpus::file_name((1 << 20) + 7);
    let (sha, md5, adler) = python_digests(&server.local(&name));
    let h = head_fields(port, &name, &["Want-Repr-Digest: sha-256=10"]);
    let want = format!("repr-digest: sha-256=:{}:\r\n", sha.to_ascii_lowercase());
    assert!(h.contains(&want), "{h}");
    assert!(!h.contains("\r\ndigest:"), "{h}");
    // A range: still the whole file's digest (RFC 9530 3).
    let mut cmd_h = vec!["Want-Repr-Digest: sha-512=9, sha-256=1", "Range: bytes=5-9"];
    let h = head_fields(port, &name, &cmd_h);
    assert!(h.starts_with("http/1.1 206"), "{h}");
    assert!(h.contains(&want), "{h}");
    // RFC 3230: the most preferred algorithm served.
    cmd_h = vec!["Want-Digest: SHA-256;q=0.3, adler32;q=0.9, md5;q=0.5"];
    let h = head_fields(port, &name, &cmd_h);
    assert!(
        h.contains(&format!("\r\ndigest: adler32={adler}\r\n")),
        "{h}"
    );
    let h = head_fields(port, &name, &["Want-Digest: MD5"]);
    assert!(
        h.contains(&format!("\r\ndigest: md5={}\r\n", md5.to_ascii_lowercase())),
        "{h}"
    );
    // Nothing asked (or only what is not served): nothing computed or sent.
    for asked in [&[][..], &["Want-Repr-Digest: sha-512=10"][..]] {
        let h = head_fields(port, &name, asked);
        assert!(!h.contains("digest:"), "{asked:?}: {h}");
    }
    // HEAD gets the field too.
    let out = run(Command::new("curl")
        .args(["-sS", "-I", "-H", "Want-Repr-Digest: sha-256=5"])
        .arg(format!("http://127.0.0.1:{port}/{name}")));
    assert!(
        out.stdout.to_ascii_lowercase().contains(&want),
        "{}",
        out.stdout
    );
    server.assert_running();
}

/// `sluice get --verify http://...` asks for Repr-Digest and checks it,
/// one stream and four.
#[test]
fn sluice_get_verifies_with_repr_digest() {
    let (server, port) = sluice_http();
    let name = corpus::file_name((1 << 20) + 7);
    let dest = tempfile::tempdir().unwrap();
    for p in ["1", "4"] {
        let d = dest.path().join(format!("f{p}"));
        let out = run(Command::new(sluice_bin())
            .args(["get", "--verify", "-p", p])
            .arg(format!("http://127.0.0.1:{port}/{name}"))
            .arg(&d));
        out.assert_success();
        assert!(out.stderr.contains("verified SHA256"), "{}", out.describe());
        assert_eq!(sha256_file(&d), sha256_file(&server.local(&name)));
    }
}

/// A server that sends the file with a wrong `Repr-Digest` (bytes changed
/// on the way, as far as the client can tell).
const FAKE: &str = r#"
import base64, hashlib, http.server, sys
body = b'x' * 100000
wrong = base64.b64encode(hashlib.sha256(b'other').digest()).decode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Repr-Digest', 'sha-256=:%s:' % wrong)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(('127.0.0.1', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[test]
fn a_wrong_repr_digest_fails_the_download() {
    if !require_tool("python3") {
        return;
    }
    let mut cmd = Command::new("python3");
    cmd.args(["-c", FAKE])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let fake = ProcessGuard::spawn(&mut cmd).expect("start the fake server");
    let mut line = String::new();
    BufReader::new(fake.take_stdout().expect("stdout"))
        .read_line(&mut line)
        .expect("port line");
    let port: u16 = line.trim().parse().expect("port");
    let dest = tempfile::tempdir().unwrap();
    // Asked for (--verify) or not: a digest that disagrees fails.
    for verify in [true, false] {
        let d = dest.path().join(format!("f{verify}"));
        let mut c = Command::new(sluice_bin());
        c.arg("get");
        if verify {
            c.arg("--verify");
        }
        let out = run(c.arg(format!("http://127.0.0.1:{port}/f")).arg(&d));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(8),
            "{}",
            out.describe()
        );
        assert!(out.stderr.contains("checksum"), "{}", out.describe());
        assert!(out.stderr.contains("Repr-Digest"), "{}", out.describe());
        assert!(!d.exists(), "a file that failed its check is not renamed");
        let part = fs::read_dir(dest.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains(".part"));
        assert!(part, "what arrived is kept");
    }
}

/// gfal2 (`gfal-sum`, the client grid sites check transfers with) asks an
/// HTTP endpoint for ADLER32 and MD5 with `Want-Digest` and fails
/// ("checksum calculation ... not supported") when no `Digest` comes
/// back: against `sluice serve` both come back and match Python's.
#[test]
fn gfal_sum_reads_checksums_from_want_digest() {
    if !require_tool("gfal-sum") {
        return;
    }
    let Some(python) = require_debian_python_with("gfal2") else {
        return;
    };
    let (server, port) = sluice_http();
    let name = corpus::file_name((1 << 20) + 7);
    let (_, _, adler) = python_digests(&server.local(&name));
    let md5 = run(Command::new("python3")
        .args([
            "-c",
            "import hashlib,sys;print(hashlib.md5(open(sys.argv[1],'rb').read()).hexdigest())",
        ])
        .arg(server.local(&name)));
    md5.assert_success();
    let url = format!("http://127.0.0.1:{port}/{name}");
    for (alg, want) in [("ADLER32", adler.as_str()), ("MD5", md5.stdout.trim())] {
        // gfal-sum picks its interpreter from GFAL_PYTHONBIN: Debian's,
        // where apt put the gfal2 bindings.
        let out = run(Command::new("gfal-sum")
            .env("GFAL_PYTHONBIN", python)
            .args([&url, alg]));
        out.assert_success();
        assert_eq!(
            out.stdout.split_whitespace().nth(1),
            Some(want),
            "{alg}: {}",
            out.describe()
        );
    }
}
