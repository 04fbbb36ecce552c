//! Creating the two TUN devices and moving each into its network namespace.

use anyhow::{bail, Context, Result};
use sluice_platform::tun::Tun;

use crate::cmd::run;

/// One end of the emulated link.
#[derive(Debug, Clone)]
pub struct End {
    /// Network namespace the device goes into (`ip netns` name).
    pub netns: String,
    /// Interface name inside that namespace.
    pub ifname: String,
    /// Address with prefix length, e.g. "10.77.1.1/24".
    pub addr: String,
}

/// Creates the TUN device for `end` in this process's namespace, moves it into
/// `end.netns`, gives it its address and MTU and brings it up. The returned
/// device keeps working after the move; dropping it deletes the interface.
pub fn make_end(end: &End, mtu: u32, txqueuelen: u32) -> Result<Tun> {
    // Created under a temporary name, so a stale device of the same name in the
    // target namespace shows up as a clear error at the rename, not a clash here.
    let tun = Tun::create(&end.ifname, true)
        .with_context(|| format!("creating TUN device {}", end.ifname))?;
    let name = tun.name().to_string();
    run("ip", &["link", "set", "dev", &name, "netns", &end.netns])?;
    let ns = ["-n", end.netns.as_str()];
    let ip = |args: &[&str]| {
        let mut v: Vec<&str> = ns.to_vec();
        v.extend_from_slice(args);
        run("ip", &v)
    };
    ip(&["addr", "add", &end.addr, "dev", &name])?;
    ip(&[
        "link",
        "set",
        "dev",
        &name,
        "mtu",
        &mtu.to_string(),
        "txqueuelen",
        &txqueuelen.to_string(),
        "up",
    ])?;
    if !end.addr.contains('/') {
        bail!("address {} needs a prefix length", end.addr);
    }
    Ok(tun)
}
