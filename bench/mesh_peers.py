"""PyTorch's all-reduce next to tir's (bench/src/mesh.rs): torch.distributed with NCCL, one process
per GPU, fp16, the same message sizes; per size the median of CUDA-event times of one call from
eager Python and of one call replayed in a CUDA graph (captured on a side stream after a
warm-up), and the bus bandwidth (2(n-1)/n * bytes / time). Prints one JSON line per size and
writes them all to OUT (rank 0's times; every rank checks its sum).

    python3 bench/mesh_peers.py --devices 2 --out mesh_peers.json
"""

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20, 256 << 20, 1 << 30]


def timed(fn, reps):
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def worker(rank, world, out):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29517"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    rows = []
    for size in SIZES:
        n = size // 2
        gen = torch.Generator(device="cuda").manual_seed(77 + rank)
        x = torch.rand(n, dtype=torch.float16, device="cuda", generator=gen) * 2 - 1
        want = x.clone()
        dist.all_reduce(want)  # the sum, for the check
        reps = 10 if size >= 256 << 20 else 30
        buf = x.clone()
        for _ in range(5):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        eager = timed(lambda: dist.all_reduce(buf), reps)
        # One all-reduce captured, replayed (buffer reset first so the sum stays finite).
        graph_buf = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dist.all_reduce(graph_buf)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(graph_buf)
        graph_buf.copy_(x)
        g.replay()
        torch.cuda.synchronize()
        right = bool(torch.allclose(graph_buf.float(), want.float(), rtol=2e-3, atol=1e-3))
        graphed = timed(g.replay, reps)
        bus = lambda ms: 2 * (world - 1) / world * size / (ms * 1e-3) / 1e9
        row = {
            "all_reduce_bytes": size,
            "devices": world,
            "torch_eager_ms": eager,
            "torch_graph_ms": graphed,
            "torch_eager_busbw_gbs": bus(eager),
            "torch_graph_busbw_gbs": bus(graphed),
            "sum_right": right,
        }
        if rank == 0:
            print(json.dumps(row), flush=True)
        rows.append(row)
        del g
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--out", default="mesh_peers.json")
    a = p.parse_args()
    mp.spawn(worker, args=(a.devices, a.out), nprocs=a.devices)


if __name__ == "__main__":
    main()
