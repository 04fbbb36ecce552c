//! Uploads to `sluice serve --writable`, resume in both directions, and a
//! read-only server refusing to be written to.

use crate::harness::control::mode_e;
use crate::harness::corpus::{populate_tree, write_prefix};
use crate::harness::servers::{sluice_rw, under_test};
use crate::harness::*;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;

#[test]
fn curl_upload_every_size() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    upload_all_sizes(&server, "curl -T", |f, rel| {
        run(Command::new("curl")
            .args(["-sS", "--fail", "-T"])
            .arg(&f.path)
            .arg(server.url(rel)))
    });
}

#[test]
fn curl_upload_overwrites_existing_file() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    // f1.bin already exists (1 byte); replace it with the 1 MiB + 7 file.
    let f = corpus().file((1 << 20) + 7);
    let out = run(Command::new("curl")
        .args(["-sS", "--fail", "-T"])
        .arg(&f.path)
        .arg(server.url("f1.bin")));
    out.assert_success();
    if let Err(e) = compare_file(&server.local("f1.bin"), f) {
        panic!("after overwriting: {e}\n{}", out.describe());
    }
    assert_serves_fresh_session(&server);
}

#[test]
fn ftplib_upload_every_size() {
    if !require_tool("python3") {
        return;
    }
    let server = under_test(true);
    upload_all_sizes(&server, "ftplib storbinary", |f, rel| {
        run(Command::new("python3")
            .arg(python_script())
            .args(["put", &server.port.to_string()])
            .arg(&f.path)
            .arg(server.remote_path(rel)))
    });
}

#[test]
fn ftplib_upload_active_mode() {
    if !require_tool("python3") {
        return;
    }
    let server = under_test(true);
    let f = corpus().file(BIG);
    let out = run(Command::new("python3")
        .arg(python_script())
        .args(["put", &server.port.to_string()])
        .arg(&f.path)
        .arg(server.remote_path("up-active.bin"))
        .arg("--active"));
    assert_transferred(&out, &server.local("up-active.bin"), f);
}

/// `curl -C -` on a local file holding the first part of the remote one:
/// REST then RETR, and the result must be the whole file.
#[test]
fn curl_resumes_download_of_truncated_file() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(false);
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [(BIG, BIG / 2 + 12345), ((1 << 20) + 7, 1 << 20), (4095, 1)];
    resume_cases(&server, "download resume", &cases, |f, keep| {
        let dest = dir.path().join(&f.name);
        write_prefix(&f.path, &dest, keep);
        let out = run(Command::new("curl")
            .args(["-sS", "--fail", "-C", "-", "-o"])
            .arg(&dest)
            .arg(server.url(&f.name)));
        (dest, out)
    });
}

/// `curl -C - -T` when the server holds the first part of the file: curl
/// asks SIZE and sends the rest (APPE); the server must end with the whole.
#[test]
fn curl_resumes_upload_of_partial_file() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    let cases = [(BIG, BIG / 3 + 777), ((1 << 20) + 7, 4096), (4095, 4094)];
    resume_cases(&server, "upload resume", &cases, |f, keep| {
        let rel = format!("partial-{}", f.name);
        write_prefix(&f.path, &server.local(&rel), keep);
        let out = run(Command::new("curl")
            .args(["-sS", "--fail", "-C", "-", "-T"])
            .arg(&f.path)
            .arg(server.url(&rel)));
        (server.local(&rel), out)
    });
}

fn globus_upload(extra: &[&str]) {
    if !require_tool("globus-url-copy") {
        return;
    }
    let server = under_test(true);
    upload_all_sizes(
        &server,
        &format!("globus-url-copy {} upload", extra.join(" ")),
        |f, rel| {
            run(Command::new("globus-url-copy")
                .args(extra)
                .arg(format!("file://{}", f.path.display()))
                .arg(server.url(rel)))
        },
    );
}

#[test]
fn globus_url_copy_upload_stream_mode() {
    globus_upload(&[]);
}

#[test]
fn globus_url_copy_upload_p4_mode_e() {
    globus_upload(&["-p", "4"]);
}

