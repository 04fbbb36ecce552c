//! The Range header (RFC 9110 14.1-14.2) and multipart/byteranges plans
//! (RFC 9110 14.6).
//!
//! ```text
//! Range: bytes=0-499          first 500 bytes
//! Range: bytes=500-           from byte 500 to the end
//! Range: bytes=-500           last 500 bytes
//! Range: bytes=0-0,-1         several: 206 multipart/byteranges
//! ```
//!
//! Policy, as RFC 9110 14.2 allows ("a server MAY ignore or reject a
//! Range header field that contains ... more than two overlapping ranges,
//! or a set of many small ranges"), written to defeat range amplification
//! (one small request making the server read or send a file many times):
//! - an invalid header, a unit other than `bytes`, more than
//!   [`MAX_RANGES`] ranges, or a header longer than [`MAX_RANGE_HEADER`]
//!   is ignored: the full representation is sent with 200;
//! - if the satisfiable ranges add up to more bytes than the file (nginx's
//!   rule), or more than two of them overlap another, the header is
//!   ignored (200): the answer is never bigger than the file plus part
//!   headers;
//! - if no range is satisfiable, the answer is 416 with
//!   `Content-Range: bytes */LEN`;
//! - a zero-length file has no byte to range over, so Range is ignored
//!   and the empty file is sent with 200 (RFC 9110 14.2 lets a server
//!   ignore Range; 416 would break `curl -C -` style resumes of empties).
//!
//! Ranges are answered in the order the client asked, not coalesced.
//! Numbers too big for `u64` are clamped to `u64::MAX`, which gives them
//! their natural meaning (past the end, or "the whole file").

use crate::limits::{MAX_RANGES, MAX_RANGE_HEADER};

/// One satisfiable byte range, inside the file, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte offset.
    pub start: u64,
    /// Number of bytes, at least 1.
    pub len: u64,
}

impl ByteRange {
    /// Offset of the last byte (inclusive, as Content-Range writes it).
    pub fn last(&self) -> u64 {
        self.start + (self.len - 1)
    }

    /// `bytes START-LAST/TOTAL`, the Content-Range value for this range.
    pub fn content_range(&self, total: u64) -> String {
        format!("bytes {}-{}/{}", self.start, self.last(), total)
    }
}

/// One range-spec as the client wrote it (RFC 9110 14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last`
    FromTo(u64, u64),
    /// `first-`
    From(u64),
    /// `-suffix_length`
    Suffix(u64),
}

/// Why a Range header was ignored (counted by the shell, not logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    /// Not valid `bytes=` syntax, or a unit we do not know (RFC 9110
    /// 14.2: an unknown unit MUST be ignored).
    Syntax,
    /// More than [`MAX_RANGES`] ranges, or an over-long header.
    TooMany,
    /// The ranges add up to more than the file, or overlap too much.
    Amplification,
    /// The file is empty.
    EmptyFile,
    /// An If-Range validator did not match (set by the caller).
    IfRangeMismatch,
}

/// What to do with a Range header against a file of known length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Send the whole file with 200.
    Ignore(IgnoreReason),
    /// Send these ranges with 206 (one: plain; several: multipart).
    Partial(Vec<ByteRange>),
    /// Send 416 with `Content-Range: bytes */LEN`.
    Unsatisfiable,
}

