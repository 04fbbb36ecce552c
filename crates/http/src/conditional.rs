//! Validators and conditional requests (RFC 9110 8.8, 13).
//!
//! The ETag is strong and made of the modification time (to the
//! nanosecond) and the size, as nginx makes its ETag from mtime and
//! size: cheap (no hashing of content) and it changes whenever a write
//! goes through the usual paths. Last-Modified is the mtime cut to whole
//! seconds and never later than `now` (RFC 9110 8.8.2.1).
//!
//! Evaluation order follows RFC 9110 13.2.2 for GET/HEAD: If-Match
//! first (failing: 412); If-Unmodified-Since only when If-Match is absent
//! (failing: 412); then If-None-Match (matching: 304); If-Modified-Since
//! only when If-None-Match is absent (not modified: 304). If-Range
//! (13.1.5) then decides whether a Range header is honoured. The 412
//! tests come first so a client that asked "only this version" never
//! gets a 304 or a range of another version.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The validators of one file version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// Strong entity tag, quotes included: `"<mtime hex>-<size hex>"`.
    pub etag: String,
    /// Last-Modified: whole seconds, clamped to `now`.
    pub last_modified: SystemTime,
}

impl Validators {
    /// Validators for a file of `len` bytes modified at `mtime`, seen at
    /// `now`.
    pub fn new(len: u64, mtime: SystemTime, now: SystemTime) -> Validators {
        let since = mtime.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let etag = format!(
            "\"{:x}.{:x}-{:x}\"",
            since.as_secs(),
            since.subsec_nanos(),
            len
        );
        let now_secs = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let secs = since.as_secs().min(now_secs);
        Validators {
            etag,
            last_modified: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    /// Last-Modified as an IMF-fixdate.
    pub fn last_modified_http(&self) -> String {
        httpdate::fmt_http_date(self.last_modified)
    }
}

/// The outcome of the preconditions for a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Serve the representation (possibly ranged).
    Proceed,
    /// Answer 304 Not Modified.
    NotModified,
    /// Answer 412 Precondition Failed (If-Match or If-Unmodified-Since).
    Failed,
}

/// The precondition fields of one request, as sent (`None`: absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conditions<'a> {
    /// If-Match (several fields joined with `, `).
    pub if_match: Option<&'a str>,
    /// If-Unmodified-Since.
    pub if_unmodified_since: Option<&'a str>,
    /// If-None-Match (several fields joined with `, `).
    pub if_none_match: Option<&'a str>,
    /// If-Modified-Since.
    pub if_modified_since: Option<&'a str>,
}

/// Evaluate every precondition of a GET or HEAD of a file in the order
/// of RFC 9110 13.2.2 (see the module docs).
pub fn evaluate_all(c: &Conditions<'_>, v: &Validators, now: SystemTime) -> Precondition {
    if let Some(im) = c.if_match {
        // Strong comparison (RFC 9110 13.1.1): a weak tag never matches,
        // and an unparsable value matches nothing. "*" matches any
        // current file, and the shell only calls this for one that exists.
        if !(im.trim() == "*" || list_contains(im, &v.etag, true)) {
            return Precondition::Failed;
        }
    } else if let Some(ius) = c
        .if_unmodified_since
        .and_then(|s| httpdate::parse_http_date(s).ok())
    {
        // An invalid date is ignored (RFC 9110 13.1.4). Last-Modified is
        // whole seconds, as the client saw it, so an equal date passes.
        if v.last_modified > ius {
            return Precondition::Failed;
        }
    }
    evaluate(c.if_none_match, c.if_modified_since, v, now)
}

/// Evaluate If-Match / If-Unmodified-Since for a response that has no
/// validators (a directory listing): no entity tag, so only `If-Match:
/// *` can pass; no modification date, so If-Unmodified-Since is ignored
/// (RFC 9110 13.1.4).
pub fn evaluate_unvalidated(c: &Conditions<'_>) -> Precondition {
    match c.if_match {
        Some(im) if im.trim() != "*" => Precondition::Failed,
        _ => Precondition::Proceed,
    }
}

