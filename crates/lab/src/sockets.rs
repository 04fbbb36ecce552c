//! Sampling the TCP sockets of a namespace with `ss -tinmp` while a run is in
//! progress: socket memory (skmem), RTT and retransmissions, split into the
//! server's sockets (owned by a process in the server's cgroup) and the rest.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::topology::ns_command;

/// One socket in one `ss` sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sock {
    /// "local peer" addresses, identifying the connection.
    pub key: String,
    /// Owning process ids.
    pub pids: Vec<u32>,
    /// skmem r: receive memory allocated.
    pub rmem: u64,
    /// skmem rb: receive buffer limit.
    pub rcvbuf: u64,
    /// skmem w: send memory queued.
    pub wmem: u64,
    /// skmem tb: send buffer limit.
    pub sndbuf: u64,
    /// Smoothed RTT in ms.
    pub rtt_ms: Option<f64>,
    /// Total retransmitted segments.
    pub retrans: u64,
}

fn field<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    s.split_whitespace().find_map(|w| w.strip_prefix(key))
}

fn skmem(s: &str, k: &str) -> u64 {
    let Some(inner) = field(s, "skmem:(") else {
        return 0;
    };
    inner
        .trim_end_matches(')')
        .split(',')
        .find_map(|kv| {
            let v = kv.strip_prefix(k)?;
            v.parse().ok()
        })
        .unwrap_or(0)
}

/// Parses `ss -tinmpH` output (a socket's info continues on indented lines).
pub fn parse_ss(out: &str) -> Vec<Sock> {
    let mut socks = Vec::new();
    let mut cur: Option<String> = None;
    let flush = |text: String, socks: &mut Vec<Sock>| {
        let words: Vec<&str> = text.split_whitespace().collect();
        // With a state filter ss omits the State column: Recv-Q Send-Q Local Peer [users]
        let addrs: Vec<&str> = words
            .iter()
            .copied()
            .filter(|w| {
                w.contains(':')
                    && !w.contains('(')
                    && w.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit() || c == '[' || c == '*')
            })
            .take(2)
            .collect();
        if addrs.len() < 2 {
            return;
        }
        let pids = text
            .match_indices("pid=")
            .filter_map(|(i, _)| {
                text[i + 4..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        socks.push(Sock {
            key: format!("{} {}", addrs[0], addrs[1]),
            pids,
            rmem: skmem(&text, "r"),
            rcvbuf: skmem(&text, "rb"),
            wmem: skmem(&text, "w"),
            sndbuf: skmem(&text, "tb"),
            rtt_ms: field(&text, "rtt:").and_then(|v| v.split('/').next()?.parse().ok()),
            retrans: field(&text, "retrans:")
                .and_then(|v| v.split('/').nth(1)?.parse().ok())
                .unwrap_or(0),
        });
    };
    for line in out.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(c) = cur.as_mut() {
                c.push(' ');
                c.push_str(line.trim());
            }
        } else {
            if let Some(c) = cur.take() {
                flush(c, &mut socks);
            }
            cur = Some(line.to_string());
        }
    }
    if let Some(c) = cur.take() {
        flush(c, &mut socks);
    }
    socks
}

/// Peaks and totals over a run, for one side.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideSummary {
    /// Largest skmem w (send memory queued) of any one socket.
    pub peak_wmem: u64,
    /// Largest skmem tb (send buffer size) of any one socket.
    pub peak_sndbuf: u64,
    /// Largest skmem r (receive memory) of any one socket.
    pub peak_rmem: u64,
    /// Largest skmem rb (receive buffer size) of any one socket.
    pub peak_rcvbuf: u64,
    /// Largest sum over sockets of r + w at one instant.
    pub peak_total_mem: u64,
    /// Retransmitted segments, summed over sockets (last value seen per socket).
    pub retrans: u64,
    /// Median of the sampled smoothed RTTs, ms.
    pub rtt_ms_median: Option<f64>,
}

/// Server-side and client-side summaries.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SockSummary {
    /// Sockets owned by the server's processes.
    pub server: SideSummary,
    /// All other sockets in the sampled namespaces.
    pub client: SideSummary,
}

