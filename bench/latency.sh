#!/usr/bin/env bash
# Per-file latency of small transfers: Sluice FTP and HTTP against vsftpd
# and nginx on loopback, by hand.
#
#   bench/latency.sh [SLUICE_BIN] [LABEL=BIN]...
#
# SLUICE_BIN defaults to target/release/sluice (label "sluice"); more
# sluice binaries (say the one before a change) are measured in the same
# run, e.g.  bench/latency.sh target/release/sluice before=/tmp/sluice-old
#
# One 1 KiB file (SIZE=bytes to change it) is fetched N times (default
# 1000) in a row, two ways:
#   session  one logged-in FTP session (EPSV, RETR, 226 per file) or one
#            keep-alive HTTP connection, the per-file cost of a tree
#            transfer (Python ftplib / http.client, timed around each file);
#   curl     one `curl` per file (connect, log in, transfer, quit; curl's
#            own time_total, so its process start is not counted).
# Each server gets the same client. Per run: p50, p99 and max in ms. Runs
# interleave the servers (run 1 of each, then run 2, ...) so machine noise
# spreads over all of them; the table shows min / median / max over RUNS
# (default 3) runs. Env: N, RUNS, SIZE, MODES ("session curl"), KEEP=1
# keeps the temp dir.
#
# curl 7.88 (Debian 12) waits ~200 ms after some EPSV replies before it
# connects, against any server (its timer, not the server: strace shows it
# polling nothing after the 229); the curl rows' p99 shows that, not the
# server.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${1:-${SLUICE_BIN:-$here/target/release/sluice}}
configs=("sluice=$SLUICE")
[ $# -gt 1 ] && configs+=("${@:2}")
N=${N:-1000}
RUNS=${RUNS:-3}
SIZE=${SIZE:-1024}
MODES=${MODES:-session curl}
for t in curl nginx vsftpd python3; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "bench/latency.sh: needs $t" >&2; exit 1; }
done
for c in "${configs[@]}"; do
    [ -x "${c#*=}" ] || { echo "bench/latency.sh: no sluice binary at ${c#*=} (cargo build --release -p sluice-server)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
VSFTPD=$(command -v vsftpd || echo /usr/sbin/vsftpd)

work=$(mktemp -d /tmp/sluice-bench-latency.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

root=$work/root
mkdir -p "$root" "$work/empty"
chmod 755 "$root"
head -c "$SIZE" /dev/urandom >"$root/one"
chmod 644 "$root/one"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench/latency.sh: nothing listening on $1" >&2
    return 1
}

# label kind(ftp|http) port
targets=()

for c in "${configs[@]}"; do
    label=${c%%=*}
    fp=$(free_port); hp=$(free_port)
    "${c#*=}" serve "$root" --ftp "127.0.0.1:$fp" --http "127.0.0.1:$hp" \
        >"$work/$label.out" 2>"$work/$label.err" &
    pids+=("$!")
    wait_port "$fp"; wait_port "$hp"
    targets+=("$label FTP|ftp|$fp" "$label HTTP|http|$hp")
done

vp=$(free_port)
cat >"$work/vsftpd.conf" <<CONF
listen=YES
listen_ipv6=NO
listen_address=127.0.0.1
listen_port=$vp
background=NO
seccomp_sandbox=NO
anonymous_enable=YES
local_enable=NO
anon_root=$root
no_anon_password=YES
write_enable=NO
pasv_enable=YES
connect_from_port_20=NO
xferlog_enable=NO
dirmessage_enable=NO
hide_ids=YES
delay_failed_login=0
secure_chroot_dir=$work/empty
max_per_ip=0
max_clients=0
CONF
"$VSFTPD" "$work/vsftpd.conf" >"$work/vsftpd.log" 2>&1 &
pids+=("$!")
wait_port "$vp"
targets+=("vsftpd|ftp|$vp")

np=$(free_port)
mkdir -p "$work/nginx/tmp"
cat >"$work/nginx/nginx.conf" <<CONF
daemon off;
user root;
worker_processes $(nproc);
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx/tmp; proxy_temp_path $work/nginx/tmp;
    fastcgi_temp_path $work/nginx/tmp; uwsgi_temp_path $work/nginx/tmp; scgi_temp_path $work/nginx/tmp;
    sendfile on;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$np; root $root; }
}
CONF
"$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=("$!")
wait_port "$np"
targets+=("nginx|http|$np")

# Times N sequential transfers on one session; prints one value (seconds) a line.
cat >"$work/session.py" <<'PY'
import ftplib, http.client, sys, time
kind, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
if kind == "ftp":
    f = ftplib.FTP()
    f.connect("127.0.0.1", port)
    f.login()
    f.voidcmd("TYPE I")
    for _ in range(n):
        t = time.perf_counter()
        f.retrbinary("RETR one", lambda b: None)
        out.append(time.perf_counter() - t)
    f.quit()
else:
    c = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", "/one")
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"HTTP {r.status}")
        out.append(time.perf_counter() - t)
print("\n".join(f"{x:.6f}" for x in out))
PY

results=$work/results.tsv
: >"$results"
summarize() { # label mode file
    python3 - "$1" "$2" "$3" >>"$results" <<'PY'
import sys
label, mode, path = sys.argv[1:]
v = sorted(float(x) for x in open(path) if x.strip())
q = lambda p: v[min(len(v) - 1, int(len(v) * p))] * 1e3
print(f"{label}\t{mode} p50 ms\t{q(0.5):.3f}")
print(f"{label}\t{mode} p99 ms\t{q(0.99):.3f}")
print(f"{label}\t{mode} max ms\t{v[-1] * 1e3:.3f}")
PY
}

echo "# $N sequential transfers of $SIZE bytes, $RUNS runs, modes: $MODES" >&2
for t in "${targets[@]}"; do # warm-up
    IFS='|' read -r label kind port <<<"$t"
    python3 "$work/session.py" "$kind" "$port" 50 >/dev/null
done
for i in $(seq "$RUNS"); do
    for mode in $MODES; do
        for t in "${targets[@]}"; do
            IFS='|' read -r label kind port <<<"$t"
            f=$work/times
            if [ "$mode" = session ]; then
                python3 "$work/session.py" "$kind" "$port" "$N" >"$f"
            else
                : >"$f"
                for _ in $(seq "$N"); do
                    curl -sS -o /dev/null -w '%{time_total}\n' "$kind://127.0.0.1:$port/one" >>"$f"
                done
            fi
            summarize "$label" "$mode" "$f"
            echo "  run $i $mode $label: $(tail -3 "$results" | cut -f2,3 | tr '\t\n' ' ')" >&2
        done
    done
done
uptime >&2

python3 - "$results" <<'PY'
import sys, statistics
rows, order = {}, []
for line in open(sys.argv[1]):
    label, metric, value = line.rstrip("\n").split("\t")
    if (label, metric) not in rows:
        rows[(label, metric)] = []
        order.append((label, metric))
    rows[(label, metric)].append(float(value))
print("| server | metric | min | median | max |")
print("|---|---|---:|---:|---:|")
for metric in sorted({m for _, m in order}, key=lambda m: [k[1] for k in order].index(m)):
    for key in [k for k in order if k[1] == metric]:
        v = rows[key]
        print(f"| {key[0]} | {key[1]} | {min(v):.3f} | {statistics.median(v):.3f} | {max(v):.3f} |")
PY
