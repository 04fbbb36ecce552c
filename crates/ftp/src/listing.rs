//! Directory listing formats, computed from plain data (no file system, no
//! clock: `now` is an argument).
//!
//! ```text
//! LIST   -rw-r--r--    1 ftp      ftp          1234 Nov 22 05:36 name     (ls -l, as vsftpd)
//!        drwxr-xr-x    2 ftp      ftp          4096 Jan 01  2020 old-dir
//! MLSD   type=file;size=1234;modify=20261122053600;perm=r;UNIX.mode=0644; name   (RFC 3659 7)
//! NLST   name
//! MDTM   20261122053600                                                   (RFC 3659 2.3, UTC)
//! ```
//!
//! Names are written as they are, except CR and LF, which would end the
//! line early and are replaced by `?`.

use std::fmt::Write as _;

/// What kind of directory entry; LIST shows it as `ls -l` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Regular file (`-`).
    File,
    /// Directory (`d`).
    Dir,
    /// Symbolic link (`l`).
    Symlink,
    /// Named pipe (`p`).
    Fifo,
    /// Unix domain socket (`s`).
    Socket,
    /// Character device (`c`).
    CharDevice,
    /// Block device (`b`).
    BlockDevice,
    /// Not a regular file, of a type the server could not tell (`?`, as
    /// GNU ls writes an unknown type).
    Other,
}

impl EntryKind {
    /// The kind a `st_mode` value's type bits (`S_IFMT`) say. The values
    /// are the same on every Linux architecture.
    pub fn from_mode(st_mode: u32) -> EntryKind {
        match st_mode & 0o170000 {
            0o100000 => EntryKind::File,
            0o040000 => EntryKind::Dir,
            0o120000 => EntryKind::Symlink,
            0o010000 => EntryKind::Fifo,
            0o140000 => EntryKind::Socket,
            0o020000 => EntryKind::CharDevice,
            0o060000 => EntryKind::BlockDevice,
            _ => EntryKind::Other,
        }
    }

    /// The type character of an `ls -l` line.
    fn ls_char(self) -> char {
        match self {
            EntryKind::File => '-',
            EntryKind::Dir => 'd',
            EntryKind::Symlink => 'l',
            EntryKind::Fifo => 'p',
            EntryKind::Socket => 's',
            EntryKind::CharDevice => 'c',
            EntryKind::BlockDevice => 'b',
            EntryKind::Other => '?',
        }
    }
}

/// One directory entry, as the server found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// File name (last component only).
    pub name: String,
    /// Kind.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the Unix epoch (UTC).
    pub mtime: i64,
    /// Permission bits (`st_mode & 0o7777`; the type bits are ignored).
    pub mode: u32,
    /// Link count.
    pub nlink: u64,
    /// Owner name; `ftp` if unknown (as vsftpd hides ids).
    pub owner: Option<String>,
    /// Group name; `ftp` if unknown.
    pub group: Option<String>,
}

/// Which role an entry plays in an MLSD/MLST listing (RFC 3659 7.5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlsxRole {
    /// An ordinary entry: `type=file`, `type=dir`, ...
    Entry,
    /// The listed directory itself: `type=cdir`.
    Cdir,
    /// Its parent: `type=pdir`.
    Pdir,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Six months, the `ls` threshold between "time" and "year" forms.
const SIX_MONTHS: i64 = 182 * 24 * 3600;

/// Append one `ls -l` style line with CRLF. Files older than six months
/// or more than an hour in the future show the year instead of the time,
/// as GNU ls does (clients such as lftp and FileZilla expect exactly one of
/// the two forms).
pub fn list_line(e: &EntryInfo, now: i64, out: &mut Vec<u8>) {
    let mut s = String::with_capacity(80 + e.name.len());
    s.push(e.kind.ls_char());
    // setuid, setgid and sticky show in the x column as ls does: s/S, s/S, t/T.
    for (shift, special, set, unset) in [
        (6u32, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (e.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, e.mode & special != 0) {
            (true, false) => 'x',
            (false, false) => '-',
            (true, true) => set,
            (false, true) => unset,
        });
    }
    let c = Civil::from_unix(e.mtime);
    let recent = e.mtime > now.saturating_sub(SIX_MONTHS) && e.mtime < now.saturating_add(3600);
    let when = if recent {
        format!(
            "{} {:>2} {:02}:{:02}",
            MONTHS[c.month as usize - 1],
            c.day,
            c.hour,
            c.minute
        )
    } else {
        format!(
            "{} {:>2} {:>5}",
            MONTHS[c.month as usize - 1],
            c.day,
            c.year
        )
    };
    let _ = write!(
        s,
        " {:>4} {:<8} {:<8} {:>12} {} ",
        e.nlink,
        e.owner.as_deref().unwrap_or("ftp"),
        e.group.as_deref().unwrap_or("ftp"),
        e.size,
        when
    );
    out.extend_from_slice(s.as_bytes());
    push_name(out, &e.name);
    out.extend_from_slice(b"\r\n");
}

