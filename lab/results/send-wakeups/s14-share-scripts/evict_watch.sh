#!/bin/sh
# evict_watch.sh: for every lab server group that appears, 16 s later (the 1000 readers have
# arrived and read 1-3 MB each; the steady window starts at 10 s of the clients' run) page one
# MiB of the served 64 MiB file, [5 MiB, 6 MiB), out of the page cache, as DAMON's pageout of idle
# regions (active on this VM: pageout of regions idle for 12 aggregation intervals) can do to a
# part of a warm file ahead of its readers. Logs when. Runs beside sluice-lab; killed by the
# slot script.
F=/var/tmp/sluice-lab/data/file-67108864.bin
seen=""
while true; do
  for g in /sys/fs/cgroup/memory/sluice-lab/srv-*; do
    [ -d "$g" ] || continue
    case " $seen " in *" $g "*) continue;; esac
    seen="$seen $g"
    ( sleep 16; python3 -c "import os; fd=os.open('$F', os.O_RDONLY); os.posix_fadvise(fd,5<<20,1<<20,os.POSIX_FADV_DONTNEED)"; \
      echo "$(date +%T) paged out [5 MiB, 6 MiB) of $F for $g: $(fincore -n -o RES $F)" ) &
  done
  # A group that went away may come back for the next server: forget it.
  for g in $seen; do [ -d "$g" ] || seen=$(echo "$seen" | sed "s|$g||"); done
  sleep 0.5
done
