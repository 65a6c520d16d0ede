"""Writes ONNX's backend node tests into a folder, for the Rust ONNX importer's test runner.

Usage: PYTHONPATH=.tools/onnx python3 scripts/onnx_node_tests.py OUT_DIR
(scripts/onnx-node-tests.sh runs it; see there.)

For each case of onnx.backend.test.case.node.collect_testcases() it writes OUT_DIR/<case.name>/
with model.onnx, test_data_set_<i>/input_<k>.pb and output_<k>.pb (serialized TensorProto, or
SequenceProto / MapProto / OptionalProto for inputs and outputs of those types), exactly as
onnx/backend/test/cmd_tools.py `generate-data` writes test data, plus case.json holding the
case's {"rtol", "atol"}. The global numpy RNG is seeded first, so the data is the same each run.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

warnings.simplefilter("ignore")
np.seterr(all="ignore")
np.random.seed(0)

from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx.backend.test.case import node as node_test  # noqa: E402


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


def write_case(case, out_dir: str) -> None:
    case_dir = os.path.join(out_dir, case.name)
    os.makedirs(case_dir)
    assert case.model is not None and case.data_sets
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        data_dir = os.path.join(case_dir, f"test_data_set_{i}")
        os.makedirs(data_dir)
        for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                with open(os.path.join(data_dir, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(serialize(value, infos[j]))
    tolerances = {k: getattr(case, k) for k in ("rtol", "atol") if hasattr(case, k)}
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(tolerances, f, sort_keys=True)
        f.write("\n")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    cases = node_test.collect_testcases()
    written, failed = 0, []
    for case in cases:
        try:
            write_case(case, out_dir)
            written += 1
        except Exception as e:  # report and go on; the count at the end tells
            failed.append(case.name)
            print(f"onnx-node-tests: {case.name}: {type(e).__name__}: {e}", file=sys.stderr)
    print(f"wrote {written} of {len(cases)} ONNX node test cases to {out_dir.removesuffix('.partial')}"
          + (f" ({len(failed)} failed: {', '.join(failed)})" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
