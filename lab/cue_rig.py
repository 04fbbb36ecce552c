"""The rig of the Cue experiments (lab/cue.py): two namespaces joined by a
veth pair or linkem, a server (sluice, nginx, vsftpd, globus-gridftp-server)
in a cpuacct cgroup, curl clients bounded by time, an `ss` sampler of every
connection's bytes received, a CPU-bound neighbour, and Jain's index.
"""
import os, re, shutil, subprocess, sys, threading, time

from labkit import add_pair, del_pair, sh, ns

SRV, CLI = "cue-srv", "cue-cli"
SA, CA = "10.89.0.1", "10.89.0.2"
FTP, HTTP = 2121, 8080
CG = "/sys/fs/cgroup/cpuacct/cue-lab"
PASSWORD = "cue-lab"


def teardown():
    del_pair(SRV, CLI)


class Path:
    """Two namespaces joined by a veth pair or by linkem."""

    def __init__(self, kind, bindir, work):
        self.kind, self.lk = kind, None
        teardown()
        add_pair(SRV, CLI, SA, CA)
        if kind == "veth":
            sh("ip", "link", "add", "cue-a", "netns", SRV, "type", "veth", "peer", "name", "cue-b", "netns", CLI)
            ns(SRV, "ip", "addr", "add", f"{SA}/24", "dev", "cue-a")
            ns(CLI, "ip", "addr", "add", f"{CA}/24", "dev", "cue-b")
            ns(SRV, "ip", "link", "set", "cue-a", "up")
            ns(CLI, "ip", "link", "set", "cue-b", "up")
        else:
            ctl = os.path.join(work, "linkem.sock")
            if os.path.exists(ctl):
                os.remove(ctl)
            # 100 Mbit/s, 20 ms RTT, a drop-tail queue of 2 BDP.
            self.lk = subprocess.Popen(
                ["chrt", "-f", "20", os.path.join(bindir, "linkem"), "run", "--a-ns", SRV, "--a-addr", f"{SA}/24",
                 "--b-ns", CLI, "--b-addr", f"{CA}/24", "--ctl", ctl, "--delay=10ms", "--rate=100mbit",
                 "--limit=500000B"], stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "linkem.log"), "w"))
            for _ in range(200):
                if os.path.exists(ctl):
                    break
                time.sleep(0.05)
        for _ in range(100):
            if ns(CLI, "ping", "-c1", "-W1", SA, check=False).returncode == 0:
                break
            time.sleep(0.1)

    def close(self):
        if self.lk:
            self.lk.terminate()
            self.lk.wait()
        teardown()


def cpu_ns():
    try:
        return int(open(f"{CG}/cpuacct.usage").read())
    except OSError:
        return 0


