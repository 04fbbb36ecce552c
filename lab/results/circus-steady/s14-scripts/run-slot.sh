#!/bin/sh
# Waits for the slot's start, then holds the lab lock for the plan.
# Usage: sh run-slot.sh START END PLAN
now=$(date +%s); start=$(date -u -d "$1" +%s)
[ "$start" -gt "$now" ] && sleep $((start - now))
flock /work/lab.lock chrt -r 50 sh /work/wt-scratch/lab12/slot.sh "$2" "$3"
