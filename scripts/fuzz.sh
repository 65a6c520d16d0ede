#!/usr/bin/env bash
# Fuzzes tir's readers with cargo-fuzz (libFuzzer; the nightly toolchain and `cargo install
# cargo-fuzz`), each target for SECONDS (default 60), starting from the seeds in
# fuzz/seeds/TARGET and the corpus it grew before (fuzz/corpus/TARGET, ignored). A crash stops
# that target with its input in fuzz/artifacts/TARGET, the others still run, and the script
# fails at the end (crash-, oom-, timeout- or leak-): minimize
# it (`cargo +nightly fuzz tmin TARGET FILE` in fuzz/), keep it in fuzz/regressions/TARGET, add
# a test in the crate that owns the reader, and fix the reader.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Targets (bodies in testsuite/src/fuzz/mod.rs; fuzz/fuzz_targets/NAME.rs calls them):
#   tir_file     .tir bytes → tir_graph::file::decode (header checksum also recomputed)
#   text         text form → tir_graph::text::parse → print → parse
#   npy          .npy bytes → tirc::npy::decode → encode → decode
#   tirpkg       .tirpkg bytes → backend_cuda::package::from_bytes (checksum also recomputed)
#   cache_entry  kernel-cache entry → backend_cuda::cache::decode_entry
#   safetensors  .safetensors bytes → tir_graph::weights::WeightsFile::from_bytes
#   onnx_import  ONNX bytes → tir_onnx::Model::decode → import → verify
#   pipeline     a graph (.tir or text) → verify → optimize → lower (ref target) → a run on
#                the reference backend in checking mode for small graphs
#
# CI (scripts/test.sh) does not run this script. A fresh machine would first install
# cargo-fuzz (about 1.5 CPU-minutes here) and then build the whole tir workspace again with
# the nightly toolchain and sanitizer instrumentation (several more minutes), before the first
# second of fuzzing. Instead `cargo test -p testsuite --test fuzz_replay`, part of CI's
# `cargo test --workspace` on stable, replays every seed (each must still be accepted) and
# every regression input (each must go through without a panic) through the same target bodies.
#
# Limits per run: 2 GiB of memory in all, no single allocation over 256 MiB (no valid input
# here needs one: a larger one is a length taken from the file without checking it against
# the data), 10 s per input. The reference backend runs on one thread (RAYON_NUM_THREADS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
all=(tir_file text npy tirpkg cache_entry safetensors onnx_import pipeline)
seconds="${1:-60}"
shift || true
if (($#)); then targets=("$@"); else targets=("${all[@]}"); fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "error: cargo-fuzz is missing: cargo install cargo-fuzz (and rustup toolchain install nightly)" >&2
    exit 1
fi
export RAYON_NUM_THREADS=1
crashed=()
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "== $target for ${seconds}s"
    (cd fuzz && cargo +nightly fuzz run -O "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 \
        -print_final_stats=1) 2>&1 \
        | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|.*panicked)" || true
    if compgen -G "fuzz/artifacts/$target/*" >/dev/null; then
        echo "error: $target crashed; inputs in fuzz/artifacts/$target" >&2
        crashed+=("$target")
    fi
done
if ((${#crashed[@]})); then
    echo "error: crashed: ${crashed[*]}" >&2
    exit 1
fi
