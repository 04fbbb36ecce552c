#!/bin/sh
# Samples the lab server's sockets (ss -tmi in sl-srv) DELAY s after BIN's
# server appears, N times every STEP s, into OUT/ss-K.txt.
bin=$1 out=$2 delay=$3 n=$4 step=$5
mkdir -p "$out"
pid= i=0
while [ -z "$pid" ] && [ $i -lt 3000 ]; do
  for p in $(pgrep -x sluice || true); do
    [ "$(readlink /proc/$p/exe 2>/dev/null)" = "$bin" ] && pid=$p && break
  done
  i=$((i+1)); [ -n "$pid" ] || sleep 0.1
done
[ -n "$pid" ] || exit 1
sleep "$delay"
k=0
while [ $k -lt "$n" ]; do
  ip netns exec sl-srv ss -tmi state established > "$out/ss-$k.txt" 2>&1
  k=$((k+1)); sleep "$step"
done