/// `globus-url-copy -fast -p 4 -r`: one PASV, the client keeps its four
/// MODE E connections open between files (EOD without CLOSE) and sends
/// every STOR of the tree over them.
#[test]
fn globus_url_copy_fast_p4_uploads_a_tree() {
    if !require_tool("globus-url-copy") {
        return;
    }
    let server = sluice_rw();
    let src = tempfile::Builder::new()
        .prefix("sluice-tree-")
        .tempdir()
        .expect("src dir");
    let files = populate_tree(src.path());
    let out = run(Command::new("globus-url-copy")
        .args(["-fast", "-p", "4", "-r", "-cd"])
        .arg(format!("file://{}/tree/", src.path().display()))
        .arg(server.url("up/")));
    let mut failures = Vec::new();
    if !out.success() {
        failures.push(format!("globus-url-copy failed\n{}", out.describe()));
    }
    for (rel, f) in &files {
        let dest = server.local(&format!("up/{}", rel.trim_start_matches("tree/")));
        if let Err(e) = compare_file(&dest, f) {
            failures.push(format!("{rel}: {e}"));
        }
    }
    server.assert_running();
    assert!(
        failures.is_empty(),
        "-fast tree upload:\n{}\n{}",
        failures.join("\n"),
        out.describe()
    );
}

/// APPE and ESTO A k in MODE E: block offsets count from the end of the
/// existing file (APPE) or from k (ESTO), as GFD.20 numbers a partial
/// transfer; the written file is never shifted or overlapped.
#[test]
fn mode_e_appe_and_esto_place_blocks_after_the_base() {
    let server = sluice_rw();
    fs::write(server.local("grow"), b"0123456789").expect("seed file");
    let mut c = Control::connect(server.port);
    c.login_anonymous();
    assert_eq!(c.cmd("TYPE I").code, 200);
    assert_eq!(c.cmd("MODE E").code, 200);
    let replies = c.upload("APPE", "grow", &mode_e::single_stream(b"abcdef"));
    assert_eq!(
        replies.last().map(|r| r.code),
        Some(226),
        "APPE\n{}",
        c.transcript()
    );
    assert_eq!(
        fs::read(server.local("grow")).expect("read"),
        b"0123456789abcdef"
    );
    // ESTO A 4: bytes land at 4 + their block offset, the rest is kept.
    let replies = c.upload("ESTO A 4", "grow", &mode_e::single_stream(b"WXYZ"));
    assert_eq!(
        replies.last().map(|r| r.code),
        Some(226),
        "ESTO\n{}",
        c.transcript()
    );
    assert_eq!(
        fs::read(server.local("grow")).expect("read"),
        b"0123WXYZ89abcdef"
    );
    c.quit();
    server.assert_running();
}

/// Every name under `dir`, recursively, relative to it.
fn tree_names(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            out.insert(
                p.strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string(),
            );
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out
}

#[test]
fn read_only_server_refuses_stor_and_leaves_no_file() {
    let server = under_test(false);
    let before = tree_names(&server.root);
    let mut c = server.connect();
    c.login_anonymous();
    let replies = c.upload("STOR", &server.remote_path("new.bin"), b"must not land");
    let last = replies.last().expect("a reply").code;
    assert_code(&c, "STOR on a read-only server", last, &[550, 553]);
    assert!(
        !server.local("new.bin").exists(),
        "new.bin was created\n{}",
        c.transcript()
    );
    assert_eq!(
        before,
        tree_names(&server.root),
        "the served tree changed\n{}",
        c.transcript()
    );
    c.quit();
    assert_serves_fresh_session(&server);
}

