//! The sans-I/O half of tree transfers: a directory listing in, the
//! actions for it out. A name in a listing is the server's (or the local
//! file system's) to choose, so every one is checked here before it is
//! joined to a path: a name that could leave the tree (`..`, `/`, an
//! absolute path) or carry control characters (CR LF would inject FTP
//! commands; ESC drives terminals) refuses the whole job, because a
//! server that sends one is broken or hostile, and the user must hear of
//! it rather than get a quietly partial copy.

use std::fmt;

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory to descend into.
    Dir,
    /// A symbolic link (not followed: it may point anywhere).
    Link,
    /// Anything else: device, FIFO, socket, unknown type.
    Other,
}

/// One entry of a listing, local or remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// One path segment, unchecked.
    pub name: String,
    /// File, directory, link or other.
    pub kind: Kind,
    /// Size in bytes, if known.
    pub size: Option<u64>,
    /// Modification time in seconds since the epoch (UTC), if known.
    pub mtime: Option<i64>,
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadName {
    /// The name with control characters shown as `\xNN`.
    pub shown: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unsafe name `{}` in listing: {}", self.shown, self.why)
    }
}

/// A name shown safely: control characters (C0, DEL, C1) as `\xNN`.
pub fn shown(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars().take(200) {
        if c.is_control() {
            for b in c.to_string().bytes() {
                s.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            s.push(c);
        }
    }
    s
}

/// Checks that `name` is one harmless path segment.
pub fn check_name(name: &str) -> Result<(), BadName> {
    let why = if name.is_empty() {
        Some("empty name")
    } else if name == "." || name == ".." {
        Some("names the directory itself or its parent")
    } else if name.contains('/') {
        Some("contains `/` (a path, not a name)")
    } else if name.chars().any(char::is_control) {
        Some("contains control characters")
    } else if name.len() > 1024 {
        Some("longer than 1024 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(BadName {
            shown: shown(name),
            why,
        }),
        None => Ok(()),
    }
}

/// What to do with one entry of a listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the directory `rel` and list it.
    Descend {
        /// Path relative to the tree's root, `/`-separated.
        rel: String,
    },
    /// Move the file `rel`.
    Copy {
        /// Path relative to the tree's root.
        rel: String,
        /// Size, if the listing gave it.
        size: Option<u64>,
        /// Modification time, if the listing gave it.
        mtime: Option<i64>,
    },
    /// Leave `rel` out, and say why.
    Skip {
        /// Path relative to the tree's root.
        rel: String,
        /// Why (symlink, special file).
        why: &'static str,
    },
}

/// Joins a checked name to a relative directory path (`""` is the root).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The actions for the listing of directory `dir` (relative to the root):
/// directories to descend into, files to copy, links and special files to
/// skip. Any unsafe name refuses the whole listing.
pub fn plan_dir(dir: &str, entries: &[Entry]) -> Result<Vec<Action>, BadName> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        check_name(&e.name)?;
        let rel = join(dir, &e.name);
        out.push(match e.kind {
            Kind::Dir => Action::Descend { rel },
            Kind::File => Action::Copy {
                rel,
                size: e.size,
                mtime: e.mtime,
            },
            Kind::Link => Action::Skip {
                rel,
                why: "symbolic link (not followed)",
            },
            Kind::Other => Action::Skip {
                rel,
                why: "not a regular file or directory",
            },
        });
    }
    // Directories first, then files, each by name: stable, and the tree's
    // shape is known before its files are moved.
    out.sort_by(|a, b| order(a).cmp(&order(b)));
    Ok(out)
}

fn order(a: &Action) -> (u8, &str) {
    match a {
        Action::Descend { rel } => (0, rel),
        Action::Copy { rel, .. } => (1, rel),
        Action::Skip { rel, .. } => (2, rel),
    }
}

/// What a sync knows of the copy already at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Have {
    /// Its size.
    pub size: u64,
    /// Its modification time, seconds since the epoch, if known.
    pub mtime: Option<i64>,
}

/// `--sync` by size and time: whether `src` must be copied over `dst`.
/// Sizes must match and times match to the second (listings and MFMT
/// carry whole seconds). When the destination cannot be given the
/// source's time (`dst_time_settable` false: an FTP server without
/// MFMT), a destination copy at least as new as the source counts.
/// An unknown size or time on either side means "copy".
pub fn differs(
    src_size: Option<u64>,
    src_mtime: Option<i64>,
    dst: Option<Have>,
    dst_time_settable: bool,
) -> bool {
    let Some(dst) = dst else { return true };
    if src_size != Some(dst.size) {
        return true;
    }
    match (src_mtime, dst.mtime) {
        (Some(s), Some(d)) if dst_time_settable => s != d,
        (Some(s), Some(d)) => d < s,
        _ => true,
    }
}

