//! Installing and starting `sluice serve` as an operator does: `--check-config`,
//! `--run-as` (root dropped; root on a public address refused), the man
//! pages and shell completions generated from the options, and the systemd
//! unit that `systemd-analyze verify` accepts.

use crate::harness::servers::{sluice, ServeOptions};
use crate::harness::*;
use std::fs;
use std::process::Command;

/// `sluice serve --check-config`: a good file prints a summary and exits
/// 0 without serving; a bad key, a bad value and a missing user root each
/// exit 2 with an error naming the problem (and the file).
#[test]
fn check_config_exits_0_or_2_with_the_errors() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sluice.toml");
    let check = |text: &str| {
        fs::write(&conf, text).unwrap();
        run(Command::new(sluice_bin())
            .args(["serve", "--check-config", "--config"])
            .arg(&conf)
            .arg(dir.path()))
    };
    // The default ports need not be free: nothing is bound.
    let good = check("ftp = \"127.0.0.1:2121\"\nmax_sessions = 10\n");
    good.assert_success();
    assert!(
        good.stdout.contains("configuration OK"),
        "{}",
        good.describe()
    );
    assert!(
        good.stdout.contains("ftp: 127.0.0.1:2121"),
        "{}",
        good.describe()
    );
    for (text, says) in [
        ("max_sesions = 10\n", "max_sesions"),
        ("max_sessions = 0\n", "max_sessions"),
        ("idle_timeout = \"soon\"\n", "idle_timeout"),
        (
            "[[user]]\nname = \"bob\"\npassword_hash = \"$argon2id$v=19$m=19456,t=2,p=1$IN7lY2vYsXUHwxQy938Ykg$2+veh4CT0HM4sDkD3+te/Dqpi5f5oHuJ7vhvP0uVjZ4\"\nroot = \"/nonexistent/bob\"\n",
            "/nonexistent/bob",
        ),
    ] {
        let out = check(text);
        assert_eq!(out.status.and_then(|s| s.code()), Some(2), "{}", out.describe());
        assert!(out.stderr.contains(says), "{text:?}\n{}", out.describe());
        assert!(!out.stdout.contains("configuration OK"), "{}", out.describe());
    }
    let out = check("max_sesions = 10\n");
    assert!(out.stderr.contains("sluice.toml"), "{}", out.describe());
}

/// The uids (real, effective, saved, fs) of every thread of `pid`.
fn thread_uids(pid: u32) -> Vec<String> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("status")).ok())
        .filter_map(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| {
                l["Uid:".len()..]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        })
        .collect()
}

/// Started as root with `--run-as nobody`: every thread of the server
/// runs as nobody (real, effective, saved and fs uid) once it listens,
/// and it serves a download. As root without `--run-as` on a wildcard
/// address it refuses to start (exit 2, saying what to give) unless
/// `--allow-root`; on loopback it starts (with a warning).
#[test]
fn run_as_drops_root_and_root_on_a_public_address_is_refused() {
    if !crate::harness::process::is_root() {
        eprintln!("SKIP: needs root (to switch users)");
        return;
    }
    if !require_tool("curl") {
        return;
    }
    let server = sluice(ServeOptions {
        extra_args: vec!["--run-as".into(), "nobody".into()],
        ..Default::default()
    });
    server.wait_for_log("switched user", 1);
    let nobody = "65534 65534 65534 65534";
    let uids = thread_uids(server.pid());
    assert!(
        !uids.is_empty() && uids.iter().all(|u| u == nobody),
        "{uids:?}\n{}",
        server.log_tail()
    );
    let f = corpus().file((1 << 20) + 7);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("f");
    let dl = run(Command::new("curl")
        .args(["-sS", "--fail", "-o"])
        .arg(&dest)
        .arg(server.url(&f.name)));
    assert_transferred(&dl, &dest, f);
    assert!(server.stderr_text().contains("switched user"));
    // Root on every interface without a choice: refused before binding.
    let refused = run(Command::new(sluice_bin())
        .args(["serve", "--ftp", "0.0.0.0:0", "--http", "127.0.0.1:0"])
        .arg(out.path()));
    assert_eq!(
        refused.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        refused.describe()
    );
    assert!(
        refused
            .stderr
            .contains("refusing to serve as root on 0.0.0.0:0")
            && refused.stderr.contains("--run-as"),
        "{}",
        refused.describe()
    );
    let allowed = sluice(ServeOptions {
        listen: Some("0.0.0.0:0".parse().unwrap()),
        extra_args: vec!["--allow-root".into()],
        ..Default::default()
    });
    allowed.assert_running();
    let loopback = sluice(ServeOptions::default());
    loopback.wait_for_log("serving as root on loopback", 1);
}

