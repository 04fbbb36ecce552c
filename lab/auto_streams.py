#!/usr/bin/env python3
"""auto-streams (issue 13, part 2): `sluice get -p auto` against every fixed
`-p` on one path with 0 % and 0.1 % random loss, and two or four automatic
transfers started 10 s apart on one bottleneck (Jain's index over time).

Each download runs for a fixed time (--secs) from a file larger than the
path can move in that time, so rows compare bytes per second over the
same span, whatever the loss does to them. The client's received bytes are
sampled from `ss -tinp` in the client namespace every 200 ms, per process:
from them the rate over time, the time to reach 90 % of the best fixed
count's mean rate, and, for competing transfers, Jain's index of their
rates in each second.

Own namespaces (as-srv, as-cli) and linkem between them, like
lab/drs_wan.py. The server runs with `--congestion cubic` (Debian's
default; this host's bbr ignores random loss, so with it one stream fills
a lossy path and there is nothing for streams to win).

Usage (root): lab/auto_streams.py --bin DIR --out lab/results/auto-streams [--smoke]
DIR holds release builds of `sluice` and `linkem`.
"""
import argparse, json, os, re, statistics, subprocess, sys, threading, time

from labkit import LAB_SYSCTLS, sh, ns, fmt

SRV, CLI = "as-srv", "as-cli"
SA, CA = "10.89.0.1", "10.89.0.2"
FTP, HTTP = 2121, 8080
SYSCTLS = LAB_SYSCTLS
# Flags added to every server / `sluice get` command line (--server-args, --client-args).
EXTRA = {"server": [], "client": [], "cc": "cubic"}
PATH = dict(name="400 Mbit/s, 50 ms", rate="400mbit", delay="25ms", limit="5000000B")


def teardown():
    for n in (SRV, CLI):
        sh("ip", "netns", "del", n, check=False)


class Link:
    def __init__(self, bindir, work, loss):
        teardown()
        for n in (SRV, CLI):
            sh("ip", "netns", "add", n)
            ns(n, "ip", "link", "set", "lo", "up")
            for k, v in SYSCTLS.items():
                ns(n, "sysctl", "-q", "-w", f"{k}={v}")
        self.ctl = os.path.join(work, "linkem.sock")
        if os.path.exists(self.ctl):
            os.remove(self.ctl)
        args = ["chrt", "-f", "20", os.path.join(bindir, "linkem"), "run", "--a-ns", SRV, "--a-addr", f"{SA}/24",
                "--b-ns", CLI, "--b-addr", f"{CA}/24", "--ctl", self.ctl, f"--delay={PATH['delay']}",
                f"--rate={PATH['rate']}", f"--limit={PATH['limit']}"]
        if loss:
            args.append(f"--loss={loss}")
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "linkem.log"), "w"))
        for _ in range(100):
            if os.path.exists(self.ctl):
                break
            time.sleep(0.05)
        self.srv = subprocess.Popen(["ip", "netns", "exec", SRV, os.path.join(bindir, "sluice"), "serve",
                                     os.path.join(work, "data"), "--ftp", f"{SA}:{FTP}", "--http", f"{SA}:{HTTP}",
                                     "--congestion", EXTRA["cc"]] + EXTRA["server"],
                                    stdout=subprocess.PIPE, stderr=open(os.path.join(work, "server.err"), "w"),
                                    text=True)
        self.srv.stdout.readline()
        self.srv.stdout.readline()

    def close(self):
        self.srv.terminate()
        self.srv.wait()
        self.p.terminate()
        self.p.wait()
        teardown()


PID = re.compile(r"pid=(\d+)")
RECV = re.compile(r"\bbytes_received:(\d+)")


