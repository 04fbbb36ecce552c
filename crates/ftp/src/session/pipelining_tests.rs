//! Pipelined commands, segmentation and refused commands: the replies to a
//! command stream must not depend on how the bytes were cut into reads,
//! and a refused command must leave nothing behind.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::tests::T;
use super::*;

/// A shell that performs every action at once with a canned result, and,
/// like the real one (server/src/ftp/session.rs), offers held input again
/// after every completion, not only when new bytes arrive.
struct SimShell {
    s: Session,
    now: Instant,
    pending: Vec<u8>,
    out: Vec<u8>,
}

impl SimShell {
    fn new() -> SimShell {
        SimShell {
            s: Session::new(SessionConfig {
                local_addr: "127.0.0.1:2121".parse().unwrap(),
                peer_addr: "127.0.0.1:40000".parse().unwrap(),
                idle_timeout: Duration::from_secs(300),
                greeting: "ready".into(),
                tls: Default::default(),
            }),
            now: Instant::now(),
            pending: Vec::new(),
            out: Vec::new(),
        }
    }

    fn read(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        loop {
            self.drive();
            if self.pending.is_empty() || self.s.is_closed() {
                break;
            }
            match self.s.handle_input(self.now, &self.pending) {
                Ok(0) => break,
                Ok(used) => {
                    self.pending.drain(..used);
                }
                Err(_) => self.pending.clear(),
            }
        }
    }

    /// Performs actions until the session is quiet.
    fn drive(&mut self) {
        loop {
            self.s.poll_output(&mut self.out);
            let Some(action) = self.s.poll_action() else {
                return;
            };
            match action {
                Action::Authenticate { .. } => self.s.handle_login(Some(LoginGrant {
                    writable: true,
                    allow_foreign_data_host: false,
                })),
                Action::OpenPassive { .. } => self
                    .s
                    .handle_passive(Some("127.0.0.1:50000".parse().unwrap())),
                Action::Query { query, .. } => self.s.handle_result(match query {
                    Query::Size => Ok(Answer::Size(7)),
                    Query::Modified => Ok(Answer::Modified(1_700_000_000)),
                    Query::Facts(_) => Ok(Answer::Facts("type=file;size=7; f".into())),
                    Query::Status => Ok(Answer::Lines(vec!["-rw-r--r-- f".into()])),
                    Query::ChangeDir => Err(OpError::NotADirectory),
                    Query::Exists => Ok(Answer::Done),
                }),
                Action::Change(_) => self.s.handle_result(Ok(Answer::Done)),
                Action::Checksum { .. } => self.s.handle_result(Ok(Answer::Checksum("ab".into()))),
                Action::List { .. } | Action::StartRetr { .. } | Action::StartStor { .. } => {
                    self.s.handle_transfer_started(Some(7));
                    self.s.handle_transfer_done(self.now, Ok(7));
                }
                Action::StartTls => self.s.handle_tls(true),
                Action::ClosePassive | Action::DropKept | Action::Abort | Action::Close => {}
            }
        }
    }
}

/// Commands pipelined in any order. A transfer goes only at the end: ABOR,
/// STAT, NOOP and QUIT are answered while one runs (RFC 959 4.1.3), so a
/// STAT sent behind a LIST is answered mid-transfer or after it depending
/// on when it arrives, by design.
const COMMANDS: &[&str] = &[
    "SIZE f\r\n",
    "SYST\r\n",
    "CWD d\r\n",
    "PWD\r\n",
    "MDTM f\r\n",
    "MLST f\r\n",
    "STAT f\r\n",
    "CKSM MD5 0 -1 f\r\n",
    "RNFR a\r\n",
    "RNTO b\r\n",
    "TYPE I\r\n",
    "NOOP\r\n",
    "\r\n",
    "REIN\r\n",
    "USER anonymous\r\n",
    "PASS x\r\n",
];

fn replies(stream: &[u8], cuts: &[usize]) -> String {
    let mut sh = SimShell::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        let cut = cut.clamp(at, stream.len());
        sh.read(&stream[at..cut]);
        at = cut;
    }
    String::from_utf8(sh.out).unwrap()
}

proptest! {
    /// Any segmentation of a command stream, from one byte per read to all
    /// in one, gives the same replies in the same order.
    #[test]
    fn replies_do_not_depend_on_segmentation(
        picks in prop::collection::vec(0..COMMANDS.len(), 1..24),
        list in any::<bool>(),
        mut cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let mut stream = b"USER anonymous\r\nPASS x\r\n".to_vec();
        for p in picks {
            stream.extend_from_slice(COMMANDS[p].as_bytes());
        }
        if list {
            stream.extend_from_slice(b"EPSV\r\nLIST\r\n");
        }
        stream.extend_from_slice(b"QUIT\r\n");
        let whole = replies(&stream, &[]);
        let mut cut_at: Vec<usize> = cuts.drain(..).map(|i| i.index(stream.len() + 1)).collect();
        cut_at.sort_unstable();
        prop_assert_eq!(&replies(&stream, &cut_at), &whole);
        let every_byte: Vec<usize> = (1..stream.len()).collect();
        prop_assert_eq!(&replies(&stream, &every_byte), &whole);
        // Every command got its reply: the last is QUIT's.
        prop_assert!(whole.ends_with("221 Goodbye.\r\n"), "{}", whole);
    }
}

#[test]
fn the_example_from_the_issue_is_answered_in_one_read() {
    let out = replies(b"USER anonymous\r\nPASS x\r\nSIZE f\r\nSYST\r\n", &[]);
    let codes: Vec<&str> = out.lines().map(|l| &l[..3]).collect();
    assert_eq!(codes, ["220", "331", "230", "213", "215"], "{out}");
}

#[test]
fn a_refused_rnfr_does_not_arm_rnto() {
    let mut t = T::logged_in(true);
    t.send("RNFR outlink\r\n");
    assert!(matches!(
        t.action(),
        Some(Action::Query {
            query: Query::Exists,
            ..
        })
    ));
    t.s.handle_result(Err(OpError::NotFound));
    assert!(t.out().starts_with("550 "));
    t.send("RNTO x\r\n");
    assert_eq!(
        t.action(),
        None,
        "RNTO after a refused RNFR asked for a change"
    );
    assert_eq!(t.out(), "503 RNFR required first.\r\n");
}

#[test]
fn rein_logs_out_and_resets() {
    let mut t = T::logged_in(true);
    t.send("TYPE A\r\nREIN\r\n");
    assert_eq!(
        t.out(),
        "200 Switching to ASCII mode.\r\n220 Service ready for new user.\r\n"
    );
    assert_eq!(t.s.login(), None);
    t.send("PWD\r\n");
    assert!(
        t.out().starts_with("530 "),
        "PWD after REIN must need a login"
    );
    t.send("USER anonymous\r\nPASS y\r\n");
    assert!(matches!(t.action(), Some(Action::Authenticate { .. })));
}

#[test]
fn unavailable_during_login_is_421_not_530() {
    let mut t = T::new();
    t.send("USER anonymous\r\nPASS x\r\n");
    assert!(matches!(t.action(), Some(Action::Authenticate { .. })));
    t.s.handle_unavailable("Out of resources, try again later.");
    assert_eq!(
        t.out(),
        "331 Please specify the password.\r\n421 Out of resources, try again later.\r\n"
    );
    assert_eq!(t.action(), Some(Action::Close));
}
