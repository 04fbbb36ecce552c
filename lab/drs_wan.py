#!/usr/bin/env python3
"""drs-wan (issue 13): one download over linkem, Sluice with DRS on/off,
kernel autotuning (lab sysctls and Debian defaults) and static
over-provisioned buffers; throughput, peak socket memory each side,
retransmits, time to 90 % of the final rate, the client's verdict.

Why a script and not `sluice-lab run drs-wan` (lab/experiments/drs-wan.toml
holds the same rows): sluice-lab's namespaces (sl-srv/sl-cli) have fixed
names and were in use by another experiment when this ran, and the rows
need per-row sysctls (Debian defaults, raised maxima), which sluice-lab
sets per experiment only. This script makes its own namespaces (drs-srv,
drs-cli) and a linkem between them, once per run, with the row's sysctls.

Usage (root): lab/drs_wan.py --bin DIR --path 100m50 --size 1G --repeat 3 --out lab/results/drs-wan
DIR holds release builds of `sluice` and `linkem`.
"""
import argparse, json, os, re, statistics, subprocess, sys, threading, time

from labkit import sh, ns, fmt

SRV, CLI = "drs-srv", "drs-cli"
SA, CA = "10.88.0.1", "10.88.0.2"
PORT = 2121

LAB = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 16384 4194304",
       "net.core.rmem_max": "4194304", "net.core.wmem_max": "4194304"}
# net.core.rmem_max and wmem_max are not per network namespace: writing
# them inside one fails ("Invalid argument", sysctl still exits 0) and the
# host's values (4 MiB here) stay. So the Debian and over-provisioned rows
# differ from the lab's only in tcp_rmem/tcp_wmem (autotuning's range):
# "over-provisioned" is autotuning allowed 64 MiB each side, and a
# SO_*BUF request beyond 4 MiB needs FORCE (root) in every row.
# Debian's defaults (a fresh bookworm/trixie host).
DEBIAN = {"net.ipv4.tcp_rmem": "4096 131072 6291456", "net.ipv4.tcp_wmem": "4096 16384 4194304",
          "net.core.rmem_max": "212992", "net.core.wmem_max": "212992"}
# Over-provisioned: maxima raised to 64 MiB, autotuning may use all of it.
BIG = {"net.ipv4.tcp_rmem": "4096 131072 67108864", "net.ipv4.tcp_wmem": "4096 16384 67108864",
       "net.core.rmem_max": "67108864", "net.core.wmem_max": "67108864"}

OFF = ["--drs", "off"]
# DRS is on by default at both ends since session 6: every row that is
# not DRS says --drs off on both sides (before session 9 rows 1-3 and 5
# relied on the old default and measured DRS on the server).
ROWS = [
    # name, sysctls, server args, client args
    ("sluice drs on (default)", LAB, ["--drs", "on"], ["--drs", "on"]),
    ("sluice drs off", LAB, OFF, OFF),
    ("kernel autotuning, lab sysctls", LAB, OFF + ["--send-buffer", "auto"], OFF),
    ("kernel autotuning, Debian defaults", DEBIAN, OFF + ["--send-buffer", "auto"], OFF),
    ("sluice drs on, Debian defaults", DEBIAN, ["--drs", "on"], ["--drs", "on"]),
    ("over-provisioned (sysctls 64 MiB, SO_SNDBUF max)", BIG, OFF + ["--send-buffer", "max"], OFF),
    ("server drs on, client autotuning", LAB, ["--drs", "on"], OFF),
    ("sluice drs on, --send-buffer auto (autotuning floor)", LAB, ["--drs", "on", "--send-buffer", "auto"], ["--drs", "on"]),
]

PATHS = {
    "100m50": dict(name="100 Mbit/s, 50 ms", rate="100mbit", delay="25ms", limit="1250000B"),
    "400m100": dict(name="400 Mbit/s, 100 ms", rate="400mbit", delay="50ms", limit="10000000B"),
    "1g100": dict(name="1 Gbit/s, 100 ms", rate="1gbit", delay="50ms", limit="25000000B"),
}


def teardown():
    for n in (SRV, CLI):
        sh("ip", "netns", "del", n, check=False)


