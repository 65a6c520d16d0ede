#!/usr/bin/env bash
# The benchmarks, in two halves:
#   bash bench/run.sh prepare   # here: build tir-bench, compile every workload's kernels into a
#                               # kernel cache, time compiling; pack it all into .device/
#   bash bench/run.sh run       # on the GPU machine (one device call): tir-bench, then the
#                               # PyTorch peers on the same inputs; writes $OUT/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    bash scripts/install-tileiras.sh
    cargo build --release --locked -q -p bench
    mkdir -p .device
    export TIR_CACHE_DIR="$PWD/target/device-cache"
    target/release/tir-bench compile --out target/bench-compile
    cp target/bench-compile/compile.json .device/compile.json
    tar -C "$TIR_CACHE_DIR/.." -cJf .device/cache.tar.xz "$(basename "$TIR_CACHE_DIR")"
    cp target/release/tir-bench .device/
    git rev-parse --short HEAD > .device/commit
    ;;
run)
    mkdir -p /tmp/tir && tar -C /tmp/tir -xJf .device/cache.tar.xz
    export TIR_CACHE_DIR=/tmp/tir/device-cache
    out="${OUT:-.device/out}"
    mkdir -p "$out"
    .device/tir-bench run --out /tmp/tir-bench | tee "$out/tir-bench.log"
    python3 bench/peers.py /tmp/tir-bench --commit "$(cat .device/commit)" \
        --compile-json .device/compile.json --results "$out/RESULTS.md"
    ;;
*)
    echo "usage: bench/run.sh prepare | run" >&2
    exit 1
    ;;
esac
