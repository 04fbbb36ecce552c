//! Protocol gaps real clients hit (issue "Moving datasets"): MLST of a
//! subdirectory says `type=dir` (aioftp decides rmdir on it; `cdir` stays
//! for the directory MLSD lists), MFMT sets a file's time for writable
//! users (and `sluice put -r` keeps modification times with it), CKSM
//! answers SHA1 and CRC32C next to ADLER32, MD5 and SHA256, each checked
//! against a value computed here. aioftp, the client that found the
//! `cdir` bug, removes a directory tree through MLST and MLSD.

use crate::harness::corpus;
use crate::harness::servers::{sluice_ro, sluice_rw};
use crate::harness::*;
use std::fs;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

fn logged_in(server: &FtpServer) -> Control {
    let mut c = server.connect();
    c.login_anonymous();
    c
}

#[test]
fn mlst_of_a_subdirectory_is_type_dir_and_mlsd_keeps_cdir() {
    let server = sluice_ro();
    fs::create_dir_all(server.local("sub/inner")).unwrap();
    let mut c = logged_in(&server);
    let r = c.cmd("MLST sub");
    assert_eq!(r.code, 250, "{}", c.transcript());
    let facts = r
        .lines
        .iter()
        .find(|l| l.contains("type="))
        .expect("fact line");
    assert!(facts.contains("type=dir;"), "{facts}");
    assert!(facts.trim_end().ends_with("/sub"), "{facts}");
    let file = corpus::file_name(4095);
    let r = c.cmd(&format!("MLST {file}"));
    assert!(r.text().contains("type=file;size=4095;"), "{}", r.text());
    // MLSD of sub: the listed directory is `cdir`, its child `dir`.
    if !require_tool("curl") {
        return;
    }
    let out = run(Command::new("curl").args(["-sS", "-X", "MLSD", &server.url("sub/")]));
    out.assert_success();
    let text = out.stdout.clone();
    assert!(text.contains("type=cdir;"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("type=dir;") && l.ends_with(" inner")),
        "{text}"
    );
}

/// aioftp's `remove` asks MLST what a path is and removes a directory
/// (its listing's files, then RMD) only when the answer is `type=dir`:
/// with `cdir` it did nothing and the tree stayed. Against `sluice
/// serve --writable` the whole tree goes and `exists` says so.
#[test]
fn aioftp_sees_a_subdirectory_as_a_directory_and_removes_it() {
    let Some(python) = require_debian_python_with("aioftp") else {
        return;
    };
    let server = sluice_rw();
    fs::create_dir_all(server.local("tree/inner")).unwrap();
    fs::write(server.local("tree/a.txt"), b"a").unwrap();
    fs::write(server.local("tree/inner/b.txt"), b"b").unwrap();
    let script = r#"
import asyncio, sys, aioftp
async def main(host, port):
    async with aioftp.Client.context(host, int(port), user="anonymous", password="t@x") as c:
        print("type", (await c.stat("tree"))["type"])
        print("is_dir", await c.is_dir("tree"), await c.is_dir("tree/inner"))
        await c.remove("tree")
        print("exists", await c.exists("tree"))
asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;
    let out = run(Command::new(python).args([
        "-c",
        script,
        &server.host.to_string(),
        &server.port.to_string(),
    ]));
    out.assert_success();
    assert!(out.stdout.contains("type dir\n"), "{}", out.describe());
    assert!(
        out.stdout.contains("is_dir True True\n"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("exists False\n"), "{}", out.describe());
    assert!(!server.local("tree").exists(), "{}", out.describe());
}

#[test]
fn mfmt_sets_the_modification_time_for_writable_users_only() {
    let ro = sluice_ro();
    let file = corpus::file_name(4095);
    let mut c = logged_in(&ro);
    assert_eq!(c.cmd(&format!("MFMT 20200102030405 {file}")).code, 550);
    let feat = c.cmd("FEAT").text();
    assert!(feat.contains("MFMT"), "{feat}");

    let server = sluice_rw();
    fs::write(server.local("t.txt"), b"time").unwrap();
    let mut c = logged_in(&server);
    let r = c.cmd("MFMT 20200102030405 t.txt");
    assert_eq!(r.code, 213, "{}", c.transcript());
    assert!(r.text().contains("Modify=20200102030405;"), "{}", r.text());
    assert_eq!(c.cmd("MDTM t.txt").text(), "213 20200102030405");
    let local = fs::metadata(server.local("t.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        local.duration_since(UNIX_EPOCH).unwrap(),
        Duration::from_secs(1_577_934_245)
    );
    // Bad times and directories are refused; a missing file is 550.
    assert_eq!(c.cmd("MFMT 20200231000000 t.txt").code, 501);
    assert_eq!(c.cmd("MFMT 2020 t.txt").code, 501);
    fs::create_dir(server.local("d")).unwrap();
    assert_eq!(c.cmd("MFMT 20200102030405 d").code / 100, 5);
    assert_eq!(c.cmd("MFMT 20200102030405 nothing-here").code, 550);
}

#[test]
fn put_r_keeps_modification_times_through_mfmt() {
    let server = sluice_rw();
    let src = tempfile::tempdir().unwrap();
    fs::create_dir(src.path().join("d")).unwrap();
    for (rel, secs) in [("a.txt", 1_500_000_000u64), ("d/b.bin", 1_600_000_000)] {
        let p = src.path().join(rel);
        fs::write(&p, rel.as_bytes()).unwrap();
        let f = fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    }
    let out = run(Command::new(sluice_bin()).args([
        "put",
        "-r",
        "-q",
        src.path().to_str().unwrap(),
        &server.url("up/"),
    ]));
    out.assert_success();
    for (rel, secs) in [("a.txt", 1_500_000_000u64), ("d/b.bin", 1_600_000_000)] {
        let m = fs::metadata(server.local(&format!("up/{rel}"))).unwrap();
        assert_eq!(
            m.modified().unwrap().duration_since(UNIX_EPOCH).unwrap(),
            Duration::from_secs(secs),
            "{rel}"
        );
    }
}

/// CRC32C (Castagnoli), bit by bit: slow and obviously right.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ if c & 1 != 0 { 0x82F6_3B78 } else { 0 };
        }
    }
    !c
}

