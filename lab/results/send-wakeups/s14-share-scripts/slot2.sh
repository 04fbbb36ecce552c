#!/bin/sh
# Session 14, helper share, lock slot 12:00-12:10 UTC:
#   flock /work/lab.lock sh /work/wt-scratch/share/slots/slot2.sh
# Runs from /work/wt-scratch/share/root, whose lab/experiments/send-wakeups.toml is the
# repository's with the 1 Mbit/s class only (the loopback class is in slot 1's run).
# Every hold ends by 12:09:40 (timeout).
B=/work/wt-scratch/share/bin        # branch share at 9cbc440
BB=/work/wt-scratch/share/bin-base  # the same without c1afb8b (a missing chunk goes by the copy path)
S=/work/wt-scratch/share
cd $S/root
left() { echo $(( $(date -d 12:09:40 +%s) - $(date +%s) )); }
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "start $(date +%T) load $(load)"
for r in 1 2 3; do
  [ $(left) -gt 110 ] || break
  timeout -s INT $(left) chrt -r 50 $B/sluice-lab run send-wakeups --repeat 1 \
    --servers sluice-default,sluice-sharing-off,nginx --out s14-share-r$r
  echo "rep $r done $(date +%T) load $(load)"
done
sh $S/slots/evict_watch.sh > $S/slot2-evict.log 2>&1 & EV=$!
sh $S/sample.sh $S/slot2-mem.log & SMP=$!
if [ $(left) -gt 75 ]; then
  timeout -s INT $(left) chrt -r 50 $B/sluice-lab run send-wakeups --repeat 1 \
    --servers sluice-default,sluice-sharing-off --out s14-share-pageout
  echo "pageout (branch) done $(date +%T) load $(load)"
fi
if [ $(left) -gt 40 ]; then
  timeout -s INT $(left) chrt -r 50 $BB/sluice-lab run send-wakeups --repeat 1 \
    --servers sluice-sharing-off --out s14-share-pageout-base
  echo "pageout (base) done $(date +%T) load $(load)"
fi
kill $EV $SMP
cd /work/wt/share
if [ $(left) -gt 35 ]; then
  timeout -s INT $(left) chrt -r 50 python3 bench/dlcost.py --data $S/dlcost-data --runs 3 --cases 16c,4s \
    --client $B/sluice nginx sluice=$B/sluice sluice-sharing-off=$B/sluice,--sharing=off > $S/slot2-dlcost.md 2> $S/slot2-dlcost.err
  echo "dlcost done $(date +%T) load $(load)"
fi
