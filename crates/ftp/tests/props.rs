//! Property tests for the codecs: parsers consume at most their input and
//! never panic, encode-then-decode gives back the original, bounds hold.
//! The fuzz targets in fuzz/ check the same properties on longer runs.

use proptest::prelude::*;
use sluice_ftp::addr::{
    format_227, format_229, format_eprt, format_port, parse_227, parse_229, parse_eprt, parse_port,
};
use sluice_ftp::command::{next_line, parse_command, Command, CommandError};
use sluice_ftp::limits::{MAX_LINE, MAX_MODE_E_BLOCK};
use sluice_ftp::listing::{mdtm, parse_mdtm};
use sluice_ftp::markers::RangeSet;
use sluice_ftp::mode_e::{BlockHeader, Descriptor, Event, StreamDecoder, HEADER_LEN};
use sluice_ftp::reply::{parse_reply, Reply, ReplyCode, ReplyParser};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Text without CR or LF (what a reply line may hold).
fn line_text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,40}"
}

fn reply() -> impl Strategy<Value = Reply> {
    (100u16..=599, prop::collection::vec(line_text(), 1..6))
        .prop_map(|(code, lines)| Reply::multi(ReplyCode(code), lines))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn next_line_bounds(input in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(Some((line, used))) = next_line(&input) {
            prop_assert!(used <= input.len());
            prop_assert!(!line.contains(&b'\n'));
            prop_assert!(line.len() < used);
        }
    }

    #[test]
    fn long_lines_are_rejected(fill in any::<u8>().prop_filter("no LF or IAC", |b| *b != b'\n' && *b != 0xff), extra in 0usize..64) {
        let input = vec![fill; MAX_LINE + extra];
        prop_assert_eq!(next_line(&input), Err(CommandError::LineTooLong));
    }

    #[test]
    fn parse_command_never_panics_and_replies_are_short(input in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Err(e) = parse_command(&input) {
            let r = e.reply();
            let wire = r.to_bytes();
            prop_assert!(wire.len() < 120, "reply too long: {:?}", r);
            prop_assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), 1);
            prop_assert!(r.code.is_failure());
        }
    }

    #[test]
    fn verb_case_and_path_survive(
        verb in prop::sample::select(vec!["retr", "stor", "dele", "size", "mdtm", "appe"]),
        upper in prop::collection::vec(any::<bool>(), 4),
        path in "[^\r\n\0]{1,60}",
    ) {
        prop_assume!(!path.bytes().all(|b| b == b' '));
        let verb: String = verb
            .chars()
            .zip(upper)
            .map(|(c, u)| if u { c.to_ascii_uppercase() } else { c })
            .collect();
        let cmd = parse_command(format!("{verb} {path}").as_bytes()).unwrap();
        let got = match cmd {
            Command::Retr(p) | Command::Stor(p) | Command::Dele(p) | Command::Size(p) | Command::Mdtm(p) | Command::Appe(p) => p,
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        };
        prop_assert_eq!(got, path);
    }

    #[test]
    fn reply_roundtrip(r in reply(), tail in prop::collection::vec(any::<u8>(), 0..20)) {
        let mut wire = r.to_bytes();
        let len = wire.len();
        wire.extend_from_slice(&tail);
        let (back, used) = parse_reply(&wire).unwrap().unwrap();
        prop_assert_eq!(used, len);
        prop_assert_eq!(back, r);
    }

    #[test]
    fn reply_parser_any_chunking(rs in prop::collection::vec(reply(), 1..5), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
        let mut wire = Vec::new();
        for r in &rs {
            r.encode(&mut wire);
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        points.push(0);
        points.push(wire.len());
        points.sort_unstable();
        let mut p = ReplyParser::new();
        let mut got = Vec::new();
        for w in points.windows(2) {
            p.handle_input(&wire[w[0]..w[1]]).unwrap();
            while let Some(r) = p.poll_reply().unwrap() {
                got.push(r);
            }
        }
        prop_assert_eq!(got, rs);
        prop_assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn parse_reply_never_panics(input in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Some((_, used))) = parse_reply(&input) {
            prop_assert!(used <= input.len() && used > 0);
        }
    }

    #[test]
    fn port_roundtrip(ip in any::<u32>(), port in 1u16..) {
        let a = SocketAddrV4::new(Ipv4Addr::from(ip), port);
        prop_assert_eq!(parse_port(format_port(a).as_bytes()), Ok(a));
        prop_assert_eq!(parse_227(&format_227(a)), Ok(a));
        prop_assert_eq!(parse_eprt(format_eprt(SocketAddr::V4(a)).as_bytes()), Ok(SocketAddr::V4(a)));
        prop_assert_eq!(parse_229(&format_229(port)), Ok(port));
    }

    #[test]
    fn eprt_v6_roundtrip(ip in any::<u128>(), port in 1u16..) {
        let a = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0));
        prop_assert_eq!(parse_eprt(format_eprt(a).as_bytes()), Ok(a));
    }

    #[test]
    fn addr_parsers_never_panic(input in prop::collection::vec(any::<u8>(), 0..80)) {
        let _ = parse_port(&input);
        let _ = parse_eprt(&input);
        let s = String::from_utf8_lossy(&input);
        let _ = parse_227(&s);
        let _ = parse_229(&s);
    }

    #[test]
    fn header_roundtrip(d in any::<u8>(), count in any::<u64>(), offset in any::<u64>()) {
        let h = BlockHeader { descriptor: Descriptor(d), count, offset };
        let b = h.encode();
        match BlockHeader::decode(&b) {
            Ok(Some((back, used))) => {
                prop_assert_eq!(back, h);
                prop_assert_eq!(used, HEADER_LEN);
                prop_assert!(h.descriptor.has(Descriptor::EOF) || count <= MAX_MODE_E_BLOCK);
                prop_assert!(h.descriptor.has(Descriptor::EOF) || offset.checked_add(count).is_some());
            }
            Ok(None) => prop_assert!(false, "17 bytes is a whole header"),
            Err(_) => prop_assert!(h.validate().is_err()),
        }
    }

    #[test]
    fn decoder_chunking_is_invisible(
        blocks in prop::collection::vec((0u64..1 << 40, prop::collection::vec(any::<u8>(), 0..40)), 0..6),
        eof in any::<bool>(),
        close in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut wire = Vec::new();
        for (off, data) in &blocks {
            wire.extend_from_slice(&BlockHeader::data(*off, data.len() as u64).encode());
            wire.extend_from_slice(data);
        }
        wire.extend_from_slice(&BlockHeader::end(eof.then_some(3), close).encode());
        let whole = decode_all(&wire, &[]);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        points.sort_unstable();
        let chunked = decode_all(&wire, &points);
        prop_assert_eq!(&chunked, &whole);
        let expect: Vec<(u64, u8)> = blocks
            .iter()
            .flat_map(|(off, d)| d.iter().enumerate().map(move |(i, &b)| (off + i as u64, b)))
            .collect();
        prop_assert_eq!(&whole.0, &expect);
        let mut ends = Vec::new();
        if eof { ends.push(Event::Eof { eod_count: 3 }); }
        ends.push(Event::Eod);
        if close { ends.push(Event::Close); }
        prop_assert_eq!(&whole.1, &ends);
    }

    #[test]
    fn decoder_never_panics(input in prop::collection::vec(any::<u8>(), 0..200), cut in any::<prop::sample::Index>()) {
        let mut d = StreamDecoder::new();
        let c = cut.index(input.len() + 1);
        for piece in [&input[..c], &input[c..]] {
            let mut at = 0;
            while let Ok((used, ev)) = d.handle_input(&piece[at..]) {
                prop_assert!(used <= piece.len() - at);
                if let Some(Event::Data { range, .. }) = &ev {
                    prop_assert!(range.end <= piece.len() - at && range.start < range.end);
                }
                at += used;
                if used == 0 && ev.is_none() { break; }
            }
        }
    }

    #[test]
    fn rangeset_matches_a_bitmap(ops in prop::collection::vec((0u64..200, 0u64..40), 0..30), len in 0u64..260) {
        let mut set = RangeSet::new();
        let mut bits = [false; 260];
        for (start, n) in ops {
            set.insert(start..start + n);
            for b in &mut bits[start as usize..(start + n) as usize] { *b = true; }
        }
        // Sorted, disjoint, non-adjacent, non-empty.
        for w in set.ranges().windows(2) {
            prop_assert!(w[0].end < w[1].start);
        }
        prop_assert!(set.ranges().iter().all(|r| r.start < r.end));
        for (i, &b) in bits.iter().enumerate() {
            prop_assert_eq!(set.contains(i as u64), b);
        }
        prop_assert_eq!(set.total(), bits.iter().filter(|&&b| b).count() as u64);
        let gaps = set.gaps(len);
        let mut in_gap = vec![false; len as usize];
        for g in &gaps {
            prop_assert!(g.start < g.end && g.end <= len);
            for b in &mut in_gap[g.start as usize..g.end as usize] { *b = true; }
        }
        for i in 0..len as usize {
            prop_assert_eq!(in_gap[i], !bits[i]);
        }
        if !set.is_empty() {
            prop_assert_eq!(RangeSet::parse(set.to_string().as_bytes()), Ok(set.clone()));
        }
    }

    #[test]
    fn rangeset_parse_never_panics(input in prop::collection::vec(any::<u8>(), 0..100)) {
        if let Ok(set) = RangeSet::parse(&input) {
            for w in set.ranges().windows(2) {
                prop_assert!(w[0].end < w[1].start);
            }
        }
    }

    #[test]
    fn mdtm_roundtrip(secs in 0i64..253_402_300_800) {
        prop_assert_eq!(parse_mdtm(&mdtm(secs)), Some(secs));
    }
}

/// Decode `wire` cut at `points`; returns (bytes by offset, other events).
fn decode_all(wire: &[u8], points: &[usize]) -> (Vec<(u64, u8)>, Vec<Event>) {
    let mut d = StreamDecoder::new();
    let mut data = Vec::new();
    let mut other = Vec::new();
    let mut bounds = vec![0];
    bounds.extend_from_slice(points);
    bounds.push(wire.len());
    for w in bounds.windows(2) {
        let piece = &wire[w[0]..w[1]];
        let mut at = 0;
        loop {
            let (used, ev) = d.handle_input(&piece[at..]).expect("valid stream");
            match ev {
                Some(Event::Data { offset, range }) => {
                    let bytes = &piece[at..][range];
                    data.extend(
                        bytes
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| (offset + i as u64, b)),
                    );
                }
                Some(e) => other.push(e),
                None if used == 0 => break,
                None => {}
            }
            at += used;
        }
    }
    (data, other)
}