/// `sluice man` and `sluice completions` come from the same clap
/// definitions as the options: the serve page lists `--shutdown-timeout`
/// and renders with man(1) when it is installed; the bash script parses
/// (`bash -n`) and completes the serve flags.
#[test]
fn man_pages_and_completions_come_from_the_options() {
    let top = run(Command::new(sluice_bin()).arg("man"));
    top.assert_success();
    assert!(top.stdout.contains(".TH sluice 1"), "{}", top.describe());
    let serve = run(Command::new(sluice_bin()).args(["man", "serve"]));
    serve.assert_success();
    assert!(
        serve.stdout.contains(".TH sluice\\-serve 1")
            || serve.stdout.contains(".TH sluice-serve 1"),
        "{}",
        serve.describe()
    );
    assert!(
        serve.stdout.contains("shutdown\\-timeout"),
        "{}",
        serve.describe()
    );
    let bad = run(Command::new(sluice_bin()).args(["man", "nonesuch"]));
    assert_eq!(
        bad.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        bad.describe()
    );
    if crate::harness::process::find_tool("man").is_some() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("sluice-serve.1");
        fs::write(&page, &serve.stdout_bytes).unwrap();
        let shown = run(Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANWIDTH", "100"));
        shown.assert_success();
        assert!(
            shown.stdout.contains("--shutdown-timeout"),
            "{}",
            shown.describe()
        );
    }
    let bash = run(Command::new(sluice_bin()).args(["completions", "bash"]));
    bash.assert_success();
    assert!(
        bash.stdout.contains("--shutdown-timeout"),
        "{}",
        bash.describe()
    );
    if crate::harness::process::find_tool("bash").is_some() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("sluice.bash");
        fs::write(&script, &bash.stdout_bytes).unwrap();
        run(Command::new("bash").arg("-n").arg(&script)).assert_success();
    }
    for shell in ["zsh", "fish"] {
        run(Command::new(sluice_bin()).args(["completions", shell])).assert_success();
    }
}

/// dist/sluice.service passes `systemd-analyze verify` with no warning
/// (it exits 0 even for an unknown key, so its output must be empty),
/// with ExecStart pointing at the binary under test and the generated
/// sluice-serve(1) page on MANPATH (its Documentation= line). Skipped
/// where systemd-analyze is not installed.
#[test]
fn systemd_unit_verifies() {
    if crate::harness::process::find_tool("systemd-analyze").is_none() {
        eprintln!("SKIP: systemd-analyze is not installed");
        return;
    }
    let unit = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/sluice.service"
    ))
    .expect("dist/sluice.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/sluice serve"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.service");
    fs::write(&path, unit.replace("/usr/local/bin/sluice", &sluice_bin())).unwrap();
    let man1 = dir.path().join("man/man1");
    fs::create_dir_all(&man1).unwrap();
    let page = run(Command::new(sluice_bin()).args(["man", "serve"]));
    fs::write(man1.join("sluice-serve.1"), &page.stdout_bytes).unwrap();
    let out = run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("MANPATH", dir.path().join("man")));
    out.assert_success();
    assert!(
        out.stdout.trim().is_empty() && out.stderr.trim().is_empty(),
        "systemd-analyze verify warned\n{}",
        out.describe()
    );
    // The check is real: a misspelt key is reported.
    fs::write(
        &path,
        unit.replace("NoNewPrivileges=", "NoNewPrivilege=")
            .replace("/usr/local/bin/sluice", &sluice_bin()),
    )
    .unwrap();
    let out = run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("MANPATH", dir.path().join("man")));
    assert!(out.stderr.contains("NoNewPrivilege"), "{}", out.describe());
}
