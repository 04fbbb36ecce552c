//! Checksums on request: `Want-Repr-Digest` / `Repr-Digest` (RFC 9530)
//! and the older `Want-Digest` / `Digest` (RFC 3230, what gfal2 and davix
//! send). Decisions and text only; the shell hashes the file (off the
//! event loop, cached) and adds the fields with [`add_fields`].
//!
//! ```text
//! Want-Repr-Digest: sha-256=10, sha-512=3   ->  Repr-Digest: sha-256=:<base64>:
//! Want-Digest: SHA-256;q=0.5, adler32;q=1   ->  Digest: adler32=0a1b2c3d
//! ```
//!
//! A request that asks for neither gets no digest, and costs nothing.

use base64ct::{Base64, Encoding};

use crate::serve::Plan;
use crate::Status;

/// Digest algorithms the server computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DigestAlg {
    /// SHA-256 (both headers).
    Sha256,
    /// MD5 (RFC 3230 `Digest` only; RFC 9530 deprecates it).
    Md5,
    /// Adler-32 (RFC 3230 `Digest` only; 8 hex digits).
    Adler32,
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// `Repr-Digest: sha-256=...` (the only RFC 9530 algorithm served).
    pub repr_sha256: bool,
    /// The `Digest` algorithm to send: the client's most preferred one
    /// among those served.
    pub legacy: Option<DigestAlg>,
}

impl Wanted {
    /// The algorithms to compute (each at most once).
    pub fn algorithms(self) -> Vec<DigestAlg> {
        let mut v: Vec<DigestAlg> = self
            .repr_sha256
            .then_some(DigestAlg::Sha256)
            .into_iter()
            .collect();
        if let Some(a) = self.legacy {
            if !v.contains(&a) {
                v.push(a);
            }
        }
        v
    }

    /// True when nothing is asked.
    pub fn is_empty(self) -> bool {
        !self.repr_sha256 && self.legacy.is_none()
    }
}

/// What the `Want-Repr-Digest` and `Want-Digest` values ask for. Unknown
/// algorithms and preference 0 (RFC 9530 4: "not acceptable") are
/// ignored; a malformed member is skipped, never an error.
pub fn wanted(want_repr_digest: Option<&str>, want_digest: Option<&str>) -> Wanted {
    let repr_sha256 = want_repr_digest.is_some_and(|v| {
        v.split(',').any(|m| {
            let (k, pref) = m.split_once('=').unwrap_or((m, "1"));
            k.trim().eq_ignore_ascii_case("sha-256")
                && pref
                    .trim()
                    .parse::<u32>()
                    .is_ok_and(|p| (1..=10).contains(&p))
        })
    });
    let mut best: Option<(u32, DigestAlg)> = None;
    for item in want_digest.unwrap_or("").split(',') {
        let mut parts = item.split(';');
        let alg = match parts
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "sha-256" => DigestAlg::Sha256,
            "md5" => DigestAlg::Md5,
            "adler32" => DigestAlg::Adler32,
            _ => continue,
        };
        let mut q = 1000;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = qvalue(v.trim()).unwrap_or(0);
                }
            }
        }
        // Ties go to the first listed.
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, alg));
        }
    }
    Wanted {
        repr_sha256,
        legacy: best.map(|(_, a)| a),
    }
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths.
fn qvalue(v: &str) -> Option<u32> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int: u32 = match int {
        "0" => 0,
        "1" => 1,
        _ => return None,
    };
    let frac: u32 = format!("{frac:0<3}").parse().ok()?;
    let q = int * 1000 + frac;
    (q <= 1000).then_some(q)
}

/// Whether a response of this status carries the file's digests: the
/// whole representation (200) or a part of it (206: Repr-Digest is still
/// of the whole file, RFC 9530 3).
pub fn applies(status: Status) -> bool {
    matches!(status, Status::Ok | Status::PartialContent)
}

