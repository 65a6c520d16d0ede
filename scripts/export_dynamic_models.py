"""Exports real models with dynamic axes, as users export them, with both of torch's exporters,
and writes each with test data at several bindings (and a batch of 0) in the layout of ONNX's backend node tests
(scripts/onnx_test_layout.py), so `tir-conform --onnx-node DIR` runs them.

Usage (on a machine with torch, torchvision, transformers, onnx, onnxruntime and onnxscript; the
GPU machines have them): python3 scripts/export_dynamic_models.py OUT_DIR [NAME ...]

Models (random weights from a fixed seed; nothing is downloaded):
  resnet18, mobilenet_v3_small, squeezenet1_1, shufflenet_v2_x0_5  torchvision, images
      [batch, 3, 64, 64], batch dynamic; bindings batch 1 and 3.
  bert, gpt2, llama, vit  transformers models built from small configs (llama with rotary
      embeddings and grouped-query attention): token ids [batch, seq] (and an attention mask for
      bert), batch and seq dynamic; bindings (1, 7) and (3, 16). vit: pixels [batch, 3, 32, 32].
  bert_bench  a BERT-style encoder of width 256 and 4 layers for bench/dynamic.sh; bindings
      (8, 64) and (32, 128); only when named.
Each is exported twice: `ts` (TorchScript, opset 17, dynamic_axes) and `dynamo` (opset 18,
dynamic_shapes). The expected outputs are onnxruntime's (CPU, float32): what the exported model
means at each binding. Torch's outputs (eval mode) are compared with them and the largest
difference, relative to torch's largest output, is printed, so an export that does not hold at
some binding is seen here.
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_test_layout import write_test  # noqa: E402

TOLERANCES = {"rtol": 2e-3, "atol": 2e-4}
IMAGE_BINDINGS = [1, 3]
TOKEN_BINDINGS = [(1, 7), (3, 16)]
# The largest size of a symbolic dim that dynamo's exports admit (bert_bench's positions: 512).
DIM_MAX = 64


def vision(name):
    import torchvision

    def build():
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None)

    def inputs(batch, g):
        return {"images": torch.rand(batch, 3, 64, 64, generator=g) * 2 - 1}

    return build, inputs, IMAGE_BINDINGS, {"images": {0: "batch"}}


def tokens(config_fn, with_mask=False, bindings=TOKEN_BINDINGS):
    def build():
        torch.manual_seed(0)
        cls, cfg = config_fn()
        return cls(cfg)

    def inputs(binding, g):
        batch, seq = binding
        ids = torch.randint(0, 100, (batch, seq), generator=g)
        out = {"input_ids": ids}
        if with_mask:
            mask = torch.ones(batch, seq, dtype=torch.int64)
            if batch > 1:
                mask[1:, seq - 2 :] = 0  # padded tails
            out["attention_mask"] = mask
        return out

    axes = {"input_ids": {0: "batch", 1: "seq"}}
    if with_mask:
        axes["attention_mask"] = {0: "batch", 1: "seq"}
    return build, inputs, bindings, axes


def bert_config():
    from transformers import BertConfig, BertModel

    return BertModel, BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, attn_implementation="eager",
    )


def bert_bench_config():
    """A BERT-style encoder large enough to time (4 layers of width 256), small enough to carry."""
    from transformers import BertConfig, BertModel

    return BertModel, BertConfig(
        vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=512, attn_implementation="eager",
    )


def gpt2_config():
    from transformers import GPT2Config, GPT2Model

    return GPT2Model, GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False,
        attn_implementation="eager",
    )


def llama_config():
    from transformers import LlamaConfig, LlamaModel

    return LlamaModel, LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        use_cache=False, attn_implementation="eager",
    )


def vit():
    from transformers import ViTConfig, ViTModel

    def build():
        torch.manual_seed(0)
        return ViTModel(ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, attn_implementation="eager",
        ), add_pooling_layer=False)

    def inputs(batch, g):
        return {"pixel_values": torch.rand(batch, 3, 32, 32, generator=g) * 2 - 1}

    return build, inputs, IMAGE_BINDINGS, {"pixel_values": {0: "batch"}}


MODELS = {
    "resnet18": lambda: vision("resnet18"),
    "mobilenet_v3_small": lambda: vision("mobilenet_v3_small"),
    "squeezenet1_1": lambda: vision("squeezenet1_1"),
    "shufflenet_v2_x0_5": lambda: vision("shufflenet_v2_x0_5"),
    "bert": lambda: tokens(bert_config, with_mask=True),
    "bert_bench": lambda: tokens(bert_bench_config, with_mask=True, bindings=[(8, 64), (32, 128)]),
    "gpt2": lambda: tokens(gpt2_config),
    "llama": lambda: tokens(llama_config),
    "vit": vit,
}


class FirstOutput(torch.nn.Module):
    """A transformers model's first output (the last hidden state) as a plain tensor."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        out = self.inner(*args)
        return out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)