/// Which MLSx facts a session shows (`OPTS MLST type;size;`, RFC 3659
/// 7.9); all of them until the client chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlstFacts(u8);

/// The facts Sluice knows, in the order FEAT and the lines give them.
const FACT_NAMES: [&str; 5] = ["type", "size", "modify", "perm", "UNIX.mode"];

impl MlstFacts {
    /// Every fact (the default).
    pub const ALL: MlstFacts = MlstFacts((1 << FACT_NAMES.len()) - 1);

    /// The facts an `OPTS MLST` argument names (`type;size;`, any case);
    /// unknown names are ignored and an empty list selects none (RFC 3659
    /// 7.9).
    pub fn parse(list: &str) -> MlstFacts {
        let mut bits = 0;
        for f in list.split(';').map(str::trim) {
            if let Some(i) = FACT_NAMES.iter().position(|n| n.eq_ignore_ascii_case(f)) {
                bits |= 1 << i;
            }
        }
        MlstFacts(bits)
    }

    fn has(self, name: &str) -> bool {
        FACT_NAMES
            .iter()
            .position(|n| *n == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// The selected facts as `OPTS MLST` answers them: `type;size;`.
    pub fn selected(self) -> String {
        FACT_NAMES
            .iter()
            .filter(|n| self.has(n))
            .map(|n| format!("{n};"))
            .collect()
    }

    /// The FEAT line: every fact, the selected ones marked with `*`.
    pub fn feat_line(self) -> String {
        let mut s = String::from("MLST ");
        for n in FACT_NAMES {
            s.push_str(n);
            if self.has(n) {
                s.push('*');
            }
            s.push(';');
        }
        s
    }
}

impl Default for MlstFacts {
    fn default() -> Self {
        MlstFacts::ALL
    }
}

/// The MLSx facts and name, without terminator:
/// `type=file;size=N;modify=YYYYMMDDHHMMSS;perm=..;UNIX.mode=0644; name`.
/// `writable` says whether the session may change the entry (it decides
/// the `perm` fact, RFC 3659 7.5.5). For MLST the caller prefixes a space
/// and puts it inside a 250 reply; for MLSD use [`mlsd_line`].
pub fn mlsx_facts(e: &EntryInfo, role: MlsxRole, writable: bool) -> String {
    mlsx_selected_facts(e, role, writable, MlstFacts::ALL)
}

/// [`mlsx_facts`] with only the facts in `facts` (the name always; with
/// none, the line is a space and the name, RFC 3659 7.2).
pub fn mlsx_selected_facts(
    e: &EntryInfo,
    role: MlsxRole,
    writable: bool,
    facts: MlstFacts,
) -> String {
    let ty = match (role, e.kind) {
        (MlsxRole::Cdir, _) => "cdir",
        (MlsxRole::Pdir, _) => "pdir",
        (MlsxRole::Entry, EntryKind::Dir) => "dir",
        (MlsxRole::Entry, EntryKind::File) => "file",
        (MlsxRole::Entry, EntryKind::Symlink) => "OS.unix=symlink",
        (
            MlsxRole::Entry,
            EntryKind::Fifo
            | EntryKind::Socket
            | EntryKind::CharDevice
            | EntryKind::BlockDevice
            | EntryKind::Other,
        ) => "OS.unix=special",
    };
    let is_dir = e.kind == EntryKind::Dir || role != MlsxRole::Entry;
    // r/w for files; e (enter), l (list), c (create), m (mkdir) for dirs.
    let perm = match (is_dir, writable) {
        (false, false) => "r",
        (false, true) => "adfrw",
        (true, false) => "el",
        (true, true) => "cdeflmp",
    };
    let mut s = String::with_capacity(96 + e.name.len());
    if facts.has("type") {
        let _ = write!(s, "type={ty};");
    }
    if !is_dir && facts.has("size") {
        let _ = write!(s, "size={};", e.size);
    }
    if facts.has("modify") {
        let _ = write!(s, "modify={};", mdtm(e.mtime));
    }
    if facts.has("perm") {
        let _ = write!(s, "perm={perm};");
    }
    if facts.has("UNIX.mode") {
        let _ = write!(s, "UNIX.mode={:04o};", e.mode & 0o7777);
    }
    s.push(' ');
    s.extend(
        e.name
            .chars()
            .map(|c| if c.is_ascii_control() { '?' } else { c }),
    );
    s
}

/// Append one MLSD line (the selected facts, name, CRLF).
pub fn mlsd_line(
    e: &EntryInfo,
    role: MlsxRole,
    writable: bool,
    facts: MlstFacts,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(mlsx_selected_facts(e, role, writable, facts).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Append one NLST line (the name and CRLF).
pub fn nlst_line(e: &EntryInfo, out: &mut Vec<u8>) {
    push_name(out, &e.name);
    out.extend_from_slice(b"\r\n");
}

/// Control characters become `?`: CR/LF would end the line, and ESC and
/// friends would reach the terminal of a user reading the listing.
fn push_name(out: &mut Vec<u8>, name: &str) {
    out.extend(
        name.bytes()
            .map(|b| if b.is_ascii_control() { b'?' } else { b }),
    );
}

/// `YYYYMMDDHHMMSS` in UTC (RFC 3659 2.3), for MDTM and `modify=`.
pub fn mdtm(secs: i64) -> String {
    let c = Civil::from_unix(secs);
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Parse `YYYYMMDDHHMMSS[.sss]` (fraction ignored) into Unix seconds.
pub fn parse_mdtm(s: &str) -> Option<i64> {
    let s = s.trim();
    let main = s.split('.').next()?;
    if main.len() != 14 || !main.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| main[r].parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(4..6)?,
        n(6..8)?,
        n(8..10)?,
        n(10..12)?,
        n(12..14)?,
    );
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60
    {
        return None;
    }
    let secs = days_from_civil(y, mo as u32, d as u32) * 86400 + h * 3600 + mi * 60 + se;
    // A leap second on the last second of 9999 would format as year 10000,
    // 15 digits that no MLSD parser expects (found by the ftp_mdtm target).
    (secs < days_from_civil(10000, 1, 1) * 86400).then_some(secs)
}

/// A UTC calendar time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    /// Howard Hinnant's civil_from_days, on days since 1970-01-01.
    fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86400);
        let rem = secs.rem_euclid(86400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (days_from_civil).
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_326_960; // 2026-11-22 05:56:00 UTC

    fn file() -> EntryInfo {
        EntryInfo {
            name: "name with space".into(),
            kind: EntryKind::File,
            size: 1234,
            mtime: NOW - 1200,
            mode: 0o644,
            nlink: 1,
            owner: None,
            group: None,
        }
    }

    fn line(e: &EntryInfo) -> String {
        let mut out = Vec::new();
        list_line(e, NOW, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn epoch_and_known_dates() {
        assert_eq!(mdtm(0), "19700101000000");
        assert_eq!(mdtm(NOW), "20261122055600");
        assert_eq!(mdtm(951_782_400), "20000229000000"); // leap day
        assert_eq!(mdtm(-1), "19691231235959");
        assert_eq!(parse_mdtm("19700101000000"), Some(0));
        assert_eq!(parse_mdtm("20261122055600.123"), Some(NOW));
        assert_eq!(parse_mdtm("2026112205560"), None);
        assert_eq!(parse_mdtm("20261322055600"), None);
        // Days that do not exist are refused, not rolled into the next month.
        assert_eq!(parse_mdtm("20260231000000"), None);
        assert_eq!(parse_mdtm("20250229000000"), None);
        assert!(parse_mdtm("20240229000000").is_some());
        assert!(parse_mdtm("20000229000000").is_some());
        assert_eq!(parse_mdtm("21000229000000"), None);
        assert_eq!(parse_mdtm("99991231235960"), None);
        assert!(parse_mdtm("99991231235959").is_some());
        for t in [0, NOW, 951_782_400, 4_102_444_800, -86_400 * 365] {
            assert_eq!(parse_mdtm(&mdtm(t)), Some(t));
        }
    }

    #[test]
    fn ls_recent_and_old() {
        assert_eq!(
            line(&file()),
            "-rw-r--r--    1 ftp      ftp              1234 Nov 22 05:36 name with space\r\n"
        );
        let old = EntryInfo {
            kind: EntryKind::Dir,
            mode: 0o755,
            nlink: 2,
            mtime: 1_577_836_800,
            size: 4096,
            owner: Some("root".into()),
            group: Some("wheel".into()),
            name: "d".into(),
        };
        assert_eq!(
            line(&old),
            "drwxr-xr-x    2 root     wheel            4096 Jan  1  2020 d\r\n"
        );
        let special = EntryInfo {
            kind: EntryKind::Dir,
            mode: 0o1777,
            ..file()
        };
        assert!(line(&special).starts_with("drwxrwxrwt "));
        let suid = EntryInfo {
            mode: 0o4644,
            ..file()
        };
        assert!(line(&suid).starts_with("-rwSr--r-- "));
        let future = EntryInfo {
            mtime: NOW + 7200,
            ..file()
        };
        assert!(line(&future).contains("Nov 22  2026"));
    }

    #[test]
    fn type_character_as_ls() {
        for (kind, c) in [
            (EntryKind::File, '-'),
            (EntryKind::Dir, 'd'),
            (EntryKind::Symlink, 'l'),
            (EntryKind::Fifo, 'p'),
            (EntryKind::Socket, 's'),
            (EntryKind::CharDevice, 'c'),
            (EntryKind::BlockDevice, 'b'),
            // A type the server could not tell is not a plain file.
            (EntryKind::Other, '?'),
        ] {
            let e = EntryInfo { kind, ..file() };
            assert!(line(&e).starts_with(c), "{kind:?}: {}", line(&e));
            if !matches!(kind, EntryKind::File | EntryKind::Dir | EntryKind::Symlink) {
                let facts = mlsx_facts(&e, MlsxRole::Entry, false);
                assert!(facts.starts_with("type=OS.unix=special;"), "{facts}");
            }
        }
        for (mode, kind) in [
            (0o100644, EntryKind::File),
            (0o040755, EntryKind::Dir),
            (0o120777, EntryKind::Symlink),
            (0o010644, EntryKind::Fifo),
            (0o140755, EntryKind::Socket),
            (0o020620, EntryKind::CharDevice),
            (0o060660, EntryKind::BlockDevice),
            (0o644, EntryKind::Other),
        ] {
            assert_eq!(EntryKind::from_mode(mode), kind, "{mode:o}");
        }
    }

    #[test]
    fn mlsx() {
        assert_eq!(
            mlsx_facts(&file(), MlsxRole::Entry, false),
            "type=file;size=1234;modify=20261122053600;perm=r;UNIX.mode=0644; name with space"
        );
        let dir = EntryInfo {
            kind: EntryKind::Dir,
            mode: 0o755,
            name: ".".into(),
            ..file()
        };
        assert_eq!(
            mlsx_facts(&dir, MlsxRole::Cdir, false),
            "type=cdir;modify=20261122053600;perm=el;UNIX.mode=0755; ."
        );
        assert!(mlsx_facts(&dir, MlsxRole::Pdir, true).starts_with("type=pdir;"));
        let mut out = Vec::new();
        mlsd_line(&file(), MlsxRole::Entry, true, MlstFacts::ALL, &mut out);
        assert!(out.ends_with(b"; name with space\r\n"));
        assert!(String::from_utf8(out).unwrap().contains("perm=adfrw;"));
    }

    #[test]
    fn selected_facts() {
        let f = MlstFacts::parse("size;TYPE;bogus;");
        assert_eq!(f.selected(), "type;size;");
        assert_eq!(f.feat_line(), "MLST type*;size*;modify;perm;UNIX.mode;");
        assert_eq!(
            MlstFacts::ALL.feat_line(),
            "MLST type*;size*;modify*;perm*;UNIX.mode*;"
        );
        assert_eq!(
            mlsx_selected_facts(&file(), MlsxRole::Entry, false, f),
            "type=file;size=1234; name with space"
        );
        let none = MlstFacts::parse("");
        assert_eq!(none.selected(), "");
        assert_eq!(
            mlsx_selected_facts(&file(), MlsxRole::Entry, false, none),
            " name with space"
        );
        let m = MlstFacts::parse("modify;UNIX.mode;perm");
        assert_eq!(
            mlsx_selected_facts(&file(), MlsxRole::Entry, true, m),
            "modify=20261122053600;perm=adfrw;UNIX.mode=0644; name with space"
        );
    }

    #[test]
    fn names_cannot_break_lines() {
        let e = EntryInfo {
            name: "a\r\nb".into(),
            ..file()
        };
        let mut out = Vec::new();
        nlst_line(&e, &mut out);
        assert_eq!(out, b"a??b\r\n");
        assert!(line(&e).ends_with("a??b\r\n"));
        assert!(mlsx_facts(&e, MlsxRole::Entry, false).ends_with("a??b"));
        let e = EntryInfo {
            name: "x\x1b[31m\ty\x7f".into(),
            ..file()
        };
        let mut out = Vec::new();
        nlst_line(&e, &mut out);
        assert_eq!(out, b"x?[31m?y?\r\n");
        assert!(mlsx_facts(&e, MlsxRole::Entry, false).ends_with("x?[31m?y?"));
    }
}
