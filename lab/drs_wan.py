#!/usr/bin/env python3
"""drs-wan (issue 13): one download over linkem, Sluice with DRS on/off,
kernel autotuning (lab sysctls and Debian defaults), static
over-provisioned buffers and peers (globus-url-copy against
globus-gridftp-server with -tcp-bs and with -p 4 and -p 8, curl and aria2c -x 8
against nginx); throughput, peak socket memory each side (all of a row's
connections summed per sample), retransmits, time to 90 % of the final
rate, the client's verdict.

Why a script and not `sluice-lab run drs-wan` (lab/experiments/drs-wan.toml
holds the same rows): sluice-lab's namespaces (sl-srv/sl-cli) have fixed
names and were in use by another experiment when this ran, and the rows
need per-row sysctls (Debian defaults, raised maxima), which sluice-lab
sets per experiment only. This script makes its own namespaces (drs-srv,
drs-cli) and a linkem between them, once per run, with the row's sysctls.

Usage (root): lab/drs_wan.py --bin DIR --path 100m50 --size 1G --repeat 3 --out lab/results/drs-wan
DIR holds release builds of `sluice` and `linkem`. `--append` adds this
invocation's runs to the same table (one repetition per lock hold).
`--smoke`: 16 MiB, the first two rows, one run (< 60 s).
"""
import argparse, json, os, re, shutil, subprocess, sys, threading, time

from labkit import add_pair, del_pair, sh, ns, fmt

SRV, CLI = "drs-srv", "drs-cli"
SA, CA = "10.88.0.1", "10.88.0.2"
PORT = 2121
WORK = "/var/tmp/drs-wan"

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
    # name, sysctls, server args, client args: Sluice at both ends
    ("sluice drs on (default)", LAB, ["--drs", "on"], ["--drs", "on"]),
    ("sluice drs off", LAB, OFF, OFF),
    ("kernel autotuning, lab sysctls", LAB, OFF + ["--send-buffer", "auto"], OFF),
    ("kernel autotuning, Debian defaults", DEBIAN, OFF + ["--send-buffer", "auto"], OFF),
    ("sluice drs on, Debian defaults", DEBIAN, ["--drs", "on"], ["--drs", "on"]),
    ("over-provisioned (sysctls 64 MiB, SO_SNDBUF max)", BIG, OFF + ["--send-buffer", "max"], OFF),
    ("server drs on, client autotuning", LAB, ["--drs", "on"], OFF),
    ("sluice drs on, --send-buffer auto (autotuning floor)", LAB, ["--drs", "on", "--send-buffer", "auto"], ["--drs", "on"]),
    ("sluice, no flags at either end", LAB, [], []),
    # Peers, each with its own server, the lab's sysctls, as a user runs them
    # ("gridftp"/"nginx" as the server args, the client argv built per path).
    ("globus-url-copy -tcp-bs BDP (gridftp server)", LAB, "gridftp", "guc-bs"),
    ("globus-url-copy -p 4 (gridftp server)", LAB, "gridftp", "guc-p4"),
    ("curl (nginx)", LAB, "nginx", "curl"),
    ("aria2c -x 8 (nginx)", LAB, "nginx", "aria2c"),
    # The default client chooses its streams (-p auto); this is one stream.
    ("sluice, client -p 1", LAB, [], ["-p", "1"]),
    # The peers as they come, no flags (the issue's "every peer's default").
    ("globus-url-copy, no flags (gridftp server)", LAB, "gridftp", "guc"),
    ("aria2c, no flags (nginx)", LAB, "nginx", "aria2c-1"),
    ("globus-url-copy -p 8 (gridftp server)", LAB, "gridftp", "guc-p8"),
]

PATHS = {
    "100m50": dict(name="100 Mbit/s, 50 ms", rate="100mbit", delay="25ms", limit="1250000B", bdp=625000),
    "400m100": dict(name="400 Mbit/s, 100 ms", rate="400mbit", delay="50ms", limit="10000000B", bdp=5000000),
    "1g100": dict(name="1 Gbit/s, 100 ms", rate="1gbit", delay="50ms", limit="25000000B", bdp=12500000),
}


