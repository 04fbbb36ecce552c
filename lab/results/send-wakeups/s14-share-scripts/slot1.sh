#!/bin/sh
# Session 14, helper share, lock slot 11:20-11:30 UTC. Run from /work/wt/share:
#   flock /work/lab.lock sh /work/wt-scratch/share/slots/slot1.sh
# Every hold ends by 11:29:30 (timeout).
B=/work/wt-scratch/share/bin
S=/work/wt-scratch/share
left() { echo $(( $(date -d 11:29:30 +%s) - $(date +%s) )); }
echo "start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
sh $S/sample.sh $S/slot1-mem.log & SMP=$!
timeout -s INT $(left) chrt -r 50 $B/sluice-lab run send-wakeups --repeat 1 \
  --servers sluice-sharing-off,sluice-default,sluice-sharing-circus,nginx \
  --out lab/results/send-wakeups/s14-share-slot1
kill $SMP
echo "lab done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $(left) -gt 150 ]; then
  timeout -s INT $(left) chrt -r 50 python3 bench/dlcost.py --data /work/wt-scratch/share/dlcost-data --runs 3 --cases 16c,4s --client $B/sluice \
    nginx sluice=$B/sluice sluice-sharing-off=$B/sluice,--sharing=off > $S/slot1-dlcost.md 2> $S/slot1-dlcost.err
  echo "dlcost done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
fi
