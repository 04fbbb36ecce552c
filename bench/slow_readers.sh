#!/bin/sh
# bench/slow_readers.sh BIN LABEL: a quick diagnostic, not a lab measurement
# (run it under the lab lock like any measurement). 40 FTP readers of one
# warm 64 MiB file ($DIR/f.bin, e.g. head -c 64M /dev/urandom) read at
# 1 Mbit/s in 20 reads a second (as the lab load client), over a veth pair in
# namespaces circus-s/circus-c (no delay); perf stat of the server over 12 s
# (context switches, CPU) and the not-sent bytes of its sockets (ss).
DIR=${DIR:?set DIR to a directory holding f.bin}
bin=$1 label=$2 out=${OUT:-/tmp}/slow-readers-$label
mkdir -p $out
ip netns add circus-s; ip netns add circus-c
ip link add cz-s netns circus-s type veth peer name cz-c netns circus-c
ip -n circus-s addr add 10.99.0.1/24 dev cz-s; ip -n circus-c addr add 10.99.0.2/24 dev cz-c
for ns in circus-s circus-c; do ip -n $ns link set lo up; done
ip -n circus-s link set cz-s up; ip -n circus-c link set cz-c up
ip netns exec circus-s $bin serve "$DIR" --ftp 10.99.0.1:2121 --no-http > $out/serve.out 2> $out/serve.err &
sleep 1
pid=$(pgrep -f "^$bin serve $DIR")
ip netns exec circus-c python3 "$(dirname "$0")"/slow_readers.py 10.99.0.1 2121 40 125000 25 &
cpid=$!
sleep 8
perf stat -e context-switches,task-clock -p $pid -o $out/stat.txt -- sleep 12
ip netns exec circus-s ss -tmi state established "sport != :2121" > $out/ss.txt
wait $cpid
kill $pid; sleep 1
ip netns del circus-s; ip netns del circus-c
grep -E "context-switches|task-clock" $out/stat.txt
grep -oE "notsent:[0-9]+" $out/ss.txt | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {print "notsent n="NR" min="a[1]" med="a[int(NR/2)+1]" max="a[NR]}'
grep -oE "tb[0-9]+" $out/ss.txt | sort | uniq -c | head -3
grep -oE "bytes_acked:[0-9]+" $out/ss.txt | cut -d: -f2 | awk '{s+=$1} END {print "acked total MB", s/1e6}'
