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
        run(Command::new("curl").args(["-sS", "--fail", "-o"]).arg(dest).arg(server.url(&f.name)))
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
    download_all_sizes(&server, "globus-url-copy -p 4 from globus-gridftp-server", |f, dest| {
        run(Command::new("globus-url-copy")
            .args(["-p", "4", &server.url(&f.name)])
            .arg(format!("file://{}", dest.display())))
    });
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
    upload_all_sizes(&server, "globus-url-copy -p 4 to globus-gridftp-server", |f, rel| {
        run(Command::new("globus-url-copy")
            .args(["-p", "4"])
            .arg(format!("file://{}", f.path.display()))
            .arg(server.url(rel)))
    });
}
