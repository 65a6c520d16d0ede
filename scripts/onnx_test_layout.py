"""The layout of ONNX's backend test data, shared by onnx_node_tests.py and onnx_models.py.

    <test>/model.onnx
    <test>/case.json                          {"rtol": ..., "atol": ...}
    <test>/test_data_set_<i>/input_<k>.pb      the value of graph input k
    <test>/test_data_set_<i>/output_<k>.pb     the value of graph output k

as onnx/backend/test/cmd_tools.py `generate-data` writes test data (plus case.json).
"""

from __future__ import annotations

import json
import os

from onnx import TensorProto, numpy_helper


def serialize(value, value_info) -> bytes:
    """One input or output value as cmd_tools.py generate_data writes it."""
    t = value_info.type
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, value_info.name).SerializeToString()
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, value_info.name).SerializeToString()
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, value_info.name).SerializeToString()
    assert t.HasField("tensor_type"), f"{value_info.name}: unexpected type {t}"
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, value_info.name).SerializeToString()


def write_test(test_dir: str, model, data_sets, tolerances: dict) -> None:
    """Writes `model`, its data sets (pairs of input and output value lists, in graph order) and
    its tolerances into the new folder `test_dir`."""
    os.makedirs(test_dir)
    with open(os.path.join(test_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    graph = model.graph
    for i, (inputs, outputs) in enumerate(data_sets):
        data_dir = os.path.join(test_dir, f"test_data_set_{i}")
        os.makedirs(data_dir)
        for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                with open(os.path.join(data_dir, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(serialize(value, infos[j]))
    with open(os.path.join(test_dir, "case.json"), "w") as f:
        json.dump(tolerances, f, sort_keys=True)
        f.write("\n")
