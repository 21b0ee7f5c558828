"""What an epilogue costs our kernel: a row bias, and full M x N inputs, against cuBLAS.

    python benchmarks/bias_probe.py --json bias.json

In session 7 Inductor's fair timing read our addmm candidate (row bias) 3-15% behind
cuBLAS's bias addmm at the benchmark shapes, where our plain GEMM runs level with
cuBLAS's mm; and the selection read fused relu + residual / silu * gate 11-21% over
the plain kernel at 8192 rows. Here, at every benchmark shape and with the shortlist's
first cooperative config, each contender is one CUDA graph, timed side by side (do_bench medians,
interleaved rotating rounds): our kernel plain, with a row bias, with relu + residual
and with silu * gate (paired global loads, and staged through shared memory), cuBLAS
mm and cuBLAS addmm. Each of ours is checked against a float64 reference first.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import SHAPES, build_all, linear_spec  # noqa: E402
from inductor_cutedsl.kernels import epilogue as E  # noqa: E402
from inductor_cutedsl.kernels.config import GemmConfig, shortlist  # noqa: E402
from inductor_cutedsl.runtime import get_gemm  # noqa: E402
from inductor_cutedsl.runtime.launch import default_cache  # noqa: E402
from inductor_cutedsl.bench.report import graphed, rel_err, report_row, run_info  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

FULL = E.EpilogueOperand("r", "full", "bfloat16", True)
STAGED = E.EpilogueOperand("r", "full", "bfloat16", staged=True)
# M x N epilogues: (source expression, reference), each with paired global loads of
# the input and with the input TMA-loaded into shared memory ahead of the epilogue.
FUSED = {
    "relu_residual": ("relu(acc) + ops[0]", lambda acc, res: torch.relu(acc) + res),
    "silu_gate": ("silu(acc) * ops[0]", lambda acc, res: torch.nn.functional.silu(acc) * res),
}
EPILOGUES = {
    "plain": (E.IDENTITY, lambda acc, bias, res: acc),
    "bias": (E.bias("row"), lambda acc, bias, res: acc + bias),
    **{
        name + suffix: (
            E.Epilogue(name, f"def epilogue(acc, m, n, l, ops):\n    return {expr}\n", (op,)),
            lambda acc, bias, res, ref=ref: ref(acc, res),
        )
        for name, (expr, ref) in FUSED.items()
        for suffix, op in (("", FULL), ("_staged", STAGED))
    },
}
ROUNDS = 3


def _config(m: int, n: int, k: int) -> GemmConfig:
    """The shortlist's first cooperative config (what a staged operand needs)."""
    return next(c for c in shortlist(m, n, k) if c.stages_operands())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cache = default_cache()
    specs = {
        (shape, name): linear_spec(_config(*shape), epi) for shape in SHAPES for name, (epi, _) in EPILOGUES.items()
    }
    build_all(specs.values())
    result = {**run_info(), "rows": []}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = (torch.randn(n, k, device="cuda") * k**-0.5).to(torch.bfloat16).t()
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        res = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        acc = a.double() @ b.double()
        runs, errors = {}, {}
        for name, (epi, ref) in EPILOGUES.items():
            kern = get_gemm(specs[((m, n, k), name)], cache)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            extra = {"bias": (bias,), "plain": ()}.get(name, (res,))
            kern(a, b, out, *extra)
            errors[name] = rel_err(out, ref(acc, bias.double(), res.double()))
            runs[name] = graphed(lambda kern=kern, out=out, extra=extra: kern(a, b, out, *extra))
        mm_out, addmm_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), torch.empty(
            m, n, device="cuda", dtype=torch.bfloat16
        )
        runs["cublas_mm"] = graphed(lambda: torch.mm(a, b, out=mm_out))
        runs["cublas_addmm"] = graphed(lambda: torch.addmm(bias, a, b, out=addmm_out))
        times = interleaved({name: (lambda fn=fn: bench(fn, rep=100)) for name, fn in runs.items()}, ROUNDS)
        row = {
            "shape": [m, n, k], "config": _config(m, n, k).name(),
            "ms": {name: round(t, 4) for name, t in times.items()},
            "rel_err": {name: float(f"{e:.3e}") for name, e in errors.items()},
            "bias_over_plain": round(times["bias"] / times["plain"], 4),
            "cublas_addmm_over_bias": round(times["cublas_addmm"] / times["bias"], 4),
            "cublas_mm_over_plain": round(times["cublas_mm"] / times["plain"], 4),
            "fused_over_plain": {
                name: round(times[name] / times["plain"], 4) for name in EPILOGUES if name not in ("plain", "bias")
            },
        }  # fmt: skip
        report_row(result, row, args.json)


if __name__ == "__main__":
    main()