class Server:
    def __init__(self, bindir, kind, args, root, work, config=None):
        self.kind = kind
        wd = os.path.join(work, "srv")
        shutil.rmtree(wd, ignore_errors=True)
        os.makedirs(wd)
        os.makedirs(CG, exist_ok=True)
        if kind == "sluice":
            argv = [os.path.join(bindir, "sluice"), "serve", root, "--ftp", f"{SA}:{FTP}", "--http", f"{SA}:{HTTP}",
                    "--allow-root", "--log-level", "warn"] + args
            if config:
                cf = os.path.join(wd, "sluice.toml")
                open(cf, "w").write(config)
                argv += ["--config", cf]
            self.url = lambda i: f"http://{SA}:{HTTP}/f{i}.bin"
        elif kind == "nginx":
            conf = os.path.join(wd, "nginx.conf")
            open(conf, "w").write(
                f"daemon off;\nmaster_process on;\nworker_processes auto;\nerror_log {wd}/error.log error;\npid {wd}/nginx.pid;\n"
                f"events {{ worker_connections 4096; }}\nhttp {{\n default_type application/octet-stream;\n sendfile on;\n"
                f" tcp_nopush on;\n access_log off;\n client_body_temp_path {wd}/cb; proxy_temp_path {wd}/px;"
                f" fastcgi_temp_path {wd}/fc; uwsgi_temp_path {wd}/uw; scgi_temp_path {wd}/sc;\n"
                f" server {{ listen {SA}:{HTTP}; root {root}; location / {{ }} }}\n}}\n")
            argv = ["nginx", "-p", wd, "-c", conf, "-e", f"{wd}/error.log"]
            self.url = lambda i: f"http://{SA}:{HTTP}/f{i}.bin"
        elif kind == "vsftpd":
            conf = os.path.join(wd, "vsftpd.conf")
            os.makedirs("/var/run/vsftpd/empty", exist_ok=True)
            open(conf, "w").write(
                f"listen=YES\nlisten_ipv6=NO\nlisten_address={SA}\nlisten_port={FTP}\nbackground=NO\n"
                f"anonymous_enable=YES\nno_anon_password=YES\nanon_root={root}\nlocal_enable=NO\nwrite_enable=NO\n"
                "seccomp_sandbox=NO\npasv_enable=YES\nuse_sendfile=YES\nxferlog_enable=NO\nmax_clients=0\nmax_per_ip=0\n"
                "secure_chroot_dir=/var/run/vsftpd/empty\nftp_username=ftp\nconnect_from_port_20=NO\n")
            argv = ["vsftpd", conf]
            self.url = lambda i: f"ftp://{SA}:{FTP}/f{i}.bin"
        else:
            # Home "/": curl walks the URL's path with one CWD per
            # component from the login directory.
            empty = os.path.join(wd, "empty.conf")
            open(empty, "w").write("")
            argv = ["globus-gridftp-server", "-aa", "-anonymous-user", "ftp", "-rp", root, "-home-dir", "/",
                    "-c", empty, "-p", str(FTP), "-d", "error", "-control-interface", SA, "-data-interface", SA]
            self.url = lambda i: f"ftp://{SA}:{FTP}{root}/f{i}.bin"
        # Into the cgroup first: `ip netns exec` remounts /sys, where the
        # cgroup tree is not mounted.
        inner = f"echo $$ > {CG}/cgroup.procs; exec ip netns exec {SRV} " + " ".join(q(a) for a in argv)
        self.log = open(os.path.join(wd, "server.log"), "w")
        self.p = subprocess.Popen(["sh", "-c", inner], stdout=self.log, stderr=subprocess.STDOUT)
        port = HTTP if kind in ("sluice", "nginx") else FTP
        for _ in range(150):
            if ns(SRV, "ss", "-Hltn", "sport", "=", f":{port}").stdout.strip():
                break
            if self.p.poll() is not None:
                raise SystemExit(f"{kind} exited: {open(os.path.join(wd, 'server.log')).read()}")
            time.sleep(0.1)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        # nginx workers, gridftp children: whatever is left in the group.
        for pid in open(f"{CG}/cgroup.procs").read().split():
            sh("kill", "-9", pid, check=False)
        time.sleep(0.2)


def start_retrying(bindir, kind, args, root, work, config=None):
    """globus-gridftp-server sometimes fails its start-up name lookup
    ("Temporary failure in name resolution") on a loaded host: once more."""
    try:
        return Server(bindir, kind, args, root, work, config)
    except SystemExit:
        time.sleep(2)
        return Server(bindir, kind, args, root, work, config)


def q(s):
    return s if re.fullmatch(r"[\w\-./:=,@]+", s) else "'" + s.replace("'", "'\\''") + "'"


