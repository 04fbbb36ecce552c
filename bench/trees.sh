#!/usr/bin/env bash
# Many small files: a tree of FILES files of SIZE bytes (default 2,000 x
# 64 KiB in 20 directories) downloaded and uploaded on loopback by
# `sluice get -r` / `put -r` (FTP and HTTP, no flags) and by the peers
# (lftp mirror --parallel=8, wget -r, globus-url-copy -r -cc 4 -pp), by hand.
#
#   bench/trees.sh [SLUICE_BIN] [LABEL=BIN]...
#
# (globus-gridftp-server's -rp root is in its URLs' paths, as in tests/harness.)
# SLUICE_BIN (default target/release/sluice) serves every FTP and HTTP row
# but the peers' own servers (nginx for wget, globus-gridftp-server for
# globus-url-copy); more client binaries (LABEL=BIN, say the one before a
# change) get their own sluice rows. Per run: files/s; the table shows
# min / median / max over RUNS (default 3) runs, interleaved (run 1 of
# every row, then run 2, ...). Every run's copy is checked (file count
# and, on the first run, sha256 of every file) before it counts. Env:
# FILES, SIZE, DIRS, RUNS, ROWS (a regexp of row names to run),
# KEEP=1 keeps the temp dir.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${1:-${SLUICE_BIN:-$here/target/release/sluice}}
clients=("sluice=$SLUICE")
[ $# -gt 1 ] && clients+=("${@:2}")
FILES=${FILES:-2000}
SIZE=${SIZE:-65536}
DIRS=${DIRS:-20}
RUNS=${RUNS:-3}
ROWS=${ROWS:-.}
for t in lftp wget nginx globus-url-copy globus-gridftp-server python3 sha256sum; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "bench/trees.sh: needs $t" >&2; exit 1; }
done
for c in "${clients[@]}"; do
    [ -x "${c#*=}" ] || { echo "bench/trees.sh: no sluice binary at ${c#*=} (cargo build --release -p sluice-server)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
GRIDFTP=$(command -v globus-gridftp-server || echo /usr/sbin/globus-gridftp-server)

work=$(mktemp -d /tmp/sluice-bench-trees.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# The tree: served (read-only) from $root/tree, uploaded from there to
# $up (Sluice, writable) and $gup (globus-gridftp-server, as user ftp).
root=$work/root
up=$work/up
gup=$work/gup
mkdir -p "$root/tree" "$up" "$gup" "$work/dst"
chown ftp "$gup" 2>/dev/null || chmod 777 "$gup"
python3 - "$root/tree" "$FILES" "$SIZE" "$DIRS" <<'PY'
import os, sys
top, files, size, dirs = sys.argv[1], *map(int, sys.argv[2:])
for i in range(files):
    d = os.path.join(top, f"d{i % dirs:03}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05}"), "wb") as f:
        f.write(os.urandom(size))
PY
chmod -R a+rX "$root"
(cd "$root/tree" && find . -type f | sort | xargs sha256sum) >"$work/tree.sha256"
echo "# $FILES files of $SIZE bytes in $DIRS directories" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench/trees.sh: nothing listening on $1" >&2
    return 1
}

fp=$(free_port); hp=$(free_port); wp=$(free_port)
"$SLUICE" serve "$root" --ftp "127.0.0.1:$fp" --http "127.0.0.1:$hp" >"$work/serve.out" 2>"$work/serve.err" &
pids+=("$!")
"$SLUICE" serve "$up" --writable --ftp "127.0.0.1:$wp" --no-http >"$work/serve-up.out" 2>"$work/serve-up.err" &
pids+=("$!")
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
    server { listen 127.0.0.1:$np; root $root; autoindex on; }
}
CONF
"$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=("$!")
gp=$(free_port); gwp=$(free_port)
: >"$work/empty.conf"
for spec in "$gp:$root" "$gwp:$gup"; do
    "$GRIDFTP" -aa -anonymous-user ftp -rp "${spec#*:}" -home-dir / -c "$work/empty.conf" \
        -control-interface 127.0.0.1 -data-interface 127.0.0.1 -p "${spec%%:*}" -d error \
        >>"$work/gridftp.log" 2>&1 &
    pids+=("$!")
done
for p in "$fp" "$hp" "$wp" "$np" "$gp" "$gwp"; do wait_port "$p"; done

