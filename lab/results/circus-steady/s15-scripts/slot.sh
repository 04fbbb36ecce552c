#!/bin/sh
# Runs inorder's lock holds for one slot: each line of $PLAN is
# "SECONDS_NEEDED ARGS..." for sluice-lab; a line runs only if it can end
# before $END (HH:MM:SS UTC). Run from anywhere as:
#   flock /work/lab.lock chrt -r 50 sh slot.sh END PLAN
END=$(date -u -d "$1" +%s)
PLAN=$2
B=/work/wt-scratch/inorder/bin
LOG=/work/wt-scratch/inorder/slot-$(date -u +%H%M).log
cd /work/wt/inorder
while read -r need args; do
    [ -z "$need" ] && continue
    left=$((END - $(date +%s)))
    if [ "$left" -lt "$need" ]; then
        echo "SKIP ($left s left, needs $need): $args" | tee -a "$LOG"
        continue
    fi
    echo "$(date -u +%H:%M:%S) START $args | $(uptime)" | tee -a "$LOG"
    $B/sluice-lab $args > /dev/null 2>>"$LOG.err"
    echo "$(date -u +%H:%M:%S) END rc=$? $args | $(uptime)" | tee -a "$LOG"
done < "$PLAN"
