#!/bin/sh
# cost slot 2 (12:30-12:40 UTC, session 14). Run as:
#   flock /work/lab.lock chrt -r 50 sh lab/results/tpf-abort/s14-cost-scripts/slot2.sh
# bin-d = the branch's last engine (bin-c with the sender's naps back at 1 s); bin-a = 1f04747
# (batches, no dry nap, scratch-buffer reads); bin-base = c7a20ad (main).
cd /work/wt/cost
S=/work/wt-scratch/cost
R=lab/results
FINAL=${FINAL:-bin-d}
END=$(date -d 12:40 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
say "start ($FINAL)"
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
[ "$(left)" -gt 200 ] && run $FINAL tpf-mixed-rates sluice-default,nginx s14-cost-d-step2 --step 2
[ "$(left)" -gt 170 ] && run $FINAL tpf-abort sluice-default,nginx s14-cost-d
if [ "$(left)" -gt 100 ]; then
  python3 bench/dlcost.py --runs 3 --small --data $S/dlcost-data --client $S/$FINAL/sluice base=$S/bin-base/sluice final=$S/$FINAL/sluice \
    > bench/results/dlcost-s14-cost.md 2> bench/results/dlcost-s14-cost.log; rm -rf $S/dlcost-data
  say "dlcost done"
fi
[ "$(left)" -gt 100 ] && run bin-a tpf-mixed-rates sluice-default s14-cost-a-step2 --step 2
say end
