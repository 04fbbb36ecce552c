//! The engine's side of Cue (`sched/cue.rs`): one scheduler for every data
//! connection of the engine, behind a lock, and the sockets its pacing
//! decisions go to.
//!
//! A connection joins when the door makes its [`DataConn`](crate::DataConn)
//! (with its class, user and caps, [`CueSpec`]) and leaves when it is
//! dropped. It reports the bytes it pushed once per turn of its sender
//! (when the quantum is used or the sender waits for the socket), never per
//! chunk, and gets back its quantum for the next turn. Each report, join
//! and departure may change rates; the changes are set at once on the
//! sockets concerned with `SO_MAX_PACING_RATE` (TCP's own pacing holds them
//! without the fq qdisc; measured in lab/results/cue-caps), so no timer
//! runs per chunk or per connection. The event loop's run queue is the
//! round-robin ring: a sender that used its quantum yields and goes to its
//! back, so `next_turn`'s token buckets are not used here.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::sched::cue::{Cue, CueConfig, CueId, CueSpec};

/// Every connection's scheduler state; see the module docs.
#[derive(Debug)]
pub struct CueHub {
    inner: Mutex<Inner>,
    t0: Instant,
}

#[derive(Debug)]
struct Inner {
    cue: Cue,
    /// The socket of each joined connection (a duplicate descriptor of
    /// it, so it can never name another socket; the connection leaves
    /// before its own descriptor closes, `DataConn` drops its link first,
    /// so the duplicate never holds a closed connection open).
    fds: std::collections::HashMap<CueId, OwnedFd>,
    next: u64,
}

/// A connection's membership; leaving on drop.
#[derive(Debug)]
pub(crate) struct CueTicket {
    hub: Arc<CueHub>,
    id: CueId,
    /// Bytes pushed since the last report.
    pending: u64,
}

