#!/bin/bash
# transport's lock slots: every hold ends by the slot's end.
# usage: slot.sh BIN OUT END(HHMM) TAG piece...
#   piece: cN-LOSS (competing N automatic transfers), single-LOSS, drs
set -u
cd /work/wt/transport
BIN=$1; OUT=$2; END=$3; TAG=$4; shift 4
mkdir -p $OUT
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a $OUT/slot.log; }
left() { # minutes left to END
  now=$(date -u +%H%M); echo $(( (10#${END%??} * 60 + 10#${END#??}) - (10#${now%??} * 60 + 10#${now#??}) ))
}
for p in "$@"; do
  case $p in
    c*) need=2 ;; single*) need=2 ;; drs|drs1g) need=3 ;; *) need=2 ;;
  esac
  if [ "$(left)" -lt "$need" ]; then log "skip $p: $(left) min left"; continue; fi
  log "start $p"
  case $p in
    c*) n=${p#c}; n=${n%%-*}; loss=${p#*-}
        flock /work/lab.lock chrt -r 50 python3 lab/auto_streams.py --bin $BIN --out $OUT/$TAG-$p --repeat 0 --losses $loss --compete $n --secs-compete 20 > $OUT/$TAG-$p.log 2>&1 ;;
    single-*) loss=${p#single-}; fx=16; [ "$loss" = 0 ] && fx=1
        flock /work/lab.lock chrt -r 50 python3 lab/auto_streams.py --bin $BIN --out $OUT/$TAG-$p --repeat 1 --losses $loss --fixed $fx --protos http --compete "" > $OUT/$TAG-$p.log 2>&1 ;;
    drs1g) flock /work/lab.lock chrt -r 50 python3 lab/drs_wan.py --repeat 2 --append --out $OUT/drs --bin $TAG=$BIN --rows 8,5 --path 1g100 --size 512M >> $OUT/drs-$TAG.log 2>&1 ;;
    drs400) flock /work/lab.lock chrt -r 50 python3 lab/drs_wan.py --repeat 1 --append --out $OUT/drs --bin $TAG=$BIN --rows 8,5 --path 400m100 --size 512M >> $OUT/drs-$TAG.log 2>&1 ;;
    trace-c*) n=${p#trace-c}; n=${n%%-*}; loss=${p##*-}
        flock /work/lab.lock chrt -r 50 python3 lab/auto_streams.py --bin $BIN --out $OUT/$TAG-$p --repeat 0 --losses $loss --compete $n --secs-compete 20 --trace $OUT/$TAG-$p/trace > $OUT/$TAG-$p.log 2>&1 ;;
    drs) flock /work/lab.lock chrt -r 50 python3 lab/drs_wan.py --repeat 1 --append --out $OUT/drs --bin $TAG=$BIN --rows 8,5,11,14,15 --path 1g100 --size 512M >> $OUT/drs-$TAG.log 2>&1 ;;
  esac
  log "end $p rc=$?"
done
