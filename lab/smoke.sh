#!/bin/sh
# Smoke run of every lab experiment (small sizes, one repetition; a few minutes).
# Needs root, /dev/net/tun and cgroup v1 (the project's machines and CI have them).
# Usage: sh lab/smoke.sh            (from the repository root)
# Results: lab/results/NAME/smoke/ (results.md, results.json, *.png).
set -eu
cd "$(dirname "$0")/.."
need=""
for t in globus-gridftp-server:globus-gridftp-server-progs globus-url-copy:globus-gass-copy-progs \
         vsftpd:vsftpd nginx:nginx iperf3:iperf3 lftp:lftp rclone:rclone wget:wget curl:curl perf:linux-perf ss:iproute2 tc:iproute2; do
    command -v "${t%%:*}" >/dev/null 2>&1 || need="$need ${t#*:}"
done
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$need fonts-dejavu-core"
if [ -n "$need" ]; then
    echo "lab smoke: installing$need"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
# nginx/vsftpd packages may start system services; the lab uses its own ports.
cargo build --release -p sluice-server -p sluice-lab
T="${CARGO_TARGET_DIR:-target}/release"
failed=0
passed=0
for e in $("$T/sluice-lab" list | awk '{print $1}'); do
    echo "== lab smoke: $e"
    if "$T/sluice-lab" run "$e" --smoke >/dev/null; then
        passed=$((passed + 1))
        # Every configured server must have produced numbers: a "failed" note fails the smoke
        # (rows marked optional in the experiment, e.g. a flag still being added, excepted).
        if grep "failed" "lab/results/$e/smoke/results.md" | grep -qv "(optional row)"; then
            echo "lab smoke: $e ran but some transfers failed:"; grep "failed" "lab/results/$e/smoke/results.md" | grep -v "(optional row)"
            passed=$((passed - 1)); failed=$((failed + 1))
        fi
    else
        failed=$((failed + 1))
    fi
done
# Experiments driven by Python scripts (own namespaces; sluice and linkem from $T);
# each exits non-zero when a row failed.
py_smoke() { # NAME SCRIPT [ARGS...]
    name=$1; shift
    echo "== lab smoke: $name"
    if python3 "$@" --bin "$T" --smoke >/dev/null; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
}
py_smoke auto-streams lab/auto_streams.py --out lab/results/auto-streams
py_smoke receiver-load lab/receiver_load.py --out lab/results/receiver-load
py_smoke cue-scaling lab/cue.py scaling
py_smoke cue-caps lab/cue.py caps
py_smoke datasets lab/datasets.py --out lab/results/datasets
py_smoke drs-wan lab/drs_wan.py --out lab/results/drs-wan
echo "lab-smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
