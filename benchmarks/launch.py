"""Host time per launch of one GEMM from Inductor-generated code: ours, Triton's, ATen's.

    python -m benchmarks.launch --json benchmarks/results/h200-launch.json

For each shape, a graph holding only that GEMM (``a @ b``, or ``F.linear(x, w)``: a
weight read transposed) is compiled three times with ``max-autotune-no-cudagraphs``,
with the GEMM backends forced to ``CUTEDSL`` (ours), ``TRITON`` (Inductor's Triton
template) and ``ATEN`` (cuBLAS); the generated code shows which kernel each one runs.
Host time per launch is the enqueue time of N calls of the compiled function (Dynamo's
guards, Inductor's wrapper, the launch): the GPU is kept busy first by a
``torch.cuda._sleep`` that outlasts the window, so nothing inside it waits for the
GPU, and the window holds no sync. The three alternate over several rounds; each
figure is the median. ``launch_ratio_vs_triton`` is ours / Triton (issue 17 wants it
at most 1.0).

Beside them, ``breakdown_ours`` splits our figure: our launcher called directly (no
Dynamo, no wrapper), its C entry alone, and eager ``torch.mm`` for scale.

Without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from inductor_cutedsl.timing import sleep_cycles_per_ms

from .harness import geomean, run_info, write_json

MODE = "max-autotune-no-cudagraphs"
#: name -> (M, N, K, op): op "matmul" is ``a @ b`` with a row-major B, "linear" is
#: ``F.linear(x, w)`` (B = w.t(), column-major).
SHAPES = {
    "tiny": (128, 128, 128, "matmul"),
    "decode": (16, 4096, 4096, "linear"),
}
#: Which backend each compile may use (``max_autotune_gemm_backends``).
BACKENDS = {"ours": "CUTEDSL", "triton": "TRITON", "aten": "ATEN"}
#: Launch sites in Inductor's wrapper code, by kind of kernel.
KERNEL_PATTERNS = {
    "cutedsl": r"^\s+cutedsl_\w+\.run\(",
    "triton_template": r"^\s+triton_tem_\w+\.run\(",
    "triton_other": r"^\s+triton_(?!tem_)\w+\.run\(",
    "aten": r"extern_kernels\.\w*mm\(",
}
#: The kind of kernel each backend's GEMM must be.
EXPECTED = {"ours": "cutedsl", "triton": "triton_template", "aten": "aten"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH", default=None, help="write the results here (rewritten after each shape)")
    known = ", ".join(f"{k} {v[:3]}" for k, v in SHAPES.items())
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated subset of {known}")
    ap.add_argument("--calls", type=int, default=200, help="launches per timed window (default 200)")
    ap.add_argument("--rounds", type=int, default=7, help="timed windows per backend, interleaved (default 7)")
    args = ap.parse_args(argv)
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        ap.error(f"unknown shapes {unknown}; choose from {sorted(SHAPES)}")
    if args.calls < 1 or args.rounds < 1:
        ap.error("--calls and --rounds must be at least 1")
    return args


def kernel_counts(code: str) -> dict[str, int]:
    """Launch sites per kind of kernel in generated wrapper code."""
    return {kind: len(re.findall(pattern, code, flags=re.M)) for kind, pattern in KERNEL_PATTERNS.items()}


def ran_expected(backend: str, counts: dict[str, int]) -> bool:
    """Whether ``backend``'s graph runs its GEMM as the kind it was forced to (one GEMM,
    no other GEMM kernel beside it)."""
    gemm_kinds = ("cutedsl", "triton_template", "aten")
    return counts[EXPECTED[backend]] == 1 and sum(counts[k] for k in gemm_kinds) == 1


def summarize(rows: list[dict]) -> dict:
    """Top-level figures over the shapes' rows."""
    ratios = [r["launch_ratio_vs_triton"] for r in rows]
    vs_aten = [r["launch_ratio_vs_aten"] for r in rows]
    return {
        "launch_ratio_vs_triton_max": max(ratios, default=None),
        "launch_ratio_vs_triton_geomean": round(geomean(ratios), 4) if ratios else None,
        "launch_ratio_vs_aten_max": max(vs_aten, default=None),
        "ours_ran_cutedsl": all(r["ran_expected"]["ours"] for r in rows) if rows else None,
        "all_ran_expected": all(all(r["ran_expected"].values()) for r in rows) if rows else None,
        "rel_err_max": max((e for r in rows for e in r["rel_err"].values()), default=None),
        "gpu_stayed_busy": all(r["gpu_stayed_busy"] for r in rows) if rows else None,
    }


def operands(m: int, n: int, k: int, op: str) -> tuple[Callable, tuple[torch.Tensor, torch.Tensor]]:
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    if op == "linear":
        return (lambda x, w: F.linear(x, w)), (x, torch.randn(n, k, device="cuda").to(torch.bfloat16))
    return (lambda a, b: a @ b), (x, torch.randn(k, n, device="cuda").to(torch.bfloat16))


