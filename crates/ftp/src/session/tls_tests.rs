//! RFC 4217 on the session: AUTH TLS, PBSZ, PROT, CCC, FEAT, and logins
//! refused before TLS when it is required.

use std::time::{Duration, Instant};

use super::*;

fn session(tls: TlsPolicy) -> (Session, Instant) {
    let mut s = Session::new(SessionConfig {
        local_addr: "127.0.0.1:2121".parse().unwrap(),
        peer_addr: "127.0.0.1:40000".parse().unwrap(),
        idle_timeout: Duration::from_secs(300),
        greeting: "ready".into(),
        tls,
    });
    let mut v = Vec::new();
    s.poll_output(&mut v);
    (s, Instant::now())
}

fn offered() -> TlsPolicy {
    TlsPolicy {
        offered: true,
        ..Default::default()
    }
}

fn say(s: &mut Session, now: Instant, line: &str) -> String {
    let used = s.handle_input(now, line.as_bytes()).unwrap();
    assert_eq!(used, line.len(), "{line:?} not consumed");
    let mut v = Vec::new();
    s.poll_output(&mut v);
    String::from_utf8(v).unwrap()
}

fn login(s: &mut Session, now: Instant, user: &str) -> String {
    let r = say(s, now, &format!("USER {user}\r\n"));
    if !r.starts_with("331") {
        return r;
    }
    say(s, now, "PASS x\r\n");
    assert!(matches!(s.poll_action(), Some(Action::Authenticate { .. })));
    s.handle_login(Some(LoginGrant {
        writable: false,
        allow_foreign_data_host: false,
    }));
    let mut v = Vec::new();
    s.poll_output(&mut v);
    String::from_utf8(v).unwrap()
}

#[test]
fn without_a_certificate_auth_is_not_implemented() {
    let (mut s, now) = session(TlsPolicy::default());
    assert!(say(&mut s, now, "AUTH TLS\r\n").starts_with("502 "));
    assert!(say(&mut s, now, "CCC\r\n").starts_with("502 "));
    assert!(!say(&mut s, now, "FEAT\r\n").contains("AUTH TLS"));
}

#[test]
fn auth_tls_then_pbsz_and_prot_p_reach_the_data_spec() {
    let (mut s, now) = session(offered());
    let feat = say(&mut s, now, "FEAT\r\n");
    for f in [" AUTH TLS\r\n", " PBSZ\r\n", " PROT\r\n"] {
        assert!(feat.contains(f), "{feat}");
    }
    assert!(say(&mut s, now, "PBSZ 0\r\n").starts_with("503 "));
    assert!(say(&mut s, now, "PROT P\r\n").starts_with("503 "));
    assert!(say(&mut s, now, "AUTH BOGUS\r\n").starts_with("504 "));
    // The 234, then nothing more is taken until the handshake is done.
    assert_eq!(
        say(&mut s, now, "AUTH TLS\r\n"),
        "234 Proceed with negotiation.\r\n"
    );
    assert_eq!(s.poll_action(), Some(Action::StartTls));
    assert_eq!(s.handle_input(now, b"USER x\r\n").unwrap(), 0);
    s.handle_tls(true);
    assert!(s.is_protected());
    assert!(say(&mut s, now, "AUTH TLS\r\n").starts_with("503 "));
    assert!(say(&mut s, now, "PBSZ 0\r\n").starts_with("200 PBSZ=0"));
    assert!(say(&mut s, now, "PROT S\r\n").starts_with("536 "));
    assert!(say(&mut s, now, "PROT P\r\n").starts_with("200 "));
    assert!(say(&mut s, now, "CCC\r\n").starts_with("534 "));
    assert!(login(&mut s, now, "anonymous").starts_with("230 "));
    assert!(say(&mut s, now, "MODE E\r\n").starts_with("200 "));
    assert!(say(&mut s, now, "MODE S\r\n").starts_with("200 "));
    say(&mut s, now, "PASV\r\n");
    let Some(Action::OpenPassive { .. }) = s.poll_action() else {
        panic!("no OpenPassive")
    };
    s.handle_passive(Some("127.0.0.1:50000".parse().unwrap()));
    say(&mut s, now, "RETR f\r\n");
    match s.poll_action() {
        Some(Action::StartRetr { data, .. }) => assert!(data.protected),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_handshake_closes_the_session() {
    let (mut s, now) = session(offered());
    say(&mut s, now, "AUTH TLS\r\n");
    assert_eq!(s.poll_action(), Some(Action::StartTls));
    s.handle_tls(false);
    assert_eq!(s.poll_action(), Some(Action::Close));
    assert!(s.is_closed());
}

#[test]
fn required_tls_refuses_user_in_clear_and_data_without_prot_p() {
    let policy = TlsPolicy {
        offered: true,
        required: true,
        exceptions: vec!["bob".into()],
        ..Default::default()
    };
    let (mut s, now) = session(policy.clone());
    let r = say(&mut s, now, "USER anonymous\r\n");
    assert!(r.starts_with("530 ") && r.contains("AUTH TLS"), "{r}");
    // PASS after the refused USER logs nobody in.
    assert!(say(&mut s, now, "PASS x\r\n").starts_with("503 "));
    assert!(s.poll_action().is_none());
    // bob is excepted.
    assert!(login(&mut s, now, "bob").starts_with("230 "));

    let (mut s, now) = session(policy);
    say(&mut s, now, "AUTH TLS\r\n");
    assert_eq!(s.poll_action(), Some(Action::StartTls));
    s.handle_tls(true);
    assert!(login(&mut s, now, "alice").starts_with("230 "));
    assert!(say(&mut s, now, "RETR f\r\n").starts_with("521 "));
    assert!(say(&mut s, now, "LIST\r\n").starts_with("521 "));
    say(&mut s, now, "PBSZ 0\r\n");
    assert!(say(&mut s, now, "PROT P\r\n").starts_with("200 "));
    // Now the ordinary answer: no data channel set up.
    assert!(say(&mut s, now, "RETR f\r\n").starts_with("425 "));
}

#[test]
fn implicit_sessions_start_protected() {
    let (mut s, now) = session(TlsPolicy {
        offered: true,
        implicit: true,
        required: true,
        ..Default::default()
    });
    assert!(s.is_protected());
    assert!(say(&mut s, now, "PBSZ 0\r\n").starts_with("200 "));
    assert!(login(&mut s, now, "anonymous").starts_with("230 "));
}
