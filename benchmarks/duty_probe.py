"""Does a GEMM's ranking against cuBLAS depend on how busy the GPU is around it?

    python benchmarks/duty_probe.py --json duty.json

In the Phi-3 training step (session 15) ours took the gate_up GEMM (4096 x 16384 x
3072): Inductor's pass read it 6% ahead of cuBLAS and fair timing's side-by-side
replays 3.5% ahead, yet inside the block it ran 3% behind (554 vs 539 us). Side by
side, GEMMs run back to back and the H200 sits at its power limit; in a block they
alternate with memory-bound kernels (norms, attention, pointwise) and the clock can
run higher. Here, per shape, each contender (cuBLAS, and ours with each config named)
runs as a CUDA graph of ``--reps`` launches, each followed by a memory-bound copy
sized to a share of the GEMM's time (``duty`` 1.0: back to back; 0.5: the copy as
long as the GEMM; 0.33: twice as long), and each GEMM's own kernel time is read from
the profiler, over interleaved rounds. If the ranking moves with the duty, fair
timing's measurement should copy a block's duty (docs/performance.md).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.report import graphed, report_row, run_info  # noqa: E402
from inductor_cutedsl.job.kernel_profile import kernel_times  # noqa: E402
from inductor_cutedsl.kernels.config import GemmConfig, shortlist  # noqa: E402
from inductor_cutedsl.timing import bench  # noqa: E402

#: (M, N, K): the Phi-3 training step's gate_up, down and qkv projections.
SHAPES = [(4096, 16384, 3072), (4096, 3072, 8192), (4096, 9216, 3072)]
DUTIES = (1.0, 0.5, 0.33)
#: Device copy bandwidth (bytes read + written per second), to size the copies.
COPY_BYTES_PER_S = 4.0e12


def copy_elements(gemm_ms: float, duty: float) -> int:
    """bf16 elements of a copy lasting ``(1 / duty - 1)`` times the GEMM."""
    seconds = gemm_ms * 1e-3 * (1 / duty - 1)
    return int(seconds * COPY_BYTES_PER_S / 4)  # 2 bytes read + 2 written per element


def configs(m: int, n: int, k: int, names: list[str] | None) -> list[GemmConfig]:
    """The configs named (``GemmConfig.name()`` spellings from the shortlist's), else the
    shortlist's first three (the candidates the lowering offers by default)."""
    listed = shortlist(m, n, k, limit=12)
    if not names:
        return listed[:3]
    by_name = {cfg.name(): cfg for cfg in listed}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise SystemExit(f"configs {missing} are not in the shortlist of {m}x{n}x{k}: {sorted(by_name)}")
    return [by_name[name] for name in names]


def gemm_us(rows: list[dict], light: set[str], reps: int) -> float:
    """Microseconds per GEMM launch: every profiled kernel but the copy's."""
    gemm = [r for r in rows if r["kernel"] not in light]
    return sum(r["ms"] for r in gemm) / reps * 1e3


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", nargs="*", default=None,
                    help="our configs by name (default: the shortlist's first three)")
    ap.add_argument("--reps", type=int, default=20, help="GEMM launches per graph (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default: %(default)s)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("duty_probe.py needs a CUDA GPU: nothing measured")
        return None
    from inductor_cutedsl.runtime import get_gemm, spec_for

    torch.manual_seed(0)
    result = {**run_info(), "reps": args.reps, "rounds": args.rounds, "rows": []}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        launch = {"cublas": lambda: torch.mm(a, b, out=out)}
        for cfg in configs(m, n, k, args.config):
            kern = get_gemm(spec_for(a, b, torch.bfloat16, cfg))
            launch[f"ours_{cfg.name()}"] = lambda kern=kern: kern(a, b, out)
        gemm_ms = bench(graphed(launch["cublas"]), rep=200)
        for duty in DUTIES:
            n_copy = copy_elements(gemm_ms, duty)
            src = torch.randn(max(n_copy, 1), device="cuda").to(torch.bfloat16)
            dst = torch.empty_like(src)
            copy_rows = kernel_times(graphed(lambda: dst.copy_(src)), calls=2, top=None, name_chars=None)
            light = {r["kernel"] for r in copy_rows}

            def body(gemm, copy=n_copy > 0):
                for _ in range(args.reps):
                    gemm()
                    if copy:
                        dst.copy_(src)

            replays = {name: graphed(lambda gemm=gemm: body(gemm)) for name, gemm in launch.items()}
            times: dict = {name: [] for name in replays}
            for r in range(args.rounds):
                order = list(replays) if r % 2 == 0 else list(replays)[::-1]
                for name in order:
                    bench(replays[name], rep=50)  # the clock settles to this duty
                    rows = kernel_times(replays[name], calls=3, top=None, name_chars=None)
                    times[name].append(gemm_us(rows, light, args.reps))
            med = {name: round(statistics.median(t), 2) for name, t in times.items()}
            row = {"shape": [m, n, k], "duty": duty, "gemm_us": med,
                   "cublas_over": {name: round(med["cublas"] / t, 4) for name, t in med.items() if name != "cublas"},
                   "rounds_us": {name: [round(x, 2) for x in t] for name, t in times.items()}}  # fmt: skip
            report_row(result, row, args.json)
    return result


if __name__ == "__main__":
    main()
