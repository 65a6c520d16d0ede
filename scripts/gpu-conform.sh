#!/usr/bin/env bash
# The CUDA backend's conformance run on a GPU machine that has no Rust and no working Tile IR
# toolchain (the device tool's machines).
#
#   bash scripts/gpu-conform.sh prepare      # here: build, compile every case's kernels for
#                                            # sm_90 (for the `auto` and the `generated` matmul
#                                            # paths) into a kernel cache, pack it (xz) with
#                                            # the binaries in .device/conform/
#   bash scripts/gpu-conform.sh run [RUN..]  # there: unpack, then tir-conform --backend cuda
#                                            # per RUN: MODE (sync, graph, async), MODE:device
#                                            # (tensors on the device, --io device) or
#                                            # cublaslt:MODE (every plain matmul on cuBLASLt,
#                                            # --matmul) or cudnn:MODE (every fused
#                                            # attention and every convolution with a
#                                            # cuDNN call on cuDNN, --attention, --conv) or
#                                            # generated:MODE (all on the generated kernel) or
#                                            # sessions:MODE (--sessions) or onnx:MODE
#                                            # (ONNX's node tests and the test models that
#                                            # import, --onnx-node) or profile (`tirc run
#                                            # --profile --trace` on the decoder block's
#                                            # package, the trace checked, and a trace onto
#                                            # an output refused); default: all of
#                                            # sync graph async sync:device graph:device
#                                            # cublaslt:sync cudnn:sync cudnn:graph
#                                            # generated:sync sessions:sync
#                                            # sessions:graph onnx:sync onnx:graph profile
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    bash scripts/install-tileiras.sh
    cargo build --release --locked -q -p testsuite -p tirc --bin tir-conform --bin tirc
    mkdir -p .device/conform
    export TIR_CACHE_DIR="$PWD/target/conform-cache"
    # Both lowerings: `auto` and `cublaslt` keep float matmul epilogues apart, `generated` fuses.
    target/release/tir-conform --backend cuda --compile-only --arch sm_90
    target/release/tir-conform --backend cuda --compile-only --arch sm_90 --matmul generated
    target/release/tir-conform --backend cuda --compile-only --arch sm_90 --sessions
    # ONNX: the tests that import (the others are refused the same way on every backend).
    bash scripts/onnx-node-tests.sh
    bash scripts/onnx-models.sh
    rm -rf .device/conform/onnx && mkdir -p .device/conform/onnx
    for dir in .tools/onnx-node-tests .tools/onnx-models; do
        target/release/tir-conform --onnx-node "$dir" --backend cuda --compile-only --arch sm_90 \
            --json .device/conform/onnx.json >/dev/null
        python3 - "$dir" .device/conform/onnx.json .device/conform/onnx <<'PY'
import json, shutil, sys
src, report, dst = sys.argv[1:]
for r in json.load(open(report))["results"]:
    if r["outcome"] == "passed":
        shutil.copytree(f"{src}/{r['name']}", f"{dst}/{r['name']}")
PY
    done
    rm .device/conform/onnx.json
    target/release/tirc compile examples/decoder_block.tir --arch sm_90 \
        -o .device/conform/decoder_block.tirpkg
    tar -C "$TIR_CACHE_DIR/.." -cJf .device/conform/cache.tar.xz "$(basename "$TIR_CACHE_DIR")"
    cp target/release/tir-conform target/release/tirc .device/conform/
    ;;
run)
    shift
    mkdir -p /tmp/tir && tar -C /tmp/tir -xJf .device/conform/cache.tar.xz
    export TIR_CACHE_DIR=/tmp/tir/conform-cache
    out="${OUT:-.device/out}"
    mkdir -p "$out"
    # No toolchain there, so doctor reports it missing (and exits 1); the cache stands in.
    .device/conform/tirc doctor || true
    status=0
    runs="${*:-sync graph async sync:device graph:device cublaslt:sync cudnn:sync cudnn:graph generated:sync sessions:sync sessions:graph onnx:sync onnx:graph profile}"
    for run in $runs; do
        if [ "$run" = profile ]; then
            echo "== tirc run --profile --trace (decoder block package)"
            { .device/conform/tirc run .device/conform/decoder_block.tirpkg --random-inputs \
                --profile --trace "$out/decoder-trace.json" --output-dir /tmp/tir/profile-out &&
                python3 scripts/check-trace.py "$out/decoder-trace.json"; } \
                | tee "$out/profile.log" | tail -25 || status=1
            # A trace onto one of the run's output files is refused: exit 1, one line, and
            # neither file written.
            clash=/tmp/tir/clash-out
            rm -rf "$clash"
            code=0
            .device/conform/tirc run .device/conform/decoder_block.tirpkg --random-inputs \
                --profile --trace "$clash/y.npy" --output-dir "$clash" 2>"$out/clash.err" \
                >/dev/null || code=$?
            if [ "$code" = 1 ] && [ "$(wc -l <"$out/clash.err")" = 1 ] \
                && grep -q "the run writes an output" "$out/clash.err" && [ ! -e "$clash/y.npy" ]; then
                echo "--trace onto an output refused: $(cat "$out/clash.err")"
            else
                echo "FAIL: --trace onto an output: exit $code, $(cat "$out/clash.err")"
                status=1
            fi
            continue
        fi
        case "$run" in
        sessions:*) args=(--mode "${run#sessions:}" --sessions) ;;
        onnx:*) args=(--mode "${run#onnx:}" --onnx-node .device/conform/onnx) ;;
        *:device) args=(--mode "${run%:device}" --io device) ;;
        cublaslt:*) args=(--mode "${run#*:}" --matmul cublaslt) ;;
        cudnn:*) args=(--mode "${run#*:}" --attention cudnn --conv cudnn) ;;
        generated:*) args=(--mode "${run#*:}" --matmul generated --attention generated --conv generated) ;;
        *) args=(--mode "$run") ;;
        esac
        echo "== tir-conform --backend cuda ${args[*]}"
        .device/conform/tir-conform --backend cuda "${args[@]}" \
            | tee "$out/conform-${run/:/-}.log" | tail -25 || status=1
    done
    exit $status
    ;;
*)
    echo "usage: scripts/gpu-conform.sh prepare | run [RUN...]" >&2
    exit 1
    ;;
esac
