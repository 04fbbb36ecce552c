//! GridFTP markers sent on the control channel during a transfer, and the
//! [`RangeSet`] that restart markers describe.
//!
//! ```text
//! 111 Range Marker 0-1048576,2097152-3145728       ranges are [start, end)
//! 112-Perf Marker
//!  Timestamp:  1700000000.3
//!  Stripe Index: 0
//!  Stripe Bytes Transferred: 123456
//!  Total Stripe Count: 1
//! 112 End.
//! ```

use crate::limits::{MAX_MARKER_RANGES, MAX_OFFSET};
use crate::reply::{Reply, ReplyCode};
use std::fmt;
use std::ops::Range;

/// A sorted set of disjoint, non-adjacent, non-empty byte ranges
/// `[start, end)`. Inserting coalesces overlapping and touching ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range<u64>>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `[range.start, range.end)`; an empty range changes nothing.
    pub fn insert(&mut self, range: Range<u64>) {
        if range.start >= range.end {
            return;
        }
        // First range whose end reaches the new start (touching counts).
        let i = self.ranges.partition_point(|r| r.end < range.start);
        // First range that starts strictly after the new end.
        let j = self.ranges.partition_point(|r| r.start <= range.end);
        if i == j {
            self.ranges.insert(i, range);
            return;
        }
        let start = self.ranges[i].start.min(range.start);
        let end = self.ranges[j - 1].end.max(range.end);
        self.ranges.splice(i..j, std::iter::once(start..end));
    }

    /// Whether byte `offset` is in the set.
    pub fn contains(&self, offset: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= offset);
        self.ranges.get(i).is_some_and(|r| r.start <= offset)
    }

    /// Whether all of `range` is in the set (an empty range always is).
    pub fn contains_range(&self, range: Range<u64>) -> bool {
        if range.start >= range.end {
            return true;
        }
        let i = self.ranges.partition_point(|r| r.end <= range.start);
        self.ranges
            .get(i)
            .is_some_and(|r| r.start <= range.start && range.end <= r.end)
    }

    /// Total number of bytes in the set (saturating).
    pub fn total(&self) -> u64 {
        self.ranges
            .iter()
            .fold(0u64, |t, r| t.saturating_add(r.end - r.start))
    }

    /// The ranges of `[0, len)` not in the set, in order.
    pub fn gaps(&self, len: u64) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = 0;
        for r in &self.ranges {
            if r.start >= len {
                break;
            }
            if r.start > at {
                out.push(at..r.start);
            }
            at = at.max(r.end);
        }
        if at < len {
            out.push(at..len);
        }
        out
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Parse `start-end,start-end,...` (the 111 marker and MODE E REST
    /// argument). Ranges may overlap or come in any order; they are
    /// coalesced. Spaces around items and a trailing comma are accepted
    /// (one globus-gridftp-server version writes `a-b, c-d, `). At most
    /// [`MAX_MARKER_RANGES`] ranges; `end < start` or a number above
    /// [`MAX_OFFSET`] is an error.
    pub fn parse(text: &[u8]) -> Result<Self, MarkerError> {
        let text = text.trim_ascii();
        let mut set = Self::new();
        if text.is_empty() {
            return Err(MarkerError::Syntax);
        }
        let items = text.split(|&b| b == b',').map(<[u8]>::trim_ascii);
        let n_items = text.split(|&b| b == b',').count();
        for (n, item) in items.enumerate() {
            if item.is_empty() && n + 1 == n_items && n > 0 {
                break;
            }
            if n >= MAX_MARKER_RANGES {
                return Err(MarkerError::TooManyRanges);
            }
            let dash = item
                .iter()
                .position(|&b| b == b'-')
                .ok_or(MarkerError::Syntax)?;
            let start = decimal(&item[..dash])?;
            let end = decimal(&item[dash + 1..])?;
            if end < start {
                return Err(MarkerError::Syntax);
            }
            set.insert(start..end);
        }
        Ok(set)
    }
}

impl fmt::Display for RangeSet {
    /// `start-end,start-end`: the form [`RangeSet::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}-{}", r.start, r.end)?;
        }
        Ok(())
    }
}

