"""Prints tir-bench's JSON result lines as `workload  median-ms  spec` (spec: argv[1])."""
import json
import sys

for line in sys.stdin:
    r = json.loads(line)
    print(f"{r['name']:<36} {r.get('median_ms', r.get('error'))!s:>10}  {sys.argv[1]}")
