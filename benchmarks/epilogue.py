"""GEMM + epilogue patterns: eager vs stock max-autotune vs max-autotune with inductor_cutedsl.

    python -m benchmarks.epilogue --json benchmarks/results/h200-epilogue.json [--shapes 0,3]

Same tensors for all three, same timer (interleaved medians of do_bench over CUDA graph
replays, so that host time is timed for none of them), bf16.
Each compiled variant must match eager within bf16 tolerance before it is timed.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from inductor_cutedsl import disable
from inductor_cutedsl.cli.report import kernel_times, ran_cutedsl
from inductor_cutedsl.cli.run import compile_options
from inductor_cutedsl.install import reenabled
from inductor_cutedsl.scheduler import scheduling, selection

from .gemm import SHAPES
from .harness import BACKENDS, geomean, graphed, rel_err, run_info, side_by_side, stock_as_fair_stock, write_json

PATTERNS = {
    "addmm_gelu_tanh": (
        lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
        lambda m, n, k: (_bf16(m, k), _bf16(n, k, scale=k**-0.5), _bf16(n)),
    ),
    "mm_relu_residual": (
        lambda x, w, r: torch.relu(x @ w.t()) + r,
        lambda m, n, k: (_bf16(m, k), _bf16(n, k, scale=k**-0.5), _bf16(m, n)),
    ),
    "mm_silu_gate": (
        lambda x, w, g: F.silu(x @ w.t()) * g,
        lambda m, n, k: (_bf16(m, k), _bf16(n, k, scale=k**-0.5), _bf16(m, n)),
    ),
    # Inductor's max-autotune pattern gives this to mm_plus_mm; ours splits it into two
    # GEMMs and an add (lowering/mm_plus_mm.py). Training shapes: a gradient through
    # gate and up (K = the MLP width) or through k and v (K = their width).
    "mm_plus_mm": (
        lambda x, w, y, v: x @ w.t() + y @ v.t(),
        lambda m, n, k: (_bf16(m, k), _bf16(n, k, scale=k**-0.5), _bf16(m, k), _bf16(n, k, scale=k**-0.5)),
    ),
}
TOLERANCE = 2e-2
COMPILE_FIRST_HELP = "which side compiles first in each case (default stock; see measure_case)"


def _bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def _compile_and_run(fn, args, ours: bool):
    """``fn`` compiled (stock max-autotune, or with our backend and epilogue fusion)
    and its first output. The first call compiles, so it runs in that state."""
    with reenabled(epilogue_fusion=True):
        if not ours:
            disable()
        compiled = torch.compile(fn, options=compile_options())
        return compiled, compiled(*args)


def run_case(name: str, m: int, n: int, k: int, first: str = "stock") -> dict:
    fn, make = PATTERNS[name]
    args = make(m, n, k)
    x, w = args[:2]
    gemm_out = torch.empty(m, n, device=x.device, dtype=x.dtype)

    def gemm_alone() -> torch.Tensor:
        out = torch.mm(x, w.t(), out=gemm_out)
        if name == "mm_plus_mm":  # two GEMMs: the bound is cuBLAS's pair, the second accumulating
            out.addmm_(args[2], args[3].t())
        return out

    return measure_case(name, (m, n, k), fn, args, gemm_alone, first=first)


def measure_case(name: str, shape, fn, args, gemm_alone, tolerance: float = TOLERANCE, first: str = "stock") -> dict:
    """Eager, stock max-autotune and ours of ``fn(*args)``, each checked against eager
    within ``tolerance`` and timed side by side, with ``gemm_alone`` (the pattern's
    GEMM by cuBLAS) for the free-epilogue bound. ``first`` compiles first: rows whose two
    sides ran the same kernels have read slower for the side compiled second (NOTES.md),
    and the row records the order (``compiled_first``)."""
    m, n, k = shape
    torch.compiler.reset()  # the previous case's graphs; never between stock and ours (compile_options)
    with torch.no_grad():
        ref = fn(*args)
        compiled = {}
        fused_before, decided_before = len(scheduling.fused_epilogues), len(selection.decisions)
        for label in sorted(BACKENDS, key=lambda b: b != first):
            compiled[label], out = _compile_and_run(fn, args, label == "ours")
            err = rel_err(out, ref)
            if not err < tolerance:
                raise AssertionError(f"{name} {m}x{n}x{k} {label}: rel err {err:.3e} vs eager")
        # Each variant's GPU work as a CUDA graph (as max-autotune's default cudagraph mode
        # runs it): a small GEMM takes about as long as a compiled graph's host time,
        # which would otherwise be timed too.
        times = side_by_side(
            {
                "eager": graphed(lambda: fn(*args)),
                "stock": graphed(lambda: compiled["stock"](*args)),
                "ours": graphed(lambda: compiled["ours"](*args)),
                # The GEMM alone (cuBLAS): stock / this is what a free epilogue could gain.
                "gemm": graphed(gemm_alone),
            }
        )
        # Each compiled variant's kernels: what the selection's figures can be held against.
        kernels = {label: kernel_times(lambda fn=fn: fn(*args), top=6) for label, fn in compiled.items()}
        if ran_cutedsl(kernels["stock"]):
            raise AssertionError(f"{name} {m}x{n}x{k}: the stock variant ran CuteDSL kernels")
    return {
        "pattern": name,
        "shape": [m, n, k],
        "compiled_first": first,
        "eager_ms": round(times["eager"], 4),
        "stock_ms": round(times["stock"], 4),
        "ours_ms": round(times["ours"], 4),
        "vs_max_autotune": round(times["stock"] / times["ours"], 4),
        "cublas_gemm_ms": round(times["gemm"], 4),
        # The ratio a fused epilogue costing nothing, on a GEMM as fast as cuBLAS, would get.
        "free_epilogue_bound": round(times["stock"] / times["gemm"], 4),
        # What our compile fused into CuteDSL GEMMs (empty: Inductor's choice won).
        "fused_into_cutedsl": [f["ops"] for f in scheduling.fused_epilogues[fused_before:]],
        # The selection's side-by-side figures and the way it took, per decided GEMM.
        "selection": selection.decisions[decided_before:],
        "kernels": kernels,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", metavar="PATH", default=None, help="where the results are written (default: nowhere)")
    ap.add_argument("--shapes", default=None, help="indices into the shape list, e.g. 0,3 (default: all)")
    ap.add_argument("--sizes", default=None, help="MxNxK,... instead of the shape list")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated (default %(default)s)")
    ap.add_argument("--compile-first", choices=BACKENDS, default="stock", help=COMPILE_FIRST_HELP)
    args = ap.parse_args(argv)
    shapes = SHAPES if args.shapes is None else [SHAPES[int(i)] for i in args.shapes.split(",")]
    if args.sizes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    stock_as_fair_stock()
    rows: list[dict] = []
    for name in args.patterns.split(","):
        for m, n, k in shapes:
            row = run_case(name, m, n, k, args.compile_first)
            rows.append(row)
            fused = "; ".join(",".join(ops) for ops in row["fused_into_cutedsl"]) or "-"
            fused += "".join(f" [{d['way']}: {d['ms']} {d['configs']}]" for d in row["selection"])
            print(
                f"{name:>18} {m}x{n}x{k}: eager {row['eager_ms']:.4f} stock {row['stock_ms']:.4f} "
                f"ours {row['ours_ms']:.4f} -> {row['vs_max_autotune']:.3f}x (free-epilogue bound "
                f"{row['free_epilogue_bound']:.3f}x)  fused: {fused}",
                flush=True,
            )
            # After every case, so that a run cut short by a time limit keeps what it measured.
            result = _summary(rows)
            write_json(result, args.json)
    print(
        f"geomean vs stock max-autotune {result['geomean_vs_max_autotune']:.3f}, "
        f"min {result['min_vs_max_autotune']:.3f}"
    )
    return result


def _summary(rows: list[dict]) -> dict:
    ratios = [r["vs_max_autotune"] for r in rows]
    return {
        **run_info(),
        "geomean_vs_max_autotune": round(geomean(ratios), 4),
        "geomean_free_epilogue_bound": round(geomean(r["free_epilogue_bound"] for r in rows), 4),
        "min_vs_max_autotune": min(ratios),
        "rows": rows,
    }


if __name__ == "__main__":
    main()