def teardown():
    del_pair(SRV, CLI)


def setup(path, sysctls, work, bindir):
    teardown()
    add_pair(SRV, CLI, SA, CA, sysctls)
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
    """ss -tmni in both namespaces every 200 ms. Memory is summed over the
    row's connections in each sample (several streams are one transfer's
    memory), and the peak of those sums kept, with the ss lines of the
    peak sample (what held the memory: cwnd, unacked, notsent, rcv_space)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = False
        self.peak_w = self.peak_r = self.peak_tb = self.peak_rb = 0
        self.at_peak_w = self.at_peak_r = ""
        self.recv = []  # (t, bytes_received)
        self.series = []  # (t, bytes_received, send memory, receive memory): the plots' rate and memory over time
        self.retrans = 0

    def run(self):
        t0 = time.monotonic()
        while not self.stop:
            s = ns(SRV, "ss", "-tmniH", "state", "established", check=False).stdout
            c = ns(CLI, "ss", "-tmniH", "state", "established", check=False).stdout
            now = time.monotonic() - t0
            # ss -i puts each connection's details on its own line after
            # the address line; skmem and the counters are on that one.
            sl = [ln for ln in s.splitlines() if "skmem:" in ln]
            cl = [ln for ln in c.splitlines() if "skmem:" in ln]
            w = sum(skmem(ln, "w") for ln in sl)
            if w > self.peak_w:
                self.peak_w, self.at_peak_w = w, f"t={now:.1f}\n" + s
            self.peak_tb = max(self.peak_tb, sum(skmem(ln, "tb") for ln in sl))
            r = sum(skmem(ln, "r") for ln in cl)
            if r > self.peak_r:
                self.peak_r, self.at_peak_r = r, f"t={now:.1f}\n" + c
            self.peak_rb = max(self.peak_rb, sum(skmem(ln, "rb") for ln in cl))
            got = sum(field(ln, "bytes_received") for ln in cl)
            self.recv.append((now, got))
            self.series.append((round(now, 2), got, w, r))
            time.sleep(0.2)


def nstat_retrans():
    """TcpRetransSegs of the server's namespace (made fresh for each run)."""
    out = ns(SRV, "nstat", "-asz", "TcpRetransSegs", check=False).stdout
    m = re.search(r"TcpRetransSegs\s+(\d+)", out)
    return int(m.group(1)) if m else None


def wait_listening(port, proc, secs=10, log=None):
    for _ in range(int(secs / 0.05)):
        if proc.poll() is not None:
            tail = open(log).read()[-600:] if log else ""
            raise RuntimeError(f"server exited ({proc.returncode}): {tail}")
        out = ns(SRV, "ss", "-ltnH", check=False).stdout
        if f":{port} " in out:
            return
        time.sleep(0.05)
    raise RuntimeError("server did not listen")


