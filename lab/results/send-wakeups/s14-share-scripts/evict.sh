# evict.sh BIN N: N slow readers (--sharing off) through the local linkem; at 6 s the file is
# paged out (what DAMON's pageout of idle regions does to parts of a warm file); prints the
# server cgroup's peak memory and the engine's disk-read counters.
B=$1; n=$2
CG=/sys/fs/cgroup/memory/shr-test; rmdir $CG 2>/dev/null; mkdir -p $CG
cat data/f64 > /dev/null
nice -n 19 sh -c "echo \$\$ > $CG/cgroup.procs && exec ip netns exec shr-s $B serve data --ftp 10.99.0.1:2121 --no-http --sharing off --metrics 10.99.0.1:9100" > srv.out 2> srv.err & SP=$!
sleep 1
ip netns exec shr-c nice -n 19 python3 slowcli.py 2121 $n 16 10.99.0.1 2>cli.err & CP=$!
sleep 6
python3 -c "import os; fd=os.open('data/f64', os.O_RDONLY); os.posix_fadvise(fd,5<<20,1<<20,os.POSIX_FADV_DONTNEED)"
sleep 8
echo "== $B: max_usage MiB $(( $(cat $CG/memory.max_usage_in_bytes) >> 20 ))"
ip netns exec shr-s curl -s 10.99.0.1:9100/metrics | grep -v "^#" | grep -v " 0$" | grep -v "_seconds|limit"
wait $CP; kill $SP; wait $SP 2>/dev/null