class Sampler(threading.Thread):
    """Bytes received per client process over time (ss every 200 ms). A
    connection that closed drops out of ss, so each process's total is
    kept as the sum of its connections' last counts (by address pair)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = False
        self.series = {}  # pid -> [(t, bytes)]
        self.conns = {}  # (pid, local, peer) -> bytes
        self.streams = {}  # pid -> [(t, data connections open)]
        self.t0 = time.monotonic()

    def run(self):
        while not self.stop:
            out = ns(CLI, "ss", "-tinpH", "state", "established", check=False).stdout
            now = time.monotonic() - self.t0
            cur = None
            open_now = {}
            for ln in out.splitlines():
                if not ln.startswith((" ", "\t")):
                    m = PID.search(ln)
                    parts = ln.split()
                    # Keyed by both ends: MODE E connections the server opened
                    # to the client all share the client's listening address.
                    cur = (int(m.group(1)), parts[2], parts[3]) if m and len(parts) > 3 else None
                    # The FTP control connection is not a stream.
                    if cur and not parts[3].endswith(f":{FTP}"):
                        open_now[cur[0]] = open_now.get(cur[0], 0) + 1
                m = RECV.search(ln)
                if cur and m:
                    self.conns[cur] = max(self.conns.get(cur, 0), int(m.group(1)))
            tot = {}
            for (pid, _, _), b in self.conns.items():
                tot[pid] = tot.get(pid, 0) + b
            for pid, b in tot.items():
                self.series.setdefault(pid, []).append((now, b))
                self.streams.setdefault(pid, []).append((now, open_now.get(pid, 0)))
            time.sleep(0.2)


class Tracer(threading.Thread):
    """Raw `ss -tinm` of both namespaces every 100 ms into `path` (what
    holds a flow back: cwnd, send buffer, not-sent bytes, the receiver's
    window and buffer, RTTs). Each record: `# t=SECONDS ns=NAME`, then ss's lines."""

    def __init__(self, path, t0):
        super().__init__(daemon=True)
        self.stop = False
        self.f = open(path, "w")
        self.t0 = t0

    def run(self):
        while not self.stop:
            for n in (SRV, CLI):
                out = ns(n, "ss", "-tinmH", "state", "established", check=False).stdout
                self.f.write(f"# t={time.monotonic() - self.t0:.2f} ns={n}\n{out}")
            time.sleep(0.1)
        self.f.close()


