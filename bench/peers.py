"""PyTorch peers for tir-bench, run in the same device call.

    python3 bench/peers.py DIR --commit SHA --compile-json FILE --results bench/RESULTS.md

Reads tir's times (DIR/tir.json) and each workload's inputs and outputs (DIR/NAME/in_*.npy,
out_*.npy), times PyTorch eager and torch.compile on the same inputs with CUDA events (warm-up,
then the median of repetitions, each after overwriting 256 MiB so L2 holds no input), checks
tir's output against eager's, measures the device-to-device copy bandwidth, prints a table and
writes RESULTS.md, and the same run as results.json beside it (what `tir-bench plot` draws). A
workload whose output does not match is reported as wrong, without ratios.
"""

import argparse
import datetime
import json
import math
import os
import re
import statistics

import numpy as np
import torch
import torch.nn.functional as F

FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
# H100 SXM dense fp16 tensor-core peak, the compute ceiling (TFLOP/s).
PEAK_TFLOPS = 989.4


def timed(fn, reps, warmup=3):
    """Median milliseconds of `fn` over `reps` runs after `warmup`, each after an L2 flush."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(warmup + reps):
        FLUSH.fill_(i & 0xFF)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def load(path):
    return torch.from_numpy(np.load(path)).cuda()


def copy_bandwidth():
    """Device-to-device copy of 1 GiB: bytes read plus written per second (TB/s)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), 20)
    return 2 * src.numel() / (ms * 1e-3) / 1e12


def chain(n):
    def f(x, w):
        for _ in range(n):
            x = x @ w
        return x
    return f


