#!/usr/bin/env python3
"""receiver-load (issue 13, part 3): downloads over a 400 Mbit/s 50 ms
linkem path while the client's CPU is shared with 0 or 10 busy loops (the
receiver-bottleneck paper's BL0 / BL10): sluice get, curl, wget,
globus-url-copy, aria2c, all from one `sluice serve` (FTP and HTTP).

The client and its busy loops are pinned to CPU 1 (the server and linkem
run where the scheduler puts them). Reported per row: throughput, the
sender's retransmitted segments, RTOs and spurious RTOs (nstat deltas in
the server namespace: TcpRetransSegs, TcpExtTCPTimeouts,
TcpExtTCPSpuriousRTOs), and the receive stalls seen from outside for every
client alike: `ss` in the client namespace every 100 ms, the peak of
unread bytes (Recv-Q) and the share of samples that found more than 1 MiB
unread (data sat in the receive queue because the reader did not run).

Usage (root): lab/receiver_load.py --bin DIR --out lab/results/receiver-load [--smoke]
DIR holds release builds of `sluice` and `linkem`.
"""
import argparse, json, os, re, statistics, subprocess, sys, threading, time

from labkit import LAB_SYSCTLS, sh, ns, fmt

SRV, CLI = "rl-srv", "rl-cli"
SA, CA = "10.90.0.1", "10.90.0.2"
FTP, HTTP = 2121, 8080
SYSCTLS = LAB_SYSCTLS
PATH = dict(name="400 Mbit/s, 50 ms", rate="400mbit", delay="25ms", limit="5000000B")
CLIENT_CPU = "1"
NSTAT = ["TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPSpuriousRTOs"]


def teardown():
    for n in (SRV, CLI):
        sh("ip", "netns", "del", n, check=False)


def clients(bindir):
    f = "/big.bin"
    sl = os.path.join(bindir, "sluice")
    return {
        "sluice get (FTP)": [sl, "get", "-q", f"ftp://{SA}:{FTP}{f}", "/dev/null"],
        "sluice get (HTTP)": [sl, "get", "-q", f"http://{SA}:{HTTP}{f}", "/dev/null"],
        "curl": ["curl", "-sS", "-o", "/dev/null", f"http://{SA}:{HTTP}{f}"],
        "wget": ["wget", "-q", "-O", "/dev/null", f"http://{SA}:{HTTP}{f}"],
        "globus-url-copy": ["globus-url-copy", f"ftp://{SA}:{FTP}{f}", "file:///dev/null"],
        "aria2c": ["aria2c", "-q", "--allow-overwrite=true", "--file-allocation=none", "-d", "/dev/shm",
                   "-o", "rl-aria2c.out", f"http://{SA}:{HTTP}{f}"],
        # Sluice's own mechanisms off, one at a time (only when named with --clients).
        "sluice get (FTP) -p 1": [sl, "get", "-q", "-p", "1", f"ftp://{SA}:{FTP}{f}", "/dev/null"],
        "sluice get (FTP) --drs off": [sl, "get", "-q", "--drs", "off", f"ftp://{SA}:{FTP}{f}", "/dev/null"],
        "sluice get (HTTP) -p 1": [sl, "get", "-q", "-p", "1", f"http://{SA}:{HTTP}{f}", "/dev/null"],
        "sluice get (HTTP) --drs off": [sl, "get", "-q", "--drs", "off", f"http://{SA}:{HTTP}{f}", "/dev/null"],
        "sluice get (HTTP) -p 1 --drs off": [sl, "get", "-q", "-p", "1", "--drs", "off", f"http://{SA}:{HTTP}{f}",
                                             "/dev/null"],
        "sluice get (FTP) -p 1 --drs off": [sl, "get", "-q", "-p", "1", "--drs", "off", f"ftp://{SA}:{FTP}{f}",
                                            "/dev/null"],
        "sluice get (HTTP) -p auto --drs off": [sl, "get", "-q", "-p", "auto", "--drs", "off",
                                                f"http://{SA}:{HTTP}{f}", "/dev/null"],
        "sluice get (FTP) -p auto": [sl, "get", "-q", "-p", "auto", f"ftp://{SA}:{FTP}{f}", "/dev/null"],
        "sluice get (HTTP) -p auto": [sl, "get", "-q", "-p", "auto", f"http://{SA}:{HTTP}{f}", "/dev/null"],
    }


