#!/usr/bin/env bash
# Regenerates frontends/onnx/src/proto/onnx.rs, the prost types of ONNX's messages, from the
# onnx.proto that the onnx package ships (scripts/install-onnx.sh), with prost-build and a
# vendored protoc in a scratch crate. Run it when moving to a new onnx version; the generated
# file is checked in, so building tir needs neither protoc nor this script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-onnx.sh
ROOT="$PWD"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
cat > "$WORK/Cargo.toml" <<'TOML'
[package]
name = "onnx-protogen"
version = "0.1.0"
edition = "2021"
[dependencies]
prost-build = "0.14"
protoc-bin-vendored = "3"
TOML
cat > "$WORK/src/main.rs" <<'RS'
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("a vendored protoc");
    std::env::set_var("PROTOC", protoc);
    prost_build::Config::new()
        .out_dir(&args[3])
        .compile_protos(&[&args[1]], &[&args[2]])
        .expect("onnx.proto compiles");
}
RS
cp .tools/onnx/onnx/onnx.proto "$WORK/onnx.proto"
(cd "$WORK" && cargo run -q --release -- "$WORK/onnx.proto" "$WORK" "$WORK")
OUT=frontends/onnx/src/proto/onnx.rs
{
    echo '// Generated from onnx.proto (onnx 1.23.2) by prost-build 0.14: `bash scripts/gen-onnx-proto.sh`.'
    cat "$WORK/onnx.rs"
} > "$OUT.partial"
mv "$OUT.partial" "$ROOT/$OUT"
echo "wrote $OUT"
