#!/usr/bin/env bash
# What scripts/onnx-node-tests.sh and scripts/onnx-models.sh share: runs the python writer
# SCRIPT (with the onnx package of scripts/install-onnx.sh) into DIR.partial, stamps it with the
# onnx version and renames it to DIR, so that DIR is whole or absent; a stamped DIR is kept.
#
# Usage: scripts/onnx-generate.sh WHAT SCRIPT DIR   (DIR absolute or relative to the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="$1" SCRIPT="$2" DIR="${3%/}"
ONNX_VERSION=1.23.2
if [ -f "$DIR/.generated-onnx-$ONNX_VERSION" ]; then
    echo "$WHAT already in $DIR ($(find "$DIR" -mindepth 1 -maxdepth 1 -type d | wc -l) folders)"
    exit 0
fi
bash scripts/install-onnx.sh
rm -rf "$DIR.partial"
mkdir -p "$(dirname "$DIR")"
PYTHONPATH=.tools/onnx PYTHONWARNINGS=ignore python3 "$SCRIPT" "$DIR.partial"
touch "$DIR.partial/.generated-onnx-$ONNX_VERSION"
rm -rf "$DIR"
mv "$DIR.partial" "$DIR"
