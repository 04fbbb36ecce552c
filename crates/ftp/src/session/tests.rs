//! In-memory session tests: command bytes in, replies and actions out
//! (login, timeouts, writes, facts); the shared fixture `T`. Data transfers
//! are in transfer_tests.rs.

use std::time::{Duration, Instant};

use super::*;

fn config() -> SessionConfig {
    SessionConfig {
        local_addr: "127.0.0.1:2121".parse().unwrap(),
        peer_addr: "127.0.0.1:40000".parse().unwrap(),
        idle_timeout: Duration::from_secs(300),
        greeting: "Sluice ready.".into(),
        tls: Default::default(),
    }
}

pub(super) struct T {
    pub(super) s: Session,
    pub(super) now: Instant,
}

impl T {
    pub(super) fn new() -> T {
        let mut t = T {
            s: Session::new(config()),
            now: Instant::now(),
        };
        assert_eq!(t.out(), "220 Sluice ready.\r\n");
        t
    }

    pub(super) fn logged_in(writable: bool) -> T {
        let mut t = T::new();
        t.send("USER anonymous\r\nPASS x@y\r\n");
        assert!(matches!(t.action(), Some(Action::Authenticate { .. })));
        t.s.handle_login(Some(LoginGrant {
            writable,
            allow_foreign_data_host: false,
        }));
        assert!(t.out().starts_with("331 "));
        t
    }

    pub(super) fn send(&mut self, text: &str) -> usize {
        self.s.handle_input(self.now, text.as_bytes()).unwrap()
    }

    pub(super) fn out(&mut self) -> String {
        let mut v = Vec::new();
        self.s.poll_output(&mut v);
        String::from_utf8(v).unwrap()
    }

    /// The next action, skipping ClosePassive and DropKept (bookkeeping
    /// for the shell; `passive_listener_lifetime` and `kept_tests` check
    /// them).
    pub(super) fn action(&mut self) -> Option<Action> {
        loop {
            match self.s.poll_action() {
                Some(Action::ClosePassive | Action::DropKept) => continue,
                other => return other,
            }
        }
    }

    pub(super) fn passive(&mut self) {
        self.send("EPSV\r\n");
        assert_eq!(self.action(), Some(Action::OpenPassive { extended: true }));
        self.s
            .handle_passive(Some("127.0.0.1:50000".parse().unwrap()));
        assert_eq!(
            self.out(),
            "229 Entering Extended Passive Mode (|||50000|).\r\n"
        );
    }
}

#[test]
fn login_flow_and_530_before_login() {
    let mut t = T::new();
    t.send("RETR x\r\nCWD /\r\nPASS nope\r\n");
    assert_eq!(
        t.out(),
        "530 Please login with USER and PASS.\r\n530 Please login with USER and PASS.\r\n503 Login with USER first.\r\n"
    );
    t.send("USER bob\r\n");
    assert_eq!(t.out(), "331 Please specify the password.\r\n");
    t.send("PASS secret\r\n");
    match t.action() {
        Some(Action::Authenticate { user, pass }) => {
            assert_eq!(user, "bob");
            assert_eq!(pass.as_bytes(), b"secret");
            // The password never shows in Debug output (and so in logs).
            assert!(!format!("{pass:?}").contains("secret"));
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_login(None);
    assert_eq!(t.out(), "530 Login incorrect.\r\n");
    t.send("USER anonymous\r\nPASS a\r\n");
    assert!(matches!(t.action(), Some(Action::Authenticate { .. })));
    t.s.handle_login(Some(LoginGrant {
        writable: false,
        allow_foreign_data_host: false,
    }));
    assert_eq!(
        t.out(),
        "331 Please specify the password.\r\n230 Login successful.\r\n"
    );
    t.send("PWD\r\n");
    assert_eq!(t.out(), "257 \"/\" is the current directory\r\n");
}

#[test]
fn too_many_login_failures_close() {
    let mut t = T::new();
    for _ in 0..MAX_LOGIN_FAILURES {
        t.send("USER x\r\nPASS y\r\n");
        assert!(matches!(t.action(), Some(Action::Authenticate { .. })));
        t.s.handle_login(None);
    }
    assert!(t.out().ends_with("421 Too many login failures.\r\n"));
    assert_eq!(t.action(), Some(Action::Close));
    assert!(t.s.is_closed());
}

#[test]
fn commands_wait_while_an_action_is_outstanding() {
    let mut t = T::logged_in(false);
    let input = "CWD sub\r\nPWD\r\n";
    let used = t.send(input);
    assert_eq!(used, "CWD sub\r\n".len());
    assert_eq!(
        t.action(),
        Some(Action::Query {
            path: VirtualPath::root().resolve("/sub").unwrap(),
            query: Query::ChangeDir
        })
    );
    t.s.handle_result(Ok(Answer::Done));
    assert_eq!(t.out(), "250 Directory successfully changed.\r\n");
    t.send("PWD\r\nCDUP\r\n");
    assert_eq!(t.out(), "257 \"/sub\" is the current directory\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::Query {
            query: Query::ChangeDir,
            ..
        })
    ));
    t.s.handle_result(Err(OpError::NotFound));
    assert_eq!(t.out(), "550 No such file or directory.\r\n");
}