class Sampler(threading.Thread):
    """Client-side bytes_received of every established connection (ss in
    the client namespace) about every `dt` seconds. Each ss call is one
    tick: `ticks[i]` its time, `snaps[i]` {(local, peer): bytes}. Rates are
    computed between ticks as they happened (a loaded machine stretches
    the intervals; nothing assumes they are `dt`)."""

    def __init__(self, dt):
        super().__init__(daemon=True)
        self.dt, self.stop, self.t0 = dt, False, time.monotonic()
        self.ticks, self.snaps = [], []

    def run(self):
        nxt = time.monotonic()
        while not self.stop:
            out = ns(CLI, "ss", "-tinH", "state", "established", check=False).stdout
            now = time.monotonic() - self.t0
            key, snap = None, {}
            for ln in out.splitlines():
                parts = ln.split()
                if len(parts) >= 4 and ":" in parts[2] and not ln[:1].isspace():
                    key = (parts[2], parts[3])
                    continue
                m = re.search(r"bytes_received:(\d+)", ln)
                if key and m:
                    snap[key] = int(m.group(1))
                    key = None
            self.ticks.append(now)
            self.snaps.append(snap)
            nxt += self.dt
            time.sleep(max(0.0, nxt - time.monotonic()))

    def data_keys(self, min_bytes=1):
        """Connections that carried data: not FTP control connections (peer
        port FTP), so a starved transfer counts too (as zeros)."""
        last = {}
        for snap in self.snaps:
            last.update(snap)
        return [k for k, b in last.items() if b >= min_bytes and not k[1].endswith(f":{FTP}")]

    def first_seen(self, k):
        return next((t for t, s in zip(self.ticks, self.snaps) if k in s), None)

    def last_seen(self, k):
        return next((t for t, s in zip(reversed(self.ticks), reversed(self.snaps)) if k in s), None)

    def intervals(self, keys, lo, hi):
        """(seconds, {key: bytes}) between consecutive ticks inside
        [lo, hi] at which every key was sampled."""
        out = []
        for i in range(len(self.ticks) - 1):
            a, b = self.ticks[i], self.ticks[i + 1]
            if a < lo - 1e-6 or b > hi + 1e-6:
                continue
            sa, sb = self.snaps[i], self.snaps[i + 1]
            if all(k in sa and k in sb for k in keys):
                out.append((b - a, {k: sb[k] - sa[k] for k in keys}))
        return out

    def rate(self, k, lo, hi):
        """Bytes/s of k between its first tick at or after lo and its last
        at or before hi."""
        pts = [(t, s[k]) for t, s in zip(self.ticks, self.snaps) if k in s and lo - 1e-6 <= t <= hi + 1e-6]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def jain(xs):
    s, s2 = sum(xs), sum(x * x for x in xs)
    return 1.0 if s2 == 0 else s * s / (len(xs) * s2)


def neighbour(seconds):
    """Iterations per second of a CPU-bound loop running for `seconds`."""
    code = ("import time\nn=0\nend=time.monotonic()+%f\nwhile True:\n  for _ in range(20000): pass\n  n+=1\n"
            "  if time.monotonic()>=end: break\nprint(n/%f)\n" % (seconds, seconds))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def clients(urls, seconds, extra=()):
    return [subprocess.Popen(["ip", "netns", "exec", CLI, "curl", "-s", "-o", "/dev/null", "--max-time", f"{seconds}",
                              *extra, u], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for u in urls]


def wait_clients(ps):
    # curl exits 28 when --max-time ends a transfer: that is the plan here.
    return [p.wait() for p in ps]


def measure(server, n, seconds, dt=1.0, with_neighbour=True):
    """N downloads for `seconds`; per-transfer bytes every dt."""
    smp = Sampler(dt)
    smp.start()
    c0, t0 = cpu_ns(), time.monotonic()
    nb = neighbour(seconds - 1) if with_neighbour else None
    rcs = wait_clients(clients([server.url(i) for i in range(n)], seconds))
    wall = time.monotonic() - t0
    cpu = (cpu_ns() - c0) / 1e9
    time.sleep(dt)
    smp.stop = True
    smp.join()
    it = float(nb.communicate()[0].strip() or 0) if nb else None
    return smp, cpu, wall, it, rcs
