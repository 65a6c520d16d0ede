#!/usr/bin/env bash
# Writes ONNX's backend node tests (onnx.backend.test.case.node, 1884 cases in onnx 1.23.2) into
# DIR (default .tools/onnx-node-tests): DIR/<case>/model.onnx, DIR/<case>/case.json (rtol, atol)
# and DIR/<case>/test_data_set_0/{input,output}_K.pb, laid out as onnx's own
# backend/test/cmd_tools.py writes test data; scripts/onnx_node_tests.py does the writing.
# Needs python3 with pip (scripts/install-onnx.sh installs onnx into .tools/onnx); idempotent.
#
# Usage: scripts/onnx-node-tests.sh [DIR]
set -euo pipefail
# DIR is taken relative to the caller's working directory, the default relative to the repository.
DIR="${1:-}"
case "$DIR" in "" | /*) ;; *) DIR="$PWD/$DIR" ;; esac
cd "$(dirname "$0")/.."
exec bash scripts/onnx-generate.sh "ONNX node tests" scripts/onnx_node_tests.py "${DIR:-.tools/onnx-node-tests}"
