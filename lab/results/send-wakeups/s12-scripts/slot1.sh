#!/bin/sh
# circus slot 1 (05:15-05:30 UTC). Run as (from anywhere):
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/circus/slot1.sh
# bin18 = 37fd3f2 + the MissJudge change; bin-base = f90963e (main).
cd /work/wt/circus
T=/work/targets/circus
left() { echo $(( $(date -d 05:30 +%s) - $(date +%s) )); }
echo "start $(date -u +%T) $(uptime)"
"$T/bin18/sluice-lab" run send-wakeups --repeat 1 --servers sluice-default,nginx --out s12-new
echo "send-wakeups new done $(date -u +%T) $(uptime) left $(left)"
if [ "$(left)" -gt 330 ]; then
  "$T/bin18/sluice-lab" run tpf-mixed-rates --repeat 1 --step 2 --servers sluice-default,nginx --out s12-new
  echo "tpf-mixed-rates done $(date -u +%T) $(uptime) left $(left)"
fi
if [ "$(left)" -gt 240 ]; then
  "$T/bin-base/sluice-lab" run send-wakeups --repeat 1 --servers sluice-default --out s12-base
  echo "send-wakeups base done $(date -u +%T) $(uptime) left $(left)"
fi
