#!/bin/sh
# Profiles the first `sluice` server a lab run starts (issue 12's cost
# target: where the CPU and the wake-ups go). Run it beside the lab
# inside the same lock and SCHED_RR hold, so perf runs at the same
# priority as the measured processes:
#
#   flock /work/lab.lock chrt -r 50 sh -c '
#     sh bench/profile_server.sh BIN OUT 12 10 &
#     BIN_DIR/sluice-lab run send-wakeups --repeat 1 --servers sluice-default --out ...
#     wait'
#
# BIN: the sluice binary the lab runs (only a process whose executable is
# this file is profiled: other worktrees' tests may run a `sluice` too).
# OUT: directory for perf.data, perf-report.txt (flat, by self time),
# perf-callers.txt and stat.txt (context switches, CPU, per thread).
# DELAY: seconds after the server appears (past the arrivals); SECS: how
# long to record. The profile costs the server a few % of CPU: a run
# profiled is not the run whose CPU s/GiB is reported.
set -eu
bin=$1 out=$2 delay=$3 secs=$4
mkdir -p "$out"
pid=
i=0
while [ -z "$pid" ] && [ $i -lt 3000 ]; do
    for p in $(pgrep -x sluice || true); do
        if [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$bin" ]; then
            pid=$p
            break
        fi
    done
    i=$((i + 1))
    [ -n "$pid" ] || sleep 0.1
done
[ -n "$pid" ] || { echo "profile_server: no $bin process" >&2; exit 1; }
sleep "$delay"
perf stat -e context-switches,cpu-migrations,task-clock --per-thread -p "$pid" \
    -o "$out/stat.txt" -- sleep "$secs" &
stat=$!
perf record -q -F 499 -g -o "$out/perf.data" -p "$pid" -- sleep "$secs" 2>/dev/null
wait $stat
perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -v '^$' | head -150 > "$out/perf-report.txt"
perf report -i "$out/perf.data" --children --sort symbol --stdio -g none 2>/dev/null \
    | grep -v '^$' | head -120 > "$out/perf-callers.txt"
echo "profile_server: pid $pid, $secs s from +$delay s, in $out"