/// Parses an MLSD listing (RFC 3659 7.2: `fact=value;...; name` per line,
/// CRLF or LF ends). The listed directory itself (`type=cdir`) and its
/// parent (`pdir`) are dropped; a line without facts is an error (the
/// name cannot be told from the facts). Names are not checked here:
/// [`plan_dir`] does that.
pub fn parse_mlsd(text: &[u8]) -> Result<Vec<Entry>, String> {
    let text = std::str::from_utf8(text)
        .map_err(|_| "MLSD listing is not UTF-8 (RFC 3659 names are UTF-8)".to_string())?;
    let mut out = Vec::new();
    for line in text.split('\n') {
        // globus-gridftp-server in TYPE A (the lister's session) turns its
        // own CRLF into CR CR LF: every CR at the end goes (a name that
        // ends in CR is refused as a control character anyway).
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        // Facts never hold a space; the name is everything after the first.
        let Some((facts, name)) = line.split_once(' ') else {
            return Err(format!("MLSD line without facts: `{}`", shown(line)));
        };
        let mut kind = Kind::Other;
        let mut size = None;
        let mut mtime = None;
        let mut skip = false;
        for fact in facts.split(';').filter(|f| !f.is_empty()) {
            let (k, v) = fact.split_once('=').unwrap_or((fact, ""));
            match k.to_ascii_lowercase().as_str() {
                "type" => {
                    let v = v.to_ascii_lowercase();
                    kind = match v.as_str() {
                        "file" => Kind::File,
                        "dir" => Kind::Dir,
                        "cdir" | "pdir" => {
                            skip = true;
                            Kind::Dir
                        }
                        _ if v.contains("link") => Kind::Link,
                        _ => Kind::Other,
                    }
                }
                "size" => size = v.parse().ok(),
                "modify" => mtime = sluice_ftp::listing::parse_mdtm(v),
                _ => {}
            }
        }
        if !skip {
            out.push(Entry {
                name: name.to_string(),
                kind,
                size,
                mtime,
            });
        }
    }
    Ok(out)
}

