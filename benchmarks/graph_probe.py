"""Do our configs stand the same against cuBLAS when timed directly and as CUDA graphs?

    python benchmarks/graph_probe.py --json graph.json

In session 8 the GEMM benchmark (direct launches) read our whole-tile-buffers config
level with cuBLAS at 8192x4096x4096, while the fusion selection (CUDA graph replays,
GEMM + epilogue kernel) read it 3-5% behind cuBLAS + the same epilogue, and the bias
probe (graphs) read the plain cooperative config 5% behind. Here, at every benchmark
shape: the shortlist's first three configs and cuBLAS, each launched directly and as a
CUDA graph, on the same tensors, do_bench medians over interleaved rotating rounds.
Each of ours is checked against cuBLAS's result first.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import SHAPES, build_per_shape, checked_runs, linear_operands  # noqa: E402
from inductor_cutedsl.kernels.config import shortlist  # noqa: E402
from inductor_cutedsl.bench.report import graphed, report_row, run_info  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

CONFIGS = 3
ROUNDS = 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    specs = build_per_shape(lambda m, n, k: shortlist(m, n, k)[:CONFIGS])
    result = {**run_info(), "rows": []}
    for m, n, k in SHAPES:
        direct, errors = checked_runs(*linear_operands(m, n, k), specs[(m, n, k)])
        runs = {**{f"{name}/direct": fn for name, fn in direct.items()},
                **{f"{name}/graph": graphed(fn) for name, fn in direct.items()}}  # fmt: skip
        times = interleaved({name: (lambda fn=fn: bench(fn, rep=100)) for name, fn in runs.items()}, ROUNDS)
        row = {
            "shape": [m, n, k], "ms": {name: round(t, 4) for name, t in times.items()}, "rel_err": errors,
            "cublas_over_ours": {
                mode: {name: round(times[f"cublas/{mode}"] / times[f"{name}/{mode}"], 4) for name in errors}
                for mode in ("direct", "graph")
            },
        }  # fmt: skip
        report_row(result, row, args.json)


if __name__ == "__main__":
    main()
