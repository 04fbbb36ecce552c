//! GridFTP markers: the 111 restart marker (`RangeSet::parse`) and the 112
//! performance marker (`PerfMarker::parse`), both fed by untrusted servers
//! (the client) and clients (MODE E REST).
//! Properties: a parsed range set is coalesced (sorted, disjoint, non-empty
//! ranges), at most `MAX_MARKER_RANGES` long, and its text form parses back
//! to the same set; a parsed perf marker re-encodes to a 112 reply that
//! parses back to the same marker.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::markers::{parse_range_marker, range_marker, PerfMarker, RangeSet};
use sluice_ftp::reply::parse_reply;

fuzz_target!(|data: &[u8]| {
    if let Ok(set) = RangeSet::parse(data) {
        let rs = set.ranges();
        for w in rs.windows(2) {
            assert!(w[0].end < w[1].start, "not coalesced: {rs:?}");
        }
        assert!(rs.iter().all(|r| r.start < r.end), "empty range kept: {rs:?}");
        assert_eq!(set.total(), rs.iter().map(|r| r.end - r.start).sum::<u64>());
        if !set.is_empty() {
            let text = set.to_string();
            assert_eq!(RangeSet::parse(text.as_bytes()).as_ref(), Ok(&set));
            assert_eq!(parse_range_marker(&range_marker(&set)).as_ref(), Ok(&set));
        }
    }
    // The same bytes as a whole reply: whatever parses as a 112 marker
    // survives encode -> parse.
    if let Ok(Some((reply, used))) = parse_reply(data) {
        assert!(used <= data.len());
        if let Ok(m) = PerfMarker::parse(&reply) {
            let again = parse_reply(&m.to_reply().to_bytes())
                .expect("own 112 reply parses")
                .expect("own 112 reply is complete")
                .0;
            assert_eq!(PerfMarker::parse(&again), Ok(m));
        }
        let _ = parse_range_marker(&reply);
    }
});
