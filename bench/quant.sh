#!/usr/bin/env bash
# The quantized products and decode loops of bench/RESULTS.md ("Quantized weights"), in two
# halves (docs/benchmarks.md: the device lowers and compiles nothing):
#   bash bench/quant.sh prepare   # here: AOT packages of the GEMVs and 32-layer decode loops,
#                                 # the quant conformance cases' cubins in a kernel cache, and
#                                 # the stripped binaries, all under $DIR (.device/quant)
#   bash bench/quant.sh run       # on the GPU machine: the quant cases on CUDA (graph mode),
#                                 # then the timings; logs under $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${DIR:-.device/quant}"
filter="${FILTER:-qgemv|decode_32_layers_h4096_ctx2048\$|ctx2048_int8|ctx2048_fp8row}"
case "${1:-}" in
prepare)
    mkdir -p "$dir/pkgs"
    export TIR_CACHE_DIR="$PWD/target/quant-cache"
    TIR_BENCH_PACKAGES="$dir/pkgs" target/release/tir-bench compile --out target/quant-compile \
        --filter "$filter"
    target/release/tir-conform --backend cuda --compile-only --arch sm_90 --filter quant
    tar -C target -cf "$dir/cache.tar" quant-cache
    cp target/release/tir-bench target/release/tir-conform "$dir/"
    strip "$dir/tir-bench" "$dir/tir-conform"
    git rev-parse --short HEAD > "$dir/commit"
    ;;
run)
    out="${OUT:-$dir/out}"
    mkdir -p "$out" /tmp/tir
    tar -C /tmp/tir -xf "$dir/cache.tar"
    export TIR_CACHE_DIR=/tmp/tir/quant-cache
    "$dir/tir-conform" --backend cuda --mode graph --filter quant 2>&1 | tee "$out/conform.log" | tail -4
    TIR_BENCH_PACKAGES="$dir/pkgs" "$dir/tir-bench" run --out /tmp/tir-bench --filter "$filter" \
        2>&1 | tee "$out/bench.log"
    ;;
*)
    echo "usage: bench/quant.sh prepare | run" >&2
    exit 1
    ;;
esac
