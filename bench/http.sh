#!/usr/bin/env bash
# HTTP benchmark: `sluice serve` against nginx on loopback, by hand.
#
#   bench/http.sh [SLUICE_BIN] [LABEL=BIN[,VAR=VALUE...][,--flag[=value]...]]...
#
# SLUICE_BIN defaults to target/release/sluice (label "sluice"); more
# sluice configurations (another binary, env, flags; the syntax of
# bench/dlcost.py) are measured in the same run, e.g.
#   bench/http.sh target/release/sluice before=/tmp/sluice-old \
#       shared=target/release/sluice,--runtime=shared,--workers=2
#
# 1. Throughput: a warm (page-cached) 2 GiB file fetched by curl to
#    /dev/null, from sluice (its default data path, copy, and sendfile;
#    further configurations with their defaults) and from nginx
#    (sendfile on and off). Per run: MB/s (curl's average), server CPU
#    seconds per GiB (utime+stime of every server process) and context
#    switches per GiB (voluntary+involuntary, summed over every thread).
# 2. Small files: 256 concurrent keep-alive clients (wrk -c 256) fetching
#    a 64 KiB file for DURATION seconds: requests/s and p99 latency;
#    sluice at its defaults (and the first configuration with sendfile),
#    nginx with as many worker processes as sluice has runtime workers
#    (one per core).
# Each measurement runs RUNS times (default 3); the table shows
# min / median / max. The wrk runs interleave the servers (run 1 of each,
# then run 2, ...) so machine noise spreads over all of them. Env: RUNS,
# DURATION (wrk seconds, default 10), BIG_MIB (default 2048), SKIP_BIG=1
# (small files only), KEEP=1 keeps the temp dir.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${1:-${SLUICE_BIN:-$here/target/release/sluice}}
configs=("sluice=$SLUICE")
[ $# -gt 1 ] && configs+=("${@:2}")
RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
BIG_MIB=${BIG_MIB:-2048}
WORKERS=$(nproc)
for t in curl wrk nginx python3; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "bench/http.sh: needs $t" >&2; exit 1; }
done
[ -x "$SLUICE" ] || { echo "bench/http.sh: no sluice binary at $SLUICE (cargo build --release -p sluice-server)" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d /tmp/sluice-bench-http.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

root=$work/root
mkdir -p "$root"
echo "# files: ${BIG_MIB} MiB and 64 KiB in $root" >&2
head -c $((BIG_MIB << 20)) /dev/urandom >"$root/big"
head -c 65536 /dev/urandom >"$root/small"
cat "$root/big" >/dev/null # warm the page cache

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench/http.sh: nothing listening on $1" >&2
    return 1
}

