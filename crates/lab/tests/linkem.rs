//! linkem end to end: two namespaces joined by linkem, UDP probes through it.
//! Needs root and /dev/net/tun (the lab machine and CI have both); elsewhere
//! the test says so and returns. Timing is only checked in the direction that
//! is a correctness property: an emulated delay must never deliver early.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for linkem's control socket before the test gives up.
const HANG_BREAKER: Duration = Duration::from_secs(120);

struct Lab {
    a: String,
    b: String,
    linkem: Option<Child>,
    echo: Option<Child>,
    ctl: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in [self.linkem.take(), self.echo.take()].into_iter().flatten() {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_file(&self.ctl);
    }
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ping(lab: &Lab, count: u32) -> Option<Vec<f64>> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.b,
            env!("CARGO_BIN_EXE_sluice-lab"),
            "_ping",
            "10.78.0.1:7007",
            &count.to_string(),
            "10",
        ])
        .output()
        .expect("spawn ping");
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ping json");
    Some(
        v["rtt_ms"]
            .as_array()
            .expect("rtts")
            .iter()
            .map(|x| x.as_f64().expect("f64"))
            .collect(),
    )
}

fn linkem_set(lab: &Lab, args: &[&str]) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linkem"));
    c.args(["set", "--ctl"]).arg(&lab.ctl).args(args);
    assert_eq!(ok(&mut c).trim(), "ok");
}

#[test]
fn delays_drops_and_changes_while_running() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root || !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let id = std::process::id();
    let mut lab = Lab {
        a: format!("lkt{id}a"),
        b: format!("lkt{id}b"),
        linkem: None,
        echo: None,
        ctl: std::env::temp_dir().join(format!("linkem-test-{id}.sock")),
    };
    for ns in [&lab.a, &lab.b] {
        ok(Command::new("ip").args(["netns", "add", ns]));
        ok(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]));
    }
    lab.linkem = Some(
        Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args([
                "run",
                "--a-ns",
                &lab.a,
                "--a-addr",
                "10.78.0.1/24",
                "--b-ns",
                &lab.b,
                "--b-addr",
                "10.78.0.2/24",
                "--a-if",
                "lktA",
                "--b-if",
                "lktB",
                "--delay",
                "20ms",
                "--ctl",
            ])
            .arg(&lab.ctl)
            .stdin(Stdio::null())
            .spawn()
            .expect("start linkem"),
    );
    // Wait for the control socket; fail at once if linkem died. The
    // deadline only breaks a hang (linkem is up in milliseconds), it is
    // not a claim about speed.
    let started = Instant::now();
    while !lab.ctl.exists() {
        if let Some(status) = lab
            .linkem
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("linkem exited before its control socket appeared: {status}");
        }
        if started.elapsed() > HANG_BREAKER {
            panic!("linkem still has no control socket after {HANG_BREAKER:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.echo = Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.a,
                env!("CARGO_BIN_EXE_sluice-lab"),
                "_echo",
                "10.78.0.1:7007",
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("start echo"),
    );
    std::thread::sleep(Duration::from_millis(300));

    // 20 ms each way: no probe may come back in under 40 ms.
    let rtts = ping(&lab, 5).expect("probes through the link");
    assert!(!rtts.is_empty());
    assert!(rtts.iter().all(|&r| r >= 40.0), "early delivery: {rtts:?}");

    // Total loss: nothing comes back.
    linkem_set(&lab, &["--loss", "100%"]);
    assert!(
        ping(&lab, 3).is_none(),
        "probes crossed a link with 100 % loss"
    );

    // Back to no loss and no delay: the change takes effect while running.
    linkem_set(&lab, &["--loss", "0", "--delay", "0ms"]);
    let rtts = ping(&lab, 5).expect("probes after the change");
    let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(min < 40.0, "delay change not applied: {rtts:?}");

    // Counters: packets went through, and the lossy phase dropped some.
    std::thread::sleep(Duration::from_millis(200));
    let mut c = Command::new(env!("CARGO_BIN_EXE_linkem"));
    c.args(["stats", "--ctl"]).arg(&lab.ctl);
    let stats: serde_json::Value = serde_json::from_str(&ok(&mut c)).expect("stats json");
    assert!(
        stats["ba"]["packets_out"].as_u64().unwrap_or(0) >= 5,
        "{stats}"
    );
    assert!(
        stats["ba"]["dropped_loss"].as_u64().unwrap_or(0) >= 1,
        "{stats}"
    );

    // A bad setting is refused and changes nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["set", "--ctl"])
        .arg(&lab.ctl)
        .args(["--loss", "150%"])
        .output()
        .expect("spawn");
    assert!(!out.status.success());
}