# Rows: name|kind(get|put)|command (DST / SRC substituted at run time).
rows=()
for c in "${clients[@]}"; do
    l=${c%%=*}; b=${c#*=}
    rows+=("$l get -r FTP|get|$b get -r -q ftp://127.0.0.1:$fp/tree/ DST")
    rows+=("$l get -r HTTP|get|$b get -r -q http://127.0.0.1:$hp/tree/ DST")
    rows+=("$l put -r FTP|put|$b put -r -q SRC ftp://127.0.0.1:$wp/t/")
done
rows+=("lftp mirror --parallel=8 (Sluice FTP)|get|lftp -c 'set cmd:fail-exit yes; open ftp://anonymous:x@127.0.0.1:$fp; mirror --parallel=8 /tree DST'")
rows+=("lftp mirror -R --parallel=8 (Sluice FTP)|put|lftp -c 'set cmd:fail-exit yes; open ftp://anonymous:x@127.0.0.1:$wp; mirror -R --parallel=8 SRC /t'")
rows+=("wget -r (Sluice HTTP)|get|cd DST && wget -q -r -np -nH --cut-dirs=1 http://127.0.0.1:$hp/tree/")
rows+=("wget -r (nginx)|get|cd DST && wget -q -r -np -nH --cut-dirs=1 -R 'index.html*' http://127.0.0.1:$np/tree/")
rows+=("globus-url-copy -r -cc 4 -pp (globus)|get|globus-url-copy -r -cc 4 -pp ftp://127.0.0.1:$gp$root/tree/ file://DST/")
rows+=("globus-url-copy -r -cc 4 -pp (Sluice)|get|globus-url-copy -r -cc 4 -pp ftp://127.0.0.1:$fp/tree/ file://DST/")
rows+=("globus-url-copy -r -cc 4 -pp up (globus)|put|globus-url-copy -r -cc 4 -pp file://SRC/ ftp://127.0.0.1:$gwp$gup/t/")
rows+=("globus-url-copy -r -cc 4 -pp up (Sluice)|put|globus-url-copy -r -cc 4 -pp file://SRC/ ftp://127.0.0.1:$wp/t/")

results=$work/results.tsv
: >"$results"
check() { # dir first_run -> 0 when the copy is whole
    local n
    n=$(find "$1" -type f ! -name 'index.html*' ! -name '.*' | wc -l)
    [ "$n" = "$FILES" ] || { echo "    $n of $FILES files" >&2; return 1; }
    if [ "$2" = 1 ]; then
        (cd "$1" && find . -type f ! -name 'index.html*' | sort | xargs sha256sum) | cmp -s - "$work/tree.sha256" ||
            { echo "    sha256 differs" >&2; return 1; }
    fi
}
for i in $(seq "$RUNS"); do
    for r in "${rows[@]}"; do
        IFS='|' read -r name kind cmd <<<"$r"
        [[ $name =~ $ROWS ]] || continue
        dst=$work/dst/copy
        rm -rf "$dst" "$up/t" "$gup/t"
        mkdir -p "$dst"
        if [ "$kind" = get ]; then
            line=${cmd//DST/$dst}; target=$dst
        else
            line=${cmd//SRC/$root/tree}
            case $cmd in *":$gwp/"*) target=$gup/t ;; *) target=$up/t ;; esac
        fi
        t0=$(date +%s.%N)
        if bash -c "$line" >"$work/row.log" 2>&1 && t1=$(date +%s.%N) && check "$target" "$i"; then
            python3 -c "import sys; print(f'{sys.argv[1]}\tfiles/s\t{int(sys.argv[2]) / (float(sys.argv[4]) - float(sys.argv[3])):.0f}')" \
                "$name" "$FILES" "$t0" "$t1" >>"$results"
            echo "  run $i $name: $(tail -1 "$results" | cut -f3) files/s" >&2
        else
            echo "  run $i $name: FAILED ($(tail -2 "$work/row.log" | tr '\n' ' '))" >&2
        fi
    done
done
uptime >&2

python3 - "$results" <<'PY'
import sys, statistics
rows, order = {}, []
for line in open(sys.argv[1]):
    label, metric, value = line.rstrip("\n").split("\t")
    if label not in rows:
        rows[label] = []
        order.append(label)
    rows[label].append(float(value))
print("| client (server) | files/s min | median | max |")
print("|---|---:|---:|---:|")
for k in order:
    v = rows[k]
    print(f"| {k} | {min(v):.0f} | {statistics.median(v):.0f} | {max(v):.0f} |")
PY
