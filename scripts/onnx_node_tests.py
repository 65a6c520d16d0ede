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

import os
import sys
import warnings

import numpy as np

warnings.simplefilter("ignore")
np.seterr(all="ignore")
np.random.seed(0)

from onnx.backend.test.case import node as node_test  # noqa: E402
from onnx_test_layout import write_test  # noqa: E402


def write_case(case, out_dir: str) -> None:
    assert case.model is not None and case.data_sets
    tolerances = {k: getattr(case, k) for k in ("rtol", "atol") if hasattr(case, k)}
    write_test(os.path.join(out_dir, case.name), case.model, case.data_sets, tolerances)


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
