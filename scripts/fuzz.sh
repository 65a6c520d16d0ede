#!/usr/bin/env bash
# Fuzzes tir's readers with cargo-fuzz (libFuzzer; the nightly toolchain and `cargo install
# cargo-fuzz`), each target for SECONDS (default 60), starting from the seeds in
# fuzz/seeds/TARGET and the corpus it grew before (fuzz/corpus/TARGET, ignored). A crash stops
# the run with its input in fuzz/artifacts/TARGET (crash-, oom-, timeout- or leak-): make it a
# regression test and fix it.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Targets: onnx_import (ONNX bytes → decode → import → verify).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("${@:-onnx_import}")
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "error: cargo-fuzz is missing: cargo install cargo-fuzz (and rustup toolchain install nightly)" >&2
    exit 1
fi
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "== $target for ${seconds}s"
    (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1) 2>&1 \
        | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|.*panicked)" || true
    if compgen -G "fuzz/artifacts/$target/*" >/dev/null; then
        echo "error: $target crashed; inputs in fuzz/artifacts/$target" >&2
        exit 1
    fi
done