/// Parse digits only, at most [`MAX_OFFSET`].
pub(crate) fn decimal(s: &[u8]) -> Result<u64, MarkerError> {
    let s = s.trim_ascii();
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(MarkerError::Syntax);
    }
    let mut n: u64 = 0;
    for &d in s {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .filter(|&n| n <= MAX_OFFSET)
            .ok_or(MarkerError::OutOfRange)?;
    }
    Ok(n)
}

/// Why a marker could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerError {
    /// Not the expected shape.
    Syntax,
    /// A number above [`MAX_OFFSET`].
    OutOfRange,
    /// More than [`MAX_MARKER_RANGES`] ranges.
    TooManyRanges,
    /// The reply has the wrong code for this marker.
    WrongCode,
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Syntax => "malformed marker",
            Self::OutOfRange => "marker number out of range",
            Self::TooManyRanges => "too many ranges in marker",
            Self::WrongCode => "not a marker reply",
        })
    }
}

impl std::error::Error for MarkerError {}

/// The 111 restart marker for the ranges received so far.
pub fn range_marker(set: &RangeSet) -> Reply {
    Reply::new(ReplyCode::RANGE_MARKER, format!("Range Marker {set}"))
}

/// Parse a 111 restart marker reply.
pub fn parse_range_marker(reply: &Reply) -> Result<RangeSet, MarkerError> {
    if reply.code != ReplyCode::RANGE_MARKER {
        return Err(MarkerError::WrongCode);
    }
    let text = reply.text().trim_start();
    let rest = text
        .strip_prefix("Range Marker")
        .ok_or(MarkerError::Syntax)?;
    RangeSet::parse(rest.as_bytes())
}

/// A 112 performance marker: bytes moved so far on one stripe, at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfMarker {
    /// Wall-clock time of the sample, in tenths of a second since the Unix
    /// epoch (Globus prints seconds with one decimal).
    pub timestamp_tenths: u64,
    /// Which stripe (server back end) this counts; 0 for a single server.
    pub stripe_index: u32,
    /// Bytes transferred by this stripe so far.
    pub stripe_bytes: u64,
    /// Number of stripes; 1 for a single server.
    pub total_stripes: u32,
}

impl PerfMarker {
    /// A single-stripe marker, as a non-striped server sends it.
    pub fn single(timestamp_tenths: u64, bytes: u64) -> Self {
        Self {
            timestamp_tenths,
            stripe_index: 0,
            stripe_bytes: bytes,
            total_stripes: 1,
        }
    }

    /// The multi-line 112 reply.
    pub fn to_reply(&self) -> Reply {
        Reply::multi(
            ReplyCode::PERF_MARKER,
            vec![
                "Perf Marker".into(),
                format!(
                    "Timestamp:  {}.{}",
                    self.timestamp_tenths / 10,
                    self.timestamp_tenths % 10
                ),
                format!("Stripe Index: {}", self.stripe_index),
                format!("Stripe Bytes Transferred: {}", self.stripe_bytes),
                format!("Total Stripe Count: {}", self.total_stripes),
                "End.".into(),
            ],
        )
    }

    /// Parse a 112 reply. Field order is free and unknown fields are
    /// ignored; all four fields are required.
    pub fn parse(reply: &Reply) -> Result<Self, MarkerError> {
        if reply.code != ReplyCode::PERF_MARKER {
            return Err(MarkerError::WrongCode);
        }
        let (mut ts, mut idx, mut bytes, mut total) = (None, None, None, None);
        for line in &reply.lines {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim().as_bytes();
            match key.trim() {
                "Timestamp" => ts = Some(tenths(value)?),
                "Stripe Index" => idx = Some(small(decimal(value)?)?),
                "Stripe Bytes Transferred" => bytes = Some(decimal(value)?),
                "Total Stripe Count" => total = Some(small(decimal(value)?)?),
                _ => {}
            }
        }
        match (ts, idx, bytes, total) {
            (
                Some(timestamp_tenths),
                Some(stripe_index),
                Some(stripe_bytes),
                Some(total_stripes),
            ) => Ok(Self {
                timestamp_tenths,
                stripe_index,
                stripe_bytes,
                total_stripes,
            }),
            _ => Err(MarkerError::Syntax),
        }
    }
}

fn small(n: u64) -> Result<u32, MarkerError> {
    u32::try_from(n).map_err(|_| MarkerError::OutOfRange)
}

