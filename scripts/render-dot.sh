#!/usr/bin/env bash
# Renders a graph's lowered program as SVG: `tirc explain --dot GRAPH | dot -Tsvg -o OUT.svg`.
# Usage: bash scripts/render-dot.sh GRAPH OUT.svg   (GRAPH: .tir, .onnx or text form)
# Needs Graphviz's `dot` (Debian: apt-get install graphviz). tirc is built with cargo unless
# TIRC names a binary.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 GRAPH OUT.svg" >&2
    exit 1
fi
command -v dot >/dev/null || { echo "error: dot not found; install Graphviz (apt-get install graphviz)" >&2; exit 1; }
graph="$1" out="$2"
if [ -n "${TIRC:-}" ]; then
    tirc=("$TIRC")
else
    tirc=(cargo run --locked -q -p tirc --)
fi
dot_text="$("${tirc[@]}" explain --dot "$graph")"
printf '%s\n' "$dot_text" | dot -Tsvg -o "$out"
echo "$out: $(wc -c <"$out") bytes from $graph"
