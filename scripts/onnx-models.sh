#!/usr/bin/env bash
# Builds small real ONNX models (transformer_encoder, mlp_gemm, small_cnn) with onnx.helper, with
# seeded random inputs and the outputs of onnx's ReferenceEvaluator, into DIR (default
# .tools/onnx-models): DIR/<name>/model.onnx, case.json and test_data_set_0/{input,output}_K.pb,
# the layout of scripts/onnx-node-tests.sh. scripts/onnx_models.py does the building and says
# what the models are. Needs python3 with pip (scripts/install-onnx.sh installs onnx into
# .tools/onnx); no torch; idempotent.
#
# Usage: scripts/onnx-models.sh [DIR]
set -euo pipefail
# DIR is taken relative to the caller's working directory, the default relative to the repository.
DIR="${1:-}"
case "$DIR" in "" | /*) ;; *) DIR="$PWD/$DIR" ;; esac
cd "$(dirname "$0")/.."
exec bash scripts/onnx-generate.sh "ONNX models" scripts/onnx_models.py "${DIR:-.tools/onnx-models}"
