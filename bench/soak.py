#!/usr/bin/env python3
"""Soak: mixed FTP and HTTP traffic against one `sluice serve` for a while.

    bench/soak.py [--seconds 3600] [--workers 8] [--bin target/release/sluice]
                  [--sample 30] [--json FILE]

Starts `sluice serve --writable` on a scratch directory (loopback, ports
picked by the kernel) and runs WORKERS client loops with curl until the time
is up: FTP and HTTP downloads of 1 KiB .. 64 MiB files (sha256 checked),
HTTP range requests, FTP uploads (read back and checked), directory
listings on both doors, and aborted transfers (curl stopped by
--max-time or by --max-filesize mid-body, and uploads cut short). Every
SAMPLE seconds it records the server's RSS, open fds and threads, and the
running counts; at the end it prints a table of the samples and a summary
(operations per kind, errors with their first messages) and exits non-zero
if any operation that should have succeeded failed or the server died.

Traffic goes only to 127.0.0.1; every loop is bounded by the deadline.
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SIZES = [1 << 10, 64 << 10, 1 << 20, 7 << 20, 64 << 20]


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def proc_stat(pid):
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = {}
        self.errors = {}
        self.first_errors = []
        self.bytes = 0

    def done(self, kind, nbytes=0):
        with self.lock:
            self.ok[kind] = self.ok.get(kind, 0) + 1
            self.bytes += nbytes

    def fail(self, kind, msg):
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if len(self.first_errors) < 20:
                self.first_errors.append(f"{kind}: {msg}")


def curl(args, timeout=600):
    return subprocess.run(["curl", "-sS", "--noproxy", "*"] + args,
                          capture_output=True, timeout=timeout)


def worker(n, deadline, ftp, http, root, scratch, digests, stats):
    rnd = random.Random(n)
    names = sorted(digests)
    out = os.path.join(scratch, f"w{n}.out")
    while time.time() < deadline:
        kind = rnd.choice(["ftp_get", "ftp_get", "http_get", "http_get", "http_range",
                           "ftp_put", "list", "abort_get", "abort_put"])
        name = rnd.choice(names)
        try:
            if kind in ("ftp_get", "http_get"):
                url = (f"ftp://{ftp}/{name}" if kind == "ftp_get" else f"http://{http}/{name}")
                r = curl(["-o", out, url])
                if r.returncode != 0:
                    stats.fail(kind, f"{name}: curl {r.returncode} {r.stderr.decode()[:200]}")
                elif sha(out) != digests[name]:
                    stats.fail(kind, f"{name}: sha256 mismatch")
                else:
                    stats.done(kind, os.path.getsize(out))
            elif kind == "http_range":
                size = os.path.getsize(os.path.join(root, name))
                a = rnd.randrange(size)
                b = rnd.randrange(a, size)
                r = curl(["-o", out, "-r", f"{a}-{b}", f"http://{http}/{name}"])
                with open(os.path.join(root, name), "rb") as f:
                    f.seek(a)
                    want = hashlib.sha256(f.read(b - a + 1)).hexdigest()
                if r.returncode != 0 or sha(out) != want:
                    stats.fail(kind, f"{name} {a}-{b}: curl {r.returncode}")
                else:
                    stats.done(kind, b - a + 1)
            elif kind == "ftp_put":
                src = os.path.join(root, name)
                dst = f"up/w{n}-{rnd.randrange(4)}"
                r = curl(["-T", src, f"ftp://{ftp}/{dst}"])
                if r.returncode != 0:
                    stats.fail(kind, f"curl {r.returncode} {r.stderr.decode()[:200]}")
                elif sha(os.path.join(root, dst)) != digests[name]:
                    stats.fail(kind, f"{dst}: uploaded file differs")
                else:
                    stats.done(kind, os.path.getsize(src))
            elif kind == "list":
                url = rnd.choice([f"ftp://{ftp}/", f"http://{http}/", f"ftp://{ftp}/up/"])
                r = curl(["-o", out, url])
                if r.returncode != 0:
                    stats.fail(kind, f"{url}: curl {r.returncode}")
                else:
                    stats.done(kind)
            elif kind == "abort_get":
                big = names[-1]
                url = rnd.choice([f"ftp://{ftp}/{big}", f"http://{http}/{big}"])
                # A slow reader cut by --max-time mid-body: 28 is expected.
                r = curl(["-o", out, "--limit-rate", "4M", "--max-time", "1", url])
                if r.returncode in (28, 0):
                    stats.done(kind)
                else:
                    stats.fail(kind, f"curl {r.returncode} {r.stderr.decode()[:200]}")
            elif kind == "abort_put":
                src = os.path.join(root, names[-1])
                r = curl(["-T", src, "--limit-rate", "4M", "--max-time", "1",
                          f"ftp://{ftp}/up/aborted-w{n}"])
                if r.returncode in (28, 0, 55):
                    stats.done(kind)
                else:
                    stats.fail(kind, f"curl {r.returncode} {r.stderr.decode()[:200]}")
        except subprocess.TimeoutExpired:
            stats.fail(kind, "timed out after 600 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--bin", default="target/release/sluice")
    ap.add_argument("--json")
    a = ap.parse_args()
    if shutil.which("curl") is None:
        sys.exit("soak: curl is needed")
    scratch = tempfile.mkdtemp(prefix="sluice-soak-")
    root = os.path.join(scratch, "root")
    os.makedirs(os.path.join(root, "up"))
    digests = {}
    rnd = random.Random(7)
    for i, size in enumerate(SIZES):
        name = f"f{i}-{size}"
        with open(os.path.join(root, name), "wb") as f:
            f.write(rnd.randbytes(size))
        digests[name] = sha(os.path.join(root, name))
    log = open(os.path.join(scratch, "server.log"), "wb")
    srv = subprocess.Popen([a.bin, "serve", root, "--writable", "--ftp", "127.0.0.1:0",
                            "--http", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=log)
    ftp = http = None
    while ftp is None or http is None:
        line = srv.stdout.readline().decode()
        if not line:
            sys.exit("soak: server exited at start")
        m = re.match(r"(ftp|http) listening on (\S+)", line)
        if m:
            if m.group(1) == "ftp":
                ftp = m.group(2)
            else:
                http = m.group(2)
    stats = Stats()
    start = time.time()
    deadline = start + a.seconds
    threads = [threading.Thread(target=worker, daemon=True,
                                args=(n, deadline, ftp, http, root, scratch, digests, stats))
               for n in range(a.workers)]
    for t in threads:
        t.start()
    samples = []
    print("| t (s) | RSS MiB | fds | threads | ops ok | errors | GiB moved |")
    print("|---|---|---|---|---|---|---|")
    while True:
        now = time.time()
        if srv.poll() is not None:
            stats.fail("server", f"exited with {srv.returncode}")
            break
        rss, fds, nthr = proc_stat(srv.pid)
        with stats.lock:
            ok = sum(stats.ok.values())
            err = sum(stats.errors.values())
            moved = stats.bytes
        s = dict(t=round(now - start), rss=rss, fds=fds, threads=nthr, ok=ok, errors=err,
                 bytes=moved)
        samples.append(s)
        print(f"| {s['t']} | {rss / 2**20:.1f} | {fds} | {nthr} | {ok} | {err} | "
              f"{moved / 2**30:.2f} |", flush=True)
        if now >= deadline and not any(t.is_alive() for t in threads):
            break
        time.sleep(min(a.sample, max(1, deadline - now)) if now < deadline else 1)
    alive = srv.poll() is None
    if alive:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
    log.close()
    with open(os.path.join(scratch, "server.log"), "rb") as f:
        errlines = [l.decode(errors="replace").rstrip() for l in f
                    if b"ERROR" in l or b"panicked" in l]
    print()
    print("operations ok:", json.dumps(stats.ok, sort_keys=True))
    print("operations failed:", json.dumps(stats.errors, sort_keys=True))
    for e in stats.first_errors:
        print("  ", e)
    print(f"server ERROR/panic log lines: {len(errlines)}")
    for l in errlines[:10]:
        print("  ", l)
    rss = [s["rss"] for s in samples]
    fds = [s["fds"] for s in samples]
    half = samples[len(samples) // 2:]
    print(f"RSS MiB: start {rss[0] / 2**20:.1f}, max {max(rss) / 2**20:.1f}, end "
          f"{rss[-1] / 2**20:.1f}; second-half range "
          f"{min(s['rss'] for s in half) / 2**20:.1f}-{max(s['rss'] for s in half) / 2**20:.1f}")
    print(f"fds: start {fds[0]}, max {max(fds)}, end {fds[-1]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(samples=samples, ok=stats.ok, errors=stats.errors,
                           first_errors=stats.first_errors, error_log=errlines[:50]), f)
    shutil.rmtree(scratch, ignore_errors=True)
    failed = sum(stats.errors.values()) + len(errlines) + (0 if alive else 1)
    print(f"{sum(stats.ok.values())} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
