"""What the Python-driven lab experiments share (drs_wan, auto_streams,
receiver_load, cue, datasets): running a command, in a network namespace,
making and deleting a server/client namespace pair (with the hosts files
globus needs), and the summary cell of repeated runs. Each script names its
own namespaces and addresses and joins them its own way."""
import os
import shutil
import socket
import statistics
import subprocess


def sh(*a, check=True, **kw):
    """Runs a command, capturing its output as text."""
    return subprocess.run(list(a), check=check, capture_output=True, text=True, **kw)


def ns(n, *a, **kw):
    """Runs a command inside network namespace `n`."""
    return sh("ip", "netns", "exec", n, *a, **kw)


def del_pair(srv, cli):
    """Deletes the two namespaces of a pair and their /etc/netns files."""
    for n in (srv, cli):
        sh("ip", "netns", "del", n, check=False)
        shutil.rmtree(f"/etc/netns/{n}", ignore_errors=True)


def add_pair(srv, cli, sa, ca, sysctls=None):
    """Two namespaces `srv` (address `sa`) and `cli` (`ca`), loopback up,
    `sysctls` set, then TCP metrics not saved between connections.
    globus-gridftp-server and globus-url-copy look addresses up by name
    (their own host's name too, for the data channel) and will not start
    without an answer ("Temporary failure in name resolution"): `ip netns
    exec` mounts /etc/netns/NAME/hosts as the namespace's /etc/hosts."""
    for n in (srv, cli):
        os.makedirs(f"/etc/netns/{n}", exist_ok=True)
        me = sa if n == srv else ca
        with open(f"/etc/netns/{n}/hosts", "w") as f:
            f.write(f"127.0.0.1 localhost\n{me} {socket.gethostname()}\n{sa} {srv}\n{ca} {cli}\n")
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
        for k, v in (sysctls or {}).items():
            ns(n, "sysctl", "-q", "-w", f"{k}={v}")
        ns(n, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1")


def fmt(vals, f="{:.1f}"):
    """`median (min–max, n=runs)` of the numbers among `vals` (None skipped); `n/a` if none."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return f"{f.format(statistics.median(vals))} ({f.format(min(vals))}–{f.format(max(vals))}, n={len(vals)})"


# The lab's socket sysctls for a namespace (lab/experiments: Debian-like
# autotuning; the host's net.core.*mem_max apply, they are not per namespace).
LAB_SYSCTLS = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 16384 4194304",
               "net.ipv4.tcp_no_metrics_save": "1"}
