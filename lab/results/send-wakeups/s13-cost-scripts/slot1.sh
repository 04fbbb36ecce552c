#!/bin/sh
# cost slot 1 (08:15-08:25 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/cost/slot1.sh
# bin-base = f102c45 (main), bin-a = refill carried on the Flow + dry senders sleep, bin-b = bin-a + budget.
cd /work/wt/cost
S=/work/wt-scratch/cost
R=lab/results
END=$(date -d 08:25 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
sock() { # samples /proc/net/sockstat (TCP mem pages, host-wide) every 2 s into $1 for $2 samples
  k=0; while [ $k -lt "$2" ]; do echo "$(date -u +%T) $(grep '^TCP:' /proc/net/sockstat)" >> "$1"; k=$((k+1)); sleep 2; done; }
say start
run() { # bin exp servers out [extra]
  b=$1 e=$2 s=$3 o=$4; shift 4
  mkdir -p $R/$e/$o
  sock $R/$e/$o/sockstat.txt 40 &
  sp=$!
  $S/$b/sluice-lab run $e --repeat 1 --servers $s --out $R/$e/$o "$@"
  kill $sp 2>/dev/null
  say "$e $b $s done"
}
[ "$(left)" -gt 100 ] && run bin-base send-wakeups sluice-default s13-cost-base
[ "$(left)" -gt 150 ] && run bin-a send-wakeups sluice-default,nginx s13-cost-a
[ "$(left)" -gt 100 ] && run bin-b send-wakeups sluice-default s13-cost-b
[ "$(left)" -gt 100 ] && run bin-base tpf-abort sluice-default s13-cost-base
[ "$(left)" -gt 130 ] && run bin-a tpf-abort sluice-default,nginx s13-cost-a
if [ "$(left)" -gt 120 ]; then
  sh bench/profile_server.sh $S/bin-a/sluice $R/circus-load/s13-cost-profile-a 18 10 &
  run bin-a circus-load sluice-default s13-cost-profile-a --step 1
  wait
fi
say end
