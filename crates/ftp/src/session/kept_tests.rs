//! GridFTP data channel caching: after a MODE E transfer the shell keeps
//! its data connections for the next one on the same channel; the session
//! says when they must go (`Action::DropKept`) and answers 125 when the
//! shell reuses them.

use std::net::SocketAddr;

use super::tests::T;
use super::*;

/// The session's actions until it is quiet, ClosePassive included.
fn actions(t: &mut T) -> Vec<Action> {
    std::iter::from_fn(|| t.s.poll_action()).collect()
}

/// MODE E, PORT, one RETR that succeeds.
fn after_one_mode_e_retr() -> T {
    let mut t = T::logged_in(false);
    t.send("MODE E\r\nPORT 127,0,0,1,195,80\r\n");
    t.out();
    t.send("RETR a\r\n");
    assert!(matches!(t.action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_started(Some(10));
    t.s.handle_transfer_done(t.now, Ok(10));
    assert_eq!(
        t.out(),
        "150 Opening BINARY mode data connection (10 bytes).\r\n226 Transfer complete.\r\n"
    );
    assert_eq!(
        actions(&mut t),
        vec![],
        "the channel stays for the next RETR"
    );
    t
}

#[test]
fn a_reused_channel_is_answered_125_on_the_same_port_address() {
    let mut t = after_one_mode_e_retr();
    t.send("RETR b\r\n");
    match t.action() {
        Some(Action::StartRetr { data, .. }) => {
            let want: SocketAddr = "127.0.0.1:50000".parse().unwrap();
            assert_eq!(data.channel, DataChannel::Active(want));
        }
        other => panic!("{other:?}"),
    }
    t.s.handle_transfer_started_reusing(Some(7));
    t.s.handle_transfer_done(t.now, Ok(7));
    assert_eq!(
        t.out(),
        "125 Reusing existing data connection; transfer starting (7 bytes).\r\n\
         226 Transfer complete.\r\n"
    );
}

#[test]
fn a_new_port_pasv_or_mode_drops_what_was_kept() {
    for (cmd, also) in [
        // Even the same address: the client listens anew.
        ("PORT 127,0,0,1,195,80\r\n", None),
        ("EPRT |1|127.0.0.1|50001|\r\n", None),
        ("MODE S\r\n", None),
        ("MODE E\r\n", None),
        ("EPSV\r\n", Some(Action::OpenPassive { extended: true })),
        ("PASV\r\n", Some(Action::OpenPassive { extended: false })),
        ("REIN\r\n", None),
    ] {
        let mut t = after_one_mode_e_retr();
        t.send(cmd);
        let mut want = vec![Action::DropKept];
        want.extend(also);
        assert_eq!(actions(&mut t), want, "{cmd:?}");
        // Dropped once: the next change has nothing to drop.
        if cmd.starts_with("MODE") {
            t.send(cmd);
            assert_eq!(actions(&mut t), vec![], "{cmd:?} twice");
        }
    }
}

#[test]
fn a_failed_transfer_drops_the_channel_and_what_was_kept() {
    let mut t = after_one_mode_e_retr();
    t.send("RETR b\r\n");
    assert!(matches!(t.action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_started_reusing(None);
    t.s.handle_transfer_done(t.now, Err(OpError::ConnectionLost));
    assert_eq!(actions(&mut t), vec![Action::DropKept]);
    assert!(t.out().starts_with("125 "));
    // The data channel is gone with it: the next RETR needs a new PORT.
    t.send("RETR c\r\n");
    assert!(t.out().starts_with("425 "), "no data channel");
}

#[test]
fn mode_s_transfers_keep_nothing() {
    let mut t = T::logged_in(false);
    t.send("PORT 127,0,0,1,195,80\r\n");
    t.out();
    t.send("RETR a\r\n");
    assert!(matches!(t.action(), Some(Action::StartRetr { .. })));
    t.s.handle_transfer_started(Some(1));
    t.s.handle_transfer_done(t.now, Ok(1));
    t.out();
    t.send("PORT 127,0,0,1,195,80\r\n");
    assert_eq!(actions(&mut t), vec![]);
}
