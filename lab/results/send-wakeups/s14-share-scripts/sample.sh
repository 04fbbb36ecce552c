# sample.sh OUT: every 2 s, each lab server cgroup's memory.stat (rss, cache, kmem) and the sluice
# processes' RSS and engine counters (diagnosis of the alone state's memory; run beside sluice-lab).
out=$1; : > $out
while true; do
  for g in /sys/fs/cgroup/memory/sluice-lab/*/; do
    [ -f $g/memory.usage_in_bytes ] || continue
    echo "$(date +%T) $g usage=$(( $(cat $g/memory.usage_in_bytes) >> 20 ))MiB kmem=$(( $(cat $g/memory.kmem.usage_in_bytes 2>/dev/null || echo 0) >> 20 ))MiB $(grep -E '^(rss|cache|mapped_file|shmem) ' $g/memory.stat | tr '\n' ' ')" >> $out
    for p in $(cat $g/cgroup.procs); do
      c=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)
      case "$c" in *sluice*serve*) ;; *) continue;; esac
      echo "  pid $p $(grep -E 'VmRSS|RssAnon|Threads' /proc/$p/status | tr -s ' \t\n' ' ')" >> $out
      m=$(echo "$c" | grep -o -- '--metrics [0-9.:]*' | cut -d' ' -f2)
      ns=$(ip netns identify $p 2>/dev/null)
      [ -n "$m" ] && ip netns exec ${ns:-default} curl -s -m 1 http://$m/metrics 2>/dev/null | grep -E "^sluice_engine_(bytes|disk_reads|send_calls|wakeups|shared)" | tr '\n' ' ' >> $out; echo >> $out
    done
  done
  sleep 2
done
