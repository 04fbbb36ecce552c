#!/usr/bin/env python3
"""Server memory across bursts of connections (issue 17 item 9).

    bench/conn_memory.py [--bin target/debug/sluice] [--conns 10000] [--rounds 3]

Starts `sluice serve` on a scratch root (loopback, kernel-chosen ports),
then for each door (FTP, then HTTP keep-alive GETs of a 3-byte file) opens
CONNS connections at once, waits for every greeting/answer, closes them
all, waits until the server's descriptors are back down, and prints the
server's RSS at the peak, right after the close, and the lowest value in
the 12 s after (the listener returns freed memory once a thousand clients
have gone: listener.rs `trim_after_bursts`). Rounds after the first must
not grow: the memory is reused and bounded. Needs `ulimit -n` > CONNS.
"""

import argparse
import os
import re
import socket
import subprocess
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/sluice")
    ap.add_argument("--conns", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sluice-connmem-")
    with open(os.path.join(root, "f"), "w") as f:
        f.write("hi\n")
    limit = str(2 * a.conns)
    p = subprocess.Popen(
        [a.bin, "serve", root, "--ftp", "127.0.0.1:0", "--http", "127.0.0.1:0",
         "--max-sessions", limit, "--http-max-connections", limit],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ports = {}
    while len(ports) < 2:
        m = re.search(r"(ftp|http) listening on .*:(\d+)", p.stdout.readline())
        if m:
            ports[m.group(1)] = int(m.group(2))

    def rss():
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
        return -1

    def burst(door):
        conns = []
        for _ in range(a.conns):
            s = socket.create_connection(("127.0.0.1", ports[door]))
            if door == "http":
                s.sendall(b"GET /f HTTP/1.1\r\nHost: t\r\n\r\n")
            conns.append(s)
        for s in conns:
            s.settimeout(30)
            s.recv(4096)
        peak = rss()
        for s in conns:
            s.close()
        deadline = time.time() + 30
        while len(os.listdir(f"/proc/{p.pid}/fd")) > 64 and time.time() < deadline:
            time.sleep(0.1)
        closed = low = rss()
        for _ in range(120):
            time.sleep(0.1)
            low = min(low, rss())
        return peak, closed, low

    try:
        print(f"start: {rss()} MiB")
        for door in ("ftp", "http"):
            for r in range(1, a.rounds + 1):
                peak, closed, low = burst(door)
                print(f"{door} round {r}: {a.conns} connections, peak {peak} MiB, "
                      f"after close {closed} MiB, 12 s later {low} MiB", flush=True)
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
