#!/usr/bin/env bash
# Fuzz campaign on stable Rust with libFuzzer's coverage feedback (sancov
# flags; safe Rust needs no ASan). For each target: build instrumented,
# fuzz from its committed corpus (fuzz/corpus/TARGET, seeded from
# fuzz/seeds/TARGET) for RUNS executions, then minimise the corpus back into
# fuzz/corpus/TARGET. Crashes land in fuzz/artifacts/TARGET/.
#
#   sh fuzz/run.sh [-n RUNS] [TARGET...]     # default: 10 million runs, every target
#   sh fuzz/run.sh --replay                  # CI: run every target once over its corpus
set -eu
cd "$(dirname "$0")"
runs=10000000
replay=0
targets=""
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs=$2; shift 2 ;;
        --replay) replay=1; shift ;;
        *) targets="$targets $1"; shift ;;
    esac
done
[ -n "$targets" ] || targets=$(sed -n 's/^name = "\(.*\)"/\1/p' Cargo.toml | grep -v '^sluice-fuzz$')
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cdebug-assertions -Coverflow-checks --cfg fuzzing"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# shellcheck disable=SC2086
cargo build --release --target "$triple" $(for t in $targets; do printf -- '--bin %s ' "$t"; done)
bin="$CARGO_TARGET_DIR/$triple/release"
status=0
for t in $targets; do
    corpus=corpus/$t
    mkdir -p "$corpus" "artifacts/$t"
    if [ "$replay" = 1 ]; then
        # Every committed input once; a crash fails CI.
        inputs=$(find "$corpus" seeds/"$t" -type f 2>/dev/null | head -1)
        if [ -z "$inputs" ]; then echo "$t: no corpus"; continue; fi
        dirs="$corpus"; [ -d "seeds/$t" ] && dirs="$dirs seeds/$t"
        log=$(mktemp)
        # shellcheck disable=SC2086
        if "$bin/$t" -runs=0 -artifact_prefix="artifacts/$t/" $dirs >"$log" 2>&1; then
            echo "$t: $(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log") inputs replayed, no crash"
        else
            echo "$t: CRASH replaying its corpus:"; tail -30 "$log"; status=1
        fi
        rm -f "$log"
        continue
    fi
    scratch=$(mktemp -d)
    cp -r "$corpus"/. "$scratch"/ 2>/dev/null || true
    [ -d "seeds/$t" ] && cp -r "seeds/$t"/. "$scratch"/
    start=$(date +%s)
    "$bin/$t" "$scratch" -runs="$runs" -artifact_prefix="artifacts/$t/" -print_final_stats=1 \
        >"artifacts/$t/log.txt" 2>&1 || { echo "$t: FAILED (see fuzz/artifacts/$t/)"; status=1; }
    secs=$(( $(date +%s) - start ))
    # Keep a minimal corpus covering the same features.
    newc=$(mktemp -d)
    "$bin/$t" -merge=1 "$newc" "$scratch" >/dev/null 2>&1 || true
    rm -rf "$corpus"; mkdir -p "$corpus"; cp "$newc"/* "$corpus"/ 2>/dev/null || true
    rm -rf "$scratch" "$newc"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "artifacts/$t/log.txt" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "artifacts/$t/log.txt" | tail -1)
    echo "$t: ${execs:-?} runs in ${secs}s, $cov, corpus $(ls "$corpus" | wc -l) inputs"
done
exit $status
