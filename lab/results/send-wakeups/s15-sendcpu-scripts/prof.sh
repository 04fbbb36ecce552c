#!/bin/sh
# Profiles a lab server (sluice by executable path, or nginx) for SECS seconds
# from DELAY seconds after it appears: perf record -F 499 -g, perf stat with
# per-syscall counts, context switches and CPU, and the bytes the server's
# network namespace sent in the same window (/proc/PID/net/dev, all but lo).
# Usage: sh prof.sh EXE|nginx OUT DELAY SECS
set -u
what=$1 out=$2 delay=$3 secs=$4
mkdir -p "$out"
pids=
i=0
while [ -z "$pids" ] && [ $i -lt 3000 ]; do
    if [ "$what" = nginx ]; then
        pids=$(pgrep -f "master process .*work/send-wakeups/srv-nginx" | head -1)
    else
        for p in $(pgrep -x sluice || true); do
            if [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$what" ]; then
                pids=$p
                break
            fi
        done
    fi
    i=$((i + 1))
    [ -n "$pids" ] || sleep 0.1
done
[ -n "$pids" ] || { echo "prof: no $what process" >&2; exit 1; }
sleep "$delay"
# nginx: the workers appear after the master; take them all now.
if [ "$what" = nginx ]; then
    pids="$pids,$(pgrep -P "$pids" | tr '\n' ',' | sed 's/,$//')"
fi
first=${pids%%,*}
tx() { awk 'NR>2 && $1 != "lo:" { s += $10 } END { printf "%d\n", s }' /proc/$first/net/dev; }
cpu() { for p in $(echo "$pids" | tr ',' ' '); do awk '{ print $14 + $15 }' /proc/$p/stat; done | awk '{ s += $1 } END { printf "%d\n", s }'; }
EV="raw_syscalls:sys_enter,context-switches,task-clock,syscalls:sys_enter_sendfile64,syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_getsockopt,syscalls:sys_enter_setsockopt,syscalls:sys_enter_cachestat,syscalls:sys_enter_futex,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_pread64,syscalls:sys_enter_preadv2,syscalls:sys_enter_fadvise64,syscalls:sys_enter_splice,syscalls:sys_enter_ioctl,syscalls:sys_enter_sched_yield,syscalls:sys_enter_clock_nanosleep,syscalls:sys_enter_nanosleep,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap,syscalls:sys_enter_madvise,syscalls:sys_enter_close,syscalls:sys_enter_accept4,syscalls:sys_enter_openat,syscalls:sys_enter_newfstatat,syscalls:sys_enter_statx,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_timerfd_settime,syscalls:sys_enter_rt_sigprocmask,syscalls:sys_enter_mprotect,syscalls:sys_enter_brk,syscalls:sys_enter_getsockname,syscalls:sys_enter_getpeername,syscalls:sys_enter_shutdown,syscalls:sys_enter_lseek"
txp() { awk 'NR>2 && $1 != "lo:" { s += $11 } END { printf "%d\n", s }' /proc/$first/net/dev; }
cat /proc/$first/net/snmp /proc/$first/net/netstat > "$out/net0.txt"
tx0=$(tx); p0=$(txp); c0=$(cpu); t0=$(date +%s.%N)
perf stat -e "$EV" -p "$pids" -o "$out/syscalls.txt" -- sleep "$secs" &
st=$!
perf record -q -e syscalls:sys_enter_setsockopt,syscalls:sys_enter_getsockopt -o "$out/opts.data" -p "$pids" -- sleep "$secs" 2>/dev/null &
op=$!
perf record -q -F 499 -g -o "$out/perf.data" -p "$pids" -- sleep "$secs" 2>/dev/null
wait $st
wait $op
tx1=$(tx); p1=$(txp); c1=$(cpu); t1=$(date +%s.%N)
cat /proc/$first/net/snmp /proc/$first/net/netstat > "$out/net1.txt"
echo "pids $pids window $t0 $t1 tx_bytes $((tx1 - tx0)) tx_packets $((p1 - p0)) cpu_ticks $((c1 - c0)) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/window.txt"
perf report -i "$out/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null \
    | grep -v '^$' | head -80 > "$out/perf-flat.txt"
perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -v '^$' | head -400 > "$out/perf-report.txt"
perf report -i "$out/perf.data" --children --sort symbol --stdio -g none 2>/dev/null \
    | grep -v '^$' | head -120 > "$out/perf-callers.txt"
perf script -i "$out/opts.data" -F event,trace 2>/dev/null | sed -e 's/fd: 0x[0-9a-f]*, //' -e 's/, optval.*//' | sort | uniq -c | sort -rn > "$out/sockopts.txt"
rm -f "$out/opts.data"
echo "prof: $what $pids, $secs s from +$delay s, in $out"
