#!/usr/bin/env bash
# Installs the PyPI package onnx (with numpy, protobuf, ml_dtypes and typing_extensions) into
# .tools/onnx, for the scripts that write ONNX test models and data (onnx-node-tests.sh,
# onnx-models.sh); they run python as `PYTHONPATH=.tools/onnx python3 ...`. Needs python3 with
# pip and network access to PyPI the first time; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.23.2
DEST=.tools/onnx
STAMP="$DEST/.installed-$VERSION"
if [ -f "$STAMP" ]; then
    exit 0
fi
rm -rf "$DEST.partial"
mkdir -p .tools
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --root-user-action=ignore \
    --target "$DEST.partial" "onnx==$VERSION"
PYTHONPATH="$DEST.partial" python3 -c "import onnx.reference, onnx.backend.test.case.node"
touch "$DEST.partial/.installed-$VERSION"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
