#!/bin/bash
# one.sh BUSY "client flags" URL -> one line of results
# The client and BUSY busy loops share CPU 1.
R=/work/targets/streams/release
BUSY=$1; FLAGS=$2; URL=$3
pids=()
for i in $(seq $BUSY); do taskset -c 1 sh -c 'while :; do :; done' & pids+=($!); done
export NSTAT_HISTORY=/tmp/st/lab/nstat.S
ip netns exec stS nstat -n >/dev/null
out=$(ip netns exec stC taskset -c 1 $R/sluice get -q --stats=json $FLAGS $URL /dev/null 2>&1)
ns=$(ip netns exec stS nstat -z TcpRetransSegs TcpExtTCPTimeouts TcpExtTCPSpuriousRTOs TcpExtTCPLossProbes 2>/dev/null | awk 'NR>1{printf "%s=%s ",$1,$2}')
for p in "${pids[@]}"; do kill $p; done
wait 2>/dev/null
echo "$out" | python3 -c "
import json,sys
txt=sys.stdin.read()
j=[json.loads(l) for l in txt.splitlines() if l.startswith('{')]
if not j: print('FAIL', txt[:300]); sys.exit()
j=j[0]
mb=j['bytes']/j['seconds']/1e6
print('busy=$BUSY flags=[$FLAGS] ep=%s MB/s=%.1f s=%.2f streams_auto=%d peak=%d run_delay_ms=%.0f unread_peak_kB=%.0f unread_full=%d ooo=%d prio=%d limit=%s' % (' '.join('%.1f:%d:%.0f'%(e['at'],e['streams'],e['mb_per_s']) for e in j.get('streams_epochs',[])), mb, j['seconds'], j['streams_auto'], j['streams_peak'], j['drain_run_delay_micros']/1e3, j['unread_peak']/1e3, j['unread_full_wakes'], j['rcv_ooo_packets'], j['drain_priority'], j['limit']['text']), end=' ')
"
echo "sender: $ns"
