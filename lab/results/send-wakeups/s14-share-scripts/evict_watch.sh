#!/bin/sh
# evict_watch.sh: for every lab server group that appears, 18 s later (the 1000 readers are
# arriving; the steady window starts at 10 s of the clients' run) page the served 64 MiB file out
# of the page cache once, as DAMON's pageout of idle regions does to parts of a warm file on this
# VM. Logs when. Runs beside sluice-lab; killed by the slot script.
F=/var/tmp/sluice-lab/data/file-67108864.bin
seen=""
while true; do
  for g in /sys/fs/cgroup/memory/sluice-lab/srv-*; do
    [ -d "$g" ] || continue
    case " $seen " in *" $g "*) continue;; esac
    seen="$seen $g"
    ( sleep 18; python3 -c "import os; fd=os.open('$F', os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)"; \
      echo "$(date +%T) paged out $F for $g" ) &
  done
  # A group that went away may come back for the next server: forget it.
  for g in $seen; do [ -d "$g" ] || seen=$(echo "$seen" | sed "s|$g||"); done
  sleep 0.5
done
