#!/usr/bin/env python3
"""Pools repetitions run into separate result directories (one `sluice-lab run
... --repeat 1 --out DIR` per lock slot) into one markdown table per workload:
median (min-max, n; with n=2 the upper value, as the lab's tables) of the columns that issue 12's targets read, and the
median ratios against the baseline server (nginx).

Usage: python3 summarize.py [--baseline nginx] DIR [DIR...]  (markdown on stdout)
"""
import json
import statistics
import sys

COLS = [
    ("% of offered (steady)", "% of offered", "{:.1f}"),
    ("disk MB read", "disk MB read", "{:.0f}"),
    ("disk read / sent", "disk read / sent", "{:.3f}"),
    ("server CPU s/GiB (steady)", "CPU s/GiB", "{:.3f}"),
    ("server ctx switches/GiB (steady)", "ctx/GiB", "{:.0f}"),
    ("server mem max MiB", "mem MiB", "{:.0f}"),
]
RATIOS = [("disk MB read", "disk"), ("server CPU s/GiB (steady)", "CPU"),
          ("server ctx switches/GiB (steady)", "ctx")]


def main(argv):
    base = "nginx"
    if argv[:1] == ["--baseline"]:
        base, argv = argv[1], argv[2:]
    cells = {}  # group -> server -> col -> [values]
    order = {}
    for d in argv:
        s = json.load(open(f"{d}/results.json"))
        for t in s["tables"]:
            for r in t["rows"]:
                g = order.setdefault(r["group"], [])
                if r["config"] not in g:
                    g.append(r["config"])
                c = cells.setdefault(r["group"], {}).setdefault(r["config"], {})
                for k, v in r["values"].items():
                    c.setdefault(k, []).extend(x for x in v if x is not None)
                if r.get("note"):
                    c.setdefault("_notes", []).append(r["note"])
    for g, servers in order.items():
        print(f"#### {g}\n")
        head = ["server", "n"] + [h for _, h, _ in COLS] + [f"{h} vs {base}" for _, h in RATIOS]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        bvals = cells[g].get(base, {})
        for sv in servers:
            c = cells[g][sv]
            n = max((len(v) for k, v in c.items() if k != "_notes"), default=0)
            row = [sv, str(n)]
            for k, _, f in COLS:
                v = c.get(k, [])
                if not v:
                    row.append("")
                elif len(v) == 1:
                    row.append(f.format(v[0]))
                else:
                    row.append(f"{f.format(statistics.median_high(v))} ({f.format(min(v))}-{f.format(max(v))})")
            for k, _ in RATIOS:
                v, b = c.get(k, []), bvals.get(k, [])
                row.append(f"{statistics.median_high(v) / statistics.median_high(b):.2f}" if v and b and statistics.median_high(b) else "")
            print("| " + " | ".join(row) + " |")
            for note in sorted(set(c.get("_notes", []))):
                print(f"|   note: {note} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
