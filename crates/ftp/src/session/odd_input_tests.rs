//! Session tests for input an outside probe found mishandled: blank
//! command lines, control characters in USER, and paths ending in `/`.

use super::tests::T;
use super::*;

#[test]
fn a_bare_line_end_is_ignored_and_a_line_of_spaces_gets_500() {
    // vsftpd ignores a bare CRLF (a keep-alive some clients send without
    // reading a reply) and answers a line of spaces with 500.
    let mut t = T::new();
    t.send("\r\n\n");
    assert_eq!(t.out(), "");
    t.send("   \r\n");
    assert_eq!(t.out(), "500 Empty command.\r\n");
    let mut t = T::logged_in(true);
    t.send("\r\nNOOP\r\n");
    assert_eq!(t.out(), "200 NOOP ok.\r\n");
    // A refused line breaks an RNFR/RNTO pair; a keep-alive does not.
    t.send("RNFR a\r\n");
    assert!(matches!(t.action(), Some(Action::Query { .. })));
    t.s.handle_result(Ok(Answer::Done));
    t.send("\r\n \r\nRNTO b\r\n");
    assert_eq!(
        t.out(),
        "350 Ready for RNTO.\r\n500 Empty command.\r\n503 RNFR required first.\r\n"
    );
    assert_eq!(t.action(), None);
}

#[test]
fn control_characters_in_user_get_501_and_pass_stays_refused() {
    for name in ["a\0b", "a\x01b", "\x1b[2J", "a\tb", "a\x7f"] {
        let mut t = T::new();
        t.send(&format!("USER {name}\r\n"));
        let out = t.out();
        assert!(
            out.starts_with("501 ") && out.contains("user name") && !out.contains("file"),
            "USER {name:?}: {out}"
        );
        t.send("PASS x\r\n");
        assert_eq!(t.out(), "503 Login with USER first.\r\n", "{name:?}");
        assert_eq!(t.action(), None);
    }
    // A refused USER also drops the name given before it: PASS must not
    // log in as `alice`.
    let mut t = T::new();
    t.send("USER alice\r\n");
    assert_eq!(t.out(), "331 Please specify the password.\r\n");
    t.send("USER a\0b\r\nPASS x\r\n");
    let out = t.out();
    assert!(out.starts_with("501 "), "{out}");
    assert!(out.ends_with("\r\n503 Login with USER first.\r\n"), "{out}");
    assert_eq!(t.action(), None);
}

#[test]
fn uploads_to_a_name_ending_in_slash_are_refused() {
    // A trailing slash names a directory; no upload can write one.
    let mut t = T::logged_in(true);
    t.passive();
    for cmd in ["STOR f/", "APPE f/", "ESTO A 0 d/f/", "STOR f/."] {
        t.send(&format!("{cmd}\r\n"));
        assert_eq!(t.out(), "553 File name not allowed.\r\n", "{cmd}");
        assert_eq!(t.action(), None, "{cmd}");
    }
    t.send("STOR f\r\n");
    assert!(matches!(t.action(), Some(Action::StartStor { .. })));
}

#[test]
fn a_trailing_slash_reaches_the_shell() {
    let mut t = T::logged_in(true);
    for cmd in ["SIZE f/", "MDTM f/", "CWD d/", "MLST d/."] {
        t.send(&format!("{cmd}\r\n"));
        match t.action() {
            Some(Action::Query { path, .. }) => {
                assert!(path.names_dir(), "{cmd}: {path:?}");
                assert_eq!(path.as_str().len(), 2, "{cmd}: {path:?}");
            }
            other => panic!("{cmd}: {other:?}"),
        }
        t.s.handle_result(Err(OpError::NotADirectory));
        assert_eq!(t.out(), "550 Not a directory.\r\n", "{cmd}");
    }
    for cmd in ["DELE f/", "MKD d/", "RMD d/"] {
        t.send(&format!("{cmd}\r\n"));
        match t.action() {
            Some(Action::Change(Change::Delete(p) | Change::Mkdir(p) | Change::Rmdir(p))) => {
                assert!(p.names_dir(), "{cmd}: {p:?}")
            }
            other => panic!("{cmd}: {other:?}"),
        }
        t.s.handle_result(Ok(Answer::Done));
        t.out();
    }
    t.send("RNFR d/\r\n");
    assert!(matches!(t.action(), Some(Action::Query { path, .. }) if path.names_dir()));
    t.s.handle_result(Ok(Answer::Done));
    t.send("RNTO e\r\n");
    match t.action() {
        Some(Action::Change(Change::Rename { from, to })) => {
            assert!(from.names_dir() && !to.names_dir(), "{from:?} {to:?}");
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_result(Ok(Answer::Done));
    t.out();
    t.passive();
    t.send("RETR f/\r\n");
    match t.action() {
        Some(Action::StartRetr { path, .. }) => assert!(path.names_dir(), "{path:?}"),
        other => panic!("{other:?}"),
    }
    t.s.handle_transfer_done(t.now, Err(OpError::NotADirectory));
    assert_eq!(t.out(), "550 Not a directory.\r\n");
    // CWD d/ succeeds into a plain working directory.
    t.send("CWD d/\r\n");
    assert!(matches!(t.action(), Some(Action::Query { .. })));
    t.s.handle_result(Ok(Answer::Done));
    assert!(!t.s.cwd().names_dir());
    t.send("PWD\r\n");
    assert_eq!(
        t.out(),
        "250 Directory successfully changed.\r\n257 \"/d\" is the current directory\r\n"
    );
}
