#!/bin/sh
# cost slot 1 (11:50-12:00 UTC, session 14). Run as:
#   flock /work/lab.lock chrt -r 50 sh lab/results/tpf-abort/s14-cost-scripts/slot1.sh
# bin-base = c7a20ad (main), bin-a = 1f04747 (reads in batches, no per-sender dry nap),
# bin-b = 58c37e8 (bin-a + naps up to 4 s while the socket holds data),
# bin-c = 2125e22 (bin-b + planned reads into the cache by sendfile to /dev/null, no copy).
# Beside every sluice run, bench/thread_cost.py samples the server's threads.
cd /work/wt/cost
S=/work/wt-scratch/cost
R=lab/results
END=$(date -d 12:00 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
say start
run() { # bin exp servers out [extra]
  b=$1 e=$2 s=$3 o=$4; shift 4
  mkdir -p $R/$e/$o
  python3 bench/thread_cost.py sample --exe $S/$b/sluice --out $R/$e/$o/threads.jsonl --wait 300 &
  tp=$!
  $S/$b/sluice-lab run $e --repeat 1 --servers $s --out $R/$e/$o "$@"
  kill $tp 2>/dev/null
  python3 bench/thread_cost.py report $R/$e/$o/threads.jsonl > $R/$e/$o/threads.md 2>&1
  say "$e $b $s done"
}
[ "$(left)" -gt 170 ] && run bin-base tpf-abort sluice-default,nginx s14-cost-base
[ "$(left)" -gt 100 ] && run bin-c tpf-abort sluice-default s14-cost-c
[ "$(left)" -gt 130 ] && run bin-c tpf-mixed-rates sluice-default s14-cost-c-step2 --step 2
[ "$(left)" -gt 130 ] && run bin-base tpf-mixed-rates sluice-default s14-cost-base-step2 --step 2
[ "$(left)" -gt 100 ] && run bin-a tpf-abort sluice-default s14-cost-a
say end