/// Parses a Unix `ls -l` style LIST listing (what vsftpd, ProFTPD and
/// most servers without MLSD send), for a tree download from a server
/// without MLSD:
/// `-rw-r--r--    1 ftp      ftp          1234 Nov 22 05:36 name`.
/// The name is everything after the time field and one space (names
/// with spaces survive); `.` and `..` (from `LIST -a`) and `total N` are
/// dropped; a symlink's `name -> target` is a [`Kind::Link`]. Times are
/// left unknown: a LIST time is local, to the minute or the day only.
/// A line of another shape is an error (a tree must not be guessed at).
pub fn parse_list(text: &[u8]) -> Result<Vec<Entry>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "LIST listing is not UTF-8".to_string())?;
    let mut out = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with("total ") {
            continue;
        }
        let bad = || format!("LIST line not in `ls -l` form: `{}`", shown(line));
        // Eight fields (mode, links, owner, group, size, month, day,
        // time or year), then the name.
        let mut rest = line;
        let mut fields = Vec::with_capacity(8);
        for _ in 0..8 {
            rest = rest.trim_start_matches(' ');
            let end = rest.find(' ').ok_or_else(bad)?;
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let name = rest.strip_prefix(' ').ok_or_else(bad)?;
        let size: u64 = fields[4].parse().map_err(|_| bad())?;
        let kind = match fields[0].chars().next() {
            Some('-') => Kind::File,
            Some('d') => Kind::Dir,
            Some('l') => Kind::Link,
            Some(_) => Kind::Other,
            None => return Err(bad()),
        };
        let name = match kind {
            Kind::Link => name.split(" -> ").next().unwrap_or(name),
            _ => name,
        };
        if name == "." || name == ".." || name.is_empty() {
            continue;
        }
        out.push(Entry {
            name: name.to_string(),
            kind,
            size: (kind == Kind::File).then_some(size),
            mtime: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_parsed() {
        let raw = b"total 12\r\n\
drwxr-xr-x    2 ftp      ftp          4096 Nov 25 06:28 .\r\n\
drwxr-xr-x    3 ftp      ftp          4096 Jan 01  2020 ..\r\n\
-rw-r--r--    1 ftp      ftp             3 Nov 25 06:28 sp ace.dat\r\n\
-rw-r--r--    1 ftp      ftp          1234 Nov 25 06:28  lead\r\n\
drwxr-xr-x    2 ftp      ftp          4096 Jan 01  2020 sub dir\n\
lrwxrwxrwx    1 ftp      ftp             4 Nov 25 06:28 ln -> /etc\r\n\
prw-r--r--    1 ftp      ftp             0 Nov 25 06:28 fifo\r\n\
-rw-r--r--    1 ftp      ftp             0 Nov 25 06:28 caf\xc3\xa9\r\n";
        let e = parse_list(raw).unwrap();
        let got: Vec<(&str, Kind, Option<u64>)> = e
            .iter()
            .map(|e| (e.name.as_str(), e.kind, e.size))
            .collect();
        assert_eq!(
            got,
            [
                ("sp ace.dat", Kind::File, Some(3)),
                (" lead", Kind::File, Some(1234)),
                ("sub dir", Kind::Dir, None),
                ("ln", Kind::Link, None),
                ("fifo", Kind::Other, None),
                ("café", Kind::File, Some(0)),
            ]
        );
        assert!(parse_list(b"garbage line\r\n").is_err());
        assert!(parse_list(b"-rw-r--r-- 1 a b notanumber Nov 25 06:28 x\r\n").is_err());
        assert!(parse_list(b"").unwrap().is_empty());
    }

    fn file(name: &str) -> Entry {
        Entry {
            name: name.into(),
            kind: Kind::File,
            size: Some(1),
            mtime: None,
        }
    }

    #[test]
    fn mlsd_lines_ending_in_cr_cr_lf_are_read() {
        // globus-gridftp-server's MLSD in TYPE A.
        let e = parse_mlsd(b"type=dir;modify=20260101000000; d0\r\r\ntype=file;size=3; f\r\r\n")
            .unwrap();
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!((e[0].name.as_str(), e[0].kind), ("d0", Kind::Dir));
        assert_eq!((e[1].name.as_str(), e[1].size), ("f", Some(3)));
    }

    #[test]
    fn mlsd_is_parsed_and_cdir_dropped() {
        let raw = b"type=cdir;modify=20260101000000; .\r\n\
type=pdir; ..\r\n\
type=file;size=5;modify=20260102030405;perm=r; a b; c.txt\r\n\
Type=DIR;Modify=20260101000000; sub dir\n\
type=OS.unix=slink:/etc;size=4; ln\r\n\
type=OS.unix=chr-1/3; null\r\n\
type=file;size=0; caf\xc3\xa9\r\n";
        let e = parse_mlsd(raw).unwrap();
        assert_eq!(e.len(), 5, "{e:?}");
        assert_eq!(e[0].name, "a b; c.txt");
        assert_eq!((e[0].kind, e[0].size), (Kind::File, Some(5)));
        assert_eq!(
            e[0].mtime,
            sluice_ftp::listing::parse_mdtm("20260102030405")
        );
        assert!(e[0].mtime.is_some());
        assert_eq!((e[1].name.as_str(), e[1].kind), ("sub dir", Kind::Dir));
        assert_eq!(e[2].kind, Kind::Link);
        assert_eq!(e[3].kind, Kind::Other);
        assert_eq!(e[4].name, "café");
        assert!(parse_mlsd(b"noname\r\n").is_err());
        assert!(parse_mlsd(b"type=file; \xff\r\n").is_err());
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "/etc/passwd",
            "a/b",
            "x\r\nDELE y",
            "\x1b[2J",
            "a\u{9b}",
        ] {
            let e = plan_dir("sub", &[file("ok"), file(bad)]).unwrap_err();
            assert!(!e.shown.contains('\x1b') && !e.shown.contains('\n'), "{e}");
        }
        for good in ["a b", "café", "..x", "x..", "-rf", " lead", "日本"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn sync_compares_size_and_time() {
        let have = |size, mtime| {
            Some(Have {
                size,
                mtime: Some(mtime),
            })
        };
        assert!(!differs(Some(5), Some(100), have(5, 100), true));
        assert!(differs(Some(5), Some(100), have(5, 101), true));
        assert!(differs(Some(6), Some(100), have(5, 100), true));
        assert!(differs(Some(5), Some(100), None, true));
        assert!(differs(None, Some(100), have(5, 100), true));
        assert!(differs(Some(5), None, have(5, 100), true));
        // No MFMT: the server's copy is newer than the source.
        assert!(!differs(Some(5), Some(100), have(5, 150), false));
        assert!(differs(Some(5), Some(100), have(5, 50), false));
    }

    #[test]
    fn plan_orders_dirs_first_and_skips_links() {
        let entries = vec![
            file("z"),
            Entry {
                name: "d".into(),
                kind: Kind::Dir,
                size: None,
                mtime: None,
            },
            Entry {
                name: "l".into(),
                kind: Kind::Link,
                size: None,
                mtime: None,
            },
            file("a"),
        ];
        let p = plan_dir("top", &entries).unwrap();
        assert_eq!(
            p[0],
            Action::Descend {
                rel: "top/d".into()
            }
        );
        assert!(matches!(&p[1], Action::Copy { rel, .. } if rel == "top/a"));
        assert!(matches!(&p[2], Action::Copy { rel, .. } if rel == "top/z"));
        assert!(matches!(&p[3], Action::Skip { rel, .. } if rel == "top/l"));
        assert!(
            matches!(&plan_dir("", &[file("f")]).unwrap()[0], Action::Copy { rel, .. } if rel == "f")
        );
    }
}
