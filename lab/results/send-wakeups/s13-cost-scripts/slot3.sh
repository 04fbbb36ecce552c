#!/bin/sh
# cost slot 3 (09:15-09:25 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/cost/slot3.sh
# bin-e = 15e9e6e (the branch's final engine: carry, dry senders sleep, netns budget 3/4, circus resident check, cachestat before RWF_NOWAIT)
# bin-f = bin-e with drs::CONN_SEND_MEM 1 MiB (not committed: a variant for the lead)
cd /work/wt/cost
S=/work/wt-scratch/cost
R=lab/results
END=$(date -d 09:25 +%s)
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
[ "$(left)" -gt 170 ] && run bin-e send-wakeups sluice-default,nginx s13-cost-final
[ "$(left)" -gt 110 ] && run bin-e tpf-abort sluice-default,nginx s13-cost-final
[ "$(left)" -gt 110 ] && run bin-e circus-load sluice-default,nginx s13-cost-final --step 1
[ "$(left)" -gt 110 ] && run bin-e circus-load sluice-default,nginx s13-cost-final3 --step 3
if [ "$(left)" -gt 85 ]; then
  sh bench/profile_server.sh $S/bin-f/sluice $R/send-wakeups/s13-cost-f-profile 14 10 &
  run bin-f send-wakeups sluice-default s13-cost-f-profile
  wait
fi
say end