impl CueHub {
    pub(crate) fn new(cfg: CueConfig) -> Arc<CueHub> {
        Arc::new(CueHub {
            inner: Mutex::new(Inner {
                cue: Cue::new(cfg),
                fds: Default::default(),
                next: 1,
            }),
            t0: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `fd` (a data socket that outlives the ticket) joins.
    pub(crate) fn join(self: &Arc<Self>, fd: Option<OwnedFd>, spec: CueSpec) -> CueTicket {
        let now = self.t0.elapsed();
        let mut g = self.lock();
        let id = CueId(g.next);
        g.next += 1;
        if let Some(fd) = fd {
            g.fds.insert(id, fd);
        }
        g.cue.register(now, id, spec);
        apply(&mut g);
        CueTicket {
            hub: self.clone(),
            id,
            pending: 0,
        }
    }

    /// Per class: bytes, transfers, active ones, weight and rate, as
    /// Prometheus text.
    pub fn prometheus(&self) -> String {
        use crate::sched::cue::ClassStat;
        use std::fmt::Write;
        type Value = fn(&ClassStat) -> String;
        let metrics: [(&str, &str, &str, Value); 5] = [
            (
                "class_bytes_total",
                "counter",
                "Bytes sent by the class's transfers.",
                |c| c.bytes.to_string(),
            ),
            (
                "class_transfers",
                "gauge",
                "Data connections of the class.",
                |c| c.transfers.to_string(),
            ),
            (
                "class_active",
                "gauge",
                "Connections of the class holding a share (sent within idle_after).",
                |c| c.active.to_string(),
            ),
            ("class_weight", "gauge", "The class's weight.", |c| {
                c.weight.to_string()
            }),
            (
                "class_cap_bytes_per_second",
                "gauge",
                "Sum of the class's pacing rates; -1 when one of its connections is unpaced.",
                |c| c.rate.map_or(-1, |r| r as i64).to_string(),
            ),
        ];
        let classes = self.lock().cue.classes();
        let mut s = String::new();
        for (name, kind, help, value) in metrics {
            let _ = writeln!(s, "# HELP sluice_cue_{name} {help}");
            let _ = writeln!(s, "# TYPE sluice_cue_{name} {kind}");
            for c in &classes {
                let _ = writeln!(s, "sluice_cue_{name}{{class=\"{}\"}} {}", c.name, value(c));
            }
        }
        s
    }
}

/// Fair shares (`--cue fair`): when a window has passed, each socket's
/// bytes acknowledged by the peer (TCP_INFO, one call per connection per
/// window, on whichever report comes first: no timer) are the measure.
fn fair_window(g: &mut Inner, now: std::time::Duration) {
    if !g.cue.fair_due(now) {
        return;
    }
    let Inner { cue, fds, .. } = g;
    cue.fair_window(now, &|id| acked(fds, id));
}

/// Bytes the peer acknowledged on `id`'s socket (TCP_INFO).
fn acked(fds: &std::collections::HashMap<CueId, OwnedFd>, id: CueId) -> Option<u64> {
    let fd = fds.get(&id)?;
    sluice_platform::tcp::tcp_info(fd.as_fd())
        .ok()
        .map(|i| i.bytes_acked)
}

/// Sets every pending pacing change on its socket.
fn apply(g: &mut Inner) {
    while let Some(p) = g.cue.poll_pace() {
        let Some(fd) = g.fds.get(&p.id) else {
            continue;
        };
        let fd = fd.as_fd();
        // u64::MAX: no cap (the kernel's "unlimited" is ~0).
        if let Err(e) = sluice_platform::tcp::set_max_pacing_rate(fd, p.rate.unwrap_or(u64::MAX)) {
            tracing::debug!("cue: SO_MAX_PACING_RATE refused: {e}");
        }
    }
}

impl CueTicket {
    /// Counts `n` bytes pushed (reported at the end of the turn).
    pub(crate) fn pushed(&mut self, n: u64) {
        self.pending += n;
    }

    /// The turn ended: reports its bytes; returns the next quantum.
    pub(crate) fn turn_ended(&mut self) -> u64 {
        let now = self.hub.t0.elapsed();
        let mut g = self.hub.lock();
        {
            let Inner { cue, fds, .. } = &mut *g;
            cue.keep_alive(now, &|id| acked(fds, id));
        }
        g.cue
            .sent(now, self.id, std::mem::take(&mut self.pending), true);
        fair_window(&mut g, now);
        apply(&mut g);
        g.cue.quantum(self.id)
    }
}

impl Drop for CueTicket {
    fn drop(&mut self) {
        let now = self.hub.t0.elapsed();
        let mut g = self.hub.lock();
        let pending = std::mem::take(&mut self.pending);
        g.cue.sent(now, self.id, pending, false);
        g.fds.remove(&self.id);
        g.cue.gone(now, self.id);
        apply(&mut g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EngineConfig};
    use std::os::fd::AsFd;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (s, c)
    }

    fn cap_of(s: &TcpStream) -> u64 {
        sluice_platform::tcp::tcp_info(s.as_fd())
            .unwrap()
            .max_pacing_rate
    }

    #[tokio::test]
    async fn a_server_cap_is_set_on_the_sockets_and_a_leaver_frees_its_share() {
        let e = Engine::new(EngineConfig {
            cue: Some(CueConfig {
                server_cap: Some(8_000_000),
                classes: vec![("gold".into(), 3.0)],
                ..CueConfig::default()
            }),
            ..EngineConfig::default()
        });
        let (s1, _c1) = pair().await;
        let (s2, _c2) = pair().await;
        let a = e.data_conn(s1);
        assert_eq!(cap_of(a.stream()), 8_000_000, "alone: the whole cap");
        let gold = CueSpec {
            class: "gold".into(),
            ..CueSpec::default()
        };
        let b = e.data_conn_in(s2, None, Some(gold));
        // 3:1 between the classes.
        assert_eq!(cap_of(a.stream()), 2_000_000);
        assert_eq!(cap_of(b.stream()), 6_000_000);
        let text = e.cue_prometheus();
        assert!(
            text.contains("sluice_cue_class_cap_bytes_per_second{class=\"gold\"} 6000000"),
            "{text}"
        );
        drop(b);
        assert_eq!(cap_of(a.stream()), 8_000_000, "b's share is a's at once");
        assert!(text.contains("sluice_cue_class_transfers{class=\"default\"} 1"));
    }

    #[tokio::test]
    async fn off_leaves_sockets_unpaced() {
        let e = Engine::new(EngineConfig::default());
        let (s1, _c1) = pair().await;
        let a = e.data_conn(s1);
        assert_eq!(cap_of(a.stream()), u64::MAX);
        assert_eq!(e.cue_prometheus(), "");
    }
}
