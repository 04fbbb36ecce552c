"""Line charts as SVG without dependencies (the lab's Python experiments;
CI has no matplotlib). One chart per file: lines of (x, y) points, axes
with a few ticks, a legend."""
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#000000"]


def line_chart(path, title, lines, xlabel, ylabel, width=640, height=360, ymax=None, logx=False, legend_w=150):
    """lines: [(label, [(x, y)], bold)]. logx: x on a log2 scale (client
    counts 1, 2, 4 ...), a tick at each x given; otherwise linear from 0."""
    import math
    ml, mr, mt, mb = 60, legend_w, 30, 45
    pts = [p for _, ps, _ in lines for p in ps]
    xmax = max((x for x, _ in pts), default=1) or 1
    ytop = ymax or (max((y for _, y in pts), default=1) or 1) * 1.05
    pw, ph = width - ml - mr, height - mt - mb
    if logx:
        xs = sorted({x for x, _ in pts if x > 0}) or [1]
        lo, hi = math.log2(xs[0]), math.log2(xs[-1])
        hi = hi if hi > lo else lo + 1
        sx = lambda x: ml + pw * (math.log2(x) - lo) / (hi - lo)
        xticks = xs
    else:
        sx = lambda x: ml + pw * x / xmax
        xticks = [xmax * i / 5 for i in range(6)]
    sy = lambda y: mt + ph * (1 - min(y, ytop) / ytop)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{ml}" y="18" font-size="13">{escape(title)}</text>',
         f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for i in range(6):
        y = ytop * i / 5
        o.append(f'<line x1="{ml - 4}" x2="{ml + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{ml - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    for x in xticks:
        o.append(f'<text x="{sx(x):.1f}" y="{mt + ph + 15}" text-anchor="middle">{x:.3g}</text>')
    o.append(f'<text x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    o.append(f'<text transform="translate(14,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
    for i, (label, ps, bold) in enumerate(lines):
        c = COLORS[i % len(COLORS)]
        if ps:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
            o.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="{3 if bold else 1.3}"/>')
        ly = mt + 14 * i + 8
        o.append(f'<line x1="{ml + pw + 10}" x2="{ml + pw + 30}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="{3 if bold else 1.3}"/>')
        o.append(f'<text x="{ml + pw + 34}" y="{ly + 4}">{escape(label)}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")


def bar_chart(path, title, groups, series, ylabel, width=720, height=360):
    """groups: names along x; series: [(label, [value per group])]."""
    ml, mr, mt, mb = 60, 150, 30, 60
    pw, ph = width - ml - mr, height - mt - mb
    top = max((v for _, vs in series for v in vs), default=1) * 1.1 or 1
    sy = lambda y: mt + ph * (1 - y / top)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{ml}" y="18" font-size="13">{escape(title)}</text>',
         f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for i in range(6):
        y = top * i / 5
        o.append(f'<line x1="{ml - 4}" x2="{ml + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{ml - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    gw = pw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    for gi, g in enumerate(groups):
        o.append(f'<text x="{ml + gw * (gi + 0.5):.1f}" y="{mt + ph + 15}" text-anchor="middle">{escape(g)}</text>')
        for si, (_, vs) in enumerate(series):
            x = ml + gw * gi + gw * 0.1 + bw * si
            o.append(f'<rect x="{x:.1f}" y="{sy(vs[gi]):.1f}" width="{bw:.1f}" height="{mt + ph - sy(vs[gi]):.1f}" fill="{COLORS[si % len(COLORS)]}"/>')
    for si, (label, _) in enumerate(series):
        ly = mt + 14 * si + 8
        o.append(f'<rect x="{ml + pw + 10}" y="{ly - 5}" width="16" height="10" fill="{COLORS[si % len(COLORS)]}"/>')
        o.append(f'<text x="{ml + pw + 32}" y="{ly + 4}">{escape(label)}</text>')
    o.append(f'<text transform="translate(14,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")
