#!/bin/sh
# sendcpu slot 2 (15:20-15:30 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/sendcpu/slot2.sh
# bin-final = cbb397d (the branch's final build); bin-before = /work/bin15 (main dcd05a3).
cd /work/wt/sendcpu
S=/work/wt-scratch/sendcpu
R=lab/results/send-wakeups
END=$(date -d 15:30 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)" | tee -a $S/slot2.log; }
say start
prof() { # bin server out
  b=$1 s=$2 o=$3
  mkdir -p $R/$o
  if [ "$s" = nginx ]; then w=nginx; else w=$S/$b/sluice; fi
  sh $S/prof.sh $w $R/$o/prof 13 15 > $R/$o/prof.log 2>&1 &
  $S/$b/sluice-lab run send-wakeups --repeat 1 --servers $s --out $R/$o
  wait
  say "profiled $b $s -> $o"
}
run() { # bin servers out
  b=$1 s=$2 o=$3
  $S/$b/sluice-lab run send-wakeups --repeat 1 --servers $s --out $R/$o
  say "run $b $s -> $o"
}
[ "$(left)" -gt 170 ] && run bin-final sluice-default,nginx s15-sendcpu-final-1
[ "$(left)" -gt 90 ] && prof bin-final sluice-default s15-sendcpu-prof-final
[ "$(left)" -gt 100 ] && { python3 bench/dlcost.py --data /work/wt-scratch/sendcpu/dlcost-data --small --runs 3 --cases 1s,4s,16c --client $S/bin-final/sluice nginx before=$S/bin-before/sluice after=$S/bin-final/sluice > bench/results/dlcost-s15-sendcpu.md 2> $S/dlcost-s15.err; say dlcost; }
[ "$(left)" -gt 170 ] && run bin-final sluice-default,nginx s15-sendcpu-final-2
say end