def start_get(bindir, proto, p, secs):
    url = f"ftp://{SA}:{FTP}/big.bin" if proto == "ftp" else f"http://{SA}:{HTTP}/big.bin"
    argv = ["ip", "netns", "exec", CLI, "timeout", "-s", "INT", str(secs),
            os.path.join(bindir, "sluice"), "get", "-q", "--stats=json", "-p", p] + EXTRA["client"] + [url, "/dev/null"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def child_pid(popen):
    """The sluice process under ip netns exec / timeout (up to 10 s: at
    load 100 the exec chain took more than a second and a run counted
    nothing)."""
    for _ in range(500):
        out = sh("pgrep", "-P", str(popen.pid), check=False).stdout.split()
        for c in out:
            inner = sh("pgrep", "-P", c, check=False).stdout.split()
            if inner:
                return int(inner[0])
            return int(c)
        time.sleep(0.02)
    return None


def rate_series(series, t_from, width=1.0):
    """Rate per `width` s bin from t_from: [(bin end, bytes/s)]."""
    out = []
    if not series:
        return out
    t = t_from + width
    end = series[-1][0]
    while t <= end + 1e-9:
        a = interp(series, t - width)
        b = interp(series, t)
        out.append((t - t_from, (b - a) / width))
        t += width
    return out


def interp(series, t):
    prev = (0.0, 0)
    for s in series:
        if s[0] >= t:
            if s[0] == prev[0]:
                return s[1]
            return prev[1] + (s[1] - prev[1]) * (t - prev[0]) / (s[0] - prev[0])
        prev = s
    return prev[1]


def jain(xs):
    xs = [x for x in xs]
    if not xs or sum(xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def one_run(bindir, work, loss, proto, p, secs):
    link = Link(bindir, work, loss)
    try:
        smp = Sampler()
        smp.start()
        g = start_get(bindir, proto, p, secs)
        time.sleep(0.05)
        pid = child_pid(g)
        _, err = g.communicate()
        smp.stop = True
        smp.join()
    finally:
        link.close()
    stats = next((json.loads(l) for l in err.splitlines() if l.startswith("{")), {})
    ser = smp.series.get(pid, [])
    total = ser[-1][1] if ser else 0
    span = ser[-1][0] if ser else secs
    st = smp.streams.get(pid, [])
    # sluice get is stopped by SIGINT at --secs, before its --stats: the
    # stream counts come from ss (data connections open per sample).
    return dict(proto=proto, p=p, loss=loss or "0", bytes=total, mbps=total / max(span, 0.1) / 1e6,
                series=ser, streams_series=st, streams_auto=st[-1][1] if st else None,
                streams_peak=max((n for _, n in st), default=None), stats=stats or None)


def compete(bindir, work, loss, proto, n, gap, secs, settle=10, trace=None):
    """n automatic transfers, started gap s apart, each running until the
    last has had `secs` s."""
    link = Link(bindir, work, loss)
    tr = None
    try:
        smp = Sampler()
        smp.start()
        if trace:
            tr = Tracer(f"{trace}-{n}-{loss or 0}.txt", smp.t0)
            tr.start()
        procs, starts = [], []
        total = gap * (n - 1) + secs
        for i in range(n):
            starts.append(time.monotonic() - smp.t0)
            g = start_get(bindir, proto, "auto", total - gap * i)
            time.sleep(0.05)
            procs.append((g, child_pid(g)))
            if i < n - 1:
                time.sleep(gap - 0.05)
        errs = [g.communicate()[1] for g, _ in procs]
        smp.stop = True
        smp.join()
        if tr:
            tr.stop = True
            tr.join()
    finally:
        link.close()
    # Rates per second of each transfer over the whole run.
    t_end = max(s[-1][0] for s in smp.series.values()) if smp.series else 0
    per = []
    for (g, pid), st in zip(procs, starts):
        ser = smp.series.get(pid, [])
        per.append({int(round(t)): r for t, r in rate_series(ser, 0.0)})
    timeline = []
    for sec in range(1, int(t_end) + 1):
        active = [i for i, st in enumerate(starts) if sec - 1 >= st]
        rates = [per[i].get(sec, 0.0) for i in active]
        timeline.append(dict(t=sec, active=len(active), rates=[r / 1e6 for r in rates], jain=jain(rates)))
    last_start = starts[-1]
    after = [x["jain"] for x in timeline if x["t"] - 1 >= last_start + settle and x["active"] == n and x["jain"] is not None]
    sts = [smp.streams.get(pid, []) for _, pid in procs]
    return dict(proto=proto, n=n, loss=loss or "0", gap=gap, settle=settle, timeline=timeline,
                jain_after_10s=statistics.median(after) if after else None,
                jain_after_10s_min=min(after) if after else None,
                streams=[streams_end(st) for st in sts], streams_series=sts,
                peaks=[max((k for _, k in st), default=None) for st in sts])


def t90(series, ref_rate):
    for t, r in rate_series(series, 0.0):
        if r >= 0.9 * ref_rate:
            return t
    return None


def plot(out, runs, comps):
    """rates-PROTO-LOSS.svg (last run of each -p) and compete-N-LOSS.svg."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from svgplot import line_chart
    order = lambda p: (p == "auto", int(p) if p.isdigit() else 0)
    for proto, loss in sorted({(r["proto"], r["loss"]) for r in runs}):
        lines = []
        for p in sorted({r["p"] for r in runs if (r["proto"], r["loss"]) == (proto, loss)}, key=order):
            r = [r for r in runs if (r["proto"], r["loss"], r["p"]) == (proto, loss, p)][-1]
            lines.append((f"-p {p}", [(t, y / 1e6) for t, y in rate_series(r["series"], 0.0)], p == "auto"))
        tag = loss.replace("%", "pct").replace(".", "_")
        line_chart(os.path.join(out, f"rates-{proto}-{tag}.svg"), f"{PATH['name']}, loss {loss}, {proto.upper()}: rate per second (last run)",
                   lines, "s", "MB/s")
    for c in comps:
        lines = []
        for i in range(c["n"]):
            lines.append((f"transfer {i + 1}", [(x["t"], x["rates"][i]) for x in c["timeline"] if len(x["rates"]) > i], False))
        top = max((y for _, ps, _ in lines for _, y in ps), default=1) or 1
        # Jain scaled to the rate axis: 1.0 at the top.
        lines.append(("Jain (top = 1)", [(x["t"], (x["jain"] or 0) * top) for x in c["timeline"]], True))
        tag = c["loss"].replace("%", "pct").replace(".", "_")
        line_chart(os.path.join(out, f"compete-{c['n']}-{tag}.svg"),
                   f"{c['n']} x -p auto started {c['gap']} s apart, loss {c['loss']}", lines, "s", "MB/s", ymax=top)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="one short run of a few rows (< 60 s)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--secs", type=int, default=15)
    ap.add_argument("--fixed", default="1,2,4,8,16")
    ap.add_argument("--protos", default="http,ftp")
    ap.add_argument("--losses", default="0,0.1%")
    ap.add_argument("--compete", default="2,4", help="transfer counts of the competing runs ('' for none)")
    ap.add_argument("--gap", type=int, default=10)
    ap.add_argument("--secs-compete", type=int, default=30, help="seconds every competing transfer shares the path")
    ap.add_argument("--trace", help="write ss -tinm of both namespaces every 100 ms to TRACE-N-LOSS.txt (competing runs)")
    ap.add_argument("--rerender", action="store_true",
                    help="write results.md and the plots again from OUT/results.json (no runs)")
    ap.add_argument("--server-args", default="", help="extra flags of `sluice serve` (e.g. '--drs off')")
    ap.add_argument("--client-args", default="", help="extra flags of `sluice get`")
    ap.add_argument("--congestion", default="cubic", help="the server's congestion control ('system': the host's, bbr here)")
    a = ap.parse_args()
    EXTRA["server"], EXTRA["client"] = a.server_args.split(), a.client_args.split()
    EXTRA["cc"] = a.congestion
    if a.rerender:
        d = json.load(open(os.path.join(a.out, "results.json")))
        render(a.out, d["runs"], d["compete"], d["command"], d["when"], d["load"])
        return
    if a.smoke:
        a.repeat, a.secs, a.fixed, a.protos, a.compete, a.gap = 1, 5, "1,4", "http", "2", 2
    work = "/var/tmp/auto-streams"
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    big = os.path.join(work, "data", "big.bin")
    if not os.path.exists(big):
        # Sparse: reads cost no disk, the path is what is measured.
        with open(big, "wb") as f:
            f.truncate(16 << 30)
    out = os.path.join(a.out, "smoke") if a.smoke else a.out
    os.makedirs(out, exist_ok=True)
    losses = [None if l in ("0", "") else l for l in a.losses.split(",")]
    runs = []
    for rep in range(a.repeat):
        for loss in losses:
            for proto in a.protos.split(","):
                for p in [x for x in a.fixed.split(",") if x] + ["auto"]:
                    r = one_run(a.bin, work, loss, proto, p, a.secs)
                    r["rep"] = rep
                    print(json.dumps({k: v for k, v in r.items() if k != "series"}), flush=True)
                    runs.append(r)
    comps = []
    for n in [int(x) for x in a.compete.split(",") if x]:
        for loss in losses[:1] if a.smoke else losses:
            c = compete(a.bin, work, loss, "http", n, a.gap, 6 if a.smoke else a.secs_compete, 2 if a.smoke else 10,
                        trace=a.trace)
            print(json.dumps({k: v for k, v in c.items() if k != "timeline"}), flush=True)
            comps.append(c)
    load = open("/proc/loadavg").read().strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    json.dump(dict(path=PATH, command=" ".join(sys.argv), when=when, load=load, runs=runs, compete=comps),
              open(os.path.join(out, "results.json"), "w"), indent=1)
    render(out, runs, comps, " ".join(sys.argv), when, load)
    bad = [r for r in runs if r["bytes"] == 0]
    if bad:
        raise SystemExit(f"{len(bad)} downloads moved nothing")


def streams_end(series):
    """Streams open at the last sample that had any (the client is
    stopped by a signal; its connections close before the last samples)."""
    live = [n for _, n in series if n > 0]
    return live[-1] if live else None


def render(out, runs, comps, command, when, load):
    secs = round(max((r["series"][-1][0] for r in runs if r["series"]), default=0))
    losses = sorted({r["loss"] for r in runs}, key=lambda l: l != "0")
    protos = list(dict.fromkeys(r["proto"] for r in runs))
    lines = [f"# auto-streams: {PATH['name']}, about {secs} s per download, server {EXTRA['cc']}", "",
             f"Command: `{command}`  ", f"When: {when}, load average at the end {load.split()[:3]}. "
             "Cells are median (min–max, n=runs). \"vs best\": the row's median over the best fixed count's. "
             "\"t90\": first 1 s bin at 90 % of the best fixed count's mean rate.", ""]
    for loss in losses:
        for proto in protos:
            rs = [r for r in runs if r["loss"] == loss and r["proto"] == proto]
            by = {}
            for r in rs:
                by.setdefault(r["p"], []).append(r)
            med = {p: statistics.median([r["mbps"] for r in v]) for p, v in by.items()}
            fixed = {p: m for p, m in med.items() if p != "auto"}
            best_p = max(fixed, key=fixed.get) if fixed else None
            best = fixed[best_p] * 1e6 if fixed else None
            lines += [f"## {proto.upper()}, loss {loss} (best fixed: -p {best_p})", "",
                      "| -p | MB/s | vs best | t90 s | streams at the end (auto) | peak streams |", "|---|---|---|---|---|---|"]
            for p, v in by.items():
                lines.append("| " + " | ".join([
                    p, fmt([r["mbps"] for r in v]), f"{med[p] / fixed[best_p]:.2f}" if best else "n/a",
                    fmt([t90(r["series"], best) for r in v]) if best else "n/a",
                    " ".join(str(streams_end(r["streams_series"])) for r in v) if p == "auto" else "",
                    " ".join(str(r["streams_peak"]) for r in v)]) + " |")
            lines.append("")
    if comps:
        lines += ["## Competing automatic transfers (HTTP), one bottleneck", "",
                  "| transfers | loss | started apart s | Jain from the last start + settle s (settle) : median (min) | streams at the end | peaks |",
                  "|---|---|---|---|---|---|"]
        for c in comps:
            j = "n/a" if c["jain_after_10s"] is None else f"{c['jain_after_10s']:.3f} ({c['jain_after_10s_min']:.3f})"
            lines.append(f"| {c['n']} | {c['loss']} | {c['gap']} | {j} ({c.get('settle', 10)} s) | {c['streams']} | {c['peaks']} |")
        lines.append("")
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    plot(out, runs, comps)
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    finally:
        teardown()
