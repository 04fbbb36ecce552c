#!/bin/sh
# naps slot 2 (session 15, 15:10-15:20 UTC). Run as:
#   END=15:20 flock /work/lab.lock chrt -r 50 sh lab/results/tpf-mixed-rates/s15-naps-scripts/slot2.sh
# bin-A = c8269406 (sockets drain at their rates between samples for the timing of reads,
#         no naps while the socket holds data, the hub's 1 s tick samples every socket and
#         drops acknowledged pages; the budget counts the sampled socket bytes);
# bin-B = the same with PlanConfig::drain_at_rate false (naps of up to 1 s back, no due timer);
# bin-D = bin-A with drain_at_rate false but senders still without naps (the planner sees the
#         sockets only at samples: the senders' own and the hub's 1 s tick);
# bin-c1m = 83ddc5a0 (drain estimate in the budget too) with drs::CONN_SEND_MEM 1 MiB.
# From the scratch root of slot.sh (sluice-b6q12 = default + --prefetch-batch 6 --prefetch-queue-depth 12).
cd /work/wt-scratch/naps/root
T=/work/wt/naps/bench/thread_cost.py
S=/work/wt-scratch/naps
R=lab/results
END=$(date -d ${END:?} +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
say start
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
[ "$(left)" -gt 180 ] && run $S/bin-A tpf-mixed-rates sluice-default,nginx s15-naps-A --step 2
[ "$(left)" -gt 100 ] && run $S/bin-A tpf-abort sluice-default,nginx s15-naps-A
[ "$(left)" -gt 95 ] && run $S/bin-D tpf-mixed-rates sluice-default s15-naps-D --step 2
[ "$(left)" -gt 55 ] && run $S/bin-D tpf-abort sluice-default s15-naps-D
[ "$(left)" -gt 95 ] && run $S/bin-B tpf-mixed-rates sluice-default s15-naps-B --step 2
[ "$(left)" -gt 55 ] && run $S/bin-B tpf-abort sluice-default s15-naps-B
[ "$(left)" -gt 55 ] && run $S/bin-A tpf-abort sluice-b6q12 s15-naps-A-b6q12
[ "$(left)" -gt 55 ] && run $S/bin-c1m tpf-abort sluice-default s15-naps-c1m
say end
