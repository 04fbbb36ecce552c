use super::*;

#[test]
fn gaps_skip_what_the_client_has() {
    let g = |s, e, skip: &[std::ops::Range<u64>]| {
        gaps(s, e, skip)
            .into_iter()
            .map(|r| (r.offset, r.len))
            .collect::<Vec<_>>()
    };
    assert_eq!(g(0, 100, &[]), vec![(0, 100)]);
    assert_eq!(g(0, 100, &[0..10, 20..30]), vec![(10, 10), (30, 70)]);
    assert_eq!(g(0, 100, &[0..50, 50..100]), vec![]);
    assert_eq!(g(50, 100, &[0..60, 90..200]), vec![(60, 30)]);
}

/// Each fault gets the reply the door always sent: 426 for the peer's
/// side and aborts, 451 for ours, 452 (`OpError::NoSpace`) for a full
/// disk (layer 2's own `reply_code()` said 552, but the door never
/// sent that); ABOR wins over whatever the streams said.
#[test]
fn transfer_faults_map_to_ftp_replies() {
    use sluice_engine::EngineError;
    use std::io;
    let code = |e: TransferError| transfer_error(&e, &Cancel::new()).reply().code.0;
    let engine = |e: EngineError| code(TransferError::from(e));
    assert_eq!(
        engine(EngineError::Disk(io::Error::from_raw_os_error(28))),
        452
    );
    assert_eq!(
        engine(EngineError::Disk(io::Error::from_raw_os_error(5))),
        451
    );
    assert_eq!(engine(EngineError::ShortFile { at: 1 }), 451);
    assert_eq!(engine(EngineError::PoolClosed), 451);
    assert_eq!(engine(EngineError::Cancelled), 426);
    assert_eq!(engine(EngineError::Idle), 426);
    let reset = io::Error::from(io::ErrorKind::ConnectionReset);
    assert_eq!(engine(EngineError::Connection(reset)), 426);
    let framing = sluice_ftp::mode_e::ModeEError::OffsetOverflow;
    assert_eq!(code(TransferError::from(framing)), 426);
    assert_eq!(code(TransferError::Limit("streams")), 426);
    assert_eq!(code(TransferError::Stalled), 426);
    assert_eq!(code(TransferError::Setup("x")), 451);
    let e = TransferError::Incomplete {
        eods: 1,
        expected: 2,
    };
    assert_eq!(transfer_error(&e, &Cancel::new()), OpError::ConnectionLost);
    let aborted = Cancel::new();
    aborted.cancel();
    let full = TransferError::DiskFull(io::Error::from_raw_os_error(28));
    assert_eq!(transfer_error(&full, &aborted), OpError::Aborted);
}