/// `secs[.fraction]` to tenths of a second (extra decimals truncated).
fn tenths(v: &[u8]) -> Result<u64, MarkerError> {
    let (secs, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b""[..]),
    };
    if !frac.iter().all(u8::is_ascii_digit) {
        return Err(MarkerError::Syntax);
    }
    let tenth = frac.first().map_or(0, |d| u64::from(d - b'0'));
    decimal(secs)?
        .checked_mul(10)
        .and_then(|t| t.checked_add(tenth))
        .ok_or(MarkerError::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::parse_reply;

    #[test]
    fn coalesce() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        s.insert(0..5);
        s.insert(5..10);
        assert_eq!(s.ranges().to_vec(), vec![0..20]);
        s.insert(30..40);
        s.insert(25..26);
        assert_eq!(s.ranges(), &[0..20, 25..26, 30..40]);
        s.insert(15..35);
        assert_eq!(s.ranges().to_vec(), vec![0..40]);
        s.insert(7..7);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn queries() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        s.insert(30..40);
        assert!(!s.contains(9) && s.contains(10) && s.contains(19) && !s.contains(20));
        assert!(s.contains_range(12..18) && !s.contains_range(15..35) && s.contains_range(50..50));
        assert_eq!(s.total(), 20);
        assert_eq!(s.gaps(50), vec![0..10, 20..30, 40..50]);
        assert_eq!(s.gaps(35), vec![0..10, 20..30]);
        assert_eq!(s.gaps(5), vec![0..5]);
        assert_eq!(RangeSet::new().gaps(0), vec![]);
    }

    #[test]
    fn parse_and_format() {
        let s = RangeSet::parse(b"0-1000,2000-3000").unwrap();
        assert_eq!(s.to_string(), "0-1000,2000-3000");
        let s = RangeSet::parse(b"2000-3000, 0-1000, ").unwrap();
        assert_eq!(s.to_string(), "0-1000,2000-3000");
        assert_eq!(RangeSet::parse(b"0-0").unwrap(), RangeSet::new());
        for bad in [
            &b""[..],
            b"-2",
            b"5-3",
            b"1-2,,3-4",
            b"1-2e",
            b"1",
            b"1-99999999999999999999",
        ] {
            assert!(
                RangeSet::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: Vec<String> = (0..=MAX_MARKER_RANGES as u64)
            .map(|i| format!("{}-{}", 3 * i, 3 * i + 1))
            .collect();
        assert_eq!(
            RangeSet::parse(many.join(",").as_bytes()),
            Err(MarkerError::TooManyRanges)
        );
    }

    #[test]
    fn range_marker_reply() {
        let mut s = RangeSet::new();
        s.insert(0..1000);
        let r = range_marker(&s);
        assert_eq!(r.to_bytes(), b"111 Range Marker 0-1000\r\n");
        assert_eq!(parse_range_marker(&r).unwrap(), s);
        assert_eq!(
            parse_range_marker(&Reply::new(ReplyCode::OK, "x")),
            Err(MarkerError::WrongCode)
        );
    }

    #[test]
    fn perf_marker_matches_globus() {
        let m = PerfMarker::single(17_000_000_003, 123_456);
        let wire = m.to_reply().to_bytes();
        assert_eq!(
            String::from_utf8(wire.clone()).unwrap(),
            "112-Perf Marker\r\n Timestamp:  1700000000.3\r\n Stripe Index: 0\r\n \
             Stripe Bytes Transferred: 123456\r\n Total Stripe Count: 1\r\n112 End.\r\n"
        );
        let (r, _) = parse_reply(&wire).unwrap().unwrap();
        assert_eq!(PerfMarker::parse(&r).unwrap(), m);
        // Tabs, no decimals, and extra fields from other servers.
        let (r, _) = parse_reply(
            b"112-Perf Marker\r\n\tTimestamp: 5\r\n\tStripe Index: 1\r\n\tStripe Bytes Transferred: 7\r\n\
              \tTotal Stripe Count: 2\r\n RemoteConnections: x\r\n112 End\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            PerfMarker::parse(&r).unwrap(),
            PerfMarker {
                timestamp_tenths: 50,
                stripe_index: 1,
                stripe_bytes: 7,
                total_stripes: 2
            }
        );
        let (r, _) = parse_reply(b"112-Perf Marker\r\n Timestamp: 5.x\r\n112 End\r\n")
            .unwrap()
            .unwrap();
        assert!(PerfMarker::parse(&r).is_err());
    }
}
