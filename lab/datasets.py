#!/usr/bin/env python3
"""datasets (issue 15): trees of files over linkem, Sluice against the
peers' clients and servers; files/s, MB/s, server CPU, and the time of a
re-sync after 1 % of the files changed.

Cases: (a) many 64 KiB files in 100 directories, (b) a few 32 MiB files,
(c) a mix. The issue asks for 10,000 small and 100 large files; at
100 Mbit/s the slowest peer row (wget -r, ~12 files/s) would take 14
minutes for (a) alone and every row of (b) 4.5 minutes, so the default
sizes are scaled down (--small, --large; the table says what ran).

Rows, downloads (client in the client namespace, server in the server
namespace): sluice get -r (FTP, HTTP), sluice cp -f LIST (one pair a
file, FTP), globus-url-copy -r -cc 4 -pp and -cc 16 -pp against
globus-gridftp-server and against Sluice, lftp mirror --parallel=8 and
rclone copy --transfers 8 against Sluice's FTP, wget -r against nginx.
Uploads: sluice put -r, globus-url-copy to both servers, lftp mirror -R,
rclone copy. Re-sync (case a): the destination holds the tree as it was,
1 % of the source files are rewritten (same size, new time), and each
tool's sync mode runs; "just those files" is sluice get -r (put -r) of a
tree holding only the changed files.

Why a script and not a sluice-lab TOML: sluice-lab's "transfers" runner
moves one file per row; trees, peer clients and re-syncs are rows of
shell commands, which a script says more cheaply. Like drs_wan.py it
makes its own namespaces (ds-srv, ds-cli) and linkem between them.

Server CPU: every server runs in the cpuacct cgroup `sluice-datasets`
(forked sessions of globus-gridftp-server too); a row's CPU is the
group's usage over the row, in CPU seconds per GiB moved.

Usage (root, from the repository root):
  lab/datasets.py --bin DIR [--repeat 3] [--out lab/results/datasets]
  lab/datasets.py --bin DIR --smoke     (< 60 s; lab/smoke.sh runs it)
DIR holds release builds of `sluice` and `linkem`. Exit status 1 if a
row failed (wrong file count or sha256).
"""
import argparse, hashlib, json, os, random, re, shutil, statistics, subprocess, sys, time

from labkit import add_pair, del_pair, sh

SRV, CLI = "ds-srv", "ds-cli"
SA, CA = "10.89.0.1", "10.89.0.2"
FTP, FTPW, HTTP, GFTP, GFTPW, NGINX = 2121, 2122, 8080, 2811, 2812, 8081
CG = "/sys/fs/cgroup/cpuacct/sluice-datasets"
LAB = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "4096 16384 4194304"}
KIB, MIB = 1 << 10, 1 << 20


def teardown():
    del_pair(SRV, CLI)


def setup(path, work, bindir):
    teardown()
    add_pair(SRV, CLI, SA, CA, LAB)
    ctl = os.path.join(work, "linkem.sock")
    if os.path.exists(ctl):
        os.remove(ctl)
    lk = subprocess.Popen(["chrt", "-f", "20", os.path.join(bindir, "linkem"), "run",
                           "--a-ns", SRV, "--a-addr", f"{SA}/24", "--b-ns", CLI, "--b-addr", f"{CA}/24",
                           "--ctl", ctl, f"--delay={path['delay']}", f"--rate={path['rate']}",
                           f"--limit={path['limit']}"],
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "linkem.log"), "w"))
    for _ in range(200):
        # Up once the client namespace has its address (linkem adds it).
        if os.path.exists(ctl) and SA[:-1] in sh("ip", "netns", "exec", CLI, "ip", "-4", "addr", check=False).stdout:
            return lk
        time.sleep(0.05)
    raise SystemExit("datasets: linkem did not come up (see linkem.log)")


