#!/bin/sh
# naps slots (session 15). Run as:
#   END=14:40 flock /work/lab.lock chrt -r 50 sh lab/results/tpf-mixed-rates/s15-naps-scripts/slot.sh
# NEW = this branch's build (bin dir), N = suffix of the output dirs; BASE = main's build (/work/bin15).
# Beside every sluice run, bench/thread_cost.py samples the server's threads.
# Runs from a scratch root whose lab/experiments are this worktree's tpf-abort and
# tpf-mixed-rates plus one measurement-only row, sluice-b6q12 (the default with
# --prefetch-batch 6 --prefetch-queue-depth 12); its other lab/ entries, results included,
# are symlinks into this worktree.
cd /work/wt-scratch/naps/root
T=/work/wt/naps/bench/thread_cost.py
NEW=${NEW:-/work/wt-scratch/naps/bin}
N=${N:-1}
BASE=${BASE:-/work/bin15}
R=lab/results
END=$(date -d ${END:?} +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
say "start (NEW=$NEW N=$N)"
run() { # bindir exp servers out [extra]
  b=$1 e=$2 s=$3 o=$4; shift 4
  mkdir -p $R/$e/$o
  python3 $T sample --exe $b/sluice --out $R/$e/$o/threads.jsonl --wait 300 &
  tp=$!
  $b/sluice-lab run $e --repeat 1 --servers $s --out $R/$e/$o "$@"
  kill $tp 2>/dev/null
  python3 $T report $R/$e/$o/threads.jsonl > $R/$e/$o/threads.md 2>&1
  say "$e $b $s done"
}
[ "$(left)" -gt 200 ] && run $NEW tpf-mixed-rates sluice-default,nginx s15-naps-$N --step 2
[ "$(left)" -gt 170 ] && run $NEW tpf-abort sluice-default,nginx s15-naps-$N
[ -n "$SKIP_BASE" ] || { [ "$(left)" -gt 130 ] && run $BASE tpf-mixed-rates sluice-default s15-base --step 2; }
[ -n "$SKIP_BASE" ] || { [ "$(left)" -gt 100 ] && run $BASE tpf-abort sluice-default s15-base; }
say end
