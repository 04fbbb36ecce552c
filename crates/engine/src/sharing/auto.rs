//! `--sharing auto`, sans I/O: does a download share its file's reads?
//! Decided at its start from where its range is (page cache or not) and
//! from the file's other readers in flight: how many, and how fast.

use std::time::Duration;

/// Where a download's range is, as `--sharing auto` sees it at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Residency {
    /// At least half of its data bytes are in the page cache (holes not
    /// counted), or reads of the file were measured at memory speed.
    InMemory,
    /// Mostly not in the page cache, and not known to read at memory speed.
    NotInMemory,
    /// Nothing tells (no `cachestat`, before Linux 6.5).
    Unknown,
}

/// The other downloads of a file in flight when one starts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FileReaders {
    /// Readers, alone and shared.
    pub count: usize,
    /// Their mean send rate per reader, bytes/s (`None`: not measured yet).
    pub rate: Option<f64>,
}

/// From this many readers of a file in memory on, slow ones share. Alone,
/// each slow reader keeps its own send state and socket queue per file;
/// shared, the file's readers take one region of blocks (64 MiB budget)
/// and one selector batch serves many of them. Lab send-wakeups (1000
/// readers at 1 Mbit/s of one warm file): shared 0.50 CPU s/GiB and 58 MiB
/// of server memory, alone 0.89-1.5 and 1064 MiB; bench/dlcost.py 16c (16
/// fast readers of a warm file) lost 16 % of its MB/s shared: 16 stays
/// under this.
pub(crate) const MANY_READERS: usize = 32;

/// A reader at most this fast (bytes/s, mean over a file's readers) is
/// slow: its client, not the server, sets its pace, and sharing costs it
/// nothing it would notice. 10 MB/s (80 Mbit/s) lies between the lab's
/// slow readers (1 Mbit/s; a reader's first socket fill, ~1 MB at once,
/// reads as a few MB/s in its first second) and loopback or LAN readers
/// (hundreds of MB/s each in bench/dlcost.py).
pub(crate) const SLOW_READER: f64 = 10e6;

/// Readers measured for less than this in all are not measured yet (a
/// rate over a few milliseconds is the first socket fill).
pub(crate) const MEASURED_FOR: Duration = Duration::from_millis(100);

/// Does a download share its file's reads? Never when it is the file's
/// only reader (a lone reader in Circus costs ~15 % of its rate and ~20 %
/// CPU per GiB on loopback, bench/dlcost.py 4s). A range not in memory is
/// shared (each block read once for every reader); where nothing tells,
/// as before: shared. A range in memory is shared only among many slow
/// readers ([`MANY_READERS`], [`SLOW_READER`]): a few readers, or fast
/// ones, read it for themselves (16c: shared 3655 MB/s against 4328).
/// Many readers with no measured rate yet (all arrived within
/// [`MEASURED_FOR`]) are taken as fast.
pub(crate) fn auto_shares(others: FileReaders, range: Residency) -> bool {
    if others.count == 0 {
        return false;
    }
    match range {
        Residency::NotInMemory | Residency::Unknown => true,
        Residency::InMemory => {
            others.count >= MANY_READERS && others.rate.is_some_and(|r| r <= SLOW_READER)
        }
    }
}

/// The mean send rate per reader of readers each `(age, bytes sent)`:
/// all their bytes over all their time, so a young reader's first socket
/// fill weighs by its short age. `None` when they were measured for less
/// than [`MEASURED_FOR`] in all.
pub(crate) fn mean_rate(readers: impl IntoIterator<Item = (Duration, u64)>) -> Option<f64> {
    let (mut time, mut bytes) = (Duration::ZERO, 0u64);
    for (age, sent) in readers {
        time += age;
        bytes += sent;
    }
    (time >= MEASURED_FOR).then(|| bytes as f64 / time.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::Residency::*;
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// `n` readers arriving `gap` apart from time zero, each sending
    /// `burst` at its start and `rate` bytes/s after it; measured at `now`.
    fn readers(n: usize, gap: Duration, burst: u64, rate: f64, now: Duration) -> FileReaders {
        let ages: Vec<Duration> = (0..n).map(|i| now.saturating_sub(gap * i as u32)).collect();
        FileReaders {
            count: n,
            rate: mean_rate(
                ages.iter()
                    .map(|a| (*a, burst + (rate * a.as_secs_f64()) as u64)),
            ),
        }
    }

    #[test]
    fn auto_shares_many_slow_readers_of_a_warm_file() {
        // Lab send-wakeups: readers of one warm file arrive 10 ms apart at
        // 1 Mbit/s, each first filling its socket (~1 MB). The 33rd finds
        // 32 readers whose mean rate is a few MB/s: slow.
        let others = readers(32, 10 * MS, 1 << 20, 125e3, 320 * MS);
        assert!(others.rate.unwrap() < SLOW_READER, "{others:?}");
        assert!(auto_shares(others, InMemory));
        // Later (every reader older) the more so.
        assert!(auto_shares(
            readers(500, 10 * MS, 1 << 20, 125e3, 5000 * MS),
            InMemory
        ));
    }

    #[test]
    fn a_few_slow_readers_of_a_warm_file_read_alone() {
        let others = readers(MANY_READERS - 1, 10 * MS, 1 << 20, 125e3, 2000 * MS);
        assert!(!auto_shares(others, InMemory));
    }

    #[test]
    fn many_fast_readers_of_a_warm_file_read_alone() {
        // 64 loopback readers at ~270 MB/s each (bench/dlcost.py 16c's
        // share of 4.3 GB/s).
        let others = readers(64, MS, 4 << 20, 270e6, 500 * MS);
        assert!(others.rate.unwrap() > SLOW_READER);
        assert!(!auto_shares(others, InMemory));
    }

    #[test]
    fn readers_not_measured_yet_count_as_fast() {
        // 40 readers that all came within 2 ms: their rate is their first
        // socket fill over nothing.
        let others = readers(40, Duration::from_micros(50), 1 << 20, 125e3, 2 * MS);
        assert_eq!(others.rate, None);
        assert!(!auto_shares(others, InMemory));
    }

    #[test]
    fn auto_shares_a_busy_file_not_in_memory_whatever_its_readers() {
        let one_fast = readers(1, MS, 4 << 20, 1e9, 1000 * MS);
        assert!(auto_shares(one_fast, NotInMemory));
        assert!(auto_shares(one_fast, Unknown));
        assert!(!auto_shares(one_fast, InMemory));
    }

    #[test]
    fn a_lone_reader_never_shares() {
        let none = FileReaders::default();
        for r in [InMemory, NotInMemory, Unknown] {
            assert!(!auto_shares(none, r));
        }
    }

    #[test]
    fn the_mean_rate_weighs_every_reader_by_its_age() {
        // One reader 1 s old at 1 MB/s, one 3 s old at 3 MB/s: 10 MB in 4 s.
        let r = mean_rate([(1000 * MS, 1_000_000), (3000 * MS, 9_000_000)]).unwrap();
        assert!((r - 2.5e6).abs() < 1.0, "{r}");
        assert_eq!(mean_rate([(99 * MS, 1 << 20)]), None);
        assert_eq!(mean_rate([]), None);
    }
}