def make_tree(top, n_small, n_large, large, dirs):
    """n_small 64 KiB files spread over `dirs` directories, n_large files of `large` bytes."""
    rng = random.Random(15)
    for i in range(n_small):
        d = os.path.join(top, f"d{i % dirs:03}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"s{i:05}"), "wb") as f:
            f.write(rng.randbytes(64 * KIB))
    for i in range(n_large):
        os.makedirs(os.path.join(top, "big"), exist_ok=True)
        with open(os.path.join(top, "big", f"l{i:03}"), "wb") as f:
            for _ in range(large // MIB):
                f.write(rng.randbytes(MIB))


def digest(top):
    """{relative path: sha256} of every regular file (not wget's index.html)."""
    out = {}
    for d, _, files in os.walk(top):
        for f in files:
            if f.startswith("index.html") or f.startswith("."):
                continue
            p = os.path.join(d, f)
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                while b := fh.read(1 << 20):
                    h.update(b)
            out[os.path.relpath(p, top)] = h.hexdigest()
    return out


def tree_bytes(top):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(top) for f in fs)


class Servers:
    """Sluice (read-only FTP+HTTP, writable FTP), globus-gridftp-server
    (read-only, writable) and nginx, all in the server namespace and the
    CPU cgroup."""

    def __init__(self, bindir, work, data, up, gup):
        os.makedirs(CG, exist_ok=True)
        self.procs = []
        sb = os.path.join(bindir, "sluice")
        empty = os.path.join(work, "empty.conf")
        open(empty, "w").close()
        ngx = os.path.join(work, "nginx")
        os.makedirs(os.path.join(ngx, "tmp"), exist_ok=True)
        t = os.path.join(ngx, "tmp")
        open(os.path.join(ngx, "nginx.conf"), "w").write(f"""daemon off; user root; worker_processes 2;
pid {ngx}/nginx.pid; error_log {ngx}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {t}; proxy_temp_path {t}; fastcgi_temp_path {t};
  uwsgi_temp_path {t}; scgi_temp_path {t}; sendfile on; keepalive_requests 1000000;
  server {{ listen {SA}:{NGINX}; root {data}; autoindex on; }} }}
""")
        gridftp = shutil.which("globus-gridftp-server") or "/usr/sbin/globus-gridftp-server"
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        log = open(os.path.join(work, "servers.log"), "w")
        for cmd in (
            [sb, "serve", data, "--ftp", f"{SA}:{FTP}", "--http", f"{SA}:{HTTP}"],
            [sb, "serve", up, "--writable", "--ftp", f"{SA}:{FTPW}", "--no-http"],
            [gridftp, "-aa", "-anonymous-user", "ftp", "-rp", data, "-home-dir", "/", "-c", empty,
             "-control-interface", SA, "-data-interface", SA, "-p", str(GFTP), "-d", "error"],
            [gridftp, "-aa", "-anonymous-user", "ftp", "-rp", gup, "-home-dir", "/", "-c", empty,
             "-control-interface", SA, "-data-interface", SA, "-p", str(GFTPW), "-d", "error"],
            [nginx, "-c", os.path.join(ngx, "nginx.conf"), "-p", ngx],
        ):
            # Into the cgroup before exec: forked sessions are counted too.
            self.procs.append(subprocess.Popen(
                ["sh", "-c", f'echo $$ > {CG}/tasks && exec ip netns exec {SRV} "$@"', "srv"] + cmd,
                stdout=log, stderr=log))
        for port in (FTP, FTPW, HTTP, GFTP, GFTPW, NGINX):
            for _ in range(200):
                if sh("ip", "netns", "exec", CLI, "bash", "-c", f"exec 3<>/dev/tcp/{SA}/{port}", check=False).returncode == 0:
                    break
                time.sleep(0.05)
            else:
                raise SystemExit(f"datasets: nothing listening on {SA}:{port} (see servers.log)")

    @staticmethod
    def cpu():
        return int(open(os.path.join(CG, "cpuacct.usage")).read()) / 1e9

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        # Whatever is left in the group (globus's forked sessions, a
        # server still draining): the group holds only this run's servers.
        for pid in open(os.path.join(CG, "tasks")).read().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass


def rows(bindir, w):
    """(name, direction, command). SRC/DST: local tree in the client
    namespace; CASE: the case's directory on the servers."""
    sb = os.path.join(bindir, "sluice")
    anon = "anonymous:x"
    rc = f"rclone copy -q --transfers 8 --ftp-host {SA} --ftp-user anonymous --ftp-pass $(rclone obscure x)"
    return [
        ("sluice get -r (FTP)", "down", f"{sb} get -r -q ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("sluice get -r --files 16 (FTP)", "down", f"{sb} get -r -q --files 16 ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("sluice get -r --files 16 (HTTP)", "down", f"{sb} get -r -q --files 16 http://{SA}:{HTTP}/CASE/tree/ DST"),
        ("sluice get -r (HTTP)", "down", f"{sb} get -r -q http://{SA}:{HTTP}/CASE/tree/ DST"),
        # Diagnostics for (b): one file at a time, and without DRS's
        # receive buffer sizing (not run by default: see --rows).
        ("diag: sluice get -r --files 1 (FTP)", "down", f"{sb} get -r -q --files 1 ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("diag: sluice get -r --drs off (FTP)", "down", f"{sb} get -r -q --drs off ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("diag: sluice get -r --files 1 (HTTP)", "down", f"{sb} get -r -q --files 1 http://{SA}:{HTTP}/CASE/tree/ DST"),
        # Where a tree's time goes: --stats prints a timeline (listing,
        # logins, files done by quarter), kept in the row's record.
        ("diag: sluice get -r --stats (FTP)", "down", f"{sb} get -r -q --stats ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("diag: sluice get -r --files 4 (FTP)", "down", f"{sb} get -r -q --files 4 ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("diag: sluice get -r --files 32 (FTP)", "down", f"{sb} get -r -q --files 32 ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("diag: sluice put -r --stats (FTP)", "up", f"{sb} put -r -q --stats SRC ftp://{SA}:{FTPW}/t/"),
        ("sluice cp -f LIST (FTP)", "down", f"{sb} cp -q -f {w}/cp.list"),
        ("globus-url-copy -r -cc 4 -pp (globus)", "down", f"globus-url-copy -r -cc 4 -pp ftp://{SA}:{GFTP}DATA/CASE/tree/ file://DST/"),
        ("globus-url-copy -r -cc 16 -pp (globus)", "down", f"globus-url-copy -r -cc 16 -pp ftp://{SA}:{GFTP}DATA/CASE/tree/ file://DST/"),
        ("globus-url-copy -r -cc 4 -pp (Sluice)", "down", f"globus-url-copy -r -cc 4 -pp ftp://{SA}:{FTP}/CASE/tree/ file://DST/"),
        ("globus-url-copy -r -cc 16 -pp (Sluice)", "down", f"globus-url-copy -r -cc 16 -pp ftp://{SA}:{FTP}/CASE/tree/ file://DST/"),
        ("lftp mirror --parallel=8 (Sluice)", "down", f"lftp -c 'set cmd:fail-exit yes; open ftp://{anon}@{SA}:{FTP}; mirror --parallel=8 /CASE/tree DST'"),
        ("rclone copy --transfers 8 (Sluice)", "down", f"{rc} --ftp-port {FTP} :ftp:/CASE/tree DST"),
        ("wget -r (nginx)", "down", f"cd DST && wget -q -r -np -nH --cut-dirs=2 -R 'index.html*' http://{SA}:{NGINX}/CASE/tree/"),
        ("sluice put -r (FTP)", "up", f"{sb} put -r -q SRC ftp://{SA}:{FTPW}/t/"),
        ("globus-url-copy -r -cc 4 -pp up (globus)", "up", f"globus-url-copy -r -cc 4 -pp file://SRC/ ftp://{SA}:{GFTPW}GUP/t/"),
        ("globus-url-copy -r -cc 16 -pp up (globus)", "up", f"globus-url-copy -r -cc 16 -pp file://SRC/ ftp://{SA}:{GFTPW}GUP/t/"),
        ("globus-url-copy -r -cc 4 -pp up (Sluice)", "up", f"globus-url-copy -r -cc 4 -pp file://SRC/ ftp://{SA}:{FTPW}/t/"),
        ("globus-url-copy -r -cc 16 -pp up (Sluice)", "up", f"globus-url-copy -r -cc 16 -pp file://SRC/ ftp://{SA}:{FTPW}/t/"),
        ("lftp mirror -R --parallel=8 (Sluice)", "up", f"lftp -c 'set cmd:fail-exit yes; open ftp://{anon}@{SA}:{FTPW}; mirror -R --parallel=8 SRC /t'"),
        ("rclone copy --transfers 8 up (Sluice)", "up", f"{rc} --ftp-port {FTPW} SRC :ftp:/t"),
    ]


def with_base(rows, base):
    """Each Sluice client row again with the `sluice` of directory `base`
    (a build before a change), named "... [base]", right after it: both
    builds in one run, under the same load."""
    if not base:
        return rows
    out = []
    for name, direction, cmd in rows:
        out.append((name, direction, cmd))
        if " sluice " in f" {name.removeprefix('diag: ')} " and "sluice" in cmd.split()[0]:
            first, rest = cmd.split(" ", 1)
            out.append((f"{name} [base]", direction, f"{os.path.join(base, 'sluice')} {rest}"))
    return out


def resync_rows(bindir):
    """Sync modes: the destination holds the tree before the change."""
    sb = os.path.join(bindir, "sluice")
    rc = f"rclone copy -q --transfers 8 --ftp-host {SA} --ftp-user anonymous --ftp-pass $(rclone obscure x)"
    return [
        ("sluice get -r --sync (FTP)", "down", f"{sb} get -r -q --sync ftp://{SA}:{FTP}/CASE/tree/ DST"),
        ("sluice get -r --sync (HTTP)", "down", f"{sb} get -r -q --sync http://{SA}:{HTTP}/CASE/tree/ DST"),
        ("globus-url-copy -r -cc 16 -pp -sync (globus)", "down", f"globus-url-copy -r -cc 16 -pp -sync ftp://{SA}:{GFTP}DATA/CASE/tree/ file://DST/"),
        ("lftp mirror --parallel=8 (Sluice)", "down", f"lftp -c 'set cmd:fail-exit yes; open ftp://anonymous:x@{SA}:{FTP}; mirror --parallel=8 /CASE/tree DST'"),
        ("rclone copy --transfers 8 (Sluice)", "down", f"{rc} --ftp-port {FTP} :ftp:/CASE/tree DST"),
        ("sluice put -r --sync (FTP)", "up", f"{sb} put -r -q --sync SRC ftp://{SA}:{FTPW}/t/"),
        ("diag: sluice put -r --sync --stats (FTP)", "up", f"{sb} put -r -q --sync --stats SRC ftp://{SA}:{FTPW}/t/"),
    ]


def run_row(name, direction, cmd, case, w, srcs, expect, full_check):
    """Runs one row; returns (seconds, server CPU s) or raises on a bad copy."""
    src = os.path.join(w["data"], case, "tree")
    dst = os.path.join(w["work"], "dst")
    shutil.rmtree(dst, ignore_errors=True)
    for d in (w["up"], w["gup"]):
        shutil.rmtree(os.path.join(d, "t"), ignore_errors=True)
    os.makedirs(dst)
    if "GUP/t/" in cmd:
        target = os.path.join(w["gup"], "t")
    elif direction == "up":
        target = os.path.join(w["up"], "t")
    else:
        target = dst
    if "cp.list" in cmd:
        with open(os.path.join(w["work"], "cp.list"), "w") as f:
            for rel in sorted(expect):
                os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
                f.write(f"ftp://{SA}:{FTP}/{case}/tree/{rel} {os.path.join(dst, rel)}\n")
    line = (cmd.replace("CASE", case).replace("DATA", w["data"]).replace("GUP", w["gup"])
            .replace("SRC", src).replace("DST", dst))
    return timed(name, line, target, expect, full_check)


def timed(name, line, target, expect, full_check):
    c0, t0 = Servers.cpu(), time.monotonic()
    if timed.limit and timed.limited.search(name):
        return stopped(name, line, target, expect, c0, t0)
    r = subprocess.run(["ip", "netns", "exec", CLI, "bash", "-c", line], capture_output=True, text=True)
    secs = time.monotonic() - t0
    cpu = Servers.cpu() - c0
    if r.returncode != 0:
        raise RuntimeError(f"{name}: exit {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    timed.timeline = [l for l in r.stderr.splitlines() if l.startswith("stats: timeline")]
    got = digest(target) if full_check else dict.fromkeys(
        os.path.relpath(os.path.join(d, f), target) for d, _, fs in os.walk(target) for f in fs
        if not f.startswith("index.html") and not f.startswith("."))
    if set(got) != set(expect) or (full_check and got != expect):
        raise RuntimeError(f"{name}: copy differs ({len(got)} of {len(expect)} files"
                           f"{', sha256 differs' if set(got) == set(expect) else ''})")
    return secs, cpu


def stopped(name, line, target, expect, c0, t0):
    """--row-limit: a row still running after the limit is stopped (its
    process group killed); its rate is the files that arrived whole (the
    sha256 they should have) in that time. A row done sooner is a full
    run, checked as always. Returns (seconds, server CPU s, files)."""
    p = subprocess.Popen(["ip", "netns", "exec", CLI, "bash", "-c", line], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=timed.limit)
    except subprocess.TimeoutExpired:
        secs, cpu = time.monotonic() - t0, Servers.cpu() - c0
        os.killpg(p.pid, 9)
        p.communicate()
        got = digest(target)
        whole = sum(1 for rel, h in got.items() if expect.get(rel) == h)
        return secs, cpu, whole
    secs, cpu = time.monotonic() - t0, Servers.cpu() - c0
    if p.returncode != 0:
        raise RuntimeError(f"{name}: exit {p.returncode}: {err[-400:]}")
    timed.timeline = [l for l in err.splitlines() if l.startswith("stats: timeline")]
    got = digest(target)
    if got != expect:
        raise RuntimeError(f"{name}: copy differs ({len(got)} of {len(expect)} files)")
    return secs, cpu, len(expect)


timed.limit, timed.limited = None, re.compile("")


def change_one_percent(src, rng):
    """Rewrites 1 % of the small files (same size, new contents, a new
    mtime a few seconds on). Returns their relative paths."""
    small = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs if f.startswith("s"))
    picked = rng.sample(small, max(1, len(small) // 100))
    later = time.time() + 5
    for rel in picked:
        p = os.path.join(src, rel)
        with open(p, "wb") as f:
            f.write(rng.randbytes(os.path.getsize(p) or 64 * KIB))
        os.utime(p, (later, later))
    return picked


def resync(bindir, w, case, rng, results, rep, want, base=None):
    """One re-sync round of case `case`: change 1 %, run every sync row
    from the old state, and the move of just the changed files."""
    src = os.path.join(w["data"], case, "tree")
    old = os.path.join(w["work"], "old")
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(src, old, copy_function=shutil.copy2)
    picked = change_one_percent(src, rng)
    expect = digest(src)
    # Just those files: a tree of only them, moved by sluice get -r / put -r.
    delta = os.path.join(w["data"], case + "-delta", "tree")
    shutil.rmtree(os.path.dirname(delta), ignore_errors=True)
    for rel in picked:
        os.makedirs(os.path.dirname(os.path.join(delta, rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(delta, rel))
    os.system(f"chmod -R a+rX {w['data']}")
    dexp = digest(delta)
    sb = os.path.join(bindir, "sluice")
    dst = os.path.join(w["work"], "dst")
    for name, direction, line in (
        ("just the changed files: sluice get -r (FTP)", "down", f"{sb} get -r -q ftp://{SA}:{FTP}/{case}-delta/tree/ {dst}"),
        ("just the changed files: sluice put -r (FTP)", "up", f"{sb} put -r -q {delta} ftp://{SA}:{FTPW}/t/"),
    ):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(os.path.join(w["up"], "t"), ignore_errors=True)
        os.makedirs(dst)
        target = dst if direction == "down" else os.path.join(w["up"], "t")
        record(results, rep, case, "resync", name, direction, len(picked), tree_bytes(delta),
               lambda: timed(name, line, target, dexp, True))
    for name, direction, cmd in with_base(resync_rows(bindir), base):
        if not want.search(name):
            continue
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(os.path.join(w["up"], "t"), ignore_errors=True)
        # The destination as the last full copy left it: the old tree,
        # times kept (every tool compares size and time).
        target = dst if direction == "down" else os.path.join(w["up"], "t")
        shutil.copytree(old, target, copy_function=shutil.copy2)
        line = (cmd.replace("CASE", case).replace("DATA", w["data"]).replace("SRC", src).replace("DST", dst))
        record(results, rep, case, "resync", name, direction, len(picked), tree_bytes(delta),
               lambda: timed(name, line, target, expect, True))


def record(results, rep, case, phase, name, direction, files, nbytes, fn):
    try:
        timed.timeline = []
        secs, cpu, *done = fn()
        partial = bool(done) and done[0] < files
        if partial:
            # Stopped at --row-limit: the rate of what arrived whole.
            nbytes = nbytes * done[0] // files
            files = done[0]
        r = dict(rep=rep, case=case, phase=phase, row=name, dir=direction, files=files, bytes=nbytes,
                 seconds=secs, files_per_s=files / secs, mb_per_s=nbytes / secs / 1e6,
                 server_cpu_s=cpu, cpu_s_per_gib=cpu / (nbytes / (1 << 30)))
        if timed.timeline:
            r["timeline"] = timed.timeline
        if partial:
            r["stopped_at_limit"] = True
    except RuntimeError as e:
        r = dict(rep=rep, case=case, phase=phase, row=name, dir=direction, failed=str(e))
    print(json.dumps(r), flush=True)
    results.append(r)


def med(vals, f="{:.1f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "failed"
    return f"{f.format(statistics.median(vals))} ({f.format(min(vals))}–{f.format(max(vals))})"


def svg_bars(title, items, unit, path):
    """A horizontal bar chart (no plotting library on the lab machines)."""
    h, lw, bw = 22, 330, 380
    top = max([v for _, v in items] + [1e-9])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{lw + bw + 90}" height="{h * len(items) + 50}" font-family="DejaVu Sans, sans-serif" font-size="12">',
           f'<text x="8" y="18" font-size="14">{title}</text>']
    for i, (name, v) in enumerate(items):
        y = 32 + i * h
        colour = "#1f77b4" if name.startswith("sluice") else "#999999"
        out.append(f'<text x="{lw - 6}" y="{y + 14}" text-anchor="end">{name}</text>')
        out.append(f'<rect x="{lw}" y="{y + 3}" width="{bw * v / top:.1f}" height="{h - 6}" fill="{colour}"/>')
        out.append(f'<text x="{lw + bw * v / top + 4:.1f}" y="{y + 14}">{v:.1f} {unit}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def report(a, cases, results, out, path):
    load = open("/proc/loadavg").read().split()[:3]
    lines = [f"# datasets: trees over linkem {path['name']}", "",
             f"Command: `{' '.join(sys.argv)}`  ",
             f"When: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end {' '.join(load)}; "
             f"{a.repeat} repetition(s), rows interleaved. Cells: median (min–max). Server CPU: the servers' cgroup, CPU s per GiB moved.", ""]
    for case, (desc, n, nb) in cases.items():
        lines += [f"## ({case}) {desc}: {n} files, {nb / MIB:.0f} MiB", "",
                  "| row | files/s | MB/s | server CPU s/GiB |", "|---|---|---|---|"]
        names = list(dict.fromkeys(r["row"] for r in results if r["case"] == case and r["phase"] == "copy"))
        bars = []
        for name in names:
            rs = [r for r in results if r["case"] == case and r["phase"] == "copy" and r["row"] == name]
            ok = [r for r in rs if "failed" not in r]
            note = "" if len(ok) == len(rs) else f" ({len(rs) - len(ok)} failed: {[r['failed'] for r in rs if 'failed' in r][-1][:120]})"
            stop = [r for r in ok if r.get("stopped_at_limit")]
            if stop:
                note += (f" (stopped at {stop[0]['seconds']:.0f} s with {stop[0]['files']} files whole:"
                         " the rate over that time)")
            lines.append(f"| {name}{note} | {med([r['files_per_s'] for r in ok])} | {med([r['mb_per_s'] for r in ok])} | "
                         f"{med([r['cpu_s_per_gib'] for r in ok], '{:.2f}')} |")
            if ok:
                bars.append((name, statistics.median(r["files_per_s"] if case != "b" else r["mb_per_s"] for r in ok)))
        svg_bars(f"({case}) {desc}: {'MB/s' if case == 'b' else 'files/s'}, median", bars,
                 "MB/s" if case == "b" else "files/s", os.path.join(out, f"case-{case}.svg"))
        lines.append("")
    rs_all = [r for r in results if r["phase"] == "resync"]
    if rs_all:
        case = rs_all[0]["case"]
        lines += [f"## Re-sync of case ({case}) after 1 % of its files changed", "",
                  "| row | seconds | files moved/s | server CPU s |", "|---|---|---|---|"]
        for name in dict.fromkeys(r["row"] for r in rs_all):
            rs = [r for r in rs_all if r["row"] == name]
            ok = [r for r in rs if "failed" not in r]
            note = "" if len(ok) == len(rs) else f" ({len(rs) - len(ok)} failed: {[r['failed'] for r in rs if 'failed' in r][-1][:120]})"
            stop = [r for r in ok if r.get("stopped_at_limit")]
            if stop:
                note += (f" (stopped at {stop[0]['seconds']:.0f} s with {stop[0]['files']} files whole:"
                         " the rate over that time)")
            lines.append(f"| {name}{note} | {med([r['seconds'] for r in ok], '{:.2f}')} | "
                         f"{med([r['files_per_s'] for r in ok])} | {med([r['server_cpu_s'] for r in ok], '{:.2f}')} |")
        lines.append("")
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines))
    json.dump(dict(path=path, cases=cases, command=" ".join(sys.argv), load=load, runs=results),
              open(os.path.join(out, "results.json"), "w"), indent=1)
    print("\n".join(lines))


PATHS = {
    "100m50": dict(name="100 Mbit/s, 50 ms RTT", rate="100mbit", delay="25ms", limit="1250000B"),
    # The smoke's path: same rate, a short RTT so every row runs in CI's minute.
    "100m2": dict(name="100 Mbit/s, 2 ms RTT (smoke)", rate="100mbit", delay="1ms", limit="1250000B"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory with release builds of sluice and linkem")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", help="directory with an earlier `sluice`: its rows run too, named [base]")
    ap.add_argument("--small", type=int, default=1000, help="64 KiB files of case (a) (the issue: 10,000)")
    ap.add_argument("--large", type=int, default=4, help="32 MiB files of case (b) (the issue: 100)")
    ap.add_argument("--dirs", type=int, default=100, help="directories of case (a)")
    ap.add_argument("--cases", default="a,b,c")
    ap.add_argument("--rows", default="^(?!diag:)", help="regexp of row names to run (diag: rows only when named)")
    ap.add_argument("--no-resync", action="store_true")
    ap.add_argument("--resync-rows", default="^(?!diag:)", help="regexp of re-sync row names to run")
    ap.add_argument("--row-limit", type=float, metavar="SECONDS",
                    help="stop a row after SECONDS; its rate is the files that arrived whole by then (marked in the table)")
    ap.add_argument("--limit-rows", default="", help="regexp of the row names --row-limit applies to (default: all)")
    ap.add_argument("--smoke", action="store_true", help="tiny trees on a 2 ms path, one run (< 60 s)")
    ap.add_argument("--out", default="lab/results/datasets")
    ap.add_argument("--report-from", metavar="LOG",
                    help="only write the report from the JSON lines a run printed (a run stopped early)")
    a = ap.parse_args()
    if a.report_from:
        results = [json.loads(l) for l in open(a.report_from) if l.startswith("{")]
        meta = {}
        for r in results:
            if r["phase"] == "copy" and "failed" not in r:
                meta.setdefault(r["case"], ({"a": "64 KiB files", "b": "32 MiB files", "c": "mix: 64 KiB and 32 MiB files"}[r["case"]],
                                            r["files"], r["bytes"]))
        a.repeat = 1 + max(r["rep"] for r in results)
        os.makedirs(a.out, exist_ok=True)
        report(a, dict(sorted(meta.items())), results, a.out, PATHS["100m50"])
        return
    if os.geteuid() != 0:
        raise SystemExit("datasets: needs root (namespaces, linkem, cgroups)")
    for t in ("globus-url-copy", "lftp", "rclone", "wget"):
        if not shutil.which(t):
            raise SystemExit(f"datasets: needs {t}")
    timed.limit, timed.limited = a.row_limit, re.compile(a.limit_rows)
    if a.smoke:
        a.repeat, path, out = 1, PATHS["100m2"], os.path.join(a.out, "smoke")
        small, large, large_size, dirs = 20, 2, 1 * MIB, 4
    else:
        path, out = PATHS["100m50"], a.out
        small, large, large_size, dirs = a.small, a.large, 32 * MIB, a.dirs
    os.makedirs(out, exist_ok=True)
    work = "/var/tmp/sluice-datasets"
    shutil.rmtree(work, ignore_errors=True)
    w = dict(work=work, data=os.path.join(work, "data"), up=os.path.join(work, "up"), gup=os.path.join(work, "gup"))
    for d in w.values():
        os.makedirs(d, exist_ok=True)
    shutil.chown(w["gup"], "ftp")
    cases = {
        "a": (f"64 KiB files in {dirs} directories", small, 0, 0),
        "b": (f"{large_size // MIB} MiB files", 0, large, large_size),
        "c": ("mix: 64 KiB and large files", small // 4, max(1, large // 2), large_size),
    }
    cases = {k: v for k, v in cases.items() if k in a.cases.split(",")}
    expects, meta = {}, {}
    for case, (desc, ns, nl, ls) in cases.items():
        top = os.path.join(w["data"], case, "tree")
        make_tree(top, ns, nl, ls, dirs if case != "c" else max(1, dirs // 4))
        expects[case] = digest(top)
        meta[case] = (desc, ns + nl, tree_bytes(top))
    os.system(f"chmod -R a+rX {work}")
    try:
        lk = setup(path, work, a.bin)
    except BaseException:
        teardown()
        raise
    srv = None
    results = []
    try:
        srv = Servers(a.bin, work, w["data"], w["up"], w["gup"])
        want = re.compile(a.rows)
        rng = random.Random(1015)
        for rep in range(a.repeat):
            for case in cases:
                for name, direction, cmd in with_base(rows(a.bin, work), a.base):
                    if not want.search(name):
                        continue
                    desc, n, nb = meta[case]
                    record(results, rep, case, "copy", name, direction, n, nb,
                           lambda: run_row(name, direction, cmd, case, w, None, expects[case], rep == 0 or a.smoke))
            if not a.no_resync and "a" in cases:
                resync(a.bin, w, "a", rng, results, rep, re.compile(a.resync_rows), a.base)
    finally:
        if srv:
            srv.stop()
        lk.terminate()
        lk.wait()
        teardown()
    report(a, meta, results, out, path)
    failed = [r for r in results if "failed" in r]
    if failed:
        print(f"datasets: {len(failed)} row run(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
