#!/bin/sh
# cost slot 2 (08:45-08:55 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/cost/slot2.sh
# bin-c = 1bbac53 (carry, dry senders sleep, netns budget 3/4 tcp_mem[0], circus resident check)
# bin-d = bin-c with the budget at 1/2 tcp_mem[0]
cd /work/wt/cost
S=/work/wt-scratch/cost
R=lab/results
END=$(date -d 08:55 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)"; }
sock() { k=0; while [ $k -lt "$2" ]; do echo "$(date -u +%T) $(grep '^TCP:' /proc/net/sockstat)" >> "$1"; k=$((k+1)); sleep 2; done; }
say start
run() { # bin exp servers out [extra]
  b=$1 e=$2 s=$3 o=$4; shift 4
  mkdir -p $R/$e/$o
  sock $R/$e/$o/sockstat.txt 90 &
  sp=$!
  $S/$b/sluice-lab run $e --repeat 1 --servers $s --out $R/$e/$o "$@"
  kill $sp 2>/dev/null
  say "$e $b $s done"
}
[ "$(left)" -gt 170 ] && run bin-c send-wakeups sluice-default,nginx s13-cost-c
[ "$(left)" -gt 100 ] && run bin-d send-wakeups sluice-default s13-cost-d
if [ "$(left)" -gt 90 ]; then
  sh bench/profile_server.sh $S/bin-c/sluice $R/tpf-abort/s13-cost-profile-c 8 10 &
  run bin-c tpf-abort sluice-default s13-cost-profile-c
  wait
fi
[ "$(left)" -gt 120 ] && run bin-c circus-load sluice-default,nginx s13-cost-c --step 1
[ "$(left)" -gt 120 ] && run bin-c circus-load sluice-default,nginx s13-cost-c3 --step 3
say end
