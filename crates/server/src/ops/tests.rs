use super::*;

fn setup() -> (tempfile::TempDir, ServedRoot) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f"), b"hello world").unwrap();
    std::fs::write(d.path().join(".f2.sluice-partial"), b"abc").unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    let r = ServedRoot::open(d.path()).unwrap();
    (d, r)
}

fn vp(s: &str) -> VirtualPath {
    VirtualPath::root().resolve(s).unwrap()
}

#[test]
fn checksums_match_known_values() {
    let (_d, r) = setup();
    let sha = checksum(&r, &vp("f"), ChecksumAlgorithm::Sha256, 0, None).unwrap();
    assert_eq!(
        sha,
        Answer::Checksum("b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9".into())
    );
    let md5 = checksum(&r, &vp("f"), ChecksumAlgorithm::Md5, 0, None).unwrap();
    assert_eq!(
        md5,
        Answer::Checksum("5eb63bbbe01eeed093cb22bb8f5acdc3".into())
    );
    // Known answers for "hello world" (sha1sum; CRC32C as in RFC 3720's
    // Castagnoli polynomial, checked with a bitwise Python CRC).
    let sha1 = checksum(&r, &vp("f"), ChecksumAlgorithm::Sha1, 0, None).unwrap();
    assert_eq!(
        sha1,
        Answer::Checksum("2aae6c35c94fcfb415dbe95f408b9ce91ee846ed".into())
    );
    let crc = checksum(&r, &vp("f"), ChecksumAlgorithm::Crc32c, 0, None).unwrap();
    assert_eq!(crc, Answer::Checksum("c99465aa".into()));
    let adler = checksum(&r, &vp("f"), ChecksumAlgorithm::Adler32, 0, None).unwrap();
    assert_eq!(adler, Answer::Checksum("1a0b045d".into()));
    let part = checksum(&r, &vp("f"), ChecksumAlgorithm::Md5, 6, Some(5)).unwrap();
    // md5("world")
    assert_eq!(
        part,
        Answer::Checksum("7d793037a0760186574b0282f2f435e7".into())
    );
    assert_eq!(
        checksum(&r, &vp("f"), ChecksumAlgorithm::Md5, 99, None),
        Err(OpError::OffsetBeyondEof)
    );
}