def bert(params, layers=6, heads=12, eps=1e-12):
    """all-MiniLM-L6-v2's encoder, mean pooling and normalization, written from the weights."""
    P = params

    def linear(t, name):
        return F.linear(t, P[f"{name}.weight"], P[f"{name}.bias"])

    def norm(t, name):
        return F.layer_norm(t, (t.shape[-1],), P[f"{name}.weight"], P[f"{name}.bias"], eps)

    def f(input_ids, token_type_ids, attention_mask, position_ids):
        e = "embeddings."
        x = (P[e + "word_embeddings.weight"][input_ids]
             + P[e + "position_embeddings.weight"][position_ids]
             + P[e + "token_type_embeddings.weight"][token_type_ids])
        x = norm(x, e + "LayerNorm")
        b, s, h = x.shape
        keep = attention_mask.bool()[:, None, None, :]
        for i in range(layers):
            at = f"encoder.layer.{i}."
            split = lambda t: t.view(b, s, heads, h // heads).transpose(1, 2)
            q, k, v = (split(linear(x, at + "attention.self." + n)) for n in ("query", "key", "value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, s, h)
            x = norm(x + linear(a, at + "attention.output.dense"), at + "attention.output.LayerNorm")
            inner = F.gelu(linear(x, at + "intermediate.dense"))
            x = norm(x + linear(inner, at + "output.dense"), at + "output.LayerNorm")
        m = attention_mask.to(x.dtype).unsqueeze(-1)
        mean = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(mean, dim=1)
    return f


BERT_INPUTS = ["input_ids", "token_type_ids", "attention_mask", "position_ids"]


def decoder(params, heads=32, context=2048, eps=1e-5):
    """The decode step of `tir_graph::models::decoder`, written from its weights (`l{i}.wq`, ...,
    or `wq`, ... for the one block): per layer rms_norm, q/k/v, the new k and v written into the
    layer's cache at `pos`, attention over the cache before `pos` and the new token, residual,
    rms_norm, SiLU-gated MLP, residual. The caches start at zero, as tir's states do."""
    P = params
    prefixes = sorted({k[:-len("wq")] for k in P if k.endswith("wq")},
                      key=lambda p: int(p[1:-1]) if p else 0)
    hidden = P[prefixes[0] + "wq"].shape[0]
    d = hidden // heads
    caches = [[torch.zeros(1, heads, context, d, dtype=torch.float16, device="cuda") for _ in range(2)]
              for _ in prefixes]
    positions = torch.arange(context, device="cuda")
    new_token = torch.ones(1, dtype=torch.bool, device="cuda")

    def f(x, pos):
        visible = torch.cat([positions < pos, new_token]).view(1, 1, 1, context + 1)
        split = lambda t: t.view(1, 1, heads, d).transpose(1, 2)
        for prefix, (k_cache, v_cache) in zip(prefixes, caches):
            w = lambda n: P[prefix + n]
            h = F.rms_norm(x, (hidden,), w("attn_norm"), eps)
            q, k, v = (split(h @ w(n)) for n in ("wq", "wk", "wv"))
            keys, values = torch.cat([k_cache, k], 2), torch.cat([v_cache, v], 2)
            k_cache.index_copy_(2, pos.view(1), k)
            v_cache.index_copy_(2, pos.view(1), v)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
            x = x + a.transpose(1, 2).reshape(1, 1, hidden) @ w("wo")
            h = F.rms_norm(x, (hidden,), w("mlp_norm"), eps)
            x = x + (F.silu(h @ w("w_gate")) * (h @ w("w_up"))) @ w("w_down")
        return x
    return f


# A convolution workload's name: `[dw]conv{k}x{k}[s{stride}]_n.._c..`, as bench/src/workloads.rs
# makes it (dw: depthwise, a group per channel).
CONV = re.compile(r"(?P<dw>dw)?conv(?P<k>\d+)x\d+(?:s(?P<stride>\d+))?_")


def peer_fn(name):
    """The eager function of a workload, and the tir output's name."""
    if name.startswith("add"):
        return (lambda x, y: x + y), ["x", "y"], "z"
    if name.startswith("ln_gelu"):
        def f(x, residual, gamma, beta):
            h = F.layer_norm(x + residual, (x.shape[-1],), gamma, beta, 1e-5)
            return F.gelu(h)
        return f, ["x", "residual", "gamma", "beta"], "y"
    if name.startswith("rms_norm"):
        return (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)), ["x", "w"], "y"
    if name.startswith("softmax"):
        return (lambda x: torch.softmax(x, dim=1)), ["x"], "y"
    if name.startswith("gemm"):
        return (lambda a, b: a @ b), ["a", "b"], "c"
    conv = CONV.match(name)
    if conv:
        k, stride, depthwise = int(conv["k"]), int(conv["stride"] or 1), bool(conv["dw"])
        def f(x, w, b):
            groups = x.shape[1] if depthwise else 1
            return F.relu(F.conv2d(x, w, b, stride=stride, padding=k // 2, groups=groups))
        if name.endswith("_cl"):
            # NHWC in and out: PyTorch's channels_last memory format seen as NHWC.
            return (lambda x, w, b: f(x.permute(0, 3, 1, 2), w, b).permute(0, 2, 3, 1)), \
                ["x", "w", "b"], "y"
        return f, ["x", "w", "b"], "y"
    if name.startswith("mlp"):
        return (lambda x, w1, w2: F.gelu(x @ w1) @ w2), ["x", "w1", "w2"], "y"
    if name.startswith("attention"):
        causal = name.endswith("causal")
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), \
            ["q", "k", "v"], "o"
    if name.startswith("chain"):
        return chain(int(name.split("_")[1])), ["x", "w"], "y"
    if name.startswith("bert"):
        return None, BERT_INPUTS, "embeddings"
    if name.startswith("decode"):
        return None, ["x", "pos"], "y"
    return None


def graph_of(fn, args):
    """`fn(*args)` captured as a CUDA graph; returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    return graph.replay


def check(tir, ref):
    """Largest error of tir's output relative to the largest magnitude of eager's."""
    tir, ref = tir.float(), ref.float()
    if tir.shape != ref.shape:
        return math.inf
    if not torch.isfinite(ref).all():
        return 0.0 if torch.equal(torch.isnan(tir), torch.isnan(ref)) else math.inf
    scale = ref.abs().max().item() or 1.0
    return (tir - ref).abs().max().item() / scale


def run_peer(entry, folder):
    name = entry["name"]
    fn, arg_names, out_name = peer_fn(name)
    args = [load(os.path.join(folder, f"in_{a}.npy")) for a in arg_names]
    if name.startswith("bert") or name.startswith("decode"):
        # Every other input file is a parameter, by its checkpoint name.
        params = {f[3:-4]: load(os.path.join(folder, f)) for f in os.listdir(folder)
                  if f.startswith("in_") and f[3:-4] not in arg_names}
        fn = bert(params) if name.startswith("bert") else decoder(params)
    tir_out = load(os.path.join(folder, f"out_{out_name}.npy"))
    with torch.no_grad():
        ref = fn(*args)
        row = {"error": check(tir_out, ref)}
        reps = entry["reps"]
        if (name.startswith("chain") or name.startswith("decode")) and entry["mode"] == "graph":
            # Eager captured as a CUDA graph, as tir replays one.
            row["eager_ms"] = timed(graph_of(fn, args), reps)
            return row
        row["eager_ms"] = timed(lambda: fn(*args), reps)
        if not name.startswith("chain") and not name.startswith("attention"):
            # torch.compile's default mode, as for every workload (no CUDA graphs).
            compiled = torch.compile(fn)
            compiled(*args)
            row["compile_ms"] = timed(lambda: compiled(*args), reps)
        if CONV.match(name) and not name.endswith("_cl"):
            # (A `_cl` workload's tensors are channels-last already.) torch.compile with the input and weights channels-last, as a CNN runs it when
            # its model and inputs are converted (the conversion is not timed).
            last = [a.contiguous(memory_format=torch.channels_last) if a.dim() == 4 else a
                    for a in args]
            compiled = torch.compile(fn)
            row["compile_cl_error"] = check(compiled(*last), ref)
            row["compile_cl_ms"] = timed(lambda: compiled(*last), reps)
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--commit", required=True)
    p.add_argument("--compile-json")
    p.add_argument("--weights-json")
    p.add_argument("--results", required=True)
    a = p.parse_args()
    entries = json.load(open(os.path.join(a.dir, "tir.json")))
    bandwidth = copy_bandwidth()
    rows = []
    for e in entries:
        row = dict(e)
        if "error" in e:
            rows.append(row)
            continue
        folder = os.path.join(a.dir, e["name"])
        if e["peer"] and peer_fn(e["name"]):
            try:
                row.update(run_peer(e, folder))
            except Exception as exc:  # a peer that fails is reported, not fatal
                row["peer_error"] = str(exc).splitlines()[0][:200]
        rows.append(row)
    compile_times = json.load(open(a.compile_json)) if a.compile_json else None
    weights = json.load(open(a.weights_json)) if a.weights_json else None
    text = report(rows, bandwidth, a.commit, compile_times, weights)
    print(text)
    with open(a.results, "w") as f:
        f.write(text)
    results_path = os.path.join(os.path.dirname(a.results), "results.json")
    with open(results_path, "w") as f:
        json.dump(results_json(rows, bandwidth, a.commit), f, indent=1, allow_nan=False)
        f.write("\n")


def results_json(rows, bandwidth, commit):
    """The run for `tir-bench plot` (the format of bench/results.json): per workload tir's time,
    each peer's (run in the workload's mode: for graph-mode chains, eager captured as a CUDA
    graph; for a `_generated` GEMM, also tir's cuBLASLt path, the same product without the
    suffix), and the roofline: the time of its bytes at the measured copy bandwidth, or of its
    flops at the peak."""
    tir_ms = {r["name"]: r.get("median_ms") for r in rows}
    workloads = []
    for r in rows:
        if "error" in r and isinstance(r["error"], str):
            workloads.append({"name": r["name"], "failed": r["error"]})
            continue
        bound = r["bound"]
        if "memory" in bound:
            kind, roofline_ms = "memory", 1e3 * bound["memory"]["bytes"] / (bandwidth * 1e12)
        else:
            kind, roofline_ms = "compute", 1e3 * bound["compute"]["flops"] / (PEAK_TFLOPS * 1e12)
        err = r.get("error")
        peers = {"eager": r.get("eager_ms"), "torch.compile": r.get("compile_ms"),
                 "torch.compile channels_last": r.get("compile_cl_ms")}
        if r["name"].endswith("_generated"):
            peers["cuBLASLt"] = tir_ms.get(r["name"][:-len("_generated")])
        w = {"name": r["name"], "mode": r["mode"], "tir_ms": r["median_ms"], "kernels": r["kernels"],
             "bound": kind, "roofline_ms": roofline_ms,
             "error": err if err is not None and math.isfinite(err) else None,
             "wrong": err is not None and err > 2e-2,
             "peers": {k: v for k, v in peers.items() if v is not None}}
        if r["name"].startswith("chain"):
            w["chain"] = int(r["name"].split("_")[1])
        workloads.append(w)
    return {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "commit": commit, "copy_tb_s": bandwidth, "peak_tflops": PEAK_TFLOPS, "notes": [],
            "workloads": workloads}


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}g}"


def api_table(rows):
    """What a user pays: the public run call against the kernels and the copies."""
    lines = ["", "What a user pays per call (`Executable::run`, wall time, copies included; parameters",
             "resident): `api` with the inputs in page-locked memory from `alloc_host`, `api Vec` with",
             "them in ordinary memory; `copies` the inputs to the device and the outputs back at",
             "page-locked speed, alone. The target is `api` within 15% of `kernels + copies`.", "",
             "| workload | kernels ms | copies ms | api ms | api Vec ms | api / kernels | api / (kernels + copies) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "api_ms" not in r:
            continue
        k, c, api = r["median_ms"], r["transfer_ms"], r["api_ms"]
        lines.append(f"| {r['name']} ({r['mode']}) | {fmt(k)} | {fmt(c)} | {fmt(api)} | {fmt(r['api_vec_ms'])} | "
                     f"{api / k:.2f}x | {api / (k + c):.2f}x |")
    memory = [r for r in rows if r.get("device_memory")]
    for r in memory:
        m = r["device_memory"]
        lines += ["", f"Device memory of {r['name']}: {m['used_after_warmup_bytes'] / 2**20:.1f} MiB in use after 100 runs, "
                  f"{m['used_after_runs_bytes'] / 2**20:.1f} MiB after {m['runs']} more."]
    return lines


def weights_lines(w):
    mib = lambda b: "-" if b is None else f"{b / 2**20:.1f} MiB"
    need = w["device_needed_bytes"]
    return ["", "Loading the decoder block's weights from safetensors (`load_weights`, a process of its own):", "",
            f"- file {mib(w['file_bytes'])}, loaded and uploaded in {w['load_ms']:.1f} ms;",
            f"- host memory: peak growth {mib(w['host_peak_growth_bytes'])} while loading, "
            f"{mib(w['host_rss_growth_loaded_bytes'])} resident with the file mapped, "
            f"{mib(w['host_rss_growth_after_bytes'])} after it is closed;",
            f"- device memory held by the executable after a run: {mib(w['device_used_by_executable_bytes'])}; "
            f"by the program: parameters {mib(need['parameters'])}, arena {mib(need['arena'])}, "
            f"states {mib(need['states'])}, staging {mib(need['staging'])}, constants {mib(need['constants'])} "
            f"(the rest: loaded kernels, cuBLASLt and cuDNN with their workspaces: 32 MiB for cuBLASLt and 8 MiB for cuDNN for each of their calls a wave runs at once)."]


def report(rows, bandwidth, commit, compile_times, weights=None):
    device = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    lines = [
        "# Benchmark results",
        "",
        f"Device: {device} (driver {torch.cuda.driver_version() if hasattr(torch.cuda, 'driver_version') else 'n/a'}, "
        f"torch {torch.__version__}); date {date}; tir commit {commit}.",
        f"Measured device-to-device copy bandwidth: {bandwidth:.2f} TB/s (read + write).",
        "",
        "Times are medians of CUDA-event timings after warm-up, each repetition after overwriting",
        "256 MiB so that L2 holds no input. tir's outputs are checked against PyTorch eager before",
        "anything is reported (`err`: largest error relative to the largest output magnitude).",
        "Ratios are peer time / tir time (above 1: tir is faster).",
        "",
        "| workload | tir ms | eager ms | compile ms | tir/eager | tir/compile | ceiling | err | kernels |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r and isinstance(r["error"], str):
            lines.append(f"| {r['name']} | failed: {r['error']} | | | | | | | |")
            continue
        t = r["median_ms"]
        bound = r["bound"]
        if "memory" in bound:
            tbs = bound["memory"]["bytes"] / (t * 1e-3) / 1e12
            ceiling = f"{tbs:.2f} TB/s = {100 * tbs / bandwidth:.0f}% of copy"
        else:
            tf = bound["compute"]["flops"] / (t * 1e-3) / 1e12
            ceiling = f"{tf:.1f} TFLOP/s = {100 * tf / PEAK_TFLOPS:.0f}% of peak"
        err = r.get("error")
        wrong = err is not None and err > 2e-2
        eager, comp = r.get("eager_ms"), r.get("compile_ms")
        ratio = (lambda p: "-" if p is None or wrong else f"{p / t:.2f}x")
        lines.append(
            f"| {r['name']} ({r['mode']}) | {fmt(t)} | {fmt(eager)} | {fmt(comp)} | "
            f"{ratio(eager)} | {ratio(comp)} | {ceiling} | "
            f"{'WRONG ' if wrong else ''}{fmt(err, 2) if err is not None else r.get('peer_error', '-')} | "
            f"{r['kernels']} |"
        )
    chains = [r for r in rows if r["name"].startswith("chain") and "median_ms" in r]
    if chains:
        lines += ["", "Launch overhead (a chain of N dependent 16x16 matmuls, µs per kernel):", "",
                  "| N | tir stream | tir graph | torch eager | torch graph |", "| --- | --- | --- | --- | --- |"]
        for n in sorted({int(r["name"].split("_")[1]) for r in chains}):
            def per(mode, key):
                for r in chains:
                    if r["name"] == f"chain_{n}_{mode}" and r.get(key) is not None:
                        return fmt(1e3 * r[key] / n)
                return "-"
            lines.append(f"| {n} | {per('stream', 'median_ms')} | {per('graph', 'median_ms')} | "
                         f"{per('stream', 'eager_ms')} | {per('graph', 'eager_ms')} |")
    rates = [r for r in rows if r.get("items") and "median_ms" in r]
    if rates:
        lines += ["", "Rates (items per second: sentences for BERT, the workload's batch; tokens for the decode loop,",
                  "one per step; tir as a CUDA graph replay, the decode loop's eager captured as one too):", "",
                  "| workload | tir | eager | torch.compile | tir/eager | tir/compile |", "| --- | --- | --- | --- | --- | --- |"]
        for r in rates:
            per = lambda ms: "-" if ms is None else f"{1e3 * r['items'] / ms:.0f}"
            ratio = lambda ms: "-" if ms is None else f"{ms / r['median_ms']:.2f}x"
            e, c = r.get("eager_ms"), r.get("compile_ms")
            lines.append(f"| {r['name']} | {per(r['median_ms'])} | {per(e)} | {per(c)} | {ratio(e)} | {ratio(c)} |")
    convs = [r for r in rows if r.get("compile_cl_ms") is not None and "median_ms" in r]
    if convs:
        lines += ["", "Convolutions against torch.compile with channels_last input and weights:", "",
                  "| workload | tir ms | compile channels_last ms | tir/compile channels_last |",
                  "| --- | --- | --- | --- |"]
        for r in convs:
            cl = r["compile_cl_ms"]
            lines.append(f"| {r['name']} | {fmt(r['median_ms'])} | {fmt(cl)} | {cl / r['median_ms']:.2f}x |")
    lines += api_table(rows)
    if weights:
        lines += weights_lines(weights)
    if compile_times:
        lines += ["", "Compile times (measured on the 2-core development machine, not the GPU machine):", "",
                  f"- decoder block, cold kernel cache: {compile_times['decoder_cold_s']:.2f} s;"
                  f" warm (every kernel a cache hit): {1e3 * compile_times['decoder_warm_s']:.1f} ms",
                  f"- optimizer on a {compile_times['optimizer_nodes']}-node graph: {compile_times['optimizer_s']:.2f} s"]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
