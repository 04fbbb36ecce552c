#!/usr/bin/env python3
"""Disk bytes read per byte sent with N MODE E readers of one file (root).

    bench/circus.py [--size-mib 512] [--readers 8] [--stagger 4] [--pacing 4M]
                    [--mem 256M] [--disk] [--runs 1] CONFIG...

A CONFIG is `LABEL=BIN[,--flag[=value]...]` for a sluice binary, e.g.

    circus=target/release/sluice,--sharing=circus
    off=target/release/sluice,--sharing=off

Per run the server is started fresh in a memory cgroup (`--mem`, page
cache included; cgroup v1) with the file's pages dropped from the cache
(POSIX_FADV_DONTNEED through GNU dd), each data socket paced at
`--pacing` bytes/s (SO_MAX_PACING_RATE, `--max-pacing-rate`), and
`--readers` clients `sluice get -p 4 URL /dev/null` started `--stagger`
seconds apart, so their positions in the file spread further than the
memory holds (the Circus case: readers far apart, memory small). `--disk`
also throttles the server's reads to 40 MB/s and 150 IOPS (blkio).
Reported per run: bytes the server read from the device (/proc/PID/io
read_bytes), bytes the engine read from files (`bytes_read_disk`, page
cache hits included), bytes sent, both reads per byte sent, server CPU
s/GiB sent (utime+stime) and context switches/GiB (every thread), wall time.
Runs interleave the configurations (run 1 of each, then run 2, ...).
"""

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request

MEM_CG = "/sys/fs/cgroup/memory/sluice-circus"
BLK_CG = "/sys/fs/cgroup/blkio/sluice-circus"
GIB = 1 << 30


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    with open("/dev/urandom", "rb") as src, open(path, "wb") as dst:
        left = size
        while left:
            b = src.read(min(left, 8 << 20))
            dst.write(b)
            left -= len(b)


def cgroups(mem, disk):
    os.makedirs(MEM_CG, exist_ok=True)
    with open(f"{MEM_CG}/memory.limit_in_bytes", "w") as f:
        f.write(mem)
    os.makedirs(BLK_CG, exist_ok=True)
    dev = os.stat("/").st_dev
    major, minor = os.major(dev), os.minor(dev)
    bps, iops = ("40000000", "150") if disk else ("0", "0")
    for knob, v in (("read_bps_device", bps), ("read_iops_device", iops)):
        try:
            with open(f"{BLK_CG}/blkio.throttle.{knob}", "w") as f:
                f.write(f"{major}:{minor} {v}")
        except OSError:
            pass  # 0 on a device without a rule: nothing to remove


def metrics(addr):
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"sluice_engine_(\w+)_total (\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def proc_stats(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    read = 0
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                read = int(line.split()[1])
    cs = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if "ctxt_switches" in line:
                        cs += int(line.split()[1])
        except OSError:
            pass
    return cpu, read, cs


def one_run(label, binary, flags, args, path, client):
    subprocess.run(["dd", f"if={path}", "iflag=nocache", "count=0", "status=none"], check=False)
    cmd = [
        "sh", "-c",
        f'echo $$ > {MEM_CG}/cgroup.procs; echo $$ > {BLK_CG}/cgroup.procs; exec "$@"', "sh",
        binary, "serve", os.path.dirname(path), "--ftp", "127.0.0.1:0", "--no-http",
        "--metrics", "127.0.0.1:0", "--max-pacing-rate", args.pacing, *flags,
    ]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ftp = met = None
    while ftp is None or met is None:
        line = srv.stdout.readline()
        if not line:
            sys.exit(f"{label}: server ended before listening")
        if "ftp listening on" in line:
            ftp = line.split("ftp listening on ")[1].split()[0]
        if "metrics listening on" in line:
            met = line.split("metrics listening on ")[1].split()[0]
    url = f"ftp://{ftp}/{os.path.basename(path)}"
    m0 = metrics(met)
    cpu0, rd0, cs0 = proc_stats(srv.pid)
    t0 = time.monotonic()
    clients = []
    for i in range(args.readers):
        if i:
            time.sleep(args.stagger)
        clients.append(subprocess.Popen([client, "get", "-q", "-p", "4", url, "/dev/null"],
                                       stdout=subprocess.DEVNULL))
    failed = sum(1 for c in clients if c.wait() != 0)
    wall = time.monotonic() - t0
    cpu1, rd1, cs1 = proc_stats(srv.pid)
    m1 = metrics(met)
    srv.terminate()
    srv.wait()
    sent = m1["bytes_sent"] - m0["bytes_sent"]
    gib = max(sent, 1) / GIB
    return {
        "label": label,
        "failed": failed,
        "device_read": rd1 - rd0,
        "engine_read": m1["bytes_read_disk"] - m0["bytes_read_disk"],
        "shared_read": m1.get("shared_bytes_read", 0) - m0.get("shared_bytes_read", 0),
        "sent": sent,
        "cpu_per_gib": (cpu1 - cpu0) / gib,
        "cs_per_gib": (cs1 - cs0) / gib,
        "wall": wall,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--stagger", type=float, default=4.0)
    ap.add_argument("--pacing", default="4M")
    ap.add_argument("--mem", default="256M")
    ap.add_argument("--disk", action="store_true")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--data", default="/tmp/sluice-circus-data")
    ap.add_argument("--client", default=None, help="sluice binary for `get -p 4`")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.data, exist_ok=True)
    path = os.path.join(args.data, "popular")
    make_file(path, args.size_mib << 20)
    cgroups(args.mem, args.disk)
    configs = []
    for c in args.configs:
        label, rest = c.split("=", 1)
        binary, *flags = rest.split(",")
        configs.append((label, binary, [x for f in flags for x in f.split("=", 1)]))
    client = args.client or configs[0][1]
    print(f"# {args.readers} readers x 4 streams, {args.size_mib} MiB, {args.stagger} s apart, "
          f"{args.pacing}B/s per stream, memory {args.mem}{', disk 40 MB/s 150 IOPS' if args.disk else ''}")
    print("| config | run | failed | device read / sent | engine read / sent | shared read MiB "
          "| sent MiB | CPU s/GiB | ctx sw/GiB | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        for label, binary, flags in configs:
            r = one_run(label, binary, flags, args, path, client)
            s = max(r["sent"], 1)
            print(f"| {label} | {run} | {r['failed']} | {r['device_read'] / s:.3f} | "
                  f"{r['engine_read'] / s:.3f} | {r['shared_read'] >> 20} | {r['sent'] >> 20} | "
                  f"{r['cpu_per_gib']:.2f} | {r['cs_per_gib']:.0f} | {r['wall']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