# Every pid of a server: the process and its children (nginx workers).
server_pids() { echo "$1"; pgrep -P "$1" || true; }
# utime+stime in clock ticks over all processes of the server.
cpu_ticks() {
    local t=0
    for p in $(server_pids "$1"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
# Context switches over every thread of every process of the server.
ctx_switches() {
    local n=0
    for p in $(server_pids "$1"); do
        for s in /proc/"$p"/task/*/status; do
            n=$((n + $(awk '/ctxt_switches/ {c += $2} END {print c + 0}' "$s" 2>/dev/null || echo 0)))
        done
    done
    echo "$n"
}

start_sluice() { # config data_path -> sets port, pid, label
    local spec=$1 bin envs=() flags=() part
    label=${spec%%=*}
    IFS=, read -r -a parts <<<"${spec#*=}"
    bin=${parts[0]}
    for part in "${parts[@]:1}"; do
        case $part in
        --*=*) flags+=("${part%%=*}" "${part#*=}") ;;
        --*) flags+=("$part") ;;
        *) envs+=("$part") ;;
        esac
    done
    [ -x "$bin" ] || { echo "bench/http.sh: no sluice binary at $bin" >&2; exit 1; }
    # A config's own --data-path wins over the test's.
    local dp=(--data-path "$2")
    [[ $2 == default || " ${flags[*]} " == *" --data-path "* ]] && dp=()
    port=$(free_port)
    env "${envs[@]}" "$bin" serve "$root" --no-ftp --http "127.0.0.1:$port" "${dp[@]}" \
        --http-max-connections 4096 "${flags[@]}" >"$work/$label-$2.out" 2>"$work/$label-$2.err" &
    pid=$!
    pids+=("$pid")
    wait_port "$port"
}

start_nginx() { # on|off -> sets port, pid
    port=$(free_port)
    local d=$work/nginx-$1
    mkdir -p "$d/tmp"
    cat >"$d/nginx.conf" <<CONF
daemon off;
user root;
worker_processes $WORKERS;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
    uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
    sendfile $1;
    tcp_nopush on;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$port; root $root; }
}
CONF
    "$NGINX" -c "$d/nginx.conf" -p "$d" &
    pid=$!
    pids+=("$pid")
    wait_port "$port"
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; }

results=$work/results.tsv
: >"$results"

throughput() { # label
    local url="http://127.0.0.1:$port/big" gib
    gib=$(python3 -c "print($BIG_MIB/1024)")
    curl -s -o /dev/null "$url" # one warm-up fetch
    for i in $(seq "$RUNS"); do
        local c0 x0 c1 x1 speed
        c0=$(cpu_ticks "$pid"); x0=$(ctx_switches "$pid")
        speed=$(curl -s -o /dev/null -w '%{speed_download}' "$url")
        c1=$(cpu_ticks "$pid"); x1=$(ctx_switches "$pid")
        python3 - "$1" "$speed" "$((c1 - c0))" "$((x1 - x0))" "$gib" "$(getconf CLK_TCK)" >>"$results" <<'PY'
import sys
label, speed, ticks, ctx, gib, hz = sys.argv[1:]
gib = float(gib)
print(f"{label}\tMB/s\t{float(speed)/1e6:.0f}")
print(f"{label}\tCPU s/GiB\t{int(ticks)/int(hz)/gib:.3f}")
print(f"{label}\tctx sw/GiB\t{int(ctx)/gib:.0f}")
PY
        echo "  $1 run $i: $(tail -3 "$results" | cut -f2,3 | tr '\t\n' ' ')" >&2
    done
}

small_run() { # label port run pid
    local c0 x0 c1 x1
    c0=$(cpu_ticks "$4"); x0=$(ctx_switches "$4")
    wrk -t "$WORKERS" -c 256 -d "${DURATION}s" --latency "http://127.0.0.1:$2/small" >"$work/wrk.out"
    c1=$(cpu_ticks "$4"); x1=$(ctx_switches "$4")
    python3 - "$1" "$work/wrk.out" "$((c1 - c0))" "$((x1 - x0))" "$(getconf CLK_TCK)" >>"$results" <<'PY'
import re, sys
label, path, ticks, ctx, hz = sys.argv[1:]
text = open(path).read()
rps = float(re.search(r"Requests/sec:\s*([\d.]+)", text).group(1))
m = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"{label}\treq/s (64 KiB, c=256)\t{rps:.0f}")
print(f"{label}\tp99 ms\t{float(m.group(1)) * scale:.2f}")
# Server CPU and context switches per request: steadier than req/s when
# other work shares the machine.
n = int(re.search(r"(\d+) requests in", text).group(1))
print(f"{label}\tserver CPU us/req\t{int(ticks) / int(hz) * 1e6 / max(n, 1):.1f}")
print(f"{label}\tserver ctx sw/req\t{int(ctx) / max(n, 1):.3f}")
if errors or "Socket errors" in text:
    print(f"{label}\terrors\t1", file=sys.stderr)
PY
    echo "  $1 run $3: $(tail -4 "$results" | cut -f2,3 | tr '\t\n' ' ')" >&2
}

if [ "${SKIP_BIG:-0}" != 1 ]; then
    echo "# throughput: ${BIG_MIB} MiB, curl, $RUNS runs each" >&2
    first=1
    for c in "${configs[@]}"; do
        dps=(default)
        [ $first = 1 ] && dps+=(sendfile)
        first=0
        for dp in "${dps[@]}"; do
            start_sluice "$c" "$dp"; throughput "$label ($dp)"; stop
        done
    done
    for sf in on off; do
        start_nginx "$sf"; throughput "nginx (sendfile $sf)"; stop
    done
fi
echo "# 64 KiB, wrk -c 256 -t $WORKERS, ${DURATION}s, $RUNS runs each, interleaved" >&2
labels=() ports=() spids=()
first=1
for c in "${configs[@]}"; do
    dps=(default)
    [ $first = 1 ] && dps+=(sendfile)
    first=0
    for dp in "${dps[@]}"; do
        start_sluice "$c" "$dp"; labels+=("$label ($dp)"); ports+=("$port"); spids+=("$pid")
    done
done
start_nginx on; labels+=("nginx (sendfile on, $WORKERS workers)"); ports+=("$port"); spids+=("$pid")
for k in "${!ports[@]}"; do
    wrk -t "$WORKERS" -c 256 -d 2s "http://127.0.0.1:${ports[$k]}/small" >/dev/null # warm-up
done
for i in $(seq "$RUNS"); do
    for k in "${!ports[@]}"; do
        small_run "${labels[$k]}" "${ports[$k]}" "$i" "${spids[$k]}"
    done
done
uptime >&2

python3 - "$results" <<'PY'
import sys, statistics
rows = {}
order = []
for line in open(sys.argv[1]):
    label, metric, value = line.rstrip("\n").split("\t")
    key = (label, metric)
    if key not in rows:
        rows[key] = []
        order.append(key)
    rows[key].append(float(value))
print("| server | metric | min | median | max |")
print("|---|---|---:|---:|---:|")
for key in order:
    v = rows[key]
    fmt = (lambda x: f"{x:.3f}") if max(v) < 10 else (lambda x: f"{x:.1f}") if max(v) < 100 else (lambda x: f"{x:.0f}")
    print(f"| {key[0]} | {key[1]} | {fmt(min(v))} | {fmt(statistics.median(v))} | {fmt(max(v))} |")
PY
