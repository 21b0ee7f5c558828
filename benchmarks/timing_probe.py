"""Does a short side-by-side measurement depend on what ran just before it?

    python benchmarks/timing_probe.py --json timing.json

In one compile (session 6), fair timing read our GEMM at 8192x14336x4096 level with
cuBLAS (1.448 vs 1.460 ms) and the fusion selection, minutes later, read cuBLAS 7%
ahead (1.446 vs 1.344), while final runs showed parity. The two interleave different
contenders: in the selection cuBLAS is timed right after a light, memory-bound
epilogue kernel. Here, at two shapes, the pair (ours, cuBLAS) is timed as CUDA graph
replays (the selection's and fair timing's measurement) under each protocol:

* ``pair``: the two alone, in both orders;
* ``light_before_cublas`` / ``light_before_ours``: a light elementwise kernel (the
  size of an epilogue) timed just before one of them in every round;
* each with 40 ms repetitions (what the compile-time measurements use) and 200 ms.

Each protocol's cuBLAS/ours ratio is reported; a protocol that agrees with the long
two-contender run is one the selection can use.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.kernels.config import shortlist  # noqa: E402
from inductor_cutedsl.runtime import get_gemm, spec_for  # noqa: E402
from inductor_cutedsl.bench.report import graphed, report_row, run_info  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

SHAPES = [(8192, 4096, 4096), (8192, 14336, 4096)]
ROUNDS = 5
PROTOCOLS = {
    "pair_ours_first": ("ours", "cublas"),
    "pair_cublas_first": ("cublas", "ours"),
    "light_before_cublas": ("ours", "light", "cublas"),
    "light_before_ours": ("cublas", "light", "ours"),
}


def contenders(m: int, n: int, k: int) -> dict:
    """CUDA graph replays of our kernel, cuBLAS and a light kernel (an epilogue's
    worth of elementwise work on the M x N output)."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    other = torch.empty_like(out)
    kern = get_gemm(spec_for(a, b, torch.bfloat16, shortlist(m, n, k)[0]))
    residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    return {
        "ours": graphed(lambda: kern(a, b, out)),
        "cublas": graphed(lambda: torch.mm(a, b, out=other)),
        "light": graphed(lambda: torch.add(torch.relu(out), residual, out=other)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    result = {**run_info(), "rounds": ROUNDS, "rows": []}
    runs_by_shape = {shape: contenders(*shape) for shape in SHAPES}
    bench(runs_by_shape[SHAPES[0]]["cublas"], rep=300)  # steady clock
    # The short repetitions first: they are the question (a cut-short run keeps them).
    for rep in (40, 200):
        for shape, runs in runs_by_shape.items():
            for name, order in PROTOCOLS.items():
                t = interleaved({c: (lambda fn=runs[c]: bench(fn, rep=rep)) for c in order}, ROUNDS)
                row = {
                    "shape": list(shape), "rep_ms": rep, "protocol": name,
                    "ours_ms": round(t["ours"], 4), "cublas_ms": round(t["cublas"], 4),
                    "cublas_over_ours": round(t["cublas"] / t["ours"], 4),
                }  # fmt: skip
                report_row(result, row, args.json)


if __name__ == "__main__":
    main()
