#!/usr/bin/env bash
# The benchmarks, in two halves:
#   bash bench/run.sh prepare   # here: build tir-bench, compile every workload's kernels into a
#                               # kernel cache, time compiling; pack it all into .device/bench/
#   bash bench/run.sh run       # on the GPU machine (one device call): tir-bench, the weights
#                               # loading, then the PyTorch peers on the same inputs; writes
#                               # $OUT/RESULTS.md, $OUT/results.json and the charts in
#                               # $OUT/plots/ (FILTER=NAME: only the matching workloads)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    bash scripts/install-tileiras.sh
    cargo build --release --locked -q -p bench
    mkdir -p .device/bench
    export TIR_CACHE_DIR="$PWD/target/bench-cache"
    target/release/tir-bench compile --out target/bench-compile
    cp target/bench-compile/compile.json .device/bench/compile.json
    tar -C "$TIR_CACHE_DIR/.." -cJf .device/bench/cache.tar.xz "$(basename "$TIR_CACHE_DIR")"
    cp target/release/tir-bench .device/bench/
    git rev-parse --short HEAD > .device/bench/commit
    ;;
run)
    mkdir -p /tmp/tir && tar -C /tmp/tir -xJf .device/bench/cache.tar.xz
    export TIR_CACHE_DIR=/tmp/tir/bench-cache
    out="${OUT:-.device/out}"
    mkdir -p "$out"
    .device/bench/tir-bench run --out /tmp/tir-bench ${FILTER:+--filter "$FILTER"} \
        | tee "$out/tir-bench.log"
    # Loading the decoder block's weights, in a process of its own (its peak memory is read).
    .device/bench/tir-bench write-weights /tmp/decoder.safetensors
    .device/bench/tir-bench load-weights /tmp/decoder.safetensors | tee /tmp/tir-bench/weights.json
    python3 bench/peers.py /tmp/tir-bench --commit "$(cat .device/bench/commit)" \
        --compile-json .device/bench/compile.json --weights-json /tmp/tir-bench/weights.json \
        --results "$out/RESULTS.md"
    # The charts of this run (peers.py wrote results.json beside RESULTS.md); no GPU needed.
    .device/bench/tir-bench plot "$out/results.json" --out "$out/plots"
    ;;
*)
    echo "usage: bench/run.sh prepare | run" >&2
    exit 1
    ;;
esac
