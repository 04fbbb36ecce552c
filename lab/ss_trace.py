#!/usr/bin/env python3
"""What held each connection back, from a `lab/auto_streams.py --trace` file (raw `ss -tinm`
of both namespaces every 100 ms).

Usage: lab/ss_trace.py TRACE [STEP]   (STEP seconds per row, default 1)

One row per STEP; per HTTP data connection (server port 8080), in order of appearance:
sender cwnd KB, smoothed/min RTT ms, delivery rate MB/s, unacked KB, not-sent KB, send buffer
(skmem tb) KB, share of the step the kernel counted send-buffer- and receive-window-limited
(%), the receiver's offered window (snd_wnd) KB; after `|` the receiver's rcv_rtt ms,
rcv_space KB and receive buffer (rb) KB; `rxA/B` when the sender retransmitted (ss's
retrans: in flight / total). A connection cwnd-limited has unacked ~ cwnd and both shares 0.
"""
import re, sys
KV = re.compile(r"(\w+):(\S+)")

def skmem(ln, cur):
    m = re.search(r"skmem:\(([^)]*)\)", ln)
    if m:
        for f in m.group(1).split(","):
            k = re.match(r"([a-z]+)(\d+)", f)
            if k:
                cur["sk_" + k.group(1)] = int(k.group(2))

def parse(path):
    recs = []
    t = ns = None
    cur = None
    for ln in open(path):
        if ln.startswith("# t="):
            a = ln.split()
            t = float(a[1][2:]); ns = a[2][3:]
            continue
        if not ln.startswith(("\t", " ")):
            p = ln.split()
            if len(p) < 4:
                cur = None; continue
            cur = dict(recvq=int(p[0]), sendq=int(p[1]))
            recs.append((t, ns, p[2], p[3], cur))
            skmem(ln, cur)
            rest = ln
        else:
            rest = ln
        if cur is None:
            continue
        skmem(rest, cur)
        for k, v in KV.findall(rest):
            if k not in ("skmem", "users"):
                cur[k] = v
        m = re.search(r"delivery_rate (\S+)", rest)
        if m: cur["delivery_rate"] = m.group(1)
        m = re.search(r"\b(cubic|bbr|reno)\b", rest)
        if m: cur["cc"] = m.group(1)
        if "app_limited" in rest: cur["app_limited"] = True
    return recs

def num(v, d=None):
    if v is None: return d
    m = re.match(r"([\d.]+)", str(v))
    return float(m.group(1)) if m else d

def mbps(v):
    if v is None: return None
    m = re.match(r"([\d.]+)([KMG]?)bps", v)
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)] / 8e6 if m else None

def main():
    path = sys.argv[1]
    step = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    recs = parse(path)
    # Sender side: server namespace, local port 8080 (HTTP data).
    conns = {}
    for t, ns, lo, pe, d in recs:
        if ns.endswith("srv") and lo.endswith(":8080"):
            conns.setdefault(pe, []).append((t, d))
    rx = {}
    for t, ns, lo, pe, d in recs:
        if ns.endswith("cli") and pe.endswith(":8080"):
            rx.setdefault(lo, []).append((t, d))
    order = sorted(conns, key=lambda k: conns[k][0][0])
    print("t  " + " || ".join(f"[{i}] {k}" for i, k in enumerate(order)))
    hdr = "cwndKB rtt/min dMB/s unaKB nsKB tbKB sbl% rwl% wndKB | rrtt rspKB rbKB"
    print("cols per conn:", hdr)
    t0 = min(r[0] for r in recs); t1 = max(r[0] for r in recs)
    t = t0 + step
    while t <= t1 + 1e-9:
        cells = []
        for k in order:
            s = [x for x in conns[k] if t - step < x[0] <= t]
            prev = [x for x in conns[k] if x[0] <= t - step]
            if not s:
                cells.append("-"); continue
            tt, d = s[-1]
            mss = num(d.get("mss"), 1448)
            p = prev[-1][1] if prev else {}
            dt = (tt - prev[-1][0]) * 1000 if prev else step * 1000
            sbl = (num(d.get("sndbuf_limited"), 0) - num(p.get("sndbuf_limited"), 0)) / dt * 100
            rwl = (num(d.get("rwnd_limited"), 0) - num(p.get("rwnd_limited"), 0)) / dt * 100
            rtt = d.get("rtt", "0/0").split("/")[0]
            c = (f"{num(d.get('cwnd'),0)*mss/1e3:.0f} {num(rtt,0):.0f}/{num(d.get('minrtt'),0):.0f} "
                 f"{mbps(d.get('delivery_rate')) or 0:.1f} {num(d.get('unacked'),0)*mss/1e3:.0f} "
                 f"{num(d.get('notsent'),0)/1e3:.0f} {d.get('sk_tb',0)/1e3:.0f} {sbl:.0f} {rwl:.0f} "
                 f"{num(d.get('snd_wnd'),0)/1e3:.0f}")
            r = [x for x in rx.get(k, []) if t - step < x[0] <= t]
            if r:
                rd = r[-1][1]
                c += f" | {num(rd.get('rcv_rtt'),0):.0f} {num(rd.get('rcv_space'),0)/1e3:.0f} {rd.get('sk_rb',0)/1e3:.0f}"
            if d.get("retrans"):
                c += f" rx{d.get('retrans')}"
            cells.append(c)
        print(f"{t - t0:5.1f} " + " || ".join(cells))
        t += step

if __name__ == "__main__":
    main()