#[test]
fn cksm_answers_sha1_and_crc32c() {
    let server = sluice_ro();
    let name = corpus::file_name(4095);
    let data = fs::read(server.local(&name)).unwrap();
    let out = run(Command::new("sha1sum").arg(server.local(&name)));
    out.assert_success();
    let sha1 = out.stdout.split_whitespace().next().unwrap().to_string();
    let mut c = logged_in(&server);
    for (alg, want) in [
        ("SHA1", sha1.clone()),
        ("SHA-1", sha1),
        ("CRC32C", format!("{:08x}", crc32c(&data))),
        (
            "CRC32C 100 1000",
            format!("{:08x}", crc32c(&data[100..1100])),
        ),
    ] {
        let (alg, range) = alg.split_once(' ').unwrap_or((alg, "0 -1"));
        let r = c.cmd(&format!("CKSM {alg} {range} {name}"));
        assert_eq!(r.text(), format!("213 {want}"), "CKSM {alg} {range}");
    }
    let feat = c.cmd("FEAT").text();
    assert!(
        feat.contains("CKSM ADLER32;MD5;SHA256;SHA1;CRC32C;"),
        "{feat}"
    );
}

/// OPTS MLST (RFC 3659 7.9) chooses the facts MLST and MLSD show; FEAT
/// marks the chosen ones with `*`; an empty list leaves only the names;
/// REIN brings back all of them. Then Python ftplib's `mlsd(facts=...)`,
/// which sends OPTS MLST itself.
#[test]
fn opts_mlst_selects_the_facts_of_mlst_and_mlsd() {
    let server = sluice_ro();
    fs::create_dir_all(server.local("sel/d")).unwrap();
    fs::write(server.local("sel/f.txt"), b"12345").unwrap();
    let mut c = logged_in(&server);
    let feat = c.cmd("FEAT").text();
    assert!(
        feat.contains("MLST type*;size*;modify*;perm*;UNIX.mode*;"),
        "{feat}"
    );
    let r = c.cmd("OPTS MLST size;Type;nonsense;");
    assert_eq!(r.text(), "200 MLST OPTS type;size;", "{}", c.transcript());
    let feat = c.cmd("FEAT").text();
    assert!(
        feat.contains("MLST type*;size*;modify;perm;UNIX.mode;"),
        "{feat}"
    );
    let r = c.cmd("MLST sel/f.txt");
    assert_eq!(r.code, 250, "{}", c.transcript());
    assert!(
        r.lines
            .iter()
            .any(|l| l.trim() == "type=file;size=5; /sel/f.txt"),
        "{}",
        r.text()
    );
    let data = c.open_passive();
    let t = c.transfer_in("MLSD sel", data);
    assert_eq!(t.last().code, 226, "{}", c.transcript());
    let mut lines: Vec<String> = String::from_utf8_lossy(&t.data)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        ["type=cdir; .", "type=dir; d", "type=file;size=5; f.txt"]
    );
    // No facts: a space and the name.
    assert_eq!(c.cmd("OPTS MLST").text(), "200 MLST OPTS");
    let r = c.cmd("MLST sel/f.txt");
    assert!(r.lines.iter().any(|l| l == "  /sel/f.txt"), "{:?}", r.lines);
    c.cmd("REIN");
    c.login_anonymous();
    let r = c.cmd("MLST sel/f.txt");
    assert!(
        r.text().contains("type=file;size=5;modify="),
        "{}",
        r.text()
    );

    if !require_tool("python3") {
        return;
    }
    let script = r#"
import ftplib, sys
f = ftplib.FTP()
f.connect('127.0.0.1', int(sys.argv[1]), timeout=30)
f.login()
for name, facts in sorted(f.mlsd('sel', facts=['type', 'modify'])):
    print(name, sorted(facts.items()))
"#;
    let out = run(Command::new("python3").args(["-c", script, &server.port.to_string()]));
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.describe());
    for l in &lines {
        assert!(!l.contains("'size'") && !l.contains("'perm'"), "{l}");
        assert!(
            l.contains("('modify', '") && l.contains("('type', '"),
            "{l}"
        );
    }
    assert!(lines[2].starts_with("f.txt [('modify'"), "{lines:?}");
}