def start_peer(kind, work, data):
    """globus-gridftp-server or nginx in the server namespace, as
    crates/lab/src/servers.rs starts them. Returns (process, URL prefix)."""
    log = os.path.join(work, f"server-{kind}.err")
    err = open(log, "w")
    if kind == "gridftp":
        empty = os.path.join(work, "empty.conf")
        open(empty, "w").close()
        argv = ["globus-gridftp-server", "-aa", "-anonymous-user", "ftp", "-rp", data, "-home-dir", data,
                "-c", empty, "-p", str(PORT), "-d", "error", "-control-interface", SA, "-data-interface", SA]
        url = f"ftp://{SA}:{PORT}{data.rstrip('/')}"
    else:
        w = os.path.join(work, "nginx")
        shutil.rmtree(w, ignore_errors=True)
        os.makedirs(w)
        conf = os.path.join(w, "nginx.conf")
        open(conf, "w").write(
            f"daemon off;\nmaster_process on;\nworker_processes auto;\nerror_log {w}/error.log error;\npid {w}/nginx.pid;\n"
            "events { worker_connections 1024; }\n"
            f"http {{\n default_type application/octet-stream;\n sendfile on;\n tcp_nopush on;\n access_log off;\n"
            f" client_body_temp_path {w}/cb; proxy_temp_path {w}/px; fastcgi_temp_path {w}/fc; uwsgi_temp_path {w}/uw;"
            f" scgi_temp_path {w}/sc;\n server {{ listen {SA}:{PORT}; root {data}; location / {{ }} }}\n}}\n")
        argv = ["nginx", "-p", w, "-c", conf, "-e", f"{w}/error.log"]
        url = f"http://{SA}:{PORT}"
    p = subprocess.Popen(["ip", "netns", "exec", SRV] + argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    wait_listening(PORT, p, log=log)
    return p, url


def peer_client(kind, url, path):
    f = url + "/f.bin"
    if kind == "guc-bs":
        # What a grid user is told to do: the TCP buffer set to the path's
        # bandwidth-delay product (the server is asked for it with SBUF).
        return ["globus-url-copy", "-tcp-bs", str(path["bdp"]), f, "file:///dev/null"]
    if kind in ("guc-p4", "guc-p8"):
        return ["globus-url-copy", "-p", kind[-1], f, "file:///dev/null"]
    if kind == "guc":
        return ["globus-url-copy", f, "file:///dev/null"]
    if kind == "curl":
        return ["curl", "-sS", "-o", "/dev/null", f]
    if kind == "aria2c-1":
        return ["aria2c", "-q", "--allow-overwrite=true", "--file-allocation=none",
                "-d", "/dev/shm", "-o", "drs-wan-aria2c.out", f]
    return ["aria2c", "-q", "-x", "8", "-s", "8", "--allow-overwrite=true", "--file-allocation=none",
            "-d", "/dev/shm", "-o", "drs-wan-aria2c.out", f]


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
    """One download; `bindir` holds the row's sluice (and linkem)."""
    name, sysctls, sargs, cargs = row
    peer = isinstance(sargs, str)
    lk, ctl = setup(path, sysctls, work, bindir)
    sb = os.path.join(bindir, "sluice")
    srv = None
    try:
        if peer:
            srv, url = start_peer(sargs, work, data)
            argv = peer_client(cargs, url, path)
        else:
            srv_err = open(os.path.join(work, "server.err"), "w")
            srv = subprocess.Popen(["ip", "netns", "exec", SRV, sb, "serve", data, "--ftp", f"{SA}:{PORT}", "--no-http"]
                                   + sargs, stdout=subprocess.PIPE, stderr=srv_err, text=True)
            srv.stdout.readline()  # "ftp listening on ..."
            argv = [sb, "get", "-q", "--stats=json", *cargs, f"ftp://{SA}:{PORT}/f.bin", "/dev/null"]
        smp = Sampler()
        smp.start()
        timers = []
        for at, delay in events:
            t = threading.Timer(at, lambda d=delay: sh(os.path.join(bindir, "linkem"), "set", "--ctl", ctl,
                                                       "--dir", "both", "--delay", d, check=False))
            t.start()
            timers.append(t)
        t0 = time.monotonic()
        out = ns(CLI, *argv, check=False)
        wall = time.monotonic() - t0
        for t in timers:
            t.cancel()
        time.sleep(0.5)
        smp.stop = True
        smp.join()
        retrans = nstat_retrans()
    finally:
        if srv:
            srv.terminate()
            srv.wait()
        lk.terminate()
        lk.wait()
        teardown()
        if os.path.exists("/dev/shm/drs-wan-aria2c.out"):
            os.remove("/dev/shm/drs-wan-aria2c.out")
    m = re.search(r"received (\d+) bytes in ([\d.]+) s", out.stderr)
    stats = next((json.loads(l) for l in out.stderr.splitlines() if l.startswith("{")), {})
    if out.returncode != 0 or (not peer and not m):
        raise RuntimeError(f"{name}: client failed ({out.returncode}):\n{out.stderr[-800:]}")
    # Sluice reports its own transfer time (from the first data byte);
    # a peer's is the client's wall time, login included (a few round
    # trips: ~0.5 s at 100 ms, said in the README).
    nbytes, secs = (int(m.group(1)), float(m.group(2))) if m else (parse_size(size), wall)
    rate = nbytes / secs
    xfer = "" if peer else open(os.path.join(work, "server.err")).read()
    xl = re.search(r"xferlog: .* (limit=\S+) retrans=(\d+) rtt_ms=([\d.]+)", xfer)
    return dict(row=name, mbps=rate / 1e6, seconds=secs, wall=wall, peak_server_w=smp.peak_w, peak_client_r=smp.peak_r,
                peak_server_tb=smp.peak_tb, peak_client_rb=smp.peak_rb,
                retrans=retrans if retrans is not None else smp.retrans, server_limit=xl.group(1) if xl else None,
                client_limit=stats.get("limit", {}).get("text"), drs_peak_client=stats.get("drs_peak_buffer"),
                drs_peak_window=stats.get("drs_peak_window"),
                # Automatic streams: the count at the end, the most, how often it changed
                # (an FTP change is a restart).
                streams=[stats.get("streams_auto"), stats.get("streams_peak"), stats.get("streams_changes")],
                t90=time_to_90(smp.recv, rate), drs_note=stats.get("drs_note"),
                ss_at_peak_w=smp.at_peak_w, ss_at_peak_r=smp.at_peak_r, series=smp.series)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True,
                    help="DIR with sluice and linkem, or LABEL=DIR,LABEL=DIR: every Sluice row runs with each "
                         "binary (before/after in one run; linkem from the first)")
    ap.add_argument("--path", default="100m50", choices=list(PATHS))
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default="", help="comma-separated row numbers (0-based), default all")
    ap.add_argument("--delay-change", action="store_true",
                    help="RTT 20 ms, then 150 ms, then 50 ms (linkem set) at the --change-at times")
    ap.add_argument("--change-at", default="15,45", help="seconds of the two delay changes")
    ap.add_argument("--append", action="store_true", help="add to the runs already in OUT/PATH.json")
    ap.add_argument("--rep", type=int, default=None,
                    help="repetition number of this invocation's first run (default: after the last in OUT); "
                         "rows run in separate invocations (one lock hold each) share one")
    ap.add_argument("--smoke", action="store_true", help="16 MiB, rows 0 and 1, one run (< 60 s)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.smoke:
        a.size, a.repeat, a.rows, a.path = "16M", 1, "0,1", "100m50"
        a.out = os.path.join(a.out, "smoke")
    bins = [tuple(x.split("=", 1)) if "=" in x else ("", x) for x in a.bin.split(",")]
    path = dict(PATHS[a.path])
    events = []
    if a.delay_change:
        t1, t2 = (float(x) for x in a.change_at.split(","))
        path["delay"] = "10ms"
        path["name"] += f", RTT 20 -> 150 -> 50 ms at {t1:g} s and {t2:g} s"
        events = [(t1, "75ms"), (t2, "25ms")]
    rows = [ROWS[int(i)] for i in a.rows.split(",")] if a.rows else ROWS
    plan = []  # (row name, row, sluice dir)
    for row in rows:
        if isinstance(row[2], str) or len(bins) == 1:
            plan.append((row[0], row, bins[0][1]))
        else:
            plan += [(f"{row[0]} [{lab}]", row, d) for lab, d in bins]
    os.makedirs(a.out, exist_ok=True)
    work = WORK
    # One directory per size: alternating paths (and sizes) in one slot
    # must not rewrite the file each time.
    data = os.path.join(work, f"data-{a.size}")
    os.makedirs(data, exist_ok=True)
    f = os.path.join(data, "f.bin")
    if not os.path.exists(f) or os.path.getsize(f) != parse_size(a.size):
        subprocess.run(f"head -c {parse_size(a.size)} /dev/urandom > {f}", shell=True, check=True)
    os.chmod(f, 0o644)
    tag = a.path + ("-delay-change" if a.delay_change else "")
    jpath = os.path.join(a.out, f"{tag}.json")
    runs, commands = [], []
    if a.append and os.path.exists(jpath):
        old = json.load(open(jpath))
        runs, commands = old["runs"], old.get("commands", [old.get("command")])
    commands.append(f"{' '.join(sys.argv)}  ({time.strftime('%H:%M', time.gmtime())} UTC, load "
                    f"{' '.join(open('/proc/loadavg').read().split()[:3])})")
    failed = 0
    first_rep = a.rep if a.rep is not None else 1 + max((r["rep"] for r in runs), default=-1)
    for rep in range(first_rep, first_rep + a.repeat):
        for label, row, d in plan:
            subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)  # warm cache
            try:
                r = one(row, path, a.size, d, work, data, events)
            except RuntimeError as e:
                print(f"{label}: {e}", file=sys.stderr, flush=True)
                r = dict(row=label, failed=str(e)[:400])
                failed += 1
            r["row"], r["rep"] = label, rep
            r["load"] = open("/proc/loadavg").read().split()[0]
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("ss_") and k != "series"}), flush=True)
            runs.append(r)
    json.dump(dict(path=path, size=a.size, commands=commands, runs=runs,
                   when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), open(jpath, "w"), indent=1)
    mib = 1 << 20
    lines = [f"### {path['name']}: 1 x {a.size}", "", "Commands (each with the load average when it started):", ""]
    lines += [f"- `{c}`" for c in commands]
    lines += ["", "Cells are median (min–max, n=runs); load average (1 min) at the end of each run: "
              + fmt([float(r["load"]) for r in runs if "load" in r]) + ".", "",
              "| row | MB/s | server peak send mem MiB | client peak recv mem MiB | server peak sndbuf MiB | "
              "client peak rcvbuf MiB | MB/s per MiB of memory (both sides) | retrans | time to 90 % of rate s | "
              "client's verdict (last run) | server's verdict (last run) | streams: end/most/changes (each run) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in dict.fromkeys(r["row"] for r in runs):
        rs = [r for r in runs if r["row"] == label and "failed" not in r]
        bad = [r for r in runs if r["row"] == label and "failed" in r]
        if not rs:
            lines.append(f"| {label} | failed: {bad[-1]['failed'][:120]!r} |" + " |" * 10)
            continue
        lines.append("| " + " | ".join([
            label + (f" ({len(bad)} failed)" if bad else ""), fmt([r["mbps"] for r in rs]),
            fmt([r["peak_server_w"] / mib for r in rs], "{:.2f}"),
            fmt([r["peak_client_r"] / mib for r in rs], "{:.2f}"),
            fmt([r["peak_server_tb"] / mib for r in rs], "{:.2f}"),
            fmt([r["peak_client_rb"] / mib for r in rs], "{:.2f}"),
            fmt([r["mbps"] / max((r["peak_server_w"] + r["peak_client_r"]) / mib, 0.01) for r in rs], "{:.2f}"),
            fmt([r["retrans"] for r in rs], "{:.0f}"),
            fmt([r["t90"] for r in rs], "{:.1f}"),
            str(rs[-1]["client_limit"]), str(rs[-1]["server_limit"]),
            " ".join("/".join(str(x) for x in r["streams"]) for r in rs if r.get("streams") and r["streams"][0] is not None)])
            + " |")
    open(os.path.join(a.out, f"{tag}.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    from drs_wan_plots import plot
    plot(jpath)  # TAG-summary.svg, and TAG-rate.svg / TAG-memory.svg from the runs' samples
    if failed:
        sys.exit(1)


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