#[test]
fn dotdot_never_leaves_root() {
    let mut t = T::logged_in(false);
    t.send("SIZE ../../etc/passwd\r\n");
    assert_eq!(
        t.action(),
        Some(Action::Query {
            path: VirtualPath::root().resolve("/etc/passwd").unwrap(),
            query: Query::Size
        })
    );
    t.s.handle_result(Ok(Answer::Size(42)));
    assert_eq!(t.out(), "213 42\r\n");
}

#[test]
fn writes_need_a_writable_login() {
    let mut t = T::logged_in(false);
    t.passive();
    t.send("STOR f\r\nDELE f\r\nMKD d\r\nRNFR a\r\nRNTO b\r\n");
    assert_eq!(
        t.out(),
        "550 Permission denied.\r\n550 Permission denied.\r\n550 Permission denied.\r\n550 Permission denied.\r\n503 RNFR required first.\r\n"
    );
    assert_eq!(t.action(), None);
}

#[test]
fn mfmt_sets_the_time_when_writable_and_is_refused_otherwise() {
    let mut t = T::logged_in(false);
    t.send("MFMT 20260102030405 f\r\n");
    assert_eq!(t.out(), "550 Permission denied.\r\n");
    assert_eq!(t.action(), None);
    let mut t = T::logged_in(true);
    t.send("MFMT 20260102030405 a b.txt\r\n");
    match t.action() {
        Some(Action::Change(Change::SetModified { path, secs })) => {
            assert_eq!(path.as_str(), "/a b.txt");
            assert_eq!(crate::listing::mdtm(secs), "20260102030405");
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_result(Ok(Answer::Done));
    assert_eq!(t.out(), "213 Modify=20260102030405; /a b.txt\r\n");
    t.send("MFMT 2026 f\r\nMFMT 20260231000000 f\r\nMFMT 20260102030405\r\n");
    assert_eq!(t.action(), None);
    let out = t.out();
    assert_eq!(
        out.lines().filter(|l| l.starts_with("501")).count(),
        3,
        "{out}"
    );
    t.send("FEAT\r\n");
    let feat = t.out();
    assert!(feat.contains(" MFMT\r\n"), "{feat}");
    assert!(feat.contains("SHA1;CRC32C;"), "{feat}");
}

#[test]
fn uploads_and_renames_when_writable() {
    let mut t = T::logged_in(true);
    t.passive();
    t.send("APPE f\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::StartStor {
            kind: StoreKind::Append,
            ..
        })
    ));
    t.s.handle_transfer_done(t.now, Err(OpError::NoSpace));
    assert_eq!(t.out(), "452 Insufficient storage space.\r\n");
    t.send("RNFR a\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::Query {
            query: Query::Exists,
            ..
        })
    ));
    t.s.handle_result(Ok(Answer::Done));
    t.send("RNTO b\r\n");
    match t.action() {
        Some(Action::Change(Change::Rename { from, to })) => {
            assert_eq!((from.as_str(), to.as_str()), ("/a", "/b"));
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_result(Ok(Answer::Done));
    assert_eq!(t.out(), "350 Ready for RNTO.\r\n250 Rename successful.\r\n");
    t.send("MKD /x/y\r\n");
    t.action();
    t.s.handle_result(Ok(Answer::Done));
    assert_eq!(t.out(), "257 \"/x/y\" created\r\n");
    t.passive();
    t.send("ESTO A 10 f\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::StartStor {
            kind: StoreKind::Adjusted(10),
            ..
        })
    ));
}

