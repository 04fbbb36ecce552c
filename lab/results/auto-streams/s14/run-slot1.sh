#!/bin/bash
while [ "$(date -u +%H%M)" -lt 1130 ]; do sleep 5; done
bash /work/wt-scratch/transport/slot.sh /work/wt-scratch/transport/v1 /work/wt-scratch/transport/s14 1140 v1 c4-0.1% c2-0.1% single-0.1% c4-0 c2-0 drs
