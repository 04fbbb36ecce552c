#[test]
fn fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = std::ffi::CString::new(dir.path().join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let root = ServedRoot::open(dir.path()).unwrap();
    // Without O_NONBLOCK this open would block forever (no writer).
    assert!(matches!(
        root.open_read("pipe"),
        Err(FsError::PermissionDenied)
    ));
    assert!(root.open_write("pipe").is_err());
    std::fs::write(dir.path().join("f"), b"data").unwrap();
    let mut f = root.open_read("f").unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut f, &mut got).unwrap();
    assert_eq!(got, "data");
    // SAFETY: F_GETFL on an fd we own.
    let fl = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::F_GETFL) };
    assert_eq!(fl & libc::O_NONBLOCK, 0);
}

use super::*;
use std::io::{Read, Write};
use std::os::unix::fs::symlink;

#[test]
fn data_ranges_skip_the_holes_of_a_sparse_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse");
    let mut f = std::fs::File::create(&path).unwrap();
    f.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[7u8; 64 << 10], 4 << 20).unwrap();
    f.flush().unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let r = data_ranges(&f, 0, 8 << 20, 16).unwrap();
    let total: u64 = r.iter().map(|x| x.end - x.start).sum();
    // The written bytes are data whatever the file system.
    assert!(r
        .iter()
        .any(|x| x.start <= 4 << 20 && x.end >= (4 << 20) + (64 << 10)));
    // A file system that reports holes gives (about) the written bytes;
    // one that does not gives the whole range.
    let whole = r.len() == 1 && r[0] == (0..8 << 20);
    assert!(total < 1 << 20 || whole, "{r:?}");
    // Inside a hole there is no data; `max` caps the extents walked.
    if total < 1 << 20 {
        assert!(data_ranges(&f, 0, 1 << 20, 16).unwrap().is_empty());
    }
    let capped = data_ranges(&f, 0, 8 << 20, 1).unwrap();
    assert_eq!((capped.len(), capped[0].clone()), (1, 0..8 << 20));
}

fn root() -> (tempfile::TempDir, ServedRoot) {
    let outer = tempfile::tempdir().unwrap();
    let served = outer.path().join("root");
    std::fs::create_dir(&served).unwrap();
    std::fs::write(outer.path().join("secret"), b"outside").unwrap();
    std::fs::write(served.join("a.txt"), b"hello").unwrap();
    std::fs::create_dir(served.join("sub")).unwrap();
    std::fs::write(served.join("sub/b.txt"), b"bee").unwrap();
    let r = ServedRoot::open(&served).unwrap();
    (outer, r)
}

#[test]
fn reads_files_beneath_root() {
    let (_d, r) = root();
    let mut s = String::new();
    r.open_read("/a.txt")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "hello");
    let mut s = String::new();
    r.open_read("sub/b.txt")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "bee");
    assert!(matches!(r.open_read("/sub"), Err(FsError::IsADirectory)));
    assert!(matches!(r.open_read("/nope"), Err(FsError::NotFound)));
}

#[test]
fn dotdot_past_root_is_refused() {
    let (_d, r) = root();
    assert!(matches!(
        r.open_read("../secret"),
        Err(FsError::OutsideRoot)
    ));
    assert!(matches!(
        r.open_read("sub/../../secret"),
        Err(FsError::OutsideRoot)
    ));
}

#[test]
fn escaping_symlinks_are_refused_inside_ones_work() {
    let (d, r) = root();
    let served = d.path().join("root");
    symlink(d.path().join("secret"), served.join("abs")).unwrap();
    symlink("../secret", served.join("rel")).unwrap();
    symlink("../..", served.join("sub/up")).unwrap();
    symlink("a.txt", served.join("inside")).unwrap();
    assert!(matches!(r.open_read("abs"), Err(FsError::OutsideRoot)));
    assert!(matches!(r.open_read("rel"), Err(FsError::OutsideRoot)));
    assert!(matches!(
        r.open_read("sub/up/secret"),
        Err(FsError::OutsideRoot)
    ));
    assert!(matches!(r.stat("abs"), Err(FsError::OutsideRoot)));
    assert!(matches!(r.mkdir("sub/up/evil"), Err(FsError::OutsideRoot)));
    let mut s = String::new();
    r.open_read("inside")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "hello");
    // Listings show escaping links as links, never the outside metadata.
    let list = r.list_dir("/").unwrap();
    let abs = list.iter().find(|e| e.name == b"abs").unwrap();
    assert_eq!(abs.meta.kind, FileKind::Symlink);
    let inside = list.iter().find(|e| e.name == b"inside").unwrap();
    assert_eq!(inside.meta.kind, FileKind::File);
    assert_eq!(inside.meta.size, 5);
}

#[test]
fn list_stat_mkdir_rmdir_unlink_rename() {
    let (d, r) = root();
    let names: Vec<_> = r
        .list_dir("")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b"a.txt".to_vec(), b"sub".to_vec()]);
    assert_eq!(r.stat("/a.txt").unwrap().size, 5);
    assert_eq!(r.stat("/").unwrap().kind, FileKind::Dir);
    r.mkdir("/new").unwrap();
    assert!(matches!(r.mkdir("/new"), Err(FsError::AlreadyExists)));
    assert!(matches!(r.rmdir("/sub"), Err(FsError::NotEmpty)));
    r.rmdir("/new/").unwrap();
    r.rename("/a.txt", "/sub/c.txt").unwrap();
    assert!(d.path().join("root/sub/c.txt").exists());
    assert!(matches!(r.unlink("/sub"), Err(FsError::IsADirectory)));
    r.unlink("/sub/c.txt").unwrap();
    assert!(matches!(r.unlink("/"), Err(FsError::InvalidPath)));
    assert!(matches!(r.rmdir(".."), Err(FsError::InvalidPath)));
}

#[test]
fn temp_file_commit_and_discard() {
    let (d, r) = root();
    let served = d.path().join("root");
    let t = r.create_temp("/a.txt").unwrap();
    let tname = served.join(t.temp_name());
    assert!(tname.exists());
    (&**t.file()).write_all(b"new content").unwrap();
    // Until commit the old file is intact.
    assert_eq!(std::fs::read(served.join("a.txt")).unwrap(), b"hello");
    t.commit().unwrap();
    assert_eq!(std::fs::read(served.join("a.txt")).unwrap(), b"new content");
    assert!(!tname.exists());
    let t = r.create_temp("/sub/x").unwrap();
    let tname = served.join("sub").join(t.temp_name());
    t.discard().unwrap();
    assert!(!tname.exists());
    assert!(!served.join("sub/x").exists());
    let t = r.create_temp("/sub/y").unwrap();
    t.keep_as(".y.partial").unwrap();
    assert!(served.join("sub/.y.partial").exists());
    assert!(matches!(
        r.create_temp("../escape"),
        Err(FsError::OutsideRoot)
    ));
}
