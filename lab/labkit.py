"""What the Python-driven lab experiments share (drs_wan, auto_streams,
receiver_load, cue, datasets): running a command, in a network namespace,
and the summary cell of repeated runs. Each script keeps its own namespaces,
addresses and teardown, which differ."""
import statistics
import subprocess


def sh(*a, check=True, **kw):
    """Runs a command, capturing its output as text."""
    return subprocess.run(list(a), check=check, capture_output=True, text=True, **kw)


def ns(n, *a, **kw):
    """Runs a command inside network namespace `n`."""
    return sh("ip", "netns", "exec", n, *a, **kw)


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