#[test]
fn read_only_server_refuses_other_writes() {
    let server = under_test(false);
    let before = tree_names(&server.root);
    let f1 = corpus().file(1);
    let mut c = server.connect();
    c.login_anonymous();
    // Overwrite and append to an existing file: refused like STOR.
    for verb in ["STOR", "APPE"] {
        let replies = c.upload(verb, &server.remote_path(&f1.name), b"garbage");
        let last = replies.last().expect("a reply").code;
        assert_code(
            &c,
            &format!("{verb} over an existing file"),
            last,
            &[550, 553],
        );
    }
    // Deleting, renaming and making directories: any permanent refusal.
    for cmd in [
        format!("DELE {}", server.remote_path(&f1.name)),
        format!("MKD {}", server.remote_path("newdir")),
        format!("RNFR {}", server.remote_path(&f1.name)),
    ] {
        let r = c.cmd(&cmd);
        assert!(
            (500..600).contains(&r.code),
            "`{cmd}` got {}, expected a 5xx refusal\n{}",
            r.code,
            c.transcript()
        );
    }
    assert_eq!(
        before,
        tree_names(&server.root),
        "the served tree changed\n{}",
        c.transcript()
    );
    assert_eq!(
        sha256_file(&server.local(&f1.name)),
        f1.sha256,
        "f1.bin was modified"
    );
    c.quit();
    assert_serves_fresh_session(&server);
}

/// Four uploads at once, to different names.
#[test]
fn concurrent_uploads_of_distinct_files() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    let results: Vec<(&TestFile, String, Output)> = std::thread::scope(|s| {
        let handles: Vec<_> = [BIG, (1 << 20) + 7, 4095, 1]
            .into_iter()
            .map(|size| {
                let f = corpus().file(size);
                let rel = format!("conc-{}", f.name);
                let url = server.url(&rel);
                s.spawn(move || {
                    let out = run(Command::new("curl")
                        .args(["-sS", "--fail", "-T"])
                        .arg(&f.path)
                        .arg(url));
                    (f, rel, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    server.assert_running();
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(f, rel, out)| {
            if !out.success() {
                Some(format!("client failed\n{}", out.describe()))
            } else {
                compare_file(&server.local(rel), f)
                    .err()
                    .map(|e| format!("{e}\n{}", out.describe()))
            }
        })
        .collect();
    assert!(
        failures.is_empty(),
        "concurrent uploads:\n{}",
        failures.join("\n\n")
    );
}

/// Two uploads to the same name at once: whatever the interleaving, the
/// file ends up as one of the two complete uploads, never a mix (uploads
/// go to a temporary name and are renamed into place).
#[test]
fn concurrent_uploads_to_one_name_never_mix() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    let (a, b) = (corpus().file(BIG), corpus().file((1 << 20) + 7));
    let url = server.url("contended.bin");
    let outs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = [a, b]
            .into_iter()
            .map(|f| {
                let url = url.clone();
                s.spawn(move || {
                    run(Command::new("curl")
                        .args(["-sS", "--fail", "-T"])
                        .arg(&f.path)
                        .arg(url))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    server.assert_running();
    let landed = server.local("contended.bin");
    let got = sha256_file(&landed);
    assert!(
        (got == a.sha256 && outs[0].success()) || (got == b.sha256 && outs[1].success()),
        "contended.bin ({} bytes) is neither complete upload\nfirst:\n{}\nsecond:\n{}",
        std::fs::metadata(&landed).map(|m| m.len()).unwrap_or(0),
        outs[0].describe(),
        outs[1].describe()
    );
}

/// A download running while the same file is replaced by an upload gets
/// either the old or the new content, complete.
#[test]
fn download_during_overwrite_gets_old_or_new() {
    if !require_tool("curl") {
        return;
    }
    let server = under_test(true);
    let (old, new) = (corpus().file(BIG), corpus().file((1 << 20) + 7));
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("read.bin");
    let (get, put) = std::thread::scope(|s| {
        let get = s.spawn(|| {
            run(Command::new("curl")
                .args(["-sS", "--fail", "-o"])
                .arg(&dest)
                .arg(server.url(&old.name)))
        });
        let put = s.spawn(|| {
            run(Command::new("curl")
                .args(["-sS", "--fail", "-T"])
                .arg(&new.path)
                .arg(server.url(&old.name)))
        });
        (
            get.join().expect("get thread"),
            put.join().expect("put thread"),
        )
    });
    server.assert_running();
    put.assert_success();
    compare_file(&server.local(&old.name), new)
        .unwrap_or_else(|e| panic!("after the overwrite: {e}\n{}", put.describe()));
    if get.success() {
        let got = sha256_file(&dest);
        assert!(
            got == old.sha256 || got == new.sha256,
            "the download got a mix of old and new content\n{}",
            get.describe()
        );
    }
}