def setup(path, sysctls, work, bindir):
    teardown()
    for n in (SRV, CLI):
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
        for k, v in sysctls.items():
            ns(n, "sysctl", "-q", "-w", f"{k}={v}")
        ns(n, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1")
    ctl = os.path.join(work, "linkem.sock")
    if os.path.exists(ctl):
        os.remove(ctl)
    lk = subprocess.Popen(["chrt", "-f", "20", os.path.join(bindir, "linkem"), "run",
                           "--a-ns", SRV, "--a-addr", f"{SA}/24", "--b-ns", CLI, "--b-addr", f"{CA}/24",
                           "--ctl", ctl, f"--delay={path['delay']}", f"--rate={path['rate']}",
                           f"--limit={path['limit']}"],
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "linkem.log"), "w"))
    for _ in range(100):
        if os.path.exists(ctl):
            break
        time.sleep(0.05)
    return lk, ctl


SKMEM = re.compile(r"skmem:\(([^)]*)\)")


def skmem(line, key):
    m = SKMEM.search(line)
    if not m:
        return 0
    for part in m.group(1).split(","):
        k = part.rstrip("0123456789")
        if k == key:
            return int(part[len(k):])
    return 0


def field(text, name):
    m = re.search(r"\b" + name + r":(\d+)", text)
    return int(m.group(1)) if m else 0


class Sampler(threading.Thread):
    """ss -tmni in both namespaces every 200 ms: peak server send memory
    (skmem w), peak client receive memory (r), client bytes_received over
    time, server retransmits."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = False
        self.peak_w = self.peak_r = self.peak_tb = self.peak_rb = 0
        self.recv = []  # (t, bytes_received)
        self.retrans = 0

    def run(self):
        t0 = time.monotonic()
        while not self.stop:
            s = ns(SRV, "ss", "-tmniH", "state", "established", check=False).stdout
            c = ns(CLI, "ss", "-tmniH", "state", "established", check=False).stdout
            now = time.monotonic() - t0
            for ln in s.splitlines():
                self.peak_w = max(self.peak_w, skmem(ln, "w"))
                self.peak_tb = max(self.peak_tb, skmem(ln, "tb"))
                m = re.search(r"retrans:\d+/(\d+)", ln)
                if m:
                    self.retrans = max(self.retrans, int(m.group(1)))
            total = 0
            for ln in c.splitlines():
                self.peak_r = max(self.peak_r, skmem(ln, "r"))
                self.peak_rb = max(self.peak_rb, skmem(ln, "rb"))
                total += field(ln, "bytes_received")
            self.recv.append((now, total))
            time.sleep(0.2)


def time_to_90(recv, final_rate):
    """First time the rate over the last second reaches 90 % of the
    transfer's average rate."""
    for i, (t, b) in enumerate(recv):
        j = i
        while j > 0 and t - recv[j - 1][0] <= 1.0:
            j -= 1
        if t - recv[j][0] >= 0.8 and (b - recv[j][1]) / (t - recv[j][0]) >= 0.9 * final_rate:
            return recv[j][0]
    return None