/// Parse a Range header value into its specs, or say why the header must
/// be ignored (bad syntax, unknown unit, too many ranges, too long).
pub fn parse_specs(value: &str) -> Result<Vec<RangeSpec>, IgnoreReason> {
    if value.len() > MAX_RANGE_HEADER {
        return Err(IgnoreReason::TooMany);
    }
    let (unit, set) = value.split_once('=').ok_or(IgnoreReason::Syntax)?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return Err(IgnoreReason::Syntax);
    }
    let mut specs = Vec::new();
    // RFC 9110 5.6.1: list elements are separated by commas with optional
    // whitespace, and empty elements are to be ignored.
    for elem in set.split(',') {
        let elem = elem.trim_matches([' ', '\t']);
        if elem.is_empty() {
            continue;
        }
        if specs.len() == MAX_RANGES {
            return Err(IgnoreReason::TooMany);
        }
        let (first, last) = elem.split_once('-').ok_or(IgnoreReason::Syntax)?;
        let spec = match (first.is_empty(), last.is_empty()) {
            (true, true) => return Err(IgnoreReason::Syntax),
            (true, false) => RangeSpec::Suffix(number(last)?),
            (false, true) => RangeSpec::From(number(first)?),
            (false, false) => {
                let (f, l) = (number(first)?, number(last)?);
                // RFC 9110 14.1.1: last < first makes the spec invalid.
                if l < f {
                    return Err(IgnoreReason::Syntax);
                }
                RangeSpec::FromTo(f, l)
            }
        };
        specs.push(spec);
    }
    if specs.is_empty() {
        return Err(IgnoreReason::Syntax);
    }
    Ok(specs)
}

/// A run of ASCII digits; values past `u64::MAX` clamp to it.
fn number(s: &str) -> Result<u64, IgnoreReason> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(IgnoreReason::Syntax);
    }
    Ok(s.bytes().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// Resolve one spec against a file of `len` bytes (`len > 0`).
fn resolve(spec: RangeSpec, len: u64) -> Option<ByteRange> {
    let (start, last) = match spec {
        RangeSpec::FromTo(f, l) => (f, l.min(len - 1)),
        RangeSpec::From(f) => (f, len - 1),
        RangeSpec::Suffix(0) => return None,
        RangeSpec::Suffix(n) => (len.saturating_sub(n), len - 1),
    };
    if start >= len {
        return None;
    }
    Some(ByteRange {
        start,
        len: last - start + 1,
    })
}

/// Decide how to answer `Range: value` for a file of `len` bytes, by the
/// policy in the module docs.
pub fn evaluate(value: &str, len: u64) -> RangeOutcome {
    let specs = match parse_specs(value) {
        Ok(s) => s,
        Err(why) => return RangeOutcome::Ignore(why),
    };
    if len == 0 {
        return RangeOutcome::Ignore(IgnoreReason::EmptyFile);
    }
    let ranges: Vec<ByteRange> = specs.into_iter().filter_map(|s| resolve(s, len)).collect();
    if ranges.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }
    let total: u128 = ranges.iter().map(|r| u128::from(r.len)).sum();
    if total > u128::from(len) || overlaps(&ranges) > 2 {
        return RangeOutcome::Ignore(IgnoreReason::Amplification);
    }
    RangeOutcome::Partial(ranges)
}

