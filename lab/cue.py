#!/usr/bin/env python3
"""Cue experiments (issue 14): fairness and scaling as transfers are
added (`scaling`), and rate caps and classes (`caps`).

scaling: N = 1, 2, 4, 8, 16, 64 concurrent downloads of different files,
over a veth pair (no emulated delay) and over linkem 100 Mbit/s 20 ms.
Per row and N: aggregate throughput, Jain's index over the per-transfer
throughput of every whole second while all N run (mean and minimum),
server CPU s/GiB (cgroup cpuacct), and the progress of a CPU-bound
neighbour process (iterations/s against running alone). Rows: sluice with
Cue (quantum 4M, the default, and 256K), sluice without quanta
(--send-quantum 1024G), sluice with a server cap just below the link
(linkem only: Cue's pacing divides the link), nginx, vsftpd, globus-gridftp-server; curl is the
client of every row (HTTP for sluice and nginx, FTP for the others).

caps: sluice only. 20 transfers, each its own user with rate_cap 1, 10 or
100 Mbit/s (measured rate against cap over the 10 s window); the same 20
uncapped under --server-rate-cap 200mbit (total against cap, Jain); two
classes 3:1 (10 HTTP transfers `interactive`=3, 10 FTP `bulk`=1) under
--server-rate-cap 100mbit (share against weight); and a freed share: 4
transfers under a 100 Mbit/s server cap, one stops at 4 s, time until the
other three send 95 % of the cap again (sampled every 100 ms).

Why a script and not a sluice-lab TOML: the measurements (per-second
Jain, a neighbour process, per-user caps with FTP logins, a departure at a
given time) are not among sluice-lab's kinds. Like lab/drs_wan.py it makes
its own namespaces (cue-srv, cue-cli) and path.

Files: sparse files on a private tmpfs (reads of holes cost no disk and
no page-cache growth: "warm" for every row alike); each transfer is
bounded by time (curl --max-time), so no file ever ends within a run.

Usage (root): lab/cue.py scaling|caps --bin DIR [--smoke] [--repeat N] [--out DIR]
  [--paths veth,linkem] [--rows NAME,...] [--counts 1,2,...]
DIR holds release builds of `sluice` and `linkem`. --smoke: N = 2,
2 rows (and fair shares over linkem), 3 s runs (< 60 s each experiment).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

from labkit import sh
from svgplot import line_chart
from cue_rig import (CLI, FTP, HTTP, PASSWORD, SA, Path, Sampler, Server, clients, jain, measure, neighbour,
                     start_retrying, teardown, wait_clients)


def scaling_row(server, n, seconds, dt):
    # The neighbour alone just before (the machine's load from other work
    # changes from minute to minute).
    alone = float(neighbour(1 if seconds < 5 else 2).communicate()[0])
    smp, cpu, wall, it, rcs = measure(server, n, seconds, dt=dt)
    keys = smp.data_keys()
    bad = [rc for rc in rcs if rc not in (0, 28)]
    # Intervals in which all N transfers were running: from the last one's
    # first sample to the first one's last sample.
    firsts = [smp.first_seen(k) for k in keys]
    lasts = [smp.last_seen(k) for k in keys]
    iv = smp.intervals(keys, max(firsts), min(lasts)) if keys else []
    # A transfer never seen (no connection yet) counts as zero.
    js = [jain([b / d for b in x.values()] + [0.0] * max(0, n - len(keys))) for d, x in iv]
    secs = sum(d for d, _ in iv)
    agg = sum(sum(x.values()) for _, x in iv)
    last = {}
    for snap in smp.snaps:
        last.update(snap)
    total = sum(last[k] for k in keys)
    return dict(n=n, transfers_seen=len(keys), intervals=len(iv), failed_clients=len(bad), agg_MBps=agg / secs / 1e6 if js else None,
                jain_mean=statistics.mean(js) if js else None, jain_min=min(js) if js else None,
                cpu_s_per_GiB=cpu / (total / 2**30) if total else None,
                neighbour_ratio=(it / alone) if it and alone else None, bytes=total)


ROWS_SCALING = [
    ("sluice cue k=4M (default)", "sluice", ["--cue", "on"]),
    # Fair shares of the measured aggregate (engine's sched/cue_fair.rs):
    # no cap configured, the server finds the shared bottleneck itself.
    ("sluice cue fair", "sluice", ["--cue", "fair"]),
    # Over linkem only: the server cap set just below the link's rate, so
    # Cue's pacing (not TCP's competition in the queue) divides the link.
    ("sluice cue, server cap 95 Mbit/s", "sluice", ["--server-rate-cap", "95mbit"], {"linkem"}),
    # Over veth the receivers' CPU decides who gets data (2 cores shared by
    # the server, N curl processes and the neighbour); a server cap below
    # what they can take makes Cue's pacing decide instead.
    ("sluice cue, server cap 800 Mbit/s", "sluice", ["--server-rate-cap", "800mbit"], {"veth"}),
    # The files' holes are never "in the page cache" for cachestat, so
    # sluice's default `--prefetch auto` plans reads on disk threads where
    # nginx and vsftpd sendfile the zero page: the kernel's read-ahead row
    # shows what that costs here.
    ("sluice cue, --prefetch kernel", "sluice", ["--cue", "on", "--prefetch", "kernel"], {"veth"}),
    ("sluice cue k=256K", "sluice", ["--cue", "on", "--send-quantum", "256K"]),
    ("sluice no quanta", "sluice", ["--send-quantum", "1024G"]),
    ("nginx", "nginx", []),
    ("vsftpd", "vsftpd", []),
    ("globus-gridftp-server", "gridftp", []),
]


def make_root(work, count):
    root = os.path.join(work, "root")
    os.makedirs(root, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", root)
    for i in range(count):
        with open(os.path.join(root, f"f{i}.bin"), "wb") as f:
            f.truncate(64 << 30)
    return root


def scaling(a, work):
    counts = [2] if a.smoke else [1, 2, 4, 8, 16, 64]
    if a.counts:
        counts = [int(c) for c in a.counts.split(",")]
    rows = [r for r in ROWS_SCALING if r[0] in ('sluice cue k=4M (default)', 'sluice cue fair', 'nginx')] if a.smoke else ROWS_SCALING
    if a.rows:
        rows = [r for r in rows if any(w in r[0] for w in a.rows.split(","))]
    paths = a.paths.split(",")
    secs = {"veth": 3 if a.smoke else 8, "linkem": 3 if a.smoke else 10}
    root = make_root(work, max(counts))
    dt = 0.5 if a.smoke else 1.0
    results = []
    try:
        for rep in range(a.repeat):
            for pk in paths:
                path = Path(pk, BIN, work)
                try:
                    for name, kind, args, *only in rows:
                        if only and pk not in only[0]:
                            continue
                        # The smoke run stays under a minute: fair shares on
                        # the path where they matter (one drop-tail queue).
                        if a.smoke and name == "sluice cue fair" and pk != "linkem":
                            continue
                        try:
                            srv = start_retrying(BIN, kind, args, root, work)
                        except SystemExit as e:
                            # A peer that cannot start here is a failed row,
                            # not the end of the experiment.
                            print(f"{name}: {e}", file=sys.stderr)
                            for n in counts:
                                r = dict(n=n, path=pk, row=name, rep=rep + 1, failed_clients=n,
                                         note=f"server did not start: {str(e)[:200]}", load=os.getloadavg()[0])
                                print(json.dumps(r), flush=True)
                                results.append(r)
                            continue
                        try:
                            for n in counts:
                                r = scaling_row(srv, n, secs[pk], dt)
                                r.update(rep=rep + 1, path=pk, row=name, load=os.getloadavg()[0])
                                print(json.dumps(r), flush=True)
                                results.append(r)
                        finally:
                            srv.stop()
                finally:
                    path.close()
    finally:
        sh("umount", root, check=False)
    return results


def user_config(caps, extra=""):
    h = subprocess.run([os.path.join(BIN, "sluice"), "hash-password"], input=PASSWORD, capture_output=True,
                       text=True, check=True).stdout.strip()
    out = extra
    for i, cap in enumerate(caps):
        out += f'\n[[user]]\nname = "u{i}"\npassword_hash = "{h}"\nrate_cap = "{cap}"\n'
    return out


def rates_in(smp, lo, hi):
    """Bytes/s of each data connection over [lo, hi]."""
    out = {}
    for k in smp.data_keys(64 << 10):
        r = smp.rate(k, lo, hi)
        if r is not None:
            out[k] = r
    return out


def caps(a, work):
    # The window: 10 s (full) after the last of 20 staggered logins.
    secs = 6 if a.smoke else 14.5
    lo, hi = 3.5, secs - 0.5
    root = make_root(work, 20)
    results = []
    mbit = 125000
    try:
        path = Path("veth", BIN, work)
        for rep in range(a.repeat):
            # 1. Per-user caps 1/10/100 Mbit/s, one transfer per user (FTP).
            cl = [1, 10, 100] * 7
            cl = cl[:20]
            srv = Server(BIN, "sluice", [], root, work, user_config([f"{c}mbit" for c in cl]))
            try:
                smp = Sampler(0.5)
                smp.start()
                # Logins are started 0.15 s apart: 20 argon2 checks at once
                # would be refused as "busy" (the server bounds them).
                ps = []
                for i in range(20):
                    ps.append(subprocess.Popen(["ip", "netns", "exec", CLI, "curl", "-s", "-o", "/dev/null",
                                                "--max-time", f"{secs - 0.15 * i:.2f}",
                                                f"ftp://u{i}:{PASSWORD}@{SA}:{FTP}/f{i}.bin"],
                                               stdout=subprocess.DEVNULL))
                    time.sleep(0.15)
                rcs = wait_clients(ps)
                smp.stop = True
                smp.join()
                # Map data connections to users by their rate's order is not
                # safe; instead each cap class is judged by its sorted rates.
                rs = sorted(rates_in(smp, lo, hi).values())
                want = sorted(c * mbit for c in cl)
                for c in (1, 10, 100):
                    got = [r for r, w in zip(rs, want) if w == c * mbit]
                    err = [abs(g / (c * mbit) - 1) * 100 for g in got]
                    r = dict(rep=rep + 1, case=f"per-user cap {c} Mbit/s", n=len(got),
                             failed_clients=len([x for x in rcs if x not in (0, 28)]),
                             mean_rate_over_cap=statistics.mean(got) / (c * mbit) if got else None,
                             max_err_pct=max(err) if err else None, load=os.getloadavg()[0])
                    print(json.dumps(r), flush=True)
                    results.append(r)
            finally:
                srv.stop()
            # 2. Server cap 200 Mbit/s over 20 uncapped transfers (HTTP).
            srv = Server(BIN, "sluice", ["--server-rate-cap", "200mbit"], root, work)
            try:
                smp, cpu, wall, it, rcs = measure(srv, 20, secs, dt=0.5, with_neighbour=False)
                rs = list(rates_in(smp, lo, hi).values())
                r = dict(rep=rep + 1, case="server cap 200 Mbit/s, 20 transfers", n=len(rs),
                         total_over_cap=sum(rs) / (200 * mbit), jain=jain(rs), load=os.getloadavg()[0])
                print(json.dumps(r), flush=True)
                results.append(r)
            finally:
                srv.stop()
            # 3. Two classes 3:1 under 100 Mbit/s: 10 HTTP (interactive), 10 FTP (bulk).
            srv = Server(BIN, "sluice", ["--server-rate-cap", "100mbit", "--class", "interactive=3", "--class", "bulk=1",
                                    "--http-class", "interactive", "--ftp-class", "bulk"], root, work)
            try:
                smp = Sampler(0.5)
                smp.start()
                ps = clients([f"http://{SA}:{HTTP}/f{i}.bin" for i in range(10)], secs)
                ps += clients([f"ftp://{SA}:{FTP}/f{i}.bin" for i in range(10, 20)], secs)
                wait_clients(ps)
                smp.stop = True
                smp.join()
                rs = rates_in(smp, lo, hi)
                hi_c = sum(v for k, v in rs.items() if k[1].endswith(f":{HTTP}"))
                lo_c = sum(v for k, v in rs.items() if not k[1].endswith(f":{HTTP}"))
                r = dict(rep=rep + 1, case="classes 3:1 under 100 Mbit/s", interactive_share=hi_c / (hi_c + lo_c),
                         total_over_cap=(hi_c + lo_c) / (100 * mbit), load=os.getloadavg()[0])
                print(json.dumps(r), flush=True)
                results.append(r)
            finally:
                srv.stop()
            # 4. A freed share: 4 transfers under 100 Mbit/s, one stops at 4 s (2 s in smoke).
            stop_at = 2 if a.smoke else 4
            srv = Server(BIN, "sluice", ["--server-rate-cap", "100mbit"], root, work)
            try:
                smp = Sampler(0.1)
                smp.start()
                t0 = smp.t0
                ps = clients([srv.url(0)], stop_at)
                ps += clients([srv.url(i) for i in range(1, 4)], secs)
                wait_clients(ps)
                smp.stop = True
                smp.join()
                keys = smp.data_keys(64 << 10)
                leaver = min(keys, key=smp.last_seen)
                gone_t = smp.last_seen(leaver)
                rest = [k for k in keys if k != leaver]
                # The first span of ticks at least 0.5 s long, starting
                # after the departure, in which the other three send 95 %
                # of the cap; reported as its end minus the departure.
                taken = None
                T, S = smp.ticks, smp.snaps
                for i in range(len(T)):
                    if T[i] < gone_t:
                        continue
                    j = next((j for j in range(i + 1, len(T)) if T[j] - T[i] >= 0.5), None)
                    if j is None:
                        break
                    if not all(k in S[i] and k in S[j] for k in rest):
                        continue
                    rate = sum(S[j][k] - S[i][k] for k in rest) / (T[j] - T[i])
                    if rate >= 0.95 * 100 * mbit:
                        taken = T[j] - gone_t
                        break
                r = dict(rep=rep + 1, case="freed share, 4 -> 3 under 100 Mbit/s", seconds_to_95pct=taken,
                         load=os.getloadavg()[0])
                print(json.dumps(r), flush=True)
                results.append(r)
            finally:
                srv.stop()
        path.close()
    finally:
        sh("umount", root, check=False)
    return results


def report_scaling(results, out):
    rows = [r for r in results if "row" in r]
    med = lambda xs: statistics.median(xs) if xs else None
    lines = ["| path | row | N | aggregate MB/s median (min-max) | Jain mean median (min-max) | Jain min | server CPU s/GiB | neighbour vs alone | runs | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        k = (r["path"], r["row"], r["n"])
        if k not in keys:
            keys.append(k)
    agg = {}
    for k in keys:
        rs = [r for r in rows if (r["path"], r["row"], r["n"]) == k]
        g = lambda f: med([r[f] for r in rs if r.get(f) is not None])
        fmt = lambda v, p=".3f": "n/a" if v is None else format(v, p)
        agg[k] = dict(agg=g("agg_MBps"), jain=g("jain_mean"))
        failed = sum(r["failed_clients"] for r in rs)
        def span(f, p):
            # median, and (min-max) over the runs when there are several.
            xs = [r[f] for r in rs if r.get(f) is not None]
            if len(xs) < 2:
                return fmt(med(xs), p)
            return f"{fmt(med(xs), p)} ({fmt(min(xs), p)}-{fmt(max(xs), p)})"
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {span('agg_MBps', '.1f')} | {span('jain_mean', '.3f')} | "
                     f"{fmt(g('jain_min'))} | {fmt(g('cpu_s_per_GiB'))} | {fmt(g('neighbour_ratio'), '.2f')} | "
                     f"{len(rs)}{' (' + str(failed) + ' clients failed)' if failed else ''} | "
                     f"{fmt(g('load'), '.1f')} |")
    for pk in sorted({k[0] for k in keys}):
        ns_ = sorted({k[2] for k in keys if k[0] == pk})
        names = [n for n in dict.fromkeys(k[1] for k in keys if k[0] == pk)]
        for what, label in (("agg", "aggregate MB/s"), ("jain", "Jain's index (mean of seconds)")):
            series = [(n, [(x, agg[(pk, n, x)][what]) for x in ns_
                           if agg.get((pk, n, x), {}).get(what) is not None], False) for n in names]
            if any(ps for _, ps, _ in series):
                line_chart(os.path.join(out, f"{what}-{pk}.svg"), f"{label}, {pk}", series,
                           "clients", label, logx=True)
    return "\n".join(lines)


def report_caps(results):
    lines = ["| case | rep | result | load |", "|---|---|---|---|"]
    for r in results:
        rest = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k not in ("case", "rep", "load")}
        lines.append(f"| {r['case']} | {r['rep']} | {json.dumps(rest)} | {r['load']:.1f} |")
    return "\n".join(lines)


def main():
    global BIN
    p = argparse.ArgumentParser()
    p.add_argument("experiment", choices=["scaling", "caps", "report-scaling", "report-caps"])
    p.add_argument("logs", nargs="*", help="report-*: log.jsonl files of runs to table together")
    p.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release"))
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out")
    p.add_argument("--paths", default="veth,linkem", help="scaling: veth,linkem")
    p.add_argument("--rows", help="scaling: only rows whose name contains one of these (comma-separated)")
    p.add_argument("--counts", help="scaling: numbers of transfers (comma-separated; default 1,2,4,8,16,64)")
    a = p.parse_args()
    BIN = os.path.abspath(a.bin)
    if a.experiment.startswith("report-"):
        # Tables (and plots) from the JSON lines of several runs.
        rs = [json.loads(l) for f in a.logs for l in open(f) if l.startswith("{")]
        # A server that did not start left a row of notes, not of numbers.
        rs = [r for r in rs if "note" not in r]
        os.makedirs(a.out, exist_ok=True)
        t = report_scaling(rs, a.out) if a.experiment == "report-scaling" else report_caps(rs)
        open(os.path.join(a.out, "table.md"), "w").write(t + "\n")
        print(t)
        return
    name = f"cue-{a.experiment}"
    out = a.out or os.path.join("lab", "results", name, "smoke" if a.smoke else time.strftime("%Y-%m-%d-%H%M"))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cue-lab-")
    # nginx's workers, vsftpd and gridftp's anonymous user must reach the root.
    os.chmod(work, 0o755)
    t0 = time.time()
    try:
        results = scaling(a, work) if a.experiment == "scaling" else caps(a, work)
    finally:
        teardown()
        shutil.rmtree(work, ignore_errors=True)
    json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=1)
    table = report_scaling(results, out) if a.experiment == "scaling" else report_caps(results)
    cmd = " ".join(sys.argv)
    open(os.path.join(out, "results.md"), "w").write(
        f"# {name}\n\nCommand: `{cmd}` ({time.time() - t0:.0f} s, {a.repeat} repetition(s), "
        f"load at end {os.getloadavg()}).\n\n{table}\n")
    print(table)
    bad = [r for r in results if r.get("failed_clients")]
    if bad:
        print(f"{name}: failed clients in {len(bad)} rows", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
