#!/usr/bin/env python3
"""Plots of lab/drs_wan.py's results (SVG, no dependencies: CI has no
matplotlib), written next to each PATH.json:

- PATH-summary.svg: per row, throughput (median, whisker min-max), peak
  socket memory (server send + client receive, medians, the sum's peak per
  run) and throughput per MiB of that memory;
- PATH-rate.svg and PATH-memory.svg: rate over time (bytes received per
  second over the last 1 s) and the server's send memory over time, the last
  run of each row, for runs that kept their 200 ms samples (`series`, since
  session 15; older JSON has only the peaks, so only the summary).

drs_wan.py calls `plot(json_path)` after each invocation; to re-render
committed results: `python3 lab/drs_wan_plots.py lab/results/drs-wan` (every
PATH.json under the directory).
"""
import json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svgplot  # noqa: E402
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf", "#000000", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]
MIB = 1 << 20


def svg_open(w, h, title):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
            f'<rect width="{w}" height="{h}" fill="white"/>', f'<text x="10" y="18" font-size="13">{escape(title)}</text>']


def rows_of(runs):
    """Row names in first-appearance order with their successful runs."""
    out = {}
    for r in runs:
        out.setdefault(r["row"], [])
        if "failed" not in r:
            out[r["row"]].append(r)
    return [(k, v) for k, v in out.items() if v]


def summary(path, title, runs):
    """Three panels of horizontal bars sharing the row labels."""
    rows = rows_of(runs)
    if not rows:
        return
    label_w, panel_w, gap, bar_h, top = 330, 210, 20, 16, 48
    w = label_w + 3 * (panel_w + gap) + 10
    h = top + bar_h * 1.5 * len(rows) + 30
    o = svg_open(w, h, title)
    mem = lambda r: (r["peak_server_w"] + r["peak_client_r"]) / MIB
    panels = [
        ("MB/s (median, min-max)", lambda r: r["mbps"], "#1f77b4"),
        ("peak memory MiB: send + receive", mem, "#ff7f0e"),
        ("MB/s per MiB of memory", lambda r: r["mbps"] / max(mem(r), 0.01), "#2ca02c"),
    ]
    for i, (name, _) in enumerate(rows):
        y = top + bar_h * 1.5 * i
        o.append(f'<text x="{label_w - 6}" y="{y + bar_h * 0.75:.1f}" text-anchor="end">{escape(name[:60])}</text>')
    for pi, (pname, f, color) in enumerate(panels):
        x0 = label_w + pi * (panel_w + gap)
        vals = [[f(r) for r in rs] for _, rs in rows]
        top_v = max(max(v) for v in vals) * 1.4 or 1  # room for the value labels
        sx = lambda v: x0 + panel_w * v / top_v
        o.append(f'<text x="{x0}" y="{top - 10}">{escape(pname)}</text>')
        o.append(f'<line x1="{x0}" x2="{x0}" y1="{top - 4}" y2="{h - 26}" stroke="#888"/>')
        for t in range(5):
            v = top_v * t / 4
            o.append(f'<text x="{sx(v):.1f}" y="{h - 12}" text-anchor="middle" fill="#555">{v:.3g}</text>')
        for i, ((_, rs), vs) in enumerate(zip(rows, vals)):
            y = top + bar_h * 1.5 * i
            med = statistics.median(vs)
            if pi == 1:  # stacked: the server's send memory, then the client's receive memory
                s = statistics.median(r["peak_server_w"] / MIB for r in rs)
                c = statistics.median(r["peak_client_r"] / MIB for r in rs)
                o.append(f'<rect x="{x0}" y="{y:.1f}" width="{sx(s) - x0:.1f}" height="{bar_h}" fill="{color}"/>')
                o.append(f'<rect x="{sx(s):.1f}" y="{y:.1f}" width="{sx(s + c) - sx(s):.1f}" height="{bar_h}" fill="#ffd8a8"/>')
                o.append(f'<text x="{sx(s + c) + 3:.1f}" y="{y + bar_h * 0.75:.1f}">{s:.1f}+{c:.1f}</text>')
                continue
            o.append(f'<rect x="{x0}" y="{y:.1f}" width="{sx(med) - x0:.1f}" height="{bar_h}" fill="{color}"/>')
            if len(vs) > 1:
                ym = y + bar_h / 2
                o.append(f'<line x1="{sx(min(vs)):.1f}" x2="{sx(max(vs)):.1f}" y1="{ym:.1f}" y2="{ym:.1f}" stroke="black"/>')
            o.append(f'<text x="{sx(max(vs)) + 3:.1f}" y="{y + bar_h * 0.75:.1f}">{med:.3g}'
                     f'{" n=" + str(len(vs)) if pi == 0 else ""}</text>')
    o.append(f'<text x="10" y="{h - 12}" fill="#555">memory: dark = server send, light = client receive</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")


def lines(path, title, series, ylabel):
    """series: [(label, [(t, y)])] on linear axes from 0 (svgplot's line chart)."""
    series = [(l[:52], ps, False) for l, ps in series if ps]
    if series:
        svgplot.line_chart(path, title, series, "seconds since the client started", ylabel, width=980, height=380, legend_w=330)


def rate_series(s):
    """MB/s over the last second at each 200 ms sample. The samples sum
    bytes_received over the client's open connections, so when connections
    close and new ones open (an FTP restart of `-p auto`, aria2c's
    connections) the sum falls: a fall is read as new connections counting
    from zero (their sum is the progress since the last sample), which
    misses only what the closed ones received after their last sample."""
    total, cum, prev = 0, [], 0
    for t, b, _, _ in s:
        total += b - prev if b >= prev else b
        prev = b
        cum.append((t, total))
    out = []
    for i, (t, b) in enumerate(cum):
        j = i
        while j > 0 and t - cum[j - 1][0] <= 1.0:
            j -= 1
        if t - cum[j][0] >= 0.5:
            out.append((t, (b - cum[j][1]) / (t - cum[j][0]) / 1e6))
    return out


def plot(jpath):
    d = json.load(open(jpath))
    base = jpath[:-len(".json")]
    name = d.get("path", {}).get("name", os.path.basename(base))
    runs = d["runs"]
    summary(base + "-summary.svg", f"drs-wan {name}, 1 x {d.get('size', '?')}: throughput and peak socket memory", runs)
    last = {}
    for r in runs:
        if "failed" not in r and r.get("series"):
            last[r["row"]] = r
    if last:
        lines(base + "-rate.svg", f"drs-wan {name}: rate over the last second (last run of each row)",
              [(k, rate_series(r["series"])) for k, r in last.items()], "MB/s")
        lines(base + "-memory.svg", f"drs-wan {name}: server send memory (all of the row's connections)",
              [(k, [(t, w / MIB) for t, _, w, _ in r["series"]]) for k, r in last.items()], "MiB")


def main():
    for arg in sys.argv[1:] or ["lab/results/drs-wan"]:
        if arg.endswith(".json"):
            plot(arg)
            continue
        for root, _, files in os.walk(arg):
            for f in sorted(files):
                if f.endswith(".json"):
                    plot(os.path.join(root, f))
                    print(os.path.join(root, f[:-5]) + "-*.svg")


if __name__ == "__main__":
    main()