# Rows run when --clients is not given: the peers and Sluice's defaults.
DEFAULT_CLIENTS = ["sluice get (FTP)", "sluice get (HTTP)", "curl", "wget", "globus-url-copy", "aria2c"]


class Sampler(threading.Thread):
    """Unread bytes in the client's receive queues (ss Recv-Q, 100 ms)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = False
        self.unread = []

    def run(self):
        while not self.stop:
            out = ns(CLI, "ss", "-tnH", "state", "established", check=False).stdout
            tot = 0
            for ln in out.splitlines():
                parts = ln.split()
                # Recv-Q of data connections (the server's side is not here).
                if len(parts) >= 4 and not parts[3].endswith(f":{FTP}"):
                    tot += int(parts[0])
            self.unread.append(tot)
            time.sleep(0.1)


def nstat():
    out = ns(SRV, "nstat", "-asz", *NSTAT, check=False).stdout
    v = {}
    for ln in out.splitlines():
        p = ln.split()
        if len(p) >= 2 and p[0] in NSTAT:
            v[p[0]] = int(p[1])
    return v


def one(bindir, work, name, argv, busy, size):
    teardown()
    for n in (SRV, CLI):
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
        for k, v in SYSCTLS.items():
            ns(n, "sysctl", "-q", "-w", f"{k}={v}")
    ctl = os.path.join(work, "linkem.sock")
    if os.path.exists(ctl):
        os.remove(ctl)
    lk = subprocess.Popen(["chrt", "-f", "20", os.path.join(bindir, "linkem"), "run", "--a-ns", SRV, "--a-addr",
                           f"{SA}/24", "--b-ns", CLI, "--b-addr", f"{CA}/24", "--ctl", ctl,
                           f"--delay={PATH['delay']}", f"--rate={PATH['rate']}", f"--limit={PATH['limit']}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(ctl):
            break
        time.sleep(0.05)
    srv = subprocess.Popen(["ip", "netns", "exec", SRV, os.path.join(bindir, "sluice"), "serve",
                            os.path.join(work, "data"), "--ftp", f"{SA}:{FTP}", "--http", f"{SA}:{HTTP}"],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(work, "server.err"), "w"), text=True)
    srv.stdout.readline()
    srv.stdout.readline()
    # With busy loops the client and the loops share CPU 1 as ordinary
    # (SCHED_OTHER) processes, as in the paper: the lab runs this script
    # under `chrt -r 50`, and busy loops inheriting SCHED_RR would take
    # the CPU from everything else (a client sat at 0 s of CPU for 2 min).
    other = ["chrt", "-o", "0"] if busy else []
    loops = [subprocess.Popen([*other, "taskset", "-c", CLIENT_CPU, "sh", "-c", "while :; do :; done"])
             for _ in range(busy)]
    try:
        before = nstat()
        smp = Sampler()
        smp.start()
        t0 = time.monotonic()
        r = ns(CLI, *other, "taskset", "-c", CLIENT_CPU, *argv, check=False)
        secs = time.monotonic() - t0
        smp.stop = True
        smp.join()
        after = nstat()
    finally:
        for p in loops:
            p.kill()
            p.wait()
        srv.terminate()
        srv.wait()
        lk.terminate()
        lk.wait()
        teardown()
    if os.path.exists("/dev/shm/rl-aria2c.out"):
        os.remove("/dev/shm/rl-aria2c.out")
    if r.returncode != 0:
        raise SystemExit(f"{name} failed ({r.returncode}): {r.stderr[:400]}")
    d = {k: after.get(k, 0) - before.get(k, 0) for k in NSTAT}
    u = smp.unread or [0]
    return dict(client=name, busy=busy, mbps=size / secs / 1e6, seconds=secs, retrans=d["TcpRetransSegs"],
                rtos=d["TcpExtTCPTimeouts"], spurious_rtos=d["TcpExtTCPSpuriousRTOs"], unread_peak=max(u),
                unread_over_1m=sum(1 for x in u if x > 1 << 20) / len(u))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="16 MiB, sluice get and curl, one run (< 60 s)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=200 << 20)
    ap.add_argument("--busy", default="0,10")
    ap.add_argument("--clients", default="", help="comma-separated names (default all)")
    ap.add_argument("--append", action="store_true",
                    help="add this invocation's runs to OUT/results.json (one repetition per lock hold)")
    a = ap.parse_args()
    cl = clients(a.bin)
    names = a.clients.split(",") if a.clients else DEFAULT_CLIENTS
    unknown = [n for n in names if n not in cl]
    if unknown:
        sys.exit(f"unknown clients {unknown}; known: {list(cl)}")
    if a.smoke:
        a.repeat, a.size, names = 1, 16 << 20, ["sluice get (FTP)", "curl"]
    work = "/var/tmp/receiver-load"
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    big = os.path.join(work, "data", "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != a.size:
        with open(big, "wb") as f:
            f.truncate(0)
            f.truncate(a.size)  # sparse: the path and the receiver are measured, not the disk
    out = os.path.join(a.out, "smoke") if a.smoke else a.out
    os.makedirs(out, exist_ok=True)
    busy = [int(b) for b in a.busy.split(",")]
    runs, commands = [], []
    jpath = os.path.join(out, "results.json")
    if a.append and os.path.exists(jpath):
        old = json.load(open(jpath))
        runs, commands = old["runs"], old.get("commands", [old.get("command")])
    commands.append(f"{' '.join(sys.argv)}  ({time.strftime('%H:%M', time.gmtime())} UTC, load "
                    f"{' '.join(open('/proc/loadavg').read().split()[:3])})")
    first = 1 + max((r["rep"] for r in runs), default=-1)
    for rep in range(first, first + a.repeat):
        for b in busy:
            for n in names:
                r = one(a.bin, work, n, cl[n], b, a.size)
                r["rep"] = rep
                print(json.dumps(r), flush=True)
                runs.append(r)
    load = open("/proc/loadavg").read().strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    json.dump(dict(path=PATH, size=a.size, command=" ".join(sys.argv), commands=commands, when=when, load=load,
                   runs=runs), open(jpath, "w"), indent=1)
    lines = [f"# receiver-load: {PATH['name']}, {a.size >> 20} MiB, client on CPU {CLIENT_CPU} with N busy loops", "",
             "Commands (each with the time and load average when it started):", ""]
    lines += [f"- `{c}`" for c in commands]
    lines += ["", f"Last run: {when}, load average at the end {load.split()[:3]}. "
             "Cells are median (min–max, n=runs).", "",
             "| busy loops | client | MB/s | sender retrans segs | RTOs | spurious RTOs | peak unread MiB | samples > 1 MiB unread |",
             "|---|---|---|---|---|---|---|---|"]
    busy = sorted({r["busy"] for r in runs})
    names = list(dict.fromkeys(r["client"] for r in runs))
    for b in busy:
        for n in names:
            rs = [r for r in runs if r["busy"] == b and r["client"] == n]
            if not rs:
                continue
            lines.append("| " + " | ".join([str(b), n, fmt([r["mbps"] for r in rs]),
                                            fmt([r["retrans"] for r in rs], "{:.0f}"),
                                            fmt([r["rtos"] for r in rs], "{:.0f}"),
                                            fmt([r["spurious_rtos"] for r in rs], "{:.0f}"),
                                            fmt([r["unread_peak"] / 1048576 for r in rs], "{:.2f}"),
                                            fmt([r["unread_over_1m"] * 100 for r in rs], "{:.0f} %")]) + " |")
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from svgplot import bar_chart
    bar_chart(os.path.join(out, "throughput.svg"), f"receiver-load: median MB/s, {PATH['name']}",
              [n for n in names], [(f"{b} busy loops", [statistics.median([r["mbps"] for r in runs
                                                                          if r["busy"] == b and r["client"] == n] or [0])
                                                        for n in names]) for b in busy], "MB/s")
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    finally:
        teardown()
