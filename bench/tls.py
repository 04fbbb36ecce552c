#!/usr/bin/env python3
"""TLS download benchmark on loopback: `sluice serve` against nginx (HTTPS)
and vsftpd (FTPS, ssl_enable), by hand.

    bench/tls.py [--sluice target/release/sluice] [--mib 512] [--runs 3]
                 [--streams 1,16] [--workers N] [--only https|ftps]

A warm (page-cached) file of MIB MiB is fetched with curl to /dev/null,
by 1 and by 16 concurrent curl processes (each the whole file):
- HTTPS: sluice --https vs nginx (`listen ssl`, sendfile on; as many worker
  processes as sluice has workers, default: sluice's default, half the
  cores);
- FTPS: sluice (explicit AUTH TLS, PROT P) vs vsftpd (ssl_enable=YES,
  force_anon_*_ssl=YES), curl --ssl-reqd, passive.
Per run: MB/s (bytes of all clients / wall time) and server CPU seconds per
GiB: a cgroup v1 cpuacct group per server when /sys/fs/cgroup/cpuacct is
writable (root; counts forked session processes after they exit), else
utime+stime of the live process tree plus reaped children. RUNS runs each; the table shows min / median / max.
The servers are interleaved run by run so machine noise spreads over all.
The certificate is a self-signed RSA-2048 one made with openssl (curl
trusts it with --cacert); all servers negotiate TLS 1.3 AES-256-GCM with
curl (OpenSSL) here.
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, what):
    for _ in range(400):
        if proc.poll() is not None:
            sys.exit(f"bench/tls.py: {what} exited: {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench/tls.py: {what} is not listening on {port}")


def tree(pid):
    """pid and all its descendants (live)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True).stdout
        except OSError:
            kids = ""
        todo.extend(int(k) for k in kids.split())
    return out


def cpu_ticks(pid):
    """utime+stime of the live tree, plus the root's reaped children."""
    total = 0
    for p in tree(pid):
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields after ")": state=0, ..., utime=11, stime=12, cutime=13, cstime=14
        total += int(f[11]) + int(f[12])
        if p == pid:
            total += int(f[13]) + int(f[14])
    return total


CG_ROOT = "/sys/fs/cgroup/cpuacct"


def make_cgroup(label):
    """A cpuacct cgroup for one server, or None."""
    path = os.path.join(CG_ROOT, "sluice-bench-" + label.replace(" ", "-") + f"-{os.getpid()}")
    try:
        os.makedirs(path, exist_ok=True)
        open(os.path.join(path, "cpuacct.usage")).read()
        return path
    except OSError:
        return None


def joiner(cg):
    """preexec_fn: the child joins `cg` before exec (its forks follow)."""
    if cg is None:
        return None

    def join():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    return join


def cpu_seconds(pid, cg):
    if cg is not None:
        return int(open(os.path.join(cg, "cpuacct.usage")).read()) / 1e9
    return cpu_ticks(pid) / TICK


def fetch(urls, extra):
    """Runs one curl per URL at once; returns (bytes, seconds)."""
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            ["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}"] + extra + [u],
            stdout=subprocess.PIPE,
            text=True,
        )
        for u in urls
    ]
    got = 0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"bench/tls.py: curl failed ({p.returncode}) for {urls[0]}")
        got += int(out or 0)
    return got, time.monotonic() - t0


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(here, "target/release/sluice"))
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--only", choices=["https", "ftps"])
    a = ap.parse_args()
    for tool in ["curl", "openssl", "pgrep"]:
        if not shutil.which(tool):
            sys.exit(f"bench/tls.py: needs {tool}")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    vsftpd = shutil.which("vsftpd") or "/usr/sbin/vsftpd"
    work = tempfile.mkdtemp(prefix="sluice-bench-tls.")
    procs = []
    cgs = []
    try:
        root = os.path.join(work, "root")
        os.makedirs(root)
        big = os.path.join(root, "big")
        with open(big, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(a.mib):
                f.write(chunk)
        with open(big, "rb") as f:
            while f.read(1 << 24):
                pass
        os.chmod(work, 0o755)
        os.chmod(root, 0o755)
        os.chmod(big, 0o644)
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", cert, "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True,
        )
        servers = {}  # label -> (pid, url, cgroup)

        def spawn(label, argv, **kw):
            cg = make_cgroup(label)
            if cg:
                cgs.append(cg)
            p = subprocess.Popen(argv, preexec_fn=joiner(cg), **kw)
            procs.append(p)
            return p, cg
        if a.only in (None, "https"):
            port = free_port()
            p, cg = spawn(
                "sluice https",
                [a.sluice, "serve", root, "--ftp", "127.0.0.1:0", "--http", "127.0.0.1:0",
                 "--https", f"127.0.0.1:{port}", "--tls-cert", cert, "--tls-key", key,
                 "--workers", str(a.workers)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            wait_port(port, p, "sluice https")
            servers["sluice https"] = (p.pid, f"https://127.0.0.1:{port}/big", cg)
            port = free_port()
            conf = os.path.join(work, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""daemon off; master_process on; worker_processes {a.workers};
pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ access_log off; sendfile on; tcp_nopush on; keepalive_timeout 60;
  client_body_temp_path {work}/nb; proxy_temp_path {work}/np; fastcgi_temp_path {work}/nf;
  uwsgi_temp_path {work}/nu; scgi_temp_path {work}/ns;
  server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {cert}; ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3; root {root}; }} }}
