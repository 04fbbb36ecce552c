#!/usr/bin/env python3
"""Download cost of `sluice serve` next to nginx and vsftpd, by hand (root).

    bench/dlcost.py [--runs 3] [--cases 1s,4s,16c] [--small] CONFIG...

A CONFIG is `nginx`, `vsftpd`, `gridftp` (globus-gridftp-server, anonymous),
`iperf3` (memory to memory, `-R` so the server sends: the physical limit of
loopback), or `LABEL=BIN[,VAR=VALUE...][,--flag[=value]...]` for a sluice
binary, e.g.

    before=/work/targets/perf/sluice-before,--data-path=copy
    cur=target/release/sluice,--workers=1,--notsent-lowat=off

Cases (warm page cache, loopback, clients write to /dev/null):
  1s   one 2 GiB file, one stream (curl; HTTP for nginx, FTP otherwise)
  4s   one 2 GiB file, 4 streams (`sluice get -p 4`: MODE E from sluice and
       gridftp, range requests from nginx; vsftpd has no MODE E: 1 stream)
  16c  16 concurrent 256 MiB downloads (16 curl processes)
iperf3 moves the same byte counts with one client process (`-P 1/4/16`).
Per run the server is started fresh in a cpuacct cgroup (entered before
exec, so forked session processes count) under `perf stat -e
context-switches` (every thread and child). CPU is the cgroup's usage
during the download only; context switches are perf's total minus the
median of an idle start/stop of the same server (start-up and shut-down).
Machine CPU is every core's busy time (/proc/stat: user, system, irq,
softirq) during the download, clients included: on loopback the kernel
charges TCP work to whichever process runs when a packet is processed (a
server blocked in sendfile leaves its transmit work to the client's ACK
processing), so the server column alone can flatter one design.
Runs interleave the configurations (run 1 of every config, then run 2, ...)
so machine noise spreads over all of them. Output: a markdown table of
min / median / max per config and case.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CG = "/sys/fs/cgroup/cpuacct/sluice-dlcost"
GIB = 1 << 30


def make_data(d, small):
    os.makedirs(d, exist_ok=True)
    sizes = {"big": (256 if small else 2048) << 20, "mid": (32 if small else 256) << 20}
    for name, size in sizes.items():
        p = os.path.join(d, name)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            with open("/dev/urandom", "rb") as src, open(p, "wb") as dst:
                left = size
                while left:
                    b = src.read(min(left, 8 << 20))
                    dst.write(b)
                    left -= len(b)
    warm(d, sizes)
    return sizes


def warm(d, sizes):
    """Reads the files through the page cache. Done before every download:
    between runs this VM's memory reclaim (DAMON) evicts parts of files
    left idle, which then cost disk reads (and context switches) to
    whichever server comes next."""
    for name in sizes:
        with open(os.path.join(d, name), "rb") as f:
            while f.read(16 << 20):
                pass


def wait_port(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Server:
    def __init__(self, spec, data, work, port):
        self.spec, self.data, self.work, self.port = spec, data, work, port
        self.env = dict(os.environ)
        for k in [k for k in self.env if k.startswith("SLUICE_")]:
            del self.env[k]
        if spec == "iperf3":
            self.label, self.scheme = "iperf3", "iperf"
            self.cmd = ["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"]
            self.stop_sig = signal.SIGTERM
        elif spec == "gridftp":
            self.label, self.scheme = "gridftp", "ftp"
            conf = os.path.join(work, "empty.conf")
            open(conf, "w").close()
            self.cmd = ["globus-gridftp-server", "-aa", "-anonymous-user", "ftp", "-rp", data,
                        "-home-dir", "/", "-c", conf, "-control-interface", "127.0.0.1",
                        "-p", str(port), "-d", "error"]
            self.stop_sig = signal.SIGTERM
        elif spec == "nginx":
            self.label, self.scheme = "nginx", "http"
            conf = os.path.join(work, "nginx.conf")
            with open(conf, "w") as f:
                f.write(
                    f"daemon off;\nmaster_process on;\nworker_processes auto;\n"
                    f"error_log {work}/error.log error;\npid {work}/nginx.pid;\n"
                    "events { worker_connections 4096; }\n"
                    "http { default_type application/octet-stream; sendfile on; tcp_nopush on; access_log off;\n"
                    f" client_body_temp_path {work}/cb; proxy_temp_path {work}/px; fastcgi_temp_path {work}/fc;"
                    f" uwsgi_temp_path {work}/uw; scgi_temp_path {work}/sc;\n"
                    f" server {{ listen 127.0.0.1:{port}; root {data}; location / {{ }} }}\n}}\n"
                )
            self.cmd = ["nginx", "-p", work, "-c", conf, "-e", f"{work}/error.log"]
            self.stop_sig = signal.SIGQUIT
        elif spec == "vsftpd":
            self.label, self.scheme = "vsftpd", "ftp"
            conf = os.path.join(work, "vsftpd.conf")
            os.makedirs("/var/run/vsftpd/empty", exist_ok=True)
            with open(conf, "w") as f:
                f.write(
                    f"listen=YES\nlisten_ipv6=NO\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n"
                    f"anonymous_enable=YES\nno_anon_password=YES\nanon_root={data}\nlocal_enable=NO\nwrite_enable=NO\n"
                    "seccomp_sandbox=NO\npasv_enable=YES\nuse_sendfile=YES\nxferlog_enable=NO\nmax_clients=0\n"
                    "max_per_ip=0\nsecure_chroot_dir=/var/run/vsftpd/empty\nftp_username=ftp\nconnect_from_port_20=NO\n"
                )
            self.cmd = ["vsftpd", conf]
            self.stop_sig = signal.SIGTERM
        else:
            self.label, rest = spec.split("=", 1)
            parts = rest.split(",")
            self.bin = parts[0]
            flags = []
            for p in parts[1:]:
                if p.startswith("--"):
                    flags += p.split("=", 1)
                else:
                    k, v = p.split("=", 1)
                    self.env[k] = v
            self.scheme = "ftp"
            self.cmd = [self.bin, "serve", data, "--ftp", f"127.0.0.1:{port}"] + flags
            self.stop_sig = signal.SIGINT

    def url(self, name):
        # gridftp's paths are real paths (-rp only restricts them)
        prefix = self.data if self.label == "gridftp" else ""
        return f"{self.scheme}://127.0.0.1:{self.port}{prefix}/{name}"

    def start(self):
        os.makedirs(CG, exist_ok=True)
        self.perf_out = os.path.join(self.work, "perf.txt")
        sh = f'echo $$ > {CG}/tasks; exec perf stat -x, -e context-switches -o {self.perf_out} -- "$@"'
        self.proc = subprocess.Popen(
            ["sh", "-c", sh, "sh"] + self.cmd, env=self.env,
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "stderr"), "ab"),
        )
        wait_port(self.port)

    def cpu_ns(self):
        with open(f"{CG}/cpuacct.usage") as f:
            return int(f.read())

    def stop(self):
        kids = []
        for t in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
        for k in kids:
            try:
                os.kill(k, self.stop_sig)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=20)
        with open(self.perf_out) as f:
            for line in f:
                if "context-switches" in line:
                    return int(line.split(",")[0])
        raise RuntimeError(f"no perf count for {self.label}")


def run_clients(srv, case, sizes, sluice_client):
    if srv.scheme == "iperf":
        streams = {"1s": 1, "4s": 4, "16c": 16}[case]
        total = sizes["big"] if case != "16c" else 16 * sizes["mid"]
        cmds = [["iperf3", "-c", "127.0.0.1", "-p", str(srv.port), "-R", "-P", str(streams),
                 "-l", "128K", "-n", str(total)]]
    elif case == "1s":
        cmds = [curl(srv.url("big"))]
        total = sizes["big"]
    elif case == "4s":
        cmds = [[sluice_client, "get", "-q", "-p", "4", srv.url("big"), "/dev/null"]]
        total = sizes["big"]
    else:
        cmds = [curl(srv.url("mid")) for _ in range(16)]
        total = 16 * sizes["mid"]
    t0 = time.monotonic()
    ps = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    outs = [(p.communicate()[0], p.returncode) for p in ps]
    dt = time.monotonic() - t0
    got = sum(int(o) if c[0] == "curl" else total // len(cmds) for (o, _), c in zip(outs, cmds))
    # curl reports 18 (partial) when globus-gridftp-server answers a
    # complete MODE S download with 500 "reset by peer": the byte count decides.
    bad = [rc for (_, rc), c in zip(outs, cmds) if rc and not (rc == 18 and c[0] == "curl")]
    if bad or got != total:
        raise RuntimeError(f"{srv.label} {case}: client failed {bad}, {got} of {total} bytes")
    return total, dt


def machine_busy():
    """Busy seconds of all cores so far (/proc/stat, USER_HZ ticks)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def curl(url):
    return ["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}", url]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default="1s,4s,16c")
    ap.add_argument("--small", action="store_true", help="256 MiB and 32 MiB files")
    ap.add_argument("--data", default="/tmp/sluice-dlcost-data")
    ap.add_argument("--client", default=None, help="sluice binary for `get -p 4`")
    ap.add_argument("configs", nargs="+")
    a = ap.parse_args()
    sizes = make_data(a.data, a.small)
    cases = a.cases.split(",")
    work = tempfile.mkdtemp(prefix="sluice-dlcost.")
    client = a.client
    results = {}  # (label, case) -> list of (MB/s, cpu s/GiB, cs/GiB)
    idle = {}
    try:
        servers = [Server(s, a.data, os.path.join(work, str(i)), 24100 + i) for i, s in enumerate(a.configs)
                   if not os.makedirs(os.path.join(work, str(i)), exist_ok=True)]
        if client is None:
            client = next((s.bin for s in servers if hasattr(s, "bin")), None)
        for s in servers:  # idle start/stop: context switches not due to a download
            counts = []
            for _ in range(3):
                s.start()
                time.sleep(0.2)
                counts.append(s.stop())
            idle[s.label] = statistics.median(counts)
        for r in range(a.runs):
            for case in cases:
                for s in servers:
                    warm(a.data, sizes)
                    s.start()
                    time.sleep(0.2)
                    c0, m0 = s.cpu_ns(), machine_busy()
                    total, dt = run_clients(s, case, sizes, client)
                    c1, m1 = s.cpu_ns(), machine_busy()
                    cs = s.stop() - idle[s.label]
                    gib = total / GIB
                    row = (total / dt / 1e6, (c1 - c0) / 1e9 / gib, cs / gib, (m1 - m0) / gib)
                    results.setdefault((s.label, case), []).append(row)
                    print(f"run {r + 1} {case} {s.label}: {row[0]:.0f} MB/s {row[1]:.3f} CPU s/GiB "
                          f"{row[2]:.0f} cs/GiB {row[3]:.3f} machine CPU s/GiB", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nidle start/stop context switches (subtracted): {idle}\n")
    print("| case | server | MB/s | server CPU s/GiB | server cs/GiB | machine CPU s/GiB |")
    print("|---|---|---|---|---|---|")

    def cell(vals, fmt):
        v = sorted(vals)
        return f"{fmt.format(statistics.median(v))} ({fmt.format(v[0])}–{fmt.format(v[-1])})"

    for case in cases:
        for s in a.configs:
            label = s.split("=", 1)[0]
            rows = results.get((label, case))
            if not rows:
                continue
            print(f"| {case} | {label} | {cell([x[0] for x in rows], '{:.0f}')} | "
                  f"{cell([x[1] for x in rows], '{:.3f}')} | {cell([x[2] for x in rows], '{:.0f}')} | "
                  f"{cell([x[3] for x in rows], '{:.3f}')} |")


if __name__ == "__main__":
    main()
