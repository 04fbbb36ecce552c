#!/bin/sh
# sendcpu slot 1 (14:40-14:50 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/sendcpu/slot1.sh
# bin-before = /work/bin15 (main dcd05a3); bin-a = c1a463c (short sendfile = full, DRS via Flow);
# bin-b = 5b66b32 (+ one cachestat per send start); bin-c = bin-b + TCP_CORK around sends >= 4 MiB (uncommitted at 14:20)
cd /work/wt/sendcpu
S=/work/wt-scratch/sendcpu
R=lab/results/send-wakeups
END=$(date -d 14:50 +%s)
left() { echo $(( END - $(date +%s) )); }
say() { echo "$1 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) left $(left)" | tee -a $S/slot1.log; }
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
[ "$(left)" -gt 90 ] && prof bin-before sluice-default s15-sendcpu-prof-before
[ "$(left)" -gt 90 ] && prof bin-before nginx s15-sendcpu-prof-nginx
[ "$(left)" -gt 170 ] && run bin-c sluice-default,nginx s15-sendcpu-c
[ "$(left)" -gt 90 ] && run bin-a sluice-default s15-sendcpu-a
[ "$(left)" -gt 90 ] && run bin-before sluice-default s15-sendcpu-before
[ "$(left)" -gt 90 ] && prof bin-c sluice-default s15-sendcpu-prof-c
say end
