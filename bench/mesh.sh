#!/usr/bin/env bash
# More than one GPU: tir on 1 GPU against tensor-parallel N, the all-reduce alone next to
# torch.distributed, and the mesh's conformance cases in sync and graph mode.
#   bash bench/mesh.sh prepare   # here: build tir-bench and tir-conform, compile every kernel
#                                # they need for sm_90 into a cache (the GPU machine has no Tile
#                                # IR toolchain), pack it with the binaries and the scripts into
#                                # $MESH_DIR (default .device/mesh)
#   bash $MESH_DIR/mesh.sh run   # there, from the repository's root (one device call):
#                                # writes conform.log, mesh.log, tir-mesh.json, mesh_peers.json
#                                # and topo.txt under $OUT
# DEVICES (default 2) is the mesh's size.
set -euo pipefail
devices=${DEVICES:-2}
case "${1:-}" in
prepare)
    cd "$(dirname "$0")/.."
    B=${MESH_DIR:-.device/mesh}
    [ -n "${TIR_TILEIRAS:-}" ] || bash scripts/install-tileiras.sh
    cargo build --release --locked -q -p bench -p testsuite --bin tir-bench --bin tir-conform
    rm -rf "$B" && mkdir -p "$B"
    export TIR_CACHE_DIR="$PWD/target/mesh-cache"
    target/release/tir-bench mesh --compile-only --devices "$devices" --arch sm_90
    for cases in '*sharded*' 'op/all_*' 'op/reduce_scatter*'; do
        target/release/tir-conform --backend cuda --compile-only --arch sm_90 --filter "$cases" \
            | tail -1
    done
    tar -C "$TIR_CACHE_DIR/.." -cJf "$B/cache.tar.xz" "$(basename "$TIR_CACHE_DIR")"
    cp target/release/tir-bench target/release/tir-conform bench/mesh.sh bench/mesh_peers.py "$B/"
    git rev-parse --short HEAD > "$B/commit"
    ;;
run)
    B=$(cd "$(dirname "$0")" && pwd)
    # NVLink multicast stays off in every process (the machines' rule).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    # A mesh run that hangs is aborted and reported, not waited for.
    export TIR_MESH_TIMEOUT_S=${TIR_MESH_TIMEOUT_S:-60}
    mkdir -p /tmp/tir && tar -C /tmp/tir -xJf "$B/cache.tar.xz"
    export TIR_CACHE_DIR=/tmp/tir/mesh-cache
    out="${OUT:-/tmp/mesh-out}"
    mkdir -p "$out"
    echo "commit $(cat "$B/commit")" | tee "$out/topo.txt"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$out/topo.txt" 2>&1 || true
    nvidia-smi topo -m >> "$out/topo.txt" 2>&1 || true
    status=0
    # Each conformance run under a timeout: a hang is a result, not the end of the call.
    conform() {
        echo "== $1 $2"
        timeout "${CONFORM_TIMEOUT:-90}" "$B/tir-conform" --backend cuda --mode "$1" --filter "$2" \
            2>&1 | tail -"${CONFORM_TAIL:-40}" || { echo "exit status $? ($1 $2)"; status=1; }
    }
    {
        for cases in '*sharded*' 'op/all_*' 'op/reduce_scatter*'; do conform sync "$cases"; done
        conform graph '*sharded*'
    } 2>&1 | tee "$out/conform.log"
    timeout "${BENCH_TIMEOUT:-450}" "$B/tir-bench" mesh --devices "$devices" --out "$out" \
        2>&1 | tee "$out/mesh.log" || status=1
    PYTHONUNBUFFERED=1 timeout "${PEERS_TIMEOUT:-100}" python3 "$B/mesh_peers.py" \
        --devices "$devices" --out "$out/mesh_peers.json" 2>&1 | tail -20 || status=1
    {
        for cases in 'op/all_*' 'op/reduce_scatter*'; do conform graph "$cases"; done
    } 2>&1 | tee -a "$out/conform.log"
    exit $status
    ;;
*)
    echo "usage: bench/mesh.sh prepare | run" >&2
    exit 1
    ;;
esac
