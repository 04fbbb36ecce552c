#!/usr/bin/env python3
"""The current summary of drs-wan (issue 13's paths and rows) as Markdown,
from the JSON that lab/drs_wan.py wrote.

Usage: python3 lab/drs_wan_summary.py [--ran] lab/results/drs-wan/s15 lab/results/drs-wan/s14 ...
For each path and each row of the issue, the first directory given (newest
first) that holds successful runs of that row supplies its cell, named in
the table; the targets are judged per repetition (rows of one `rep` in one
JSON, the issue's "ratios in one run") and given as min/median/max of those
ratios.
"""
import json, os, statistics, sys

MIB = 1 << 20
NOFLAGS = "sluice, no flags at either end"
OVER = "over-provisioned (sysctls 64 MiB, SO_SNDBUF max)"
AUTO = "kernel autotuning, Debian defaults"
# The rows, in its order (name in the JSON, name in the summary).
ROWS = [
    (NOFLAGS, "sluice, no flags (DRS on, `-p auto`)"),
    ("sluice drs off", "sluice `--drs off` both ends"),
    (AUTO, "kernel autotuning, Debian defaults (sluice `--drs off --send-buffer auto`)"),
    (OVER, "static over-provisioned (sysctls 64 MiB, `--send-buffer max`)"),
    ("globus-url-copy -tcp-bs BDP (gridftp server)", "globus-url-copy `-tcp-bs` BDP"),
    ("globus-url-copy -p 4 (gridftp server)", "globus-url-copy `-p 4`"),
    ("globus-url-copy -p 8 (gridftp server)", "globus-url-copy `-p 8`"),
    ("curl (nginx)", "curl (nginx)"),
    ("aria2c -x 8 (nginx)", "aria2c `-x 8` (nginx)"),
    ("globus-url-copy, no flags (gridftp server)", "globus-url-copy, no flags"),
    ("aria2c, no flags (nginx)", "aria2c, no flags (nginx)"),
]
PEER_DEFAULTS = ["curl (nginx)", "globus-url-copy, no flags (gridftp server)", "aria2c, no flags (nginx)"]
TAGS = [("100m50", "100 Mbit/s, 50 ms"), ("400m100", "400 Mbit/s, 100 ms"), ("1g100", "1 Gbit/s, 100 ms"),
        ("400m100-delay-change", "400 Mbit/s, RTT 20 -> 150 -> 50 ms"),
        ("100m50-delay-change", "100 Mbit/s, RTT 20 -> 150 -> 50 ms")]


def fmt(xs, f="{:.1f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return f.format(xs[0]) + " (n=1)"
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))}, n={len(xs)})"


def memcell(rs):
    """Medians of the send and receive peaks, and the range of their sum."""
    s = statistics.median(r["peak_server_w"] / MIB for r in rs)
    c = statistics.median(r["peak_client_r"] / MIB for r in rs)
    tot = [mem(r) for r in rs]
    return f"{s:.1f} + {c:.1f}" + (f" ({min(tot):.1f}-{max(tot):.1f})" if len(rs) > 1 else "")


def mem(r):
    return (r["peak_server_w"] + r["peak_client_r"]) / MIB


def load(d, tag):
    p = os.path.join(d, tag + ".json")
    return json.load(open(p)) if os.path.exists(p) else None


def ratios(runs, a, b, f):
    """f(run of a, run of b) for every repetition holding both."""
    out = []
    for rep in sorted({r["rep"] for r in runs}):
        ra = [r for r in runs if r["rep"] == rep and r["row"] == a and "failed" not in r]
        rb = [r for r in runs if r["rep"] == rep and r["row"] == b and "failed" not in r]
        if ra and rb:
            out.append(f(ra[0], rb[0]))
    return out


def summary(dirs, ran_only=False):
    out = []
    for tag, name in TAGS:
        data = [(d, load(d, tag)) for d in dirs]
        data = [(d, j) for d, j in data if j]
        if not data:
            continue
        out += [f"#### {name} (`{tag}`)", "",
                "| row | MB/s | peak send + receive MiB | MB/s per MiB | retrans | time to 90 % s | runs from |",
                "|---|---|---|---|---|---|---|"]
        for key, label in ROWS:
            for d, j in data:
                rs = [r for r in j["runs"] if r["row"] == key and "failed" not in r]
                if rs:
                    out.append(f"| {label} | {fmt([r['mbps'] for r in rs])} | "
                               f"{memcell(rs)} | "
                               f"{fmt([r['mbps'] / max(mem(r), 0.01) for r in rs], '{:.2f}')} | "
                               f"{fmt([r['retrans'] for r in rs], '{:.0f}')} | {fmt([r['t90'] for r in rs])} | "
                               f"`{os.path.basename(d.rstrip('/'))}/` {j.get('when', '')[:10]} |")
                    break
            else:
                if not ran_only:
                    out.append(f"| {label} | not run | | | | | |")
        out.append("")
        # Targets, per repetition in one JSON (the first holding both rows).
        checks = [
            ("rate / over-provisioned", OVER, lambda a, b: a["mbps"] / b["mbps"], ">= 0.95"),
            ("memory / over-provisioned", OVER, lambda a, b: mem(a) / max(mem(b), 0.01), "<= 0.25"),
            ("rate / Debian autotuning", AUTO, lambda a, b: a["mbps"] / b["mbps"], ">= 1"),
            ("memory / Debian autotuning", AUTO, lambda a, b: mem(a) / max(mem(b), 0.01), "<= 0.5"),
        ]
        if tag == "1g100":
            checks += [(f"rate / {p.split(' (')[0]}", p, lambda a, b: a["mbps"] / b["mbps"], ">= 3") for p in PEER_DEFAULTS]
        for what, other, f, goal in checks:
            for d, j in data:
                rs = ratios(j["runs"], NOFLAGS, other, f)
                if rs:
                    lo, hi = min(rs), max(rs)
                    bound = float(goal.split()[1])
                    ok = [(x >= bound) if goal.startswith(">=") else (x <= bound) for x in rs]
                    verdict = "met" if all(ok) else ("missed" if not any(ok) else f"met in {sum(ok)} of {len(ok)}")
                    out.append(f"- {what}: {fmt(rs, '{:.3f}')} (target {goal}): **{verdict}** "
                               f"(`{os.path.basename(d.rstrip('/'))}/`)")
                    break
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    # --ran: leave out the rows no directory holds (a table of a few rows run apart)
    print(summary([a for a in args if a != "--ran"], ran_only="--ran" in args))
