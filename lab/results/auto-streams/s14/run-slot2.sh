#!/bin/bash
while [ "$(date -u +%H%M)" -lt 1220 ]; do sleep 5; done
S=/work/wt-scratch/transport
bash $S/slot.sh $S/v3 $S/s14b 1230 v3 c4-0.1% c2-0.1% &&
bash $S/slot.sh $S/base $S/s14b 1230 base c4-0.1% c2-0.1% &&
bash $S/slot.sh $S/v3 $S/s14b 1230 v3 drs1g drs400 c4-0 trace-c2-0 single-0.1%
