//! Every bound the transfer layer enforces, in one place.

/// Most data connections one MODE E transfer may use (as `MAX_PARALLELISM`
/// of the control channel).
pub const MAX_STREAMS: usize = sluice_ftp::limits::MAX_PARALLELISM as usize;

/// Most disjoint byte ranges kept for one upload: a peer sending sparse
/// blocks cannot grow the range set without bound. The set
/// (`sluice_ftp::markers::RangeSet`) is a sorted `Vec`, so an insert in
/// the middle moves the ranges after it: 4096 keeps a hostile peer's worst
/// case (every block a new range at the front) to ~130 MB of memmove per
/// upload, while a real upload has about one open gap per stream.
pub const MAX_RANGES: usize = 4096;

/// Default MODE E block size for sending (see crates/transfer/README.md).
pub const DEFAULT_BLOCK_SIZE: u64 = 1 << 20;

/// Smallest MODE E block size we send (header overhead stays under 0.03 %).
pub const MIN_BLOCK_SIZE: u64 = 64 << 10;

/// Largest MODE E block size we send: what any receiver must accept.
pub const MAX_BLOCK_SIZE: u64 = 16 << 20;

/// MODE S sends are cut into pieces of this size so progress is updated.
pub const STREAM_PIECE: u64 = 64 << 20;