""")
            p, cg = spawn("nginx https", [nginx, "-c", conf, "-p", work], stderr=subprocess.DEVNULL)
            wait_port(port, p, "nginx")
            servers["nginx https"] = (p.pid, f"https://127.0.0.1:{port}/big", cg)
        if a.only in (None, "ftps"):
            port = free_port()
            p, cg = spawn(
                "sluice ftps",
                [a.sluice, "serve", root, "--ftp", f"127.0.0.1:{port}", "--no-http",
                 "--tls-cert", cert, "--tls-key", key, "--workers", str(a.workers)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            wait_port(port, p, "sluice ftp")
            servers["sluice ftps"] = (p.pid, f"ftp://127.0.0.1:{port}/big", cg)
            if os.geteuid() == 0 and os.path.exists(vsftpd):
                port = free_port()
                empty = os.path.join(work, "empty")
                os.makedirs(empty)
                conf = os.path.join(work, "vsftpd.conf")
                with open(conf, "w") as f:
                    f.write(f"""listen=YES
listen_ipv6=NO
listen_address=127.0.0.1
listen_port={port}
background=NO
seccomp_sandbox=NO
anonymous_enable=YES
local_enable=NO
anon_root={root}
no_anon_password=YES
write_enable=NO
pasv_enable=YES
xferlog_enable=NO
dirmessage_enable=NO
hide_ids=YES
secure_chroot_dir={empty}
max_per_ip=0
max_clients=0
ssl_enable=YES
allow_anon_ssl=YES
force_anon_logins_ssl=YES
force_anon_data_ssl=YES
require_ssl_reuse=NO
ssl_ciphers=HIGH
rsa_cert_file={cert}
rsa_private_key_file={key}
""")
                p, cg = spawn("vsftpd ftps", [vsftpd, conf], stderr=subprocess.DEVNULL)
                wait_port(port, p, "vsftpd")
                servers["vsftpd ftps"] = (p.pid, f"ftp://127.0.0.1:{port}/big", cg)
            else:
                print("# vsftpd skipped (needs root and vsftpd)", file=sys.stderr)
        results = {}
        streams = [int(s) for s in a.streams.split(",")]
        for n in streams:
            for run in range(a.runs):
                for label, (pid, url, cg) in servers.items():
                    extra = ["--cacert", cert]
                    if url.startswith("ftp://"):
                        extra += ["--ssl-reqd"]
                    before = cpu_seconds(pid, cg)
                    got, secs = fetch([url] * n, extra)
                    time.sleep(0.3)  # let forked sessions end
                    cpu = cpu_seconds(pid, cg) - before
                    gib = got / (1 << 30)
                    r = results.setdefault((label, n), ([], []))
                    r[0].append(got / secs / 1e6)
                    r[1].append(cpu / gib if gib else 0.0)
                    print(f"# {label} x{n} run {run + 1}: {got / secs / 1e6:.0f} MB/s, "
                          f"{cpu / gib:.3f} CPU s/GiB", file=sys.stderr)
        fmt = lambda v: f"{min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f}"
        fmtc = lambda v: f"{min(v):.3f} / {statistics.median(v):.3f} / {max(v):.3f}"
        how = "cgroup cpuacct" if cgs else "process tree"
        print(f"\n{a.mib} MiB file, {a.runs} runs, workers {a.workers}, loopback, curl to /dev/null, "
              f"CPU by {how}, load average before: {os.getloadavg()[0]:.1f}\n")
        print("| server | streams | MB/s min / median / max | server CPU s/GiB min / median / max |")
        print("|---|---|---|---|")
        for (label, n), (mbs, cpu) in results.items():
            print(f"| {label} | {n} | {fmt(mbs)} | {fmtc(cpu)} |")
    finally:
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=5)
            except Exception:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
        for cg in cgs:
            try:
                os.rmdir(cg)
            except OSError:
                pass


if __name__ == "__main__":
    main()
