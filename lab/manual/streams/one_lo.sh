#!/bin/bash
# like one.sh on the host loopback: server CPU 0, client + BUSY loops CPU 1
R=/work/targets/streams/release
BUSY=$1; FLAGS=$2; URL=$3
pids=()
for i in $(seq $BUSY); do taskset -c 1 sh -c 'while :; do :; done' & pids+=($!); done
out=$(taskset -c 1 $R/sluice get -q --stats=json $FLAGS $URL /dev/null 2>&1)
for p in "${pids[@]}"; do kill $p; done
wait 2>/dev/null
echo "$out" | python3 -c "
import json,sys
txt=sys.stdin.read()
j=[json.loads(l) for l in txt.splitlines() if l.startswith('{')]
if not j: print('FAIL', txt[:300]); sys.exit()
j=j[0]
mb=j['bytes']/j['seconds']/1e6
print('busy=$BUSY flags=[$FLAGS] MB/s=%.1f s=%.2f auto=%d peak=%d run_delay_ms=%.0f unread_peak_kB=%.0f unread_full=%d stalls=%d prio=%d' % (mb, j['seconds'], j['streams_auto'], j['streams_peak'], j['drain_run_delay_micros']/1e3, j['unread_peak']/1e3, j['unread_full_wakes'], j['receive_stalls'], j['drain_priority']))
"
