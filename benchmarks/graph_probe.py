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

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import SHAPES, build_per_shape, linear_operands  # noqa: E402
from inductor_cutedsl.kernels.config import shortlist  # noqa: E402
from inductor_cutedsl.runtime import get_gemm  # noqa: E402
from inductor_cutedsl.runtime.launch import default_cache  # noqa: E402
from inductor_cutedsl.bench.report import graphed, rel_err, report_row, run_info  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

CONFIGS = 3
ROUNDS = 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cache = default_cache()
    specs = build_per_shape(lambda m, n, k: shortlist(m, n, k)[:CONFIGS])
    result = {**run_info(), "rows": []}
    for m, n, k in SHAPES:
        a, b = linear_operands(m, n, k)
        ref = torch.mm(a, b)
        outs = {"cublas": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}
        direct, errors = {"cublas": lambda: torch.mm(a, b, out=outs["cublas"])}, {}
        for spec in specs[(m, n, k)]:
            name, kern = spec.config.name(), get_gemm(spec, cache)
            outs[name] = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            kern(a, b, outs[name])
            errors[name] = float(f"{rel_err(outs[name], ref):.3e}")
            direct[name] = lambda kern=kern, out=outs[name]: kern(a, b, out)
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