def one(row, path, size, bindir, work, data, events):
    name, sysctls, sargs, cargs = row
    lk, ctl = setup(path, sysctls, work, bindir)
    sb = os.path.join(bindir, "sluice")
    srv_err = open(os.path.join(work, "server.err"), "w")
    srv = subprocess.Popen(["ip", "netns", "exec", SRV, sb, "serve", data, "--ftp", f"{SA}:{PORT}", "--no-http"] + sargs,
                           stdout=subprocess.PIPE, stderr=srv_err, text=True)
    srv.stdout.readline()  # "ftp listening on ..."
    smp = Sampler()
    smp.start()
    timers = []
    for at, delay in events:
        t = threading.Timer(at, lambda d=delay: sh(os.path.join(bindir, "linkem"), "set", "--ctl", ctl,
                                                   "--dir", "both", "--delay", d, check=False))
        t.start()
        timers.append(t)
    t0 = time.monotonic()
    out = ns(CLI, sb, "get", "-q", "--stats=json", *cargs, f"ftp://{SA}:{PORT}/f.bin", "/dev/null", check=False)
    wall = time.monotonic() - t0
    for t in timers:
        t.cancel()
    time.sleep(0.5)
    smp.stop = True
    smp.join()
    srv.terminate()
    srv.wait()
    lk.terminate()
    lk.wait()
    teardown()
    m = re.search(r"received (\d+) bytes in ([\d.]+) s", out.stderr)
    stats = next((json.loads(l) for l in out.stderr.splitlines() if l.startswith("{")), {})
    if not m:
        raise SystemExit(f"{name}: client failed:\n{out.stderr}")
    nbytes, secs = int(m.group(1)), float(m.group(2))
    rate = nbytes / secs
    xfer = open(os.path.join(work, "server.err")).read()
    xl = re.search(r"xferlog: .* (limit=\S+) retrans=(\d+) rtt_ms=([\d.]+)", xfer)
    return dict(row=name, mbps=rate / 1e6, seconds=secs, peak_server_w=smp.peak_w, peak_client_r=smp.peak_r,
                peak_server_tb=smp.peak_tb, peak_client_rb=smp.peak_rb,
                retrans=int(xl.group(2)) if xl else smp.retrans, server_limit=xl.group(1) if xl else None,
                client_limit=stats.get("limit", {}).get("text"), drs_peak_client=stats.get("drs_peak_buffer"),
                t90=time_to_90(smp.recv, rate), drs_note=stats.get("drs_note"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--path", default="100m50", choices=list(PATHS))
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default="", help="comma-separated row numbers (0-based), default all")
    ap.add_argument("--delay-change", action="store_true",
                    help="RTT 20 ms, then 150 ms at 15 s, then 50 ms at 45 s (linkem set)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    path = dict(PATHS[a.path])
    events = []
    if a.delay_change:
        path["delay"] = "10ms"
        path["name"] += ", RTT 20 -> 150 -> 50 ms"
        events = [(15, "75ms"), (45, "25ms")]
    rows = [ROWS[int(i)] for i in a.rows.split(",")] if a.rows else ROWS
    os.makedirs(a.out, exist_ok=True)
    work = "/var/tmp/drs-wan"
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    f = os.path.join(data, "f.bin")
    if not os.path.exists(f) or os.path.getsize(f) != parse_size(a.size):
        subprocess.run(f"head -c {parse_size(a.size)} /dev/urandom > {f}", shell=True, check=True)
    runs = []
    for rep in range(a.repeat):
        for row in rows:
            subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)  # warm cache
            r = one(row, path, a.size, a.bin, work, data, events)
            r["rep"] = rep
            print(json.dumps(r), flush=True)
            runs.append(r)
    tag = a.path + ("-delay-change" if a.delay_change else "")
    json.dump(dict(path=path, size=a.size, command=" ".join(sys.argv), runs=runs,
                   when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load=open("/proc/loadavg").read().strip()),
              open(os.path.join(a.out, f"{tag}.json"), "w"), indent=1)
    mib = 1 << 20
    lines = [f"### {path['name']}: 1 x {a.size}", "",
             f"Command: `{' '.join(sys.argv)}`  ",
             f"When: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end {open('/proc/loadavg').read().split()[:3]}. "
             "Cells are median (min–max, n=runs).", "",
             "| row | MB/s | server peak send mem MiB | client peak recv mem MiB | MB/s per MiB of buffer (both sides) | retrans | time to 90 % of rate s | client's verdict (last run) | server's verdict (last run) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        rs = [r for r in runs if r["row"] == row[0]]
        lines.append("| " + " | ".join([
            row[0], fmt([r["mbps"] for r in rs]),
            fmt([r["peak_server_w"] / mib for r in rs], "{:.2f}"),
            fmt([r["peak_client_r"] / mib for r in rs], "{:.2f}"),
            fmt([r["mbps"] / max((r["peak_server_w"] + r["peak_client_r"]) / mib, 0.01) for r in rs], "{:.2f}"),
            fmt([r["retrans"] for r in rs], "{:.0f}"),
            fmt([r["t90"] for r in rs], "{:.1f}"),
            str(rs[-1]["client_limit"]), str(rs[-1]["server_limit"])]) + " |")
    open(os.path.join(a.out, f"{tag}.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def parse_size(s):
    s = s.strip().upper().rstrip("IB").rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


if __name__ == "__main__":
    try:
        main()
    finally:
        teardown()