def export(model, example, axes, path, exporter):
    names = list(example)
    args = tuple(example[n] for n in names)
    if exporter == "ts":
        torch.onnx.export(
            model, args, path, input_names=names, output_names=["output"],
            dynamic_axes={**axes, "output": {0: "batch"}}, opset_version=17, dynamo=False,
        )
    else:
        dims = {}
        shapes = []
        for n in names:
            spec = {}
            for axis, dim_name in axes.get(n, {}).items():
                if dim_name not in dims:
                    dims[dim_name] = torch.export.Dim(dim_name, min=1, max=DIM_MAX)
                spec[axis] = dims[dim_name]
            shapes.append(spec)
        torch.onnx.export(
            model, args, path, input_names=names, output_names=["output"],
            # One entry for forward's `*args`, a tuple with one spec per argument.
            dynamic_shapes=(tuple(shapes),), opset_version=18, dynamo=True, external_data=False,
        )


def empty_batch(data_set):
    """A data set of batch 0: the inputs and the output of `data_set` cut to an empty batch (the
    leading axis of every one), so a dynamic model is also run on empty tensors."""
    inputs, outputs = data_set
    return [v[:0] for v in inputs], [v[:0] for v in outputs]


def main():
    out_dir = sys.argv[1]
    wanted = sys.argv[2:] or [m for m in MODELS if m != "bert_bench"]
    global DIM_MAX
    os.makedirs(out_dir, exist_ok=True)
    for name in wanted:
        build, make_inputs, bindings, axes = MODELS[name]()
        DIM_MAX = max(max(b) for b in bindings) if name == "bert_bench" else 64
        model = FirstOutput(build()).eval()
        for exporter in ["ts", "dynamo"]:
            test = f"{name}_{exporter}"
            tmp = os.path.join(out_dir, f"{test}.onnx")
            try:
                g = torch.Generator().manual_seed(1)
                sets = [make_inputs(b, g) for b in bindings]
                export(model, sets[-1], axes, tmp, exporter)
                proto = onnx.load(tmp)
                session = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
                graph_inputs = [i.name for i in proto.graph.input]
                data_sets = []
                worst = 0.0
                for inputs in sets:
                    with torch.no_grad():
                        torch_out = model(*inputs.values()).numpy()
                    feed = {n: inputs[n].numpy() for n in graph_inputs}
                    want = session.run(None, feed)[0]
                    scale = max(float(np.max(np.abs(torch_out))), 1e-30)
                    worst = max(worst, float(np.max(np.abs(want - torch_out))) / scale)
                    data_sets.append(([feed[n] for n in graph_inputs], [want]))
                data_sets.append(empty_batch(data_sets[0]))
                write_test(os.path.join(out_dir, test), proto, data_sets, TOLERANCES)
                dims = [
                    [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
                    for i in proto.graph.input
                ]
                print(f"{test}: ok, inputs {dims}, onnxruntime vs torch max |diff| / max |torch| "
                      f"{worst:.2e}, "
                      f"{os.path.getsize(tmp) / 1e6:.1f} MB", flush=True)
            except Exception as e:  # noqa: BLE001 - report and go on with the next export
                print(f"{test}: FAILED {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)


if __name__ == "__main__":
    main()
