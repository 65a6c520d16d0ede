"""Builds small real ONNX models with onnx.helper, with test data, for the Rust ONNX importer.

Usage: PYTHONPATH=.tools/onnx python3 scripts/onnx_models.py OUT_DIR
(scripts/onnx-models.sh runs it; see there.)

Each model is checked with onnx.checker (full check, with strict shape inference), fed random
inputs drawn with a fixed seed (floats uniform in [-1, 1), int64 ids uniform over their range),
and run with onnx.reference.ReferenceEvaluator for the expected outputs. Written, in the layout of
ONNX's backend node tests (see onnx_node_tests.py), so one runner reads both:

    OUT_DIR/<name>/model.onnx
    OUT_DIR/<name>/case.json                     {"rtol": ..., "atol": ...}
    OUT_DIR/<name>/test_data_set_0/input_<k>.pb  TensorProto named as graph input k
    OUT_DIR/<name>/test_data_set_0/output_<k>.pb TensorProto named as graph output k

Models (weights are float32 initializers, uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) as
torch initializes nn.Linear and nn.Conv2d, each model with its own seed):

  transformer_encoder  opset 17; one post-norm BERT-style encoder layer (d_model 64, 4 heads of
                       16, FFN 128, exact GELU) in the form torch.onnx.export (TorchScript,
                       opset 17) writes it: x [batch, 16, 64] -> y [batch, 16, 64], batch a
                       dim_param, 2 in the data set.
  mlp_gemm             opset 13; x [4, 32] -> Gemm 64 -> Relu -> Gemm 10 -> Softmax -> probs.
  small_cnn            opset 17; input [2, 3, 16, 16] -> Conv 3x3 + Relu -> MaxPool 2x2 ->
                       grouped Conv 3x3 -> BatchNormalization -> Relu -> GlobalAveragePool ->
                       Flatten -> Gemm 10 -> logits.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_test_layout import write_test

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64

# Tolerances for the runner (|got - expected| <= atol + rtol * |expected|): the expected outputs
# are float32 results of the reference evaluator, so they allow for another summation order.
TOLERANCES = {"rtol": 1e-3, "atol": 1e-5}


class Builder:
    """Collects nodes and initializers of one graph, naming values the way torch's exporter does."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.counts: dict[str, int] = {}

    def node(self, op_type: str, inputs: list[str], scope: str = "", n_out: int = 1, **attrs):
        """Appends a node named like /scope/Op_1 with outputs /scope/Op_1_output_0, ...."""
        key = f"{scope}/{op_type}"
        count = self.counts.get(key, 0)
        self.counts[key] = count + 1
        name = f"{scope}/{op_type}" + (f"_{count}" if count else "")
        outputs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs[0] if n_out == 1 else outputs

    def const(self, value, dtype, scope: str = "") -> str:
        """A Constant node, as torch's exporter writes Python numbers and shapes."""
        arr = np.array(value, dtype=dtype)
        return self.node("Constant", [], scope, value=numpy_helper.from_array(arr))

    def init(self, name: str, arr: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def uniform(self, name: str, shape, bound: float) -> str:
        return self.init(name, self.rng.uniform(-bound, bound, size=shape))

    def linear_matmul(self, x: str, scope: str, fan_in: int, fan_out: int) -> str:
        """nn.Linear on a 3-d input as torch exports it: MatMul with the transposed weight, then
        Add with the bias as the first operand."""
        bound = 1.0 / math.sqrt(fan_in)
        w = self.uniform(f"onnx::MatMul{scope.replace('/', '_')}", (fan_in, fan_out), bound)
        b = self.uniform(f"{scope.strip('/').replace('/', '.')}.bias", (fan_out,), bound)
        mm = self.node("MatMul", [x, w], scope)
        return self.node("Add", [b, mm], scope)

    def linear_gemm(self, x: str, scope: str, fan_in: int, fan_out: int) -> str:
        """nn.Linear on a 2-d input as torch exports it: Gemm with transB=1."""
        bound = 1.0 / math.sqrt(fan_in)
        prefix = scope.strip("/").replace("/", ".")
        w = self.uniform(f"{prefix}.weight", (fan_out, fan_in), bound)
        b = self.uniform(f"{prefix}.bias", (fan_out,), bound)
        return self.node("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)

    def model(self, name: str, inputs, outputs, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        opsets = [helper.make_opsetid("", opset)]
        return helper.make_model(
            graph,
            opset_imports=opsets,
            ir_version=helper.find_min_ir_version_for(opsets),
            producer_name="tir scripts/onnx_models.py",
        )


def transformer_encoder() -> tuple[onnx.ModelProto, dict[str, int]]:
    seq, d_model, heads, d_head, d_ff = 16, 64, 4, 16, 128
    b = Builder(seed=1001)
    x = "x"

    # The batch size, read from the input as torch's exporter does for x.size(0).
    shape = b.node("Shape", [x])
    batch = b.node("Gather", [shape, b.const(0, np.int64)], axis=0)

    def reshape(value: str, scope: str, dims: list[int]) -> str:
        """value.view(batch, *dims): Unsqueeze the batch, Concat it with constant dims."""
        axes = b.const([0], np.int64, scope)
        parts = [b.node("Unsqueeze", [batch, axes], scope)]
        parts += [b.const([d], np.int64, scope) for d in dims]
        target = b.node("Concat", parts, scope, axis=0)
        return b.node("Reshape", [value, target], scope)

    def heads_split(value: str, scope: str) -> str:
        split = reshape(value, scope, [seq, heads, d_head])
        return b.node("Transpose", [split], scope, perm=[0, 2, 1, 3])

    scope = "/attention/self"
    q = heads_split(b.linear_matmul(x, f"{scope}/query", d_model, d_model), scope)
    k = heads_split(b.linear_matmul(x, f"{scope}/key", d_model, d_model), scope)
    v = heads_split(b.linear_matmul(x, f"{scope}/value", d_model, d_model), scope)
    k_t = b.node("Transpose", [k], scope, perm=[0, 1, 3, 2])
    scores = b.node("MatMul", [q, k_t], scope)
    scores = b.node("Div", [scores, b.const(math.sqrt(d_head), np.float32, scope)], scope)
    probs = b.node("Softmax", [scores], scope, axis=-1)
    context = b.node("MatMul", [probs, v], scope)
    context = b.node("Transpose", [context], scope, perm=[0, 2, 1, 3])
    context = reshape(context, scope, [seq, d_model])

    scope = "/attention/output"
    attn = b.linear_matmul(context, f"{scope}/dense", d_model, d_model)
    h = b.node("Add", [attn, x], scope)
    gamma = b.init("attention.output.LayerNorm.weight", 1.0 + 0.1 * b.rng.uniform(-1, 1, d_model))
    beta = b.init("attention.output.LayerNorm.bias", 0.1 * b.rng.uniform(-1, 1, d_model))
    h = b.node("LayerNormalization", [h, gamma, beta], f"{scope}/LayerNorm", axis=-1, epsilon=1e-5)

    # FFN with exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))) as torch exports it before opset 20.
    scope = "/intermediate"
    f = b.linear_matmul(h, f"{scope}/dense", d_model, d_ff)
    g = b.node("Div", [f, b.const(math.sqrt(2.0), np.float32, scope)], scope)
    g = b.node("Erf", [g], scope)
    g = b.node("Add", [g, b.const(1.0, np.float32, scope)], scope)
    g = b.node("Mul", [f, g], scope)
    g = b.node("Mul", [g, b.const(0.5, np.float32, scope)], scope)

    scope = "/output"
    f = b.linear_matmul(g, f"{scope}/dense", d_ff, d_model)
    y = b.node("Add", [f, h], scope)
    gamma = b.init("output.LayerNorm.weight", 1.0 + 0.1 * b.rng.uniform(-1, 1, d_model))
    beta = b.init("output.LayerNorm.bias", 0.1 * b.rng.uniform(-1, 1, d_model))
    b.nodes.append(
        helper.make_node("LayerNormalization", [y, gamma, beta], ["y"],
                         name="/output/LayerNorm/LayerNormalization", axis=-1, epsilon=1e-5)
    )

    model = b.model(
        "transformer_encoder",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", seq, d_model])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", seq, d_model])],
        opset=17,
    )
    return model, {"batch": 2}


