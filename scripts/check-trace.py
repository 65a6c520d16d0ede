"""Checks a Chrome trace written by `tirc run --trace` (gpu-conform.sh's profile run).

    python3 scripts/check-trace.py TRACE.json

Every slice must be a copy or a kernel with a positive duration and a track named after its
stream; slices on one stream must not overlap (a stream runs its work in order); there must be
at least one kernel. Prints one line and exits 0, or names what is wrong and exits 1.
"""

import json
import sys


def main(path):
    events = json.load(open(path))["traceEvents"]
    tracks = {e["tid"] for e in events if e.get("name") == "thread_name"}
    slices = [e for e in events if e.get("ph") == "X"]
    kernels = [e for e in slices if e["cat"] == "kernel"]
    if not kernels:
        return f"{path}: no kernel slices"
    for e in slices:
        if e["cat"] not in ("copy", "kernel"):
            return f"{path}: slice {e['name']} has category {e['cat']}"
        if not e["dur"] > 0:
            return f"{path}: slice {e['name']} lasts {e['dur']} us"
        if e["tid"] not in tracks:
            return f"{path}: slice {e['name']} is on stream {e['tid']}, which has no track"
    for tid in tracks:
        on = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in slices if e["tid"] == tid)
        for (_, end, a), (start, _, b) in zip(on, on[1:]):
            if start < end - 1e-3:
                return f"{path}: {a} and {b} overlap on stream {tid}"
    print(f"{path}: {len(kernels)} kernels, {len(slices) - len(kernels)} copies, "
          f"{len(tracks)} streams, well formed")
    return None


if __name__ == "__main__":
    problem = main(sys.argv[1])
    if problem:
        print(problem)
        sys.exit(1)
