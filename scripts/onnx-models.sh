#!/usr/bin/env bash
# Builds small real ONNX models (transformer_encoder, mlp_gemm, small_cnn) with onnx.helper, with
# seeded random inputs and the outputs of onnx's ReferenceEvaluator, into DIR (default
# .tools/onnx-models): DIR/<name>/model.onnx, case.json and test_data_set_0/{input,output}_K.pb,
# the layout of scripts/onnx-node-tests.sh. scripts/onnx-models.py does the building and says
# what the models are. Needs python3 with pip (scripts/install-onnx.sh installs onnx into
# .tools/onnx); no torch; idempotent.
#
# Usage: scripts/onnx-models.sh [DIR]
set -euo pipefail
# DIR is taken relative to the caller's working directory, the default relative to the repository.
DIR="${1:-}"
case "$DIR" in "" | /*) ;; *) DIR="$PWD/$DIR" ;; esac
cd "$(dirname "$0")/.."
ONNX_VERSION=1.23.2
DIR="${DIR:-.tools/onnx-models}"
DIR="${DIR%/}"
STAMP="$DIR/.generated-onnx-$ONNX_VERSION"
if [ -f "$STAMP" ]; then
    echo "ONNX models already in $DIR ($(find "$DIR" -mindepth 1 -maxdepth 1 -type d | wc -l) models)"
    exit 0
fi
bash scripts/install-onnx.sh
rm -rf "$DIR.partial"
mkdir -p "$(dirname "$DIR")"
PYTHONPATH=.tools/onnx PYTHONWARNINGS=ignore python3 scripts/onnx-models.py "$DIR.partial"
touch "$DIR.partial/.generated-onnx-$ONNX_VERSION"
rm -rf "$DIR"
mv "$DIR.partial" "$DIR"