def mlp_gemm() -> tuple[onnx.ModelProto, dict[str, int]]:
    b = Builder(seed=1002)
    h = b.linear_gemm("x", "/fc1", 32, 64)
    h = b.node("Relu", [h], "/relu")
    h = b.linear_gemm(h, "/fc2", 64, 10)
    b.nodes.append(helper.make_node("Softmax", [h], ["probs"], name="/softmax/Softmax", axis=1))
    model = b.model(
        "mlp_gemm",
        [helper.make_tensor_value_info("x", FLOAT, [4, 32])],
        [helper.make_tensor_value_info("probs", FLOAT, [4, 10])],
        opset=13,
    )
    return model, {}


def small_cnn() -> tuple[onnx.ModelProto, dict[str, int]]:
    b = Builder(seed=1003)

    def conv(x: str, scope: str, c_in: int, c_out: int, group: int, bias: bool) -> str:
        fan_in = c_in // group * 3 * 3
        bound = 1.0 / math.sqrt(fan_in)
        prefix = scope.strip("/")
        inputs = [x, b.uniform(f"{prefix}.weight", (c_out, c_in // group, 3, 3), bound)]
        if bias:
            inputs.append(b.uniform(f"{prefix}.bias", (c_out,), bound))
        return b.node("Conv", inputs, scope, dilations=[1, 1], group=group,
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])

    h = conv("input", "/conv1", 3, 8, group=1, bias=True)
    h = b.node("Relu", [h], "/relu1")
    h = b.node("MaxPool", [h], "/pool", ceil_mode=0, dilations=[1, 1], kernel_shape=[2, 2],
               pads=[0, 0, 0, 0], strides=[2, 2])
    h = conv(h, "/conv2", 8, 8, group=2, bias=False)
    bn = [
        b.init("bn.weight", 1.0 + 0.2 * b.rng.uniform(-1, 1, 8)),
        b.init("bn.bias", 0.2 * b.rng.uniform(-1, 1, 8)),
        b.init("bn.running_mean", 0.2 * b.rng.uniform(-1, 1, 8)),
        b.init("bn.running_var", b.rng.uniform(0.5, 1.5, 8)),
    ]
    h = b.node("BatchNormalization", [h, *bn], "/bn", epsilon=1e-5, momentum=0.9)
    h = b.node("Relu", [h], "/relu2")
    h = b.node("GlobalAveragePool", [h], "/gap")
    h = b.node("Flatten", [h], "/flatten", axis=1)
    w = b.uniform("fc.weight", (10, 8), 1.0 / math.sqrt(8))
    bias = b.uniform("fc.bias", (10,), 1.0 / math.sqrt(8))
    b.nodes.append(helper.make_node("Gemm", [h, w, bias], ["logits"], name="/fc/Gemm",
                                    alpha=1.0, beta=1.0, transB=1))
    model = b.model(
        "small_cnn",
        [helper.make_tensor_value_info("input", FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", FLOAT, [2, 10])],
        opset=17,
    )
    return model, {}


MODELS = [transformer_encoder, mlp_gemm, small_cnn]


def random_input(rng: np.random.Generator, vi: onnx.ValueInfoProto, dims: dict[str, int],
                 vocab: int = 1000) -> np.ndarray:
    """Random data for a graph input: floats uniform in [-1, 1), int64 ids in [0, vocab)."""
    t = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in t.shape.dim]
    if t.elem_type == FLOAT:
        arr = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    elif t.elem_type == INT64:
        arr = rng.integers(0, vocab, size=shape, dtype=np.int64)
    else:
        raise ValueError(f"{vi.name}: no random data for element type {t.elem_type}")
    assert arr.size == 0 or np.any(arr != 0), vi.name
    return arr


def write_model(out_dir: str, build, seed: int) -> None:
    model, dims = build()
    name = model.graph.name
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(seed)
    inputs = {vi.name: random_input(rng, vi, dims) for vi in model.graph.input}
    outputs = ReferenceEvaluator(model).run(None, inputs)
    for vi, arr in zip(model.graph.output, outputs, strict=True):
        assert arr.dtype == np.float32 and np.all(np.isfinite(arr)), (name, vi.name)
    ins = [inputs[vi.name] for vi in model.graph.input]
    write_test(os.path.join(out_dir, name), model, [(ins, outputs)], TOLERANCES)
    shapes = ", ".join(f"{vi.name} {list(arr.shape)}" for vi, arr in zip(model.graph.output, outputs))
    print(f"  {name}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, {shapes}")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for i, build in enumerate(MODELS):
        write_model(out_dir, build, seed=2000 + i)
    print(f"wrote {len(MODELS)} ONNX models to {out_dir.removesuffix('.partial')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
