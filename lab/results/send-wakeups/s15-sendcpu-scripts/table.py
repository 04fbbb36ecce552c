#!/usr/bin/env python3
"""Per-GiB syscall/switch table from prof.sh outputs: table.py LABEL=DIR ..."""
import re, sys
GIB = 1 << 30
rows = {}
order = []
for arg in sys.argv[1:]:
    label, d = arg.split("=", 1)
    w = open(f"{d}/window.txt").read().split()
    kv = dict(zip(w[::1], w[1::1]))
    tx = int(w[w.index("tx_bytes") + 1]); pk = int(w[w.index("tx_packets") + 1])
    ticks = int(w[w.index("cpu_ticks") + 1])
    gib = tx / GIB
    vals = {"GiB sent in window": gib, "bytes/packet": tx / max(pk, 1), "CPU s/GiB (ticks)": ticks / 100 / gib}
    for line in open(f"{d}/syscalls.txt"):
        m = re.match(r"\s*([\d,.]+)\s+(msec\s+)?(\S+)", line)
        if not m or m.group(1).startswith("#"):
            continue
        try:
            v = float(m.group(1).replace(",", ""))
        except ValueError:
            continue
        name = m.group(3).replace("syscalls:sys_enter_", "")
        if name == "task-clock":
            vals["task-clock s/GiB"] = v / 1000 / gib
        else:
            vals[name + "/GiB"] = v / gib
    rows[label] = vals
    for k in vals:
        if k not in order:
            order.append(k)
labels = list(rows)
print("| per GiB | " + " | ".join(labels) + " |")
print("|---|" + "---|" * len(labels))
for k in order:
    cells = []
    for l in labels:
        v = rows[l].get(k)
        cells.append("" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.0f}"))
    if all(c in ("", "0") for c in cells):
        continue
    print(f"| {k} | " + " | ".join(cells) + " |")
