#!/usr/bin/env bash
# The one test command: sets up what a fresh machine lacks and runs every test.
# Needs only the Rust toolchain; crates come from crates.io through Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The conformance corpus on the reference backend (release: the interpreter is slow in debug).
cargo run --release --locked -q -p testsuite --bin tir-conform -- --backend ref