#[test]
fn queries_and_listings() {
    let (_d, r) = setup();
    assert_eq!(
        query(&r, &vp("f"), Query::Size, false),
        Ok(Answer::Size(11))
    );
    assert_eq!(
        query(&r, &vp("sub"), Query::Size, false),
        Err(OpError::NotAFile)
    );
    assert_eq!(
        query(&r, &vp("f"), Query::ChangeDir, false),
        Err(OpError::NotADirectory)
    );
    assert_eq!(
        query(&r, &vp("sub"), Query::ChangeDir, false),
        Ok(Answer::Done)
    );
    // Nobody but an upload writes under an internal name.
    assert_eq!(
        change(
            &r,
            &Change::Rename {
                from: vp("f"),
                to: vp(".g.sluice-partial")
            }
        ),
        Err(OpError::BadName)
    );
    // The partial answers SIZE for resuming clients, and CKSM (with
    // offset and length) so `sluice put --continue` can check it.
    assert_eq!(
        query(&r, &vp("f2"), Query::Size, false),
        Ok(Answer::Size(3))
    );
    assert_eq!(
        checksum(&r, &vp("f2"), ChecksumAlgorithm::Md5, 0, Some(3)),
        Ok(Answer::Checksum("900150983cd24fb0d6963f7d28e17f72".into())) // md5("abc")
    );
    assert_eq!(
        checksum(&r, &vp("f2"), ChecksumAlgorithm::Md5, 4, None),
        Err(OpError::OffsetBeyondEof)
    );
    assert_eq!(
        query(&r, &vp("nope"), Query::Size, false),
        Err(OpError::NotFound)
    );
    let names = listing_bytes(&r, &vp("/"), ListFormat::Names, false).unwrap();
    assert_eq!(names, b"f\r\nsub\r\n");
    let mlsd = String::from_utf8(
        listing_bytes(&r, &vp("/"), ListFormat::Machine(MlstFacts::ALL), false).unwrap(),
    )
    .unwrap();
    assert!(mlsd.starts_with("type=cdir;"), "{mlsd}");
    assert!(mlsd.contains("type=file;size=11;"), "{mlsd}");
    match query(&r, &vp("f"), Query::Facts(MlstFacts::ALL), false).unwrap() {
        Answer::Facts(f) => assert!(f.ends_with("; /f"), "{f}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn special_files_are_not_listed_as_plain_files() {
    let (d, r) = setup();
    let _sock = std::os::unix::net::UnixListener::bind(d.path().join("sock")).unwrap();
    let st = std::process::Command::new("mkfifo")
        .arg(d.path().join("fifo"))
        .status()
        .unwrap();
    assert!(st.success());
    let long =
        String::from_utf8(listing_bytes(&r, &vp("/"), ListFormat::Long, false).unwrap()).unwrap();
    for (name, kind) in [("fifo", 'p'), ("sock", 's')] {
        let line = long
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} not listed:\n{long}"));
        assert!(line.starts_with(kind), "{line}");
    }
    let mlsd = String::from_utf8(
        listing_bytes(&r, &vp("/"), ListFormat::Machine(MlstFacts::ALL), false).unwrap(),
    )
    .unwrap();
    for name in ["fifo", "sock"] {
        let line = mlsd.lines().find(|l| l.ends_with(&format!("; {name}")));
        assert!(
            line.is_some_and(|l| l.starts_with("type=OS.unix=special;")),
            "{name}:\n{mlsd}"
        );
    }
}

#[test]
fn a_trailing_slash_on_a_file_is_not_a_directory() {
    let (d, r) = setup();
    let f = vp("f/");
    for q in [
        Query::Size,
        Query::Modified,
        Query::Exists,
        Query::Facts(MlstFacts::ALL),
        Query::Status,
        Query::ChangeDir,
    ] {
        assert_eq!(query(&r, &f, q, true), Err(OpError::NotADirectory), "{q:?}");
    }
    // The kept partial of f2 answers SIZE f2, not SIZE f2/.
    assert_eq!(
        query(&r, &vp("f2/"), Query::Size, false),
        Err(OpError::NotFound)
    );
    assert_eq!(
        listing_bytes(&r, &f, ListFormat::Long, false),
        Err(OpError::NotADirectory)
    );
    assert_eq!(
        checksum(&r, &f, ChecksumAlgorithm::Md5, 0, None),
        Err(OpError::NotADirectory)
    );
    assert_eq!(
        change(&r, &Change::Delete(f.clone())),
        Err(OpError::NotADirectory)
    );
    for (from, to) in [("f/", "g"), ("f", "g/")] {
        let c = Change::Rename {
            from: vp(from),
            to: vp(to),
        };
        assert_eq!(
            change(&r, &c),
            Err(OpError::NotADirectory),
            "{from} -> {to}"
        );
    }
    assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"hello world");
    assert!(!d.path().join("g").exists());
    // Directories work with the slash as without it.
    assert_eq!(
        query(&r, &vp("sub/"), Query::ChangeDir, false),
        Ok(Answer::Done)
    );
    assert_eq!(
        query(&r, &vp("sub/"), Query::Exists, true),
        Ok(Answer::Done)
    );
    assert_eq!(
        listing_bytes(&r, &vp("sub/"), ListFormat::Names, false),
        Ok(Vec::new())
    );
    assert_eq!(change(&r, &Change::Mkdir(vp("new/"))), Ok(Answer::Done));
    let c = Change::Rename {
        from: vp("new/"),
        to: vp("new2/"),
    };
    assert_eq!(change(&r, &c), Ok(Answer::Done));
    assert_eq!(change(&r, &Change::Rmdir(vp("new2/"))), Ok(Answer::Done));
    assert!(!d.path().join("new2").exists());
}
