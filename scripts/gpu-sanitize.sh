#!/usr/bin/env bash
# The conformance corpus on the CUDA backend under compute-sanitizer, on a GPU machine (issue
# #19). It uses what `bash scripts/gpu-conform.sh prepare` packed into .device/conform/ (the
# binaries and the kernel cache), so there is no prepare of its own.
#
#   bash scripts/gpu-sanitize.sh [RUN..]   # RUN: TOOL or TOOL:FILTER or TOOL:FILTER:MODE, where
#                                          # TOOL is memcheck, racecheck, initcheck or synccheck,
#                                          # FILTER a tir-conform --filter pattern (empty: the
#                                          # whole corpus) and MODE sync (default) or graph;
#                                          # default: each tool over the whole corpus in sync
#
# Each run writes $OUT/sanitize-TOOL[-FILTER][-MODE].log and prints the sanitizer's error
# summary and tir-conform's totals. Exits 1 if any run reports an error or a failed case.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizer="${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
mkdir -p /tmp/tir
[ -d /tmp/tir/conform-cache ] || tar -C /tmp/tir -xJf .device/conform/cache.tar.xz
export TIR_CACHE_DIR=/tmp/tir/conform-cache
out="${OUT:-.device/out}"
mkdir -p "$out"
status=0
for run in ${*:-memcheck racecheck initcheck synccheck}; do
    IFS=: read -r tool filter mode <<<"$run"
    mode="${mode:-sync}"
    case "$tool" in
    racecheck) opts=(--racecheck-report all) ;;
    memcheck | initcheck | synccheck) opts=() ;;
    *)
        echo "unknown tool '$tool' (memcheck, racecheck, initcheck, synccheck)" >&2
        exit 1
        ;;
    esac
    name="$tool${filter:+-${filter//[^A-Za-z0-9_]/_}}-$mode"
    log="$out/sanitize-$name.log"
    echo "== $tool ${filter:-(whole corpus)} $mode"
    started=$(date +%s)
    # The sanitizer's own exit code is the tool's verdict; tir-conform's totals come after.
    if "$sanitizer" --tool "$tool" "${opts[@]}" --error-exitcode 1 --print-limit 50 \
        .device/conform/tir-conform --backend cuda --mode "$mode" ${filter:+--filter "$filter"} \
        >"$log" 2>&1; then
        verdict=ok
    else
        verdict=FAILED
        status=1
    fi
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -2 || true
    tail -3 "$log"
    echo "-- $tool ${filter:-(whole corpus)} $mode: $verdict in $(($(date +%s) - started)) s"
done
exit $status
