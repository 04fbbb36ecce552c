#!/bin/bash
# sluice serve in stS on CPU 0
R=/work/targets/streams/release
[ -f /tmp/st/lab/serve.pid ] && kill $(cat /tmp/st/lab/serve.pid) 2>/dev/null
nohup ip netns exec stS taskset -c 0 $R/sluice serve /tmp/st/root --ftp 10.88.0.1:2121 --http 10.88.0.1:8080 "$@" > /tmp/st/lab/serve.log 2>&1 &
echo $! > /tmp/st/lab/serve.pid
sleep 1; grep listening /tmp/st/lab/serve.log