struct Acc {
    s: SideSummary,
    retrans: HashMap<String, u64>,
    rtts: Vec<f64>,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            s: SideSummary::default(),
            retrans: HashMap::new(),
            rtts: Vec::new(),
        }
    }
    fn add(&mut self, socks: &[&Sock]) {
        let mut total = 0;
        for k in socks {
            self.s.peak_wmem = self.s.peak_wmem.max(k.wmem);
            self.s.peak_sndbuf = self.s.peak_sndbuf.max(k.sndbuf);
            self.s.peak_rmem = self.s.peak_rmem.max(k.rmem);
            self.s.peak_rcvbuf = self.s.peak_rcvbuf.max(k.rcvbuf);
            total += k.rmem + k.wmem;
            self.retrans.insert(k.key.clone(), k.retrans);
            // Only busy sockets: idle control connections would skew the RTT.
            if let Some(r) = k.rtt_ms.filter(|_| k.wmem > 0 || k.rmem > 0) {
                self.rtts.push(r);
            }
        }
        self.s.peak_total_mem = self.s.peak_total_mem.max(total);
    }
    fn finish(mut self) -> SideSummary {
        self.s.retrans = self.retrans.values().sum();
        self.rtts.sort_by(|a, b| a.total_cmp(b));
        self.s.rtt_ms_median = self.rtts.get(self.rtts.len() / 2).copied();
        self.s
    }
}

/// A background sampler of one or two namespaces.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<SockSummary>,
}

impl Sampler {
    /// Samples `namespaces` every `every`, classifying sockets by the pids in `server_procs`.
    pub fn start(
        namespaces: Vec<Option<String>>,
        server_procs: PathBuf,
        every: Duration,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handle = std::thread::spawn(move || {
            let (mut srv, mut cli) = (Acc::new(), Acc::new());
            loop {
                let last = st.load(Ordering::Relaxed);
                let server_pids: HashSet<u32> = std::fs::read_to_string(&server_procs)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                for ns in &namespaces {
                    let argv: Vec<String> = ["ss", "-tinmpH", "state", "established"]
                        .iter()
                        .map(|s| s.to_string())
                        .collect();
                    let Ok(out) = ns_command(ns.as_deref(), &argv).output() else {
                        continue;
                    };
                    let socks = parse_ss(&String::from_utf8_lossy(&out.stdout));
                    let (s, c): (Vec<&Sock>, Vec<&Sock>) = socks
                        .iter()
                        .partition(|k| k.pids.iter().any(|p| server_pids.contains(p)));
                    srv.add(&s);
                    cli.add(&c);
                }
                if last {
                    return SockSummary {
                        server: srv.finish(),
                        client: cli.finish(),
                    };
                }
                std::thread::sleep(every);
            }
        });
        Sampler { stop, handle }
    }

    /// Stops sampling and returns the summary.
    pub fn finish(self) -> SockSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ss_output() {
        let out = "0      0      10.77.0.1:2121 10.77.0.2:40000 users:((\"vsftpd\",pid=123,fd=4))\n\
                   \t skmem:(r0,rb131072,t0,tb2626560,f0,w1048576,o0,bl0,d0) ts sack bbr rtt:50.2/1.1 retrans:0/7 bytes_acked:5\n\
                   0      0      10.77.0.2:40000 10.77.0.1:2121 users:((\"curl\",pid=9,fd=5))\n\
                   \t skmem:(r4096,rb6291456,t0,tb46080,f0,w0,o0,bl0,d0) rtt:0.5/0.2\n";
        let s = parse_ss(out);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].pids, vec![123]);
        assert_eq!(s[0].wmem, 1048576);
        assert_eq!(s[0].sndbuf, 2626560);
        assert_eq!(s[0].rtt_ms, Some(50.2));
        assert_eq!(s[0].retrans, 7);
        assert_eq!(s[1].rmem, 4096);
        assert_eq!(s[1].rcvbuf, 6291456);
        assert_eq!(s[1].key, "10.77.0.2:40000 10.77.0.1:2121");
    }
}
