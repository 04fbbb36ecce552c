//! In-memory session tests of data transfers: PASV/EPSV and PORT (bounce
//! refused), RETR with REST, ABOR, MODE E restart ranges, the passive
//! listener's lifetime, listings with a wildcard.

use std::net::SocketAddr;

use super::tests::T;
use super::*;
use crate::command::TransferMode;

#[test]
fn retr_needs_a_data_channel() {
    let mut t = T::logged_in(false);
    t.send("RETR file\r\n");
    assert_eq!(t.out(), "425 Use PORT or PASV first.\r\n");
    assert_eq!(t.action(), None);
}

#[test]
fn passive_retr_with_rest_then_226() {
    let mut t = T::logged_in(false);
    t.passive();
    t.send("TYPE I\r\nREST 100\r\nRETR f\r\n");
    assert_eq!(
        t.out(),
        "200 Switching to Binary mode.\r\n350 Restarting at 100. Send STOR or RETR.\r\n"
    );
    match t.action() {
        Some(Action::StartRetr {
            path,
            offset,
            len,
            data,
            ..
        }) => {
            assert_eq!(path.as_str(), "/f");
            assert_eq!(offset, 100);
            assert_eq!(len, None);
            assert_eq!(data.channel, DataChannel::Passive);
            assert_eq!(data.parallelism, 1);
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_transfer_started(Some(900));
    assert_eq!(
        t.out(),
        "150 Opening BINARY mode data connection (900 bytes).\r\n"
    );
    t.s.handle_transfer_done(t.now, Ok(900));
    assert_eq!(t.out(), "226 Transfer complete.\r\n");
    // The passive channel is used up; REST is consumed.
    t.send("RETR f\r\n");
    assert_eq!(t.out(), "425 Use PORT or PASV first.\r\n");
}

#[test]
fn rest_beyond_eof_and_missing_file_get_replies() {
    let mut t = T::logged_in(false);
    t.passive();
    t.send("REST 999999\r\nRETR f\r\n");
    t.out();
    assert!(matches!(
        t.action(),
        Some(Action::StartRetr { offset: 999999, .. })
    ));
    t.s.handle_transfer_done(t.now, Err(OpError::OffsetBeyondEof));
    assert_eq!(t.out(), "554 Restart offset beyond end of file.\r\n");
    t.passive();
    t.send("RETR dir\r\n");
    t.action();
    t.s.handle_transfer_done(t.now, Err(OpError::NotAFile));
    assert_eq!(t.out(), "550 Not a plain file.\r\n");
    t.send("NOOP\r\n");
    assert_eq!(t.out(), "200 NOOP ok.\r\n");
}

#[test]
fn abor_during_transfer() {
    let mut t = T::logged_in(false);
    t.passive();
    t.send("RETR f\r\n");
    t.action();
    t.s.handle_transfer_started(None);
    t.out();
    // PWD waits; ABOR is taken at once.
    let used = t.send("PWD\r\n");
    assert_eq!(used, 0);
    t.send("ABOR\r\n");
    assert_eq!(t.action(), Some(Action::Abort));
    t.s.handle_transfer_done(t.now, Err(OpError::Aborted));
    assert_eq!(t.out(), "426 Transfer aborted.\r\n226 ABOR successful.\r\n");
    t.send("ABOR\r\n");
    assert_eq!(t.out(), "225 No transfer to ABOR.\r\n");
}

#[test]
fn port_bounce_is_refused() {
    let mut t = T::logged_in(false);
    t.send("PORT 10,0,0,1,200,10\r\n");
    assert!(t.out().starts_with("501 "));
    t.send("PORT 127,0,0,1,0,21\r\n");
    assert!(t.out().starts_with("501 "));
    t.send("EPRT |1|127.0.0.1|50000|\r\n");
    assert!(t.out().starts_with("200 "));
    t.send("PORT 1,2,3\r\n");
    assert!(t.out().starts_with("501 "));
    t.send("MODE E\r\nOPTS RETR Parallelism=4,4,4;\r\nRETR f\r\n");
    assert_eq!(t.out(), "200 Mode set.\r\n200 OPTS Command Successful.\r\n");
    match t.action() {
        Some(Action::StartRetr { data, .. }) => {
            let want: SocketAddr = "127.0.0.1:50000".parse().unwrap();
            assert_eq!(data.channel, DataChannel::Active(want));
            assert_eq!(data.mode, TransferMode::ExtendedBlock);
            assert_eq!(data.parallelism, 4);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn foreign_host_allowed_when_granted() {
    let mut t = T::new();
    t.send("USER u\r\nPASS p\r\n");
    t.action();
    t.s.handle_login(Some(LoginGrant {
        writable: false,
        allow_foreign_data_host: true,
    }));
    t.out();
    t.send("PORT 10,0,0,1,195,80\r\n");
    assert!(t.out().starts_with("200 "));
    // Even third-party transfers never reach a privileged port (bounce to
    // SMTP and the like).
    t.send("PORT 10,0,0,1,0,25\r\n");
    assert!(t.out().starts_with("501 "));
}

#[test]
fn no_idle_timeout_during_transfer_and_quit_after() {
    let mut t = T::logged_in(false);
    t.passive();
    t.send("LIST -la\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::List {
            format: ListFormat::Long,
            ..
        })
    ));
    assert_eq!(t.s.poll_timeout(), None);
    t.send("QUIT\r\n");
    assert_eq!(t.action(), Some(Action::Abort));
    t.s.handle_transfer_done(t.now, Ok(10));
    assert_eq!(t.out(), "226 Transfer complete.\r\n221 Goodbye.\r\n");
    assert_eq!(t.action(), Some(Action::Close));
}

#[test]
fn pasv_announces_ipv4_and_feat_lists_gridftp() {
    let mut t = T::logged_in(false);
    t.send("PASV\r\n");
    assert_eq!(t.action(), Some(Action::OpenPassive { extended: false }));
    t.s.handle_passive(Some("127.0.0.1:50001".parse().unwrap()));
    assert_eq!(t.out(), "227 Entering Passive Mode (127,0,0,1,195,81).\r\n");
    t.send("FEAT\r\n");
    let feat = t.out();
    assert!(feat.starts_with("211-"));
    assert!(feat.contains(" PARALLEL\r\n") && feat.contains(" REST STREAM\r\n"));
    assert!(feat.ends_with("211 End.\r\n"));
}

#[test]
fn mode_e_restart_ranges() {
    let mut t = T::logged_in(true);
    // MODE S: a stream has no offsets, so only a prefix can be skipped.
    t.send("REST 0-100,200-300\r\n");
    assert!(t.out().starts_with("504 "));
    t.send("REST 5-100\r\n");
    assert!(t.out().starts_with("504 "));
    t.send("REST 0-100\r\nPORT 127,0,0,1,200,1\r\nRETR f\r\n");
    assert!(t.out().starts_with("350 Restarting at 100."));
    match t.action() {
        Some(Action::StartRetr {
            offset: 100,
            len: None,
            skip,
            ..
        }) => assert!(skip.is_empty()),
        other => panic!("{other:?}"),
    }
    t.s.handle_transfer_done(t.now, Ok(0));
    t.out();
    t.send("REST 0-7\r\nPORT 127,0,0,1,200,1\r\nSTOR f\r\n");
    t.out();
    assert!(matches!(
        t.action(),
        Some(Action::StartStor {
            kind: StoreKind::Restart(7),
            ..
        })
    ));
    t.s.handle_transfer_done(t.now, Ok(0));
    t.out();
    t.send("MODE E\r\nREST 100\r\nREST 0-100,200-300\r\nPORT 127,0,0,1,200,1\r\nRETR f\r\n");
    let out = t.out();
    assert!(out.contains("350 Restart markers accepted."), "{out}");
    match t.action() {
        Some(Action::StartRetr {
            offset: 0,
            len: None,
            skip,
            ..
        }) => assert_eq!(skip, vec![0..100, 200..300]),
        other => panic!("{other:?}"),
    }
    t.s.handle_transfer_done(t.now, Ok(0));
    t.out();
    t.send("REST 0-100\r\nPORT 127,0,0,1,200,1\r\nSTOR f\r\n");
    t.out();
    assert!(matches!(
        t.action(),
        Some(Action::StartStor {
            kind: StoreKind::RestartRanges(100),
            ..
        })
    ));
}

#[test]
fn passive_listener_lifetime() {
    // MODE S: the listener serves one transfer.
    let mut t = T::logged_in(false);
    t.passive();
    t.send("RETR f\r\n");
    assert!(matches!(t.s.poll_action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_done(t.now, Ok(1));
    assert_eq!(t.s.poll_action(), Some(Action::ClosePassive));
    t.out();
    // MODE E: the data channel stays for the next transfer (GridFTP data
    // channel caching), until a failure.
    t.send("MODE E\r\n");
    t.out();
    t.passive();
    t.send("RETR f\r\n");
    assert!(matches!(t.s.poll_action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_done(t.now, Ok(1));
    assert_eq!(t.s.poll_action(), None);
    t.send("RETR f\r\n");
    assert!(matches!(t.s.poll_action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_done(t.now, Err(OpError::ConnectionLost));
    assert_eq!(t.s.poll_action(), Some(Action::ClosePassive));
    t.out();
    t.send("RETR f\r\n");
    assert_eq!(t.out(), "425 Use PORT or PASV first.\r\n");
}

/// `NLST sub/*.dat` (what `mget sub/*.dat` sends) lists `/sub` filtered
/// by `*.dat`, names prefixed with `sub/` as written; MLSD takes no
/// pattern; a plain name is listed as before.
#[test]
fn list_and_nlst_carry_a_wildcard_last_component() {
    let mut t = T::logged_in(false);
    let list = |t: &mut T, cmd: &str| {
        t.passive();
        t.send(&format!("{cmd}\r\n"));
        let a = t.action();
        t.s.handle_transfer_done(t.now, Ok(0));
        t.out();
        match a {
            Some(Action::List { path, matching, .. }) => (path, matching),
            other => panic!("{cmd}: {other:?}"),
        }
    };
    let (path, m) = list(&mut t, "NLST sub/*.dat");
    assert_eq!(path.as_str(), "/sub/*.dat");
    let m = m.expect("a pattern");
    assert_eq!(m.dir.as_str(), "/sub");
    assert_eq!(m.prefix, "sub/");
    assert!(m.pattern.matches(b"x.dat"));
    let (_, m) = list(&mut t, "LIST -la *.dat");
    let m = m.expect("a pattern");
    assert_eq!((m.dir.as_str(), m.prefix.as_str()), ("/", ""));
    let (_, m) = list(&mut t, "NLST /d/../run-??");
    let m = m.expect("a pattern");
    assert_eq!((m.dir.as_str(), m.prefix.as_str()), ("/", "/d/../"));
    assert_eq!(list(&mut t, "MLSD *.dat").1, None);
    assert_eq!(list(&mut t, "NLST sub").1, None);
    assert_eq!(list(&mut t, "LIST sub/a.dat").1, None);
    // NLST of one name in another directory writes it with that prefix.
    let m = list(&mut t, "NLST sub/a.dat").1.unwrap();
    assert_eq!((m.pattern, m.prefix.as_str()), (NamePattern::Exact, "sub/"));
    // A wildcard before the last component is a plain name.
    assert_eq!(
        list(&mut t, "NLST */x.dat").1.unwrap().pattern,
        NamePattern::Exact
    );
    let long = format!("NLST {}", "*".repeat(300));
    assert_eq!(list(&mut t, &long).1.unwrap().pattern, NamePattern::TooLong);
}
