//! MODE E: header decode/encode and the per-stream decoder.
//! Properties: a decoded header re-encodes to the same 17 bytes; the
//! decoder consumes at most its input, its data ranges lie inside it, and
//! feeding the stream in arbitrary chunks gives the same bytes at the same
//! offsets and the same events as feeding it whole.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_ftp::mode_e::{BlockHeader, Event, StreamDecoder, HEADER_LEN};

type Outcome = (Vec<(u64, u8)>, Vec<Event>, bool);

fn decode(data: &[u8], cuts: &[usize]) -> Outcome {
    let mut d = StreamDecoder::new();
    let (mut bytes, mut events) = (Vec::new(), Vec::new());
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(data.len());
    for w in bounds.windows(2) {
        let piece = &data[w[0]..w[1]];
        let mut at = 0;
        loop {
            let (used, ev) = match d.handle_input(&piece[at..]) {
                Ok(x) => x,
                Err(_) => return (bytes, events, true),
            };
            assert!(used <= piece.len() - at);
            match ev {
                Some(Event::Data { offset, range }) => {
                    assert!(range.start < range.end && range.end <= used);
                    let placed = &piece[at..][range];
                    bytes.extend(
                        placed
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| (offset + i as u64, b)),
                    );
                }
                Some(e) => events.push(e),
                None if used == 0 => break,
                None => {}
            }
            at += used;
        }
    }
    (bytes, events, false)
}

fuzz_target!(|input: (Vec<u16>, Vec<u8>)| {
    let (cuts, data) = input;
    if let Ok(Some((h, used))) = BlockHeader::decode(&data) {
        assert_eq!(used, HEADER_LEN);
        assert_eq!(&h.encode()[..], &data[..HEADER_LEN]);
    }
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|&c| c as usize % (data.len() + 1))
        .collect();
    cuts.sort_unstable();
    assert_eq!(decode(&data, &[]), decode(&data, &cuts));
});