def compile_for(backend: str, fn: Callable, args: tuple) -> tuple[Callable, dict[str, int], float]:
    """(the compiled function, its kernel counts, seconds of its first call) with only
    ``backend`` allowed for the GEMM: ours installed for ours, stock Inductor else. The
    backends are in the compile options, so each compile is its own Dynamo entry."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    import inductor_cutedsl

    tokens = BACKENDS[backend]
    # A code object of its own: Dynamo keeps its cache per code object, so each compiled
    # function's guards see one entry only.
    fn = types.FunctionType(fn.__code__.replace(co_name=f"gemm_{backend}"), fn.__globals__)
    (inductor_cutedsl.enable if backend == "ours" else inductor_cutedsl.disable)()
    try:
        with inductor_config.patch(max_autotune_gemm_backends=tokens):
            options = {**torch._inductor.list_mode_options(MODE), "max_autotune_gemm_backends": tokens}
            compiled = torch.compile(fn, options=options)
            t0 = time.perf_counter()
            _, codes = run_and_get_code(compiled, *args)
            seconds = time.perf_counter() - t0
    finally:
        inductor_cutedsl.enable()
    return compiled, kernel_counts("\n".join(codes)), seconds


def host_us(fns: dict[str, Callable], args: tuple, calls: int, rounds: int, cycles_per_ms: float) -> tuple[dict, bool]:
    """Per function, the microseconds per call of each round's window of ``calls``
    calls (the functions alternate, each round in another order), and whether the
    GPU was still sleeping when every window ended (else that window is redone with a
    longer sleep, up to three times)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    busy_ms = calls * 0.2  # 200 us per call: well above any launch path's host time
    busy = True
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = fns[name]
            for _attempt in range(4):
                torch.cuda.synchronize()
                torch.cuda._sleep(int(busy_ms * cycles_per_ms))
                slept = torch.cuda.Event()
                slept.record()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(*args)
                t1 = time.perf_counter()
                still_sleeping = not slept.query()
                torch.cuda.synchronize()
                if still_sleeping:
                    break
                busy_ms *= 4
            busy &= still_sleeping
            samples[name].append((t1 - t0) / calls * 1e6)
    return samples, busy


def breakdown(m: int, n: int, k: int, op: str, tensors: tuple, args: argparse.Namespace, cycles_per_ms: float) -> dict:
    """Where our host time goes, on the same operands: our launcher called directly (no
    Dynamo, no Inductor wrapper), its C entry alone (the last launch's packed arguments
    again: the kernel runs again on them), and eager ``torch.mm`` for scale."""
    from inductor_cutedsl.kernels.config import shortlist
    from inductor_cutedsl.runtime import get_gemm, spec_for
    from inductor_cutedsl.runtime.generated import launcher

    a, b = tensors[0], (tensors[1].t() if op == "linear" else tensors[1])
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    spec = spec_for(a, b, torch.bfloat16, shortlist(m, n, k)[0])
    launch, stream = launcher(spec), torch.cuda.current_stream().cuda_stream
    launch(a, b, out, stream=stream)  # the first launch of a thread sets up the fast path
    torch.cuda.synchronize()
    fns = {
        "launcher": lambda: launch(a, b, out, stream=stream),
        "c_entry": get_gemm(spec).call.repeat_last(),
        "torch_mm": lambda: torch.mm(a, b, out=out),
    }
    for fn in fns.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    samples, busy = host_us(fns, (), args.calls, args.rounds, cycles_per_ms)
    return {
        **{f"host_us_{name}": round(statistics.median(v), 2) for name, v in samples.items()},
        "config": spec.config.name(),
        "gpu_stayed_busy": busy,
    }


def measure(name: str, args: argparse.Namespace, cycles_per_ms: float) -> dict:
    m, n, k, op = SHAPES[name]
    fn, tensors = operands(m, n, k, op)
    row: dict = {"shape": name, "m": m, "n": n, "k": k, "op": op}
    compiled, counts, compile_s = {}, {}, {}
    for backend in BACKENDS:
        compiled[backend], counts[backend], compile_s[backend] = compile_for(backend, fn, tensors)
        print(f"  {name}: {backend} compiled in {compile_s[backend]:.1f} s, kernels {counts[backend]}", flush=True)
    reference = fn(*tensors).float()
    row["rel_err"] = {}
    for backend, f in compiled.items():  # each computes the GEMM (and warms its launch path)
        for _ in range(20):
            out = f(*tensors)
        torch.cuda.synchronize()
        row["rel_err"][backend] = float(f"{((out.float() - reference).norm() / reference.norm()).item():.3g}")
    samples, busy = host_us(compiled, tensors, args.calls, args.rounds, cycles_per_ms)
    us = {backend: statistics.median(v) for backend, v in samples.items()}
    row.update({f"host_us_{backend}": round(v, 2) for backend, v in us.items()})
    row["launch_ratio_vs_triton"] = round(us["ours"] / us["triton"], 4)
    row["launch_ratio_vs_aten"] = round(us["ours"] / us["aten"], 4)
    row["samples_us"] = {backend: [round(x, 2) for x in v] for backend, v in samples.items()}
    row["kernels"] = counts
    row["ran_expected"] = {backend: ran_expected(backend, c) for backend, c in counts.items()}
    row["gpu_stayed_busy"] = busy
    row["compile_s"] = {backend: round(s, 1) for backend, s in compile_s.items()}
    try:
        row["breakdown_ours"] = breakdown(m, n, k, op, tensors, args, cycles_per_ms)
    except Exception as exc:  # a diagnostic only: keep the row
        row["breakdown_ours"] = {"error": f"{type(exc).__name__}: {exc}"}
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.launch: no CUDA GPU here, nothing measured", flush=True)
        return 0
    import inductor_cutedsl  # noqa: F401  (enables the backend)

    torch.manual_seed(0)
    cycles_per_ms = sleep_cycles_per_ms(torch.cuda.current_device())
    result: dict = {**run_info(), "mode": MODE, "calls": args.calls, "rounds": args.rounds, "rows": []}
    for name in args.shapes:
        t0 = time.perf_counter()
        row = measure(name, args, cycles_per_ms)
        result["rows"].append(row)
        result.update(summarize(result["rows"]))
        write_json(result, args.json)
        print({k: v for k, v in row.items() if k != "samples_us"}, f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print({k: v for k, v in result.items() if k != "rows"}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
