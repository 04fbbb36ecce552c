#!/bin/bash
# Two namespaces joined by linkem: server stS 10.88.0.1, client stC 10.88.0.2.
# usage: setup.sh RATE RTT_MS LIMIT [LOSS]
set -e
R=/work/targets/streams/release
RATE=$1; RTT=$2; LIMIT=$3; LOSS=${4:-0}
for ns in stS stC; do
  ip netns del $ns 2>/dev/null || true
  ip netns add $ns
  ip netns exec $ns ip link set lo up
  ip netns exec $ns sysctl -q -w net.ipv4.tcp_rmem="4096 131072 33554432" net.ipv4.tcp_wmem="4096 16384 4194304" net.core.rmem_max=4194304 net.core.wmem_max=4194304
done
rm -f /tmp/st/lab/lk.sock
nohup chrt -f 10 $R/linkem run --a-ns stS --a-addr 10.88.0.1/24 --b-ns stC --b-addr 10.88.0.2/24 \
  --ctl /tmp/st/lab/lk.sock --delay=$((RTT*500))us --rate=$RATE --limit=$LIMIT --loss=$LOSS > /tmp/st/lab/linkem.log 2>&1 &
echo $! > /tmp/st/lab/linkem.pid
for i in $(seq 50); do ip netns exec stC ping -c1 -W1 10.88.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
ip netns exec stC ping -c3 -i 0.2 10.88.0.1 | tail -1
