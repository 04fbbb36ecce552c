//! The `auto` data path from outside: a client on this host is sent the
//! file through `copy` (read into buffers: the engine's `bytes_read_disk`
//! grows), a client in another network namespace through `sendfile` (no
//! bytes read into buffers). Needs root and `ip` (CI and the lab machine
//! have both); elsewhere the test says so and returns.

use crate::harness::process::is_root;
use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

/// A namespace joined to this one by a veth pair; removed on drop.
struct Veth {
    ns: String,
    host_if: String,
    host: Ipv4Addr,
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn veth() -> Veth {
    let id = std::process::id() % 200 + 20;
    let v = Veth {
        ns: format!("sl-dp-{}", std::process::id()),
        host_if: format!("sldp{id}a"),
        host: Ipv4Addr::new(10, 79, id as u8, 1),
    };
    let peer_if = format!("sldp{id}b");
    let peer = format!("10.79.{id}.2/24");
    ip(&["netns", "add", &v.ns]);
    ip(&[
        "link", "add", &v.host_if, "type", "veth", "peer", "name", &peer_if,
    ]);
    ip(&["link", "set", &peer_if, "netns", &v.ns]);
    ip(&["addr", "add", &format!("{}/24", v.host), "dev", &v.host_if]);
    ip(&["link", "set", &v.host_if, "up"]);
    ip(&[
        "netns", "exec", &v.ns, "ip", "addr", "add", &peer, "dev", &peer_if,
    ]);
    ip(&["netns", "exec", &v.ns, "ip", "link", "set", &peer_if, "up"]);
    ip(&["netns", "exec", &v.ns, "ip", "link", "set", "lo", "up"]);
    v
}

/// The engine counter `name` from the server's metrics endpoint.
pub(crate) fn counter(metrics: SocketAddr, name: &str) -> u64 {
    let out = Command::new("curl")
        .args(["-s", &format!("http://{metrics}/metrics")])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let key = format!("sluice_engine_{name}_total ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

#[test]
fn auto_data_path_copies_to_local_clients_and_sendfiles_to_remote_ones() {
    if !is_root() || !require_tool("ip") || !require_tool("curl") {
        eprintln!("skipped: needs root, ip and curl");
        return;
    }
    let v = veth();
    let s = sluice(ServeOptions {
        listen: Some(SocketAddr::new(IpAddr::V4(v.host), 0)),
        extra_args: vec!["--metrics".into(), "127.0.0.1:0".into(), "--no-http".into()],
        ..Default::default()
    });
    let metrics = wait_for_metrics(&s);
    // Larger than what `auto` always copies (256 KiB).
    let f = corpus().file((1 << 20) + 7);
    let url = s.url(&f.name);
    let dir = tempfile::tempdir().expect("temp dir");

    // Cached pages: a cold range would go through a disk thread on either
    // path and count as read.
    std::fs::read(&f.path).expect("read the file into the page cache");
    let remote = dir.path().join("remote");
    let mut remote_curl = Command::new("ip");
    remote_curl
        .args(["netns", "exec", &v.ns, "curl", "-s", "-o"])
        .arg(&remote)
        .arg(&url);
    assert_transferred(&run(&mut remote_curl), &remote, f);
    let read_remote = counter(metrics, "bytes_read_disk");
    assert_eq!(
        read_remote,
        0,
        "a client in another namespace should get sendfile\n{}",
        s.log_tail()
    );

    // This host's own address: the peer is local, so `copy`.
    let local = dir.path().join("local");
    let mut local_curl = Command::new("curl");
    local_curl.args(["-s", "-o"]).arg(&local).arg(&url);
    assert_transferred(&run(&mut local_curl), &local, f);
    let read_local = counter(metrics, "bytes_read_disk");
    assert!(
        read_local >= f.size,
        "a client on this host should get copy: {read_local} bytes read\n{}",
        s.log_tail()
    );
}

/// `metrics listening on ADDR` from the server's stdout.
pub(crate) fn wait_for_metrics(s: &FtpServer) -> SocketAddr {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let log = s.log_tail();
        if let Some(addr) = log.lines().find_map(|l| {
            l.split("metrics listening on ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        }) {
            return addr;
        }
        assert!(Instant::now() < end, "no metrics address\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
