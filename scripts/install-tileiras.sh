#!/usr/bin/env bash
# Installs the Tile IR toolchain (tileiras with the ptxas and libnvvm of its release) into
# .tools/cuda, where the CUDA backend finds it. Needs python3 with pip; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=13.5.37
if [ -x .tools/cuda/nvidia/cu13/bin/tileiras ] \
    && .tools/cuda/nvidia/cu13/bin/tileiras --version 2>/dev/null | grep -q "V$VERSION"; then
    exit 0
fi
rm -rf .tools/cuda.partial
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --root-user-action=ignore \
    --target .tools/cuda.partial \
    "nvidia-cuda-tileiras==$VERSION" "nvidia-cuda-nvcc==$VERSION" "nvidia-nvvm==$VERSION"
rm -rf .tools/cuda
mv .tools/cuda.partial .tools/cuda
.tools/cuda/nvidia/cu13/bin/tileiras --version | grep -q "V$VERSION"
