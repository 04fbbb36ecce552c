#!/usr/bin/env python3
"""Per-thread context switches and CPU of a running `sluice` server, per GiB
it sent (issue 12's cost target: which thread switches how often, and why).

Run it beside a lab run, inside the same lock and SCHED_RR hold:

  flock /work/lab.lock chrt -r 50 sh -c '
    python3 bench/thread_cost.py sample --exe BIN_DIR/sluice --out OUT.jsonl &
    BIN_DIR/sluice-lab run tpf-abort --repeat 1 --servers sluice-default --out ...
    wait'
  python3 bench/thread_cost.py report OUT.jsonl > OUT.md

`sample` waits for the first process whose executable is `--exe` (other
worktrees' tests may run a `sluice` too), then every `--every` seconds
records, per thread, /proc/PID/task/TID/status's voluntary and
nonvoluntary_ctxt_switches and stat's utime+stime, the whole process's
utime+stime (threads that ended included) and the bytes its network
namespace sent (/proc/PID/net/dev, every interface but lo: the lab's server
namespace holds only the server), until the process ends.

`report` takes the steady window (from `--skip` seconds after the first
second that sent over 1 MB, to the last second that did), and prints per
thread group (the loop `sluice`, the disk threads, others) the switches
(voluntary, involuntary) and CPU seconds per GiB sent.
"""
import argparse
import json
import os
import sys
import time


def find(exe, wait):
    end = time.time() + wait
    while time.time() < end:
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{p}/exe") == exe:
                    return int(p)
            except OSError:
                pass
        time.sleep(0.05)
    return None


def task_sample(pid, tid):
    st = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Name", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                st[k] = v.strip()
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 (utime, stime); `rest` starts at field 3.
    ticks = int(rest[11]) + int(rest[12])
    return {
        "name": st.get("Name", "?"),
        "vol": int(st.get("voluntary_ctxt_switches", 0)),
        "nonvol": int(st.get("nonvoluntary_ctxt_switches", 0)),
        "ticks": ticks,
    }


def tx_bytes(pid):
    n = 0
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                continue
            n += int(rest.split()[8])
    return n


def sample(args):
    pid = find(args.exe, args.wait)
    if pid is None:
        sys.exit(f"thread_cost: no process runs {args.exe}")
    t0 = time.time()
    with open(args.out, "w") as out:
        while True:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                proc_ticks = int(rest[11]) + int(rest[12])
                tasks = {}
                for tid in os.listdir(f"/proc/{pid}/task"):
                    try:
                        tasks[tid] = task_sample(pid, tid)
                    except OSError:
                        pass
                rec = {
                    "t": round(time.time() - t0, 3),
                    "tx": tx_bytes(pid),
                    "proc_ticks": proc_ticks,
                    "tasks": tasks,
                }
            except OSError:
                break
            out.write(json.dumps(rec) + "\n")
            out.flush()
            time.sleep(args.every)
    print(f"thread_cost: pid {pid} sampled into {args.out}", file=sys.stderr)


def group(name):
    if name.startswith("sluice-disk"):
        return "disk threads"
    if name == "sluice":
        return "loop (sluice)"
    return name


def report(args):
    recs = [json.loads(l) for l in open(args.file)]
    hz = os.sysconf("SC_CLK_TCK")
    start = None
    last = None
    for a, b in zip(recs, recs[1:]):
        if b["tx"] - a["tx"] > 1e6 * (b["t"] - a["t"]):
            if start is None:
                start = a["t"] + args.skip
            last = b["t"]
    if start is None:
        sys.exit("thread_cost: the server sent nothing")
    a = next(r for r in recs if r["t"] >= start)
    b = [r for r in recs if r["t"] <= last][-1]
    gib = (b["tx"] - a["tx"]) / 2**30
    secs = b["t"] - a["t"]
    rows = {}
    for tid, tb in b["tasks"].items():
        ta = a["tasks"].get(tid, {"vol": 0, "nonvol": 0, "ticks": 0})
        g = rows.setdefault(group(tb["name"]), {"n": 0, "vol": 0, "nonvol": 0, "ticks": 0})
        g["n"] += 1
        for k in ("vol", "nonvol", "ticks"):
            g[k] += tb[k] - ta[k]
    proc_cpu = (b["proc_ticks"] - a["proc_ticks"]) / hz
    print(f"window {a['t']:.1f}-{b['t']:.1f} s after the server appeared ({secs:.1f} s), "
          f"{gib:.3f} GiB sent ({gib * 2**30 / 1e6 / secs:.1f} MB/s, the server netns' interfaces)\n")
    print("| threads | count | voluntary switches/GiB | involuntary/GiB | switches/s | CPU s/GiB |")
    print("|---|---|---|---|---|---|")
    tot = {"vol": 0, "nonvol": 0, "ticks": 0}
    for name, g in sorted(rows.items(), key=lambda x: -(x[1]["vol"] + x[1]["nonvol"])):
        for k in tot:
            tot[k] += g[k]
        print(f"| {name} | {g['n']} | {g['vol'] / gib:.0f} | {g['nonvol'] / gib:.0f} | "
              f"{(g['vol'] + g['nonvol']) / secs:.1f} | {g['ticks'] / hz / gib:.3f} |")
    print(f"| all live threads | | {tot['vol'] / gib:.0f} | {tot['nonvol'] / gib:.0f} | "
          f"{(tot['vol'] + tot['nonvol']) / secs:.1f} | {tot['ticks'] / hz / gib:.3f} |")
    print(f"\nprocess CPU (threads that ended included): {proc_cpu / gib:.3f} s/GiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--exe", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--every", type=float, default=1.0)
    s.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the server")
    r = sub.add_parser("report")
    r.add_argument("file")
    r.add_argument("--skip", type=float, default=10.0,
                   help="seconds after the first busy second before the window starts")
    args = ap.parse_args()
    (sample if args.cmd == "sample" else report)(args)


if __name__ == "__main__":
    main()