/// Evaluate If-None-Match / If-Modified-Since for a GET or HEAD (the
/// second half of [`evaluate_all`]; never [`Precondition::Failed`]).
pub fn evaluate(
    if_none_match: Option<&str>,
    if_modified_since: Option<&str>,
    v: &Validators,
    now: SystemTime,
) -> Precondition {
    if let Some(inm) = if_none_match {
        // Weak comparison (RFC 9110 13.1.2); "*" matches any current file.
        return if inm.trim() == "*" || list_contains(inm, &v.etag, false) {
            Precondition::NotModified
        } else {
            Precondition::Proceed
        };
    }
    if let Some(ims) = if_modified_since.and_then(|s| httpdate::parse_http_date(s).ok()) {
        // A date in the future is invalid and ignored (RFC 9110 13.1.3).
        if ims <= now && v.last_modified <= ims {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// True if the Range header may be honoured given `If-Range: value`:
/// a strong ETag that matches exactly, or a date equal to Last-Modified.
/// A weak tag or unparsable value means "send everything".
pub fn if_range_matches(value: &str, v: &Validators) -> bool {
    let value = value.trim();
    if value.starts_with('"') || value.starts_with("W/") {
        return list_contains(value, &v.etag, true) && entity_tags(value).count() == 1;
    }
    httpdate::parse_http_date(value).is_ok_and(|d| d == v.last_modified)
}

/// Does the entity-tag list `list` contain `ours`? `strong` makes weak
/// tags never match (strong comparison), otherwise W/ is ignored.
fn list_contains(list: &str, ours: &str, strong: bool) -> bool {
    entity_tags(list).any(|(weak, tag)| tag == ours && !(strong && weak))
}

/// Entity tags in a comma-separated list: (weak, `"opaque"` with quotes).
/// Commas may appear inside quotes, so this is a small scanner, not a
/// split. It stops at the first malformed element.
fn entity_tags(list: &str) -> impl Iterator<Item = (bool, &str)> {
    let mut rest = list;
    std::iter::from_fn(move || {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        let weak = rest.starts_with("W/");
        if weak {
            rest = &rest[2..];
        }
        if !rest.starts_with('"') {
            return None;
        }
        let close = rest[1..].find('"')? + 1;
        let tag = &rest[..=close];
        rest = &rest[close + 1..];
        Some((weak, tag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn v() -> Validators {
        Validators::new(
            1000,
            at(1_700_000_000) + Duration::from_nanos(5),
            at(1_800_000_000),
        )
    }

    #[test]
    fn etag_changes_with_size_and_mtime() {
        let a = v();
        assert_eq!(a.etag, "\"6553f100.5-3e8\"");
        assert_ne!(
            a.etag,
            Validators::new(1001, at(1_700_000_000), at(1_800_000_000)).etag
        );
        assert_ne!(
            a.etag,
            Validators::new(1000, at(1_700_000_000), at(1_800_000_000)).etag
        );
        assert_eq!(a.last_modified, at(1_700_000_000));
        assert_eq!(a.last_modified_http(), "Tue, 14 Nov 2023 22:13:20 GMT");
    }

    #[test]
    fn last_modified_never_after_now() {
        let f = Validators::new(1, at(2_000_000_000), at(1_000_000_000));
        assert_eq!(f.last_modified, at(1_000_000_000));
    }

    #[test]
    fn if_none_match() {
        let now = at(1_800_000_000);
        let e = v().etag;
        assert_eq!(
            evaluate(Some(&e), None, &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(Some(&format!("W/{e}")), None, &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(Some(&format!("\"x,y\", {e}")), None, &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(Some("*"), None, &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(Some("\"other\""), None, &v(), now),
            Precondition::Proceed
        );
        // If-None-Match wins over If-Modified-Since.
        let ims = "Wed, 01 Jan 2025 00:00:00 GMT";
        assert_eq!(
            evaluate(Some("\"other\""), Some(ims), &v(), now),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_modified_since() {
        let now = at(1_800_000_000);
        let same = v().last_modified_http();
        assert_eq!(
            evaluate(None, Some(&same), &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(None, Some("Wed, 01 Jan 2025 00:00:00 GMT"), &v(), now),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), &v(), now),
            Precondition::Proceed
        );
        assert_eq!(
            evaluate(None, Some("garbage"), &v(), now),
            Precondition::Proceed
        );
        // A date after `now` is invalid.
        assert_eq!(
            evaluate(None, Some("Fri, 01 Jan 2100 00:00:00 GMT"), &v(), now),
            Precondition::Proceed
        );
    }

    fn cond<'a>(im: Option<&'a str>, ius: Option<&'a str>) -> Conditions<'a> {
        Conditions {
            if_match: im,
            if_unmodified_since: ius,
            ..Conditions::default()
        }
    }

    #[test]
    fn if_match_is_strong() {
        let now = at(1_800_000_000);
        let e = v().etag;
        let p = |im: &str| evaluate_all(&cond(Some(im), None), &v(), now);
        assert_eq!(p(&e), Precondition::Proceed);
        assert_eq!(p("*"), Precondition::Proceed);
        assert_eq!(p(" * "), Precondition::Proceed);
        assert_eq!(p(&format!("\"a\", {e}")), Precondition::Proceed);
        assert_eq!(p("\"nope\""), Precondition::Failed);
        // Strong comparison: our own tag marked weak does not match.
        assert_eq!(p(&format!("W/{e}")), Precondition::Failed);
        // Not an entity tag at all: nothing matches.
        assert_eq!(p("nope"), Precondition::Failed);
        assert_eq!(p(""), Precondition::Failed);
    }

    #[test]
    fn if_unmodified_since() {
        let now = at(1_800_000_000);
        let p = |ius: &str| evaluate_all(&cond(None, Some(ius)), &v(), now);
        assert_eq!(p("Thu, 01 Jan 1970 00:00:00 GMT"), Precondition::Failed);
        assert_eq!(p("Sun, 06 Nov 1994 08:49:37 GMT"), Precondition::Failed);
        // Equal to Last-Modified (whole seconds) or later: unmodified.
        assert_eq!(p(&v().last_modified_http()), Precondition::Proceed);
        assert_eq!(p("Wed, 01 Jan 2025 00:00:00 GMT"), Precondition::Proceed);
        // An invalid date is ignored.
        assert_eq!(p("yesterday"), Precondition::Proceed);
    }

    #[test]
    fn evaluation_order() {
        let now = at(1_800_000_000);
        let e = v().etag;
        let epoch = "Thu, 01 Jan 1970 00:00:00 GMT";
        // If-Match present: If-Unmodified-Since is not looked at.
        assert_eq!(
            evaluate_all(&cond(Some(&e), Some(epoch)), &v(), now),
            Precondition::Proceed
        );
        // 412 wins over a 304 the If-None-Match would give.
        let c = Conditions {
            if_match: Some("\"nope\""),
            if_none_match: Some(&e),
            ..Conditions::default()
        };
        assert_eq!(evaluate_all(&c, &v(), now), Precondition::Failed);
        let c = Conditions {
            if_unmodified_since: Some(epoch),
            if_modified_since: Some("Wed, 01 Jan 2025 00:00:00 GMT"),
            ..Conditions::default()
        };
        assert_eq!(evaluate_all(&c, &v(), now), Precondition::Failed);
        // Passing 412 tests fall through to the 304 tests.
        let c = Conditions {
            if_match: Some(&e),
            if_none_match: Some(&e),
            ..Conditions::default()
        };
        assert_eq!(evaluate_all(&c, &v(), now), Precondition::NotModified);
        assert_eq!(
            evaluate_all(&Conditions::default(), &v(), now),
            Precondition::Proceed
        );
    }

    #[test]
    fn unvalidated_responses() {
        assert_eq!(
            evaluate_unvalidated(&cond(Some("*"), None)),
            Precondition::Proceed
        );
        assert_eq!(
            evaluate_unvalidated(&cond(Some("\"x\""), None)),
            Precondition::Failed
        );
        assert_eq!(
            evaluate_unvalidated(&cond(None, Some("Thu, 01 Jan 1970 00:00:00 GMT"))),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_range() {
        let e = v().etag;
        assert!(if_range_matches(&e, &v()));
        assert!(!if_range_matches(&format!("W/{e}"), &v()));
        assert!(!if_range_matches("\"nope\"", &v()));
        assert!(if_range_matches(&v().last_modified_http(), &v()));
        assert!(!if_range_matches("Wed, 01 Jan 2025 00:00:00 GMT", &v()));
        assert!(!if_range_matches("junk", &v()));
        assert!(!if_range_matches(&format!("{e}, {e}"), &v()));
    }
}