/// How many ranges overlap an earlier one (in start order).
fn overlaps(ranges: &[ByteRange]) -> usize {
    let mut sorted: Vec<ByteRange> = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut count = 0;
    let mut reach = 0u64; // one past the furthest byte seen so far
    for (i, r) in sorted.iter().enumerate() {
        if i > 0 && r.start < reach {
            count += 1;
        }
        reach = reach.max(r.start + r.len);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn br(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    fn partial(v: &str, len: u64) -> Vec<ByteRange> {
        match evaluate(v, len) {
            RangeOutcome::Partial(r) => r,
            other => panic!("{v}: {other:?}"),
        }
    }

    #[test]
    fn single_open_and_suffix() {
        assert_eq!(partial("bytes=0-499", 1000), vec![br(0, 500)]);
        assert_eq!(partial("bytes=500-", 1000), vec![br(500, 500)]);
        assert_eq!(partial("bytes=-200", 1000), vec![br(800, 200)]);
        assert_eq!(partial("bytes=-2000", 1000), vec![br(0, 1000)]);
        assert_eq!(partial("bytes=900-5000", 1000), vec![br(900, 100)]);
        assert_eq!(partial("BYTES=0-0", 1), vec![br(0, 1)]);
        assert_eq!(br(900, 100).content_range(1000), "bytes 900-999/1000");
    }

    #[test]
    fn several_ranges_keep_order() {
        assert_eq!(
            partial("bytes=0-9, 20-29,,-5", 100),
            vec![br(0, 10), br(20, 10), br(95, 5)]
        );
        assert_eq!(partial("bytes=50-59,0-9", 100), vec![br(50, 10), br(0, 10)]);
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(evaluate("bytes=1000-", 1000), RangeOutcome::Unsatisfiable);
        assert_eq!(
            evaluate("bytes=1000-2000,5000-", 1000),
            RangeOutcome::Unsatisfiable
        );
        assert_eq!(evaluate("bytes=-0", 1000), RangeOutcome::Unsatisfiable);
        assert_eq!(
            evaluate("bytes=99999999999999999999999-", 10),
            RangeOutcome::Unsatisfiable
        );
        // One satisfiable range is enough for 206.
        assert_eq!(partial("bytes=5000-,0-1", 1000), vec![br(0, 2)]);
    }

    #[test]
    fn invalid_is_ignored() {
        for v in [
            "",
            "bytes",
            "bytes=",
            "bytes=,",
            "bytes=-",
            "bytes=a-b",
            "bytes=5-1",
            "items=0-1",
            "bytes=0-1-2",
            "bytes=+1-2",
            "bytes = 0-1",
            "bytes=0x1-",
        ] {
            assert_eq!(
                evaluate(v, 100),
                RangeOutcome::Ignore(IgnoreReason::Syntax),
                "{v}"
            );
        }
    }

    #[test]
    fn amplification_is_ignored() {
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(
            evaluate(&many, 1 << 30),
            RangeOutcome::Ignore(IgnoreReason::TooMany)
        );
        let max = format!(
            "bytes={}",
            (0..MAX_RANGES)
                .map(|i| format!("{}-{}", i * 10, i * 10))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(partial(&max, 1 << 20).len(), MAX_RANGES);
        // Adds up to more than the file (nginx's rule).
        assert_eq!(
            evaluate("bytes=0-,0-", 100),
            RangeOutcome::Ignore(IgnoreReason::Amplification)
        );
        // Three overlapping small ranges.
        assert_eq!(
            evaluate("bytes=0-9,1-9,2-9,3-9", 1000),
            RangeOutcome::Ignore(IgnoreReason::Amplification)
        );
        // Two overlaps are allowed (RFC 9110 14.2 says "more than two").
        assert_eq!(partial("bytes=0-9,5-14,10-19", 1000).len(), 3);
        let long = format!("bytes=0-1{}", " ".repeat(MAX_RANGE_HEADER));
        assert_eq!(
            evaluate(&long, 10),
            RangeOutcome::Ignore(IgnoreReason::TooMany)
        );
    }

    #[test]
    fn empty_file_ignores_range() {
        assert_eq!(
            evaluate("bytes=0-", 0),
            RangeOutcome::Ignore(IgnoreReason::EmptyFile)
        );
        assert_eq!(
            evaluate("bytes=-5", 0),
            RangeOutcome::Ignore(IgnoreReason::EmptyFile)
        );
    }

    proptest! {
        #[test]
        fn ranges_always_inside_file(v in "bytes=[0-9,\\- ]{0,40}", len in 0u64..5000) {
            check(&v, len)?;
        }

        #[test]
        fn structured_ranges_inside_file(specs in proptest::collection::vec((any::<Option<u64>>(), any::<Option<u64>>()), 1..8), len in any::<u64>()) {
            let parts: Vec<String> = specs.iter().map(|(a, b)| format!("{}-{}",
                a.map(|x| x.to_string()).unwrap_or_default(), b.map(|x| x.to_string()).unwrap_or_default())).collect();
            check(&format!("bytes={}", parts.join(",")), len)?;
        }
    }

    fn check(v: &str, len: u64) -> Result<(), TestCaseError> {
        match evaluate(v, len) {
            RangeOutcome::Partial(rs) => {
                prop_assert!(!rs.is_empty() && rs.len() <= MAX_RANGES);
                let mut total = 0u128;
                for r in &rs {
                    prop_assert!(r.len >= 1);
                    prop_assert!(r.start < len && r.last() < len);
                    total += u128::from(r.len);
                }
                prop_assert!(total <= u128::from(len));
            }
            RangeOutcome::Unsatisfiable => prop_assert!(len > 0),
            RangeOutcome::Ignore(_) => {}
        }
        Ok(())
    }
}
