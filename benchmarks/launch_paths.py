"""A short GEMM's time by launch path: is the kernel slow, or its launch?

    python benchmarks/launch_paths.py --json launch.json

At 1024 x 4096 x 4096 a GEMM runs about 50 us, close to a Python launch path's host
time. For our plain kernel, a row-bias kernel and a residual-add kernel (the kinds of
epilogue the selection times) this prints, on Inductor's benchmarker (fastest of
repetitions, L2 flushed), the time of: a direct call of the loaded kernel; a call
through the launcher that Inductor-generated code uses; that launcher call replayed
as a CUDA graph. Also, on a tiny GEMM, the wall time per launch of each run back to
back (host time, or the tiny kernel's GPU time where longer) and the host time alone.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl import _compat  # noqa: E402
from inductor_cutedsl.bench.gemm import launch_us  # noqa: E402
from inductor_cutedsl.kernels import epilogue as E  # noqa: E402
from inductor_cutedsl.kernels.config import shortlist  # noqa: E402
from inductor_cutedsl.runtime import get_gemm, spec_for  # noqa: E402
from inductor_cutedsl.runtime.generated import launcher  # noqa: E402
from inductor_cutedsl.bench.report import graphed, run_info, write_json  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

SHAPE = (1024, 4096, 4096)
EPILOGUES = {
    "plain": (E.IDENTITY, None),
    "bias_row": (E.bias("row"), "row"),
    "relu_residual_pairs": (
        E.Epilogue("relu_residual_pairs", "def epilogue(acc, m, n, l, ops):\n    return relu(acc) + ops[0]\n",
                   (E.EpilogueOperand("r", "full", "bfloat16", True),)),
        "full",
    ),
}  # fmt: skip


def launch_paths(epi, kind: str | None, m: int, n: int, k: int) -> dict:
    """Calls of the shortlist's first config (at SHAPE) with ``epi`` on fresh m x n x k
    inputs: direct, and through the generated-code launcher."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    shape = None if kind is None else (n,) if kind == "row" else (m, n)
    ops = () if shape is None else (torch.randn(*shape, device="cuda").to(torch.bfloat16),)
    spec = spec_for(a, b, torch.bfloat16, shortlist(*SHAPE)[0], epi)
    direct, launch = get_gemm(spec), launcher(spec)
    return {
        "direct": lambda: direct(a, b, out, *ops),
        "launcher": lambda: launch(a, b, out, *ops, stream=torch.cuda.current_stream().cuda_stream),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    result = {**run_info(), "shape": list(SHAPE), "rows": []}
    for name, (epi, kind) in EPILOGUES.items():
        row = {"epilogue": name}
        paths = launch_paths(epi, kind, *SHAPE)
        paths["launcher_graph"] = graphed(paths["launcher"])
        bench(paths["direct"], rep=500)  # steady clock
        t = interleaved({p: (lambda fn=fn: _compat.benchmark_gpu(fn)) for p, fn in paths.items()}, 3)
        row.update({f"{p}_ms": round(v, 4) for p, v in t.items()})
        for p, fn in launch_paths(epi, kind, 128, 128, 64).items():
            wall, host = launch_us(fn)
            row.update({f"wall_us_{p}": round(wall, 1), f"enqueue_us_{p}": round(host, 1)})
        result["rows"].append(row)
        print(row, flush=True)
    write_json(result, args.json)


if __name__ == "__main__":
    main()