#[test]
fn line_too_long_closes() {
    let mut t = T::new();
    let long = vec![b'A'; crate::limits::MAX_LINE + 10];
    assert_eq!(
        t.s.handle_input(t.now, &long),
        Err(SessionError::LineTooLong)
    );
    assert_eq!(t.out(), "500 Input line too long.\r\n");
    assert_eq!(t.action(), Some(Action::Close));
    assert_eq!(
        t.s.handle_input(t.now, b"NOOP\r\n"),
        Err(SessionError::Closed)
    );
}

#[test]
fn unknown_and_malformed_commands_keep_the_session() {
    let mut t = T::logged_in(false);
    t.send("XYZZY\r\nTYPE Q\r\nCKSM CRC99 0 -1 f\r\nDCAU A\r\nDCAU N\r\nSBUF 1048576\r\nNOOP\r\n");
    let out = t.out();
    let codes: Vec<&str> = out.lines().map(|l| &l[..3]).collect();
    assert_eq!(codes, vec!["502", "501", "504", "504", "200", "200", "200"]);
}

#[test]
fn checksum_and_mdtm_and_mlst() {
    let mut t = T::logged_in(false);
    t.send("CKSM SHA256 0 -1 f\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::Checksum {
            algorithm: ChecksumAlgorithm::Sha256,
            offset: 0,
            len: None,
            ..
        })
    ));
    t.s.handle_result(Ok(Answer::Checksum("abcd".into())));
    assert_eq!(t.out(), "213 abcd\r\n");
    t.send("MDTM f\r\n");
    t.action();
    t.s.handle_result(Ok(Answer::Modified(0)));
    assert_eq!(t.out(), "213 19700101000000\r\n");
    t.send("MLST f\r\n");
    t.action();
    t.s.handle_result(Ok(Answer::Facts("type=file;size=1; f".into())));
    assert_eq!(
        t.out(),
        "250-Listing\r\n type=file;size=1; f\r\n250 End\r\n"
    );
    // A mismatched answer is our bug: 451, and the session goes on.
    t.send("SIZE f\r\n");
    t.action();
    t.s.handle_result(Ok(Answer::Done));
    assert_eq!(t.out(), "451 Internal error.\r\n");
}

#[test]
fn idle_timeout_closes_and_spurious_timeout_does_nothing() {
    let mut t = T::logged_in(false);
    let deadline = t.s.poll_timeout().unwrap();
    t.s.handle_timeout(deadline - Duration::from_secs(1));
    assert_eq!(t.out(), "");
    t.s.handle_timeout(deadline);
    assert_eq!(t.out(), "421 Timeout.\r\n");
    assert_eq!(t.action(), Some(Action::Close));
}

#[test]
fn silent_client_times_out_from_the_connection_time() {
    let mut t = T::new();
    assert_eq!(t.s.poll_timeout(), None);
    t.s.handle_connected(t.now);
    let deadline = t.s.poll_timeout().unwrap();
    assert_eq!(deadline, t.now + config().idle_timeout);
    t.s.handle_timeout(deadline);
    assert_eq!(t.out(), "421 Timeout.\r\n");
    assert_eq!(t.action(), Some(Action::Close));
}

#[test]
fn partial_lines_are_not_consumed() {
    let mut t = T::new();
    assert_eq!(t.send("NO"), 0);
    assert_eq!(t.send("NOOP\r\nSY"), 6);
    assert_eq!(t.out(), "200 NOOP ok.\r\n");
}
