//! The harness against peers alone. If these fail, the other suites'
//! failures say nothing about Sluice: fix the harness (or the machine) first.

use crate::harness::servers::{gridftp, vsftpd};
use crate::harness::*;
use std::process::Command;

#[test]
fn vsftpd_serves_every_size_to_curl() {
    if !require_tool("vsftpd") || !require_tool("curl") {
        return;
    }
    let server = vsftpd(false);
    download_all_sizes(&server, "curl from vsftpd", |f, dest| {
        run(Command::new("curl")
            .args(["-sS", "--fail", "-o"])
            .arg(dest)
            .arg(server.url(&f.name)))
    });
}

#[test]
fn vsftpd_passes_the_fresh_session_check() {
    if !require_tool("vsftpd") {
        return;
    }
    let server = vsftpd(false);
    assert_serves_fresh_session(&server);
}

#[test]
fn gridftp_serves_every_size_to_globus_url_copy_p4() {
    if !require_tool("globus-gridftp-server") || !require_tool("globus-url-copy") {
        return;
    }
    let server = gridftp(false);
    download_all_sizes(
        &server,
        "globus-url-copy -p 4 from globus-gridftp-server",
        |f, dest| {
            run(Command::new("globus-url-copy")
                .args(["-p", "4", &server.url(&f.name)])
                .arg(format!("file://{}", dest.display())))
        },
    );
}

#[test]
fn gridftp_passes_the_fresh_session_check() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let server = gridftp(false);
    assert_serves_fresh_session(&server);
}

#[test]
fn gridftp_accepts_uploads_from_globus_url_copy() {
    if !require_tool("globus-gridftp-server") || !require_tool("globus-url-copy") {
        return;
    }
    let server = gridftp(true);
    upload_all_sizes(
        &server,
        "globus-url-copy -p 4 to globus-gridftp-server",
        |f, rel| {
            run(Command::new("globus-url-copy")
                .args(["-p", "4"])
                .arg(format!("file://{}", f.path.display()))
                .arg(server.url(rel)))
        },
    );
}

/// The raw MODE E encoder the bad-input tests use, checked against the
/// reference server: one block plus EOF/EOD uploads a file intact.
#[test]
fn gridftp_accepts_a_raw_mode_e_upload() {
    if !require_tool("globus-gridftp-server") {
        return;
    }
    let server = gridftp(true);
    let f = corpus().file(4095);
    let data = std::fs::read(&f.path).expect("read");
    let mut c = server.connect();
    c.login_anonymous();
    let r = c.cmd("MODE E");
    assert_eq!(r.code, 200, "{}", c.transcript());
    let replies = c.upload(
        "STOR",
        &server.remote_path("raw-mode-e.bin"),
        &crate::harness::control::mode_e::single_stream(&data),
    );
    assert_eq!(
        replies.last().map(|r| r.code),
        Some(226),
        "{}",
        c.transcript()
    );
    compare_file(&server.local("raw-mode-e.bin"), f)
        .unwrap_or_else(|e| panic!("{e}\n{}", c.transcript()));
}
