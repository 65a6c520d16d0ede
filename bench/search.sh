#!/usr/bin/env bash
# The tuning search of bench/search.txt, in two halves:
#   bash bench/search.sh prepare   # here: compile every variant's kernels into a kernel cache
#                                  # and pack it with tir-bench into .device/search/
#   bash bench/search.sh run       # on the GPU machine: time every variant; prints
#                                  # `workload  median-ms  spec`, one line per variant
set -euo pipefail
cd "$(dirname "$0")/.."
variants() { grep -v '^#' bench/search.txt | grep -v '^\s*$'; }
case "${1:-}" in
prepare)
    bash scripts/install-tileiras.sh
    cargo build --release --locked -q -p bench
    export TIR_CACHE_DIR="$PWD/target/search-cache"
    variants | while read -r filter spec; do
        [ "$spec" = - ] && spec=""
        TIR_TUNE="$spec" target/release/tir-bench compile --out target/search --filter "$filter" \
            >/dev/null
    done
    mkdir -p .device/search
    tar -C "$TIR_CACHE_DIR/.." -cJf .device/search/cache.tar.xz "$(basename "$TIR_CACHE_DIR")"
    cp target/release/tir-bench .device/search/
    ;;
run)
    mkdir -p /tmp/tir && tar -C /tmp/tir -xJf .device/search/cache.tar.xz
    export TIR_CACHE_DIR=/tmp/tir/search-cache
    i=0
    variants | while read -r filter spec; do
        i=$((i + 1))
        [ "$spec" = - ] && spec=""
        TIR_TUNE="$spec" .device/search/tir-bench run --filter "$filter" --out "/tmp/search/$i" \
            | python3 bench/search_line.py "${spec:--}"
        rm -rf "/tmp/search/$i"
    done
    ;;
*)
    echo "usage: bench/search.sh prepare | run" >&2
    exit 1
    ;;
esac