/// The fields for `wanted`, given each algorithm's raw digest (`digest`
/// returns `None` for one that could not be computed: left out).
pub fn fields(
    wanted: Wanted,
    digest: impl Fn(DigestAlg) -> Option<Vec<u8>>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if wanted.repr_sha256 {
        if let Some(d) = digest(DigestAlg::Sha256) {
            out.push((
                "Repr-Digest".into(),
                format!("sha-256=:{}:", Base64::encode_string(&d)),
            ));
        }
    }
    if let Some(a) = wanted.legacy {
        if let Some(d) = digest(a) {
            let v = match a {
                DigestAlg::Sha256 => format!("SHA-256={}", Base64::encode_string(&d)),
                DigestAlg::Md5 => format!("MD5={}", Base64::encode_string(&d)),
                DigestAlg::Adler32 => format!("adler32={}", hex(&d)),
            };
            out.push(("Digest".into(), v));
        }
    }
    out
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Adds `fields` to the end of `plan`'s head.
pub fn add_fields(plan: &mut Plan, fields: &[(String, String)]) {
    if fields.is_empty() || !plan.head.ends_with(b"\r\n\r\n") {
        return;
    }
    plan.head.truncate(plan.head.len() - 2);
    for (k, v) in fields {
        plan.head.extend_from_slice(k.as_bytes());
        plan.head.extend_from_slice(b": ");
        plan.head.extend_from_slice(v.as_bytes());
        plan.head.extend_from_slice(b"\r\n");
    }
    plan.head.extend_from_slice(b"\r\n");
}

/// The SHA-256 a `Repr-Digest` value carries (`sha-256=:<base64>:`,
/// among other members), for a client to check what it received.
pub fn repr_sha256(value: &str) -> Option<Vec<u8>> {
    value.split(',').find_map(|m| {
        let (k, v) = m.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("sha-256") {
            return None;
        }
        let v = v.trim().strip_prefix(':')?.strip_suffix(':')?;
        let d = Base64::decode_vec(v).ok()?;
        (d.len() == 32).then_some(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_requests_ask_for() {
        let w = wanted(Some("sha-256=10"), None);
        assert_eq!((w.repr_sha256, w.legacy), (true, None));
        assert!(wanted(Some("sha-512=3, sha-256=0"), None).is_empty());
        assert!(wanted(Some("SHA-256=1"), None).repr_sha256);
        assert!(!wanted(Some("sha-256=11"), None).repr_sha256);
        assert!(wanted(Some("garbage,,;"), Some(";;,q=1")).is_empty());
        let w = wanted(None, Some("SHA-256;q=0.5, adler32;q=1"));
        assert_eq!(w.legacy, Some(DigestAlg::Adler32));
        assert_eq!(wanted(None, Some("md5")).legacy, Some(DigestAlg::Md5));
        assert_eq!(
            wanted(None, Some("sha-512, sha-256;q=0.1")).legacy,
            Some(DigestAlg::Sha256)
        );
        assert_eq!(wanted(None, Some("adler32;q=0")).legacy, None);
        assert_eq!(wanted(None, Some("adler32;q=2")).legacy, None);
        let both = wanted(Some("sha-256=5"), Some("SHA-256"));
        assert_eq!(both.algorithms(), [DigestAlg::Sha256]);
        assert_eq!(wanted(None, None), Wanted::default());
    }

    #[test]
    fn field_text_and_round_trip() {
        // sha256("") and md5(""), as `sha256sum`/`md5sum` of an empty file.
        let sha = hex_bytes("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let md5 = hex_bytes("d41d8cd98f00b204e9800998ecf8427e");
        let d = |a| match a {
            DigestAlg::Sha256 => Some(sha.clone()),
            DigestAlg::Md5 => Some(md5.clone()),
            DigestAlg::Adler32 => Some(vec![0, 0, 0, 1]),
        };
        let f = fields(wanted(Some("sha-256=1"), Some("MD5")), d);
        assert_eq!(
            f,
            [
                (
                    "Repr-Digest".to_string(),
                    "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:".to_string()
                ),
                (
                    "Digest".to_string(),
                    "MD5=1B2M2Y8AsgTpgAmY7PhCfg==".to_string()
                ),
            ]
        );
        assert_eq!(
            fields(wanted(None, Some("adler32")), d)[0].1,
            "adler32=00000001"
        );
        assert_eq!(repr_sha256(&f[0].1), Some(sha.clone()));
        assert_eq!(
            repr_sha256("sha-512=:AAAA:, sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"),
            Some(sha)
        );
        assert_eq!(repr_sha256("sha-256=:AAAA:"), None);
        assert_eq!(repr_sha256("sha-256=47DEQ"), None);
    }

    fn hex_bytes(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
