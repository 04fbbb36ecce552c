#!/bin/sh
# circus slot 2 (06:10-06:22 UTC). Run as:
#   flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/circus/slot2.sh
# bin23 = the branch without the MissJudge change (DRS cap from in-flight + room, refill send buffer).
cd /work/wt/circus
T=/work/targets/circus
R=lab/results
left() { echo $(( $(date -d 06:22 +%s) - $(date +%s) )); }
echo "start $(date -u +%T) $(uptime)"
sh /work/wt-scratch/circus/sample_ss.sh $T/bin23/sluice $R/send-wakeups/s12-final/ss 16 3 4 &
"$T/bin23/sluice-lab" run send-wakeups --repeat 1 --servers sluice-default,nginx --out $R/send-wakeups/s12-final
wait
echo "send-wakeups done $(date -u +%T) $(uptime) left $(left)"
if [ "$(left)" -gt 260 ]; then
  "$T/bin23/sluice-lab" run tpf-mixed-rates --repeat 1 --step 2 --servers sluice-default,sluice-tcp --out $R/tpf-mixed-rates/s12-final-step2
  echo "tpf-mixed-rates done $(date -u +%T) $(uptime) left $(left)"
fi
if [ "$(left)" -gt 200 ]; then
  "$T/bin23/sluice-lab" run tpf-abort --repeat 1 --servers sluice-default,nginx --out $R/tpf-abort/s12-final
  echo "tpf-abort done $(date -u +%T) $(uptime) left $(left)"
fi
for step in 1 3; do
  if [ "$(left)" -gt 200 ]; then
    "$T/bin23/sluice-lab" run circus-load --repeat 1 --step $step --servers sluice-default,nginx --out $R/circus-load/s12-final
    echo "circus-load step $step done $(date -u +%T) $(uptime) left $(left)"
  fi
done
