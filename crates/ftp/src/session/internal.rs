//! Entry points for the `ftp_session` fuzz target and the proptest below:
//! apply any sequence of inputs, shell results and timeouts to a session
//! and check the invariants that must hold whatever the peer (or a buggy
//! shell) does. Not part of the stable API.

use std::time::{Duration, Instant};

use super::{Answer, LoginGrant, OpError, Session, SessionConfig};
use crate::reply::parse_reply;

/// One thing that can happen to a session.
#[derive(Clone, Debug)]
pub enum Op {
    /// Control bytes from the peer.
    Input(Vec<u8>),
    /// A login verdict.
    Login(Option<(bool, bool)>),
    /// A passive listener (port) or a failure.
    Passive(Option<u16>),
    /// A query/change answer, picked by number.
    Result(u8, u64),
    /// 150.
    Started(Option<u64>),
    /// End of a transfer, `Ok(bytes)` or an error picked by number.
    Done(Result<u64, u8>),
    /// Time passes (seconds).
    Advance(u16),
}

const ERRORS: [OpError; 17] = [
    OpError::NotFound,
    OpError::NoPartial,
    OpError::PartialPending,
    OpError::Busy,
    OpError::NotAFile,
    OpError::NotADirectory,
    OpError::PermissionDenied,
    OpError::AlreadyExists,
    OpError::NotEmpty,
    OpError::NoSpace,
    OpError::BadName,
    OpError::OffsetBeyondEof,
    OpError::DataConnection,
    OpError::ConnectionLost,
    OpError::Aborted,
    OpError::BadData,
    OpError::Local,
];

/// Runs `ops` against a fresh session and panics if an invariant breaks:
/// `handle_input` never claims more bytes than it was given, unconsumed
/// bytes are kept and offered again as a real shell does, and every byte
/// of output parses as well-formed replies.
pub fn check_ops(ops: &[Op]) {
    let start = Instant::now();
    let mut now = start;
    let mut s = Session::new(SessionConfig {
        local_addr: "127.0.0.1:2121".parse().expect("literal"),
        peer_addr: "127.0.0.1:40000".parse().expect("literal"),
        idle_timeout: Duration::from_secs(60),
        greeting: "ready".into(),
        tls: Default::default(),
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Input(bytes) => {
                pending.extend_from_slice(bytes);
                match s.handle_input(now, &pending) {
                    Ok(used) => {
                        assert!(used <= pending.len(), "used {used} > {}", pending.len());
                        pending.drain(..used);
                    }
                    Err(_) => pending.clear(),
                }
            }
            Op::Login(g) => s.handle_login(g.map(|(w, f)| LoginGrant {
                writable: w,
                allow_foreign_data_host: f,
            })),
            Op::Passive(p) => {
                s.handle_passive(p.map(|port| std::net::SocketAddr::from(([127, 0, 0, 1], port))))
            }
            Op::Result(k, n) => s.handle_result(match k % 8 {
                0 => Ok(Answer::Done),
                1 => Ok(Answer::Size(*n)),
                2 => Ok(Answer::Modified(n % (1 << 40))),
                3 => Ok(Answer::Facts(format!("type=file;size={n}; f"))),
                4 => Ok(Answer::Lines(vec![format!("{n}")])),
                5 => Ok(Answer::Checksum(format!("{n:x}"))),
                _ => Err(ERRORS[(*n % ERRORS.len() as u64) as usize]),
            }),
            Op::Started(size) => s.handle_transfer_started(*size),
            Op::Done(r) => {
                s.handle_transfer_done(now, r.map_err(|e| ERRORS[usize::from(e) % ERRORS.len()]))
            }
            Op::Advance(secs) => {
                now += Duration::from_secs(u64::from(*secs));
                s.handle_timeout(now);
            }
        }
        s.poll_output(&mut out);
        while s.poll_action().is_some() {}
    }
    // Every reply is well formed: the reply parser eats all of it.
    let mut rest = &out[..];
    while !rest.is_empty() {
        match parse_reply(rest) {
            Ok(Some((_, used))) => {
                assert!(used > 0 && used <= rest.len());
                rest = &rest[used..];
            }
            other => panic!(
                "malformed reply output: {other:?} at {:?}",
                String::from_utf8_lossy(rest)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        let cmds = prop::sample::select(vec![
            "USER anonymous\r\n",
            "PASS x\r\n",
            "PASV\r\n",
            "EPSV\r\n",
            "RETR f\r\n",
            "STOR f\r\n",
            "APPE f\r\n",
            "LIST\r\n",
            "ABOR\r\n",
            "QUIT\r\n",
            "REST 5\r\n",
            "CWD ..\r\n",
            "MODE E\r\n",
            "PORT 127,0,0,1,200,1\r\n",
            "RNFR a\r\n",
            "RNTO b\r\n",
            "SIZE f\r\n",
            "MLST\r\n",
            "CKSM MD5 0 -1 f\r\n",
            "STAT\r\n",
            "NOOP\r\n",
            "\r\n",
        ]);
        prop_oneof![
            cmds.prop_map(|c| Op::Input(c.as_bytes().to_vec())),
            prop::collection::vec(any::<u8>(), 0..64).prop_map(Op::Input),
            any::<Option<(bool, bool)>>().prop_map(Op::Login),
            any::<Option<u16>>().prop_map(Op::Passive),
            (any::<u8>(), any::<u64>()).prop_map(|(k, n)| Op::Result(k, n)),
            any::<Option<u64>>().prop_map(Op::Started),
            any::<Result<u64, u8>>().prop_map(Op::Done),
            any::<u16>().prop_map(Op::Advance),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold(ops in prop::collection::vec(op(), 0..60)) {
            check_ops(&ops);
        }
    }
}
