"""Plain GEMM: our kernel (best of a small per-shape search) vs cuBLAS, side by side.

    python -m benchmarks.gemm [--json benchmarks/results/h200-gemm.json] [--workers 16]

Same randn tensors, same timer (median of triton.testing.do_bench), bf16,
C = A @ W^T with A (M, K) and W (N, K) row-major (the nn.Linear layout). Each
candidate is timed once; the leaders are re-timed in interleaved rounds and the
fastest kept; it and cuBLAS are then timed in fresh interleaved rounds and the
medians compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Iterable

import torch

from inductor_cutedsl.cli.precompile import build_with_progress
from inductor_cutedsl.kernels.config import GemmConfig, shortlist
from inductor_cutedsl.kernels.epilogue import IDENTITY, Epilogue
from inductor_cutedsl.runtime import KernelSpec, gemm_reason, get_gemm, spec_for
from inductor_cutedsl.runtime.launch import default_cache
from inductor_cutedsl.timing import bench

from .harness import geomean, rel_err, run_info, side_by_side, write_json

SHAPES = [
    (8192, 4096, 4096),
    (8192, 14336, 4096),
    (8192, 4096, 14336),
    (1024, 4096, 4096),
    (8192, 8192, 8192),
]


#: Configs re-timed side by side before the final choice.
FINALISTS = 3


def search_space(m: int, n: int, k: int) -> list[GemmConfig]:
    """The shortlist plus raster/swizzle variants of its leaders."""
    base = shortlist(m, n, k, limit=4)
    extra = (
        [
            dataclasses.replace(cfg, raster_along_m=raster_m, swizzle=swizzle, epi_n=epi_n)
            for cfg in base[:3]
            for raster_m in (True, False)
            for swizzle in (1, 8)
            for epi_n in ((cfg.epi_n,) if cfg.epi_buffers else (32, 64))  # buffers sized for epi_n
        ]
        + [
            # Stream-K over the last partial wave (several waves of tiles only).
            dataclasses.replace(cfg, stream_k=True)
            for cfg in base[:2]
            if not cfg.pingpong
        ]
        + [
            # The pair cluster along the other dimension: which operand is multicast sets
            # the L2 -> SM traffic per MAC, and with it the energy per GEMM.
            dataclasses.replace(cfg, cluster_m=cfg.cluster_n, cluster_n=cfg.cluster_m, raster_along_m=raster_m)
            for cfg in base[:2]
            for raster_m in (True, False)
        ]
    )
    return [c for c in dict.fromkeys(base + extra) if c.invalid_reason() is None]


def linear_spec(config: GemmConfig, epilogue: Epilogue = IDENTITY) -> KernelSpec:
    """The benchmarks' layout: bf16 C = A @ W^T, A (M, K) and W (N, K) row-major (both
    K-major); no GPU needed."""
    return KernelSpec(config, "bfloat16", "bfloat16", "k", "k", epilogue)


def build_all(specs: Iterable[KernelSpec], workers: int | None = None) -> dict:
    """Compile ``specs`` (each once) into the default cache, in parallel workers, with a
    line per kernel compiled."""
    return build_with_progress(specs, default_cache(), workers or os.cpu_count() or 1)


def build_per_shape(configs: Callable[[int, int, int], list[GemmConfig]]) -> dict:
    """Shape -> the linear specs of ``configs(m, n, k)``, every one compiled (in parallel
    workers) into the default cache."""
    specs = {shape: [linear_spec(c) for c in configs(*shape)] for shape in SHAPES}
    build_all(s for v in specs.values() for s in v)
    return specs


def linear_operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh randn bf16 A (M, K) and B = W^T, W (N, K) row-major, on the GPU."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    return a, torch.randn(n, k, device="cuda").to(torch.bfloat16).t()


def checked_runs(a: torch.Tensor, b: torch.Tensor, specs: Iterable[KernelSpec]) -> tuple[dict, dict]:
    """cuBLAS and each spec's kernel as runs of ``a @ b`` into their own outputs, named
    "cublas" and by config: (name -> run, config name -> rel err against cuBLAS). Each
    of ours runs once first into a NaN-filled output and is checked."""
    m, n = a.shape[0], b.shape[1]
    ref = torch.mm(a, b)
    cublas_out = torch.empty(m, n, device=a.device, dtype=a.dtype)
    runs, errors = {"cublas": lambda: torch.mm(a, b, out=cublas_out)}, {}
    for spec in specs:
        name, kern = spec.config.name(), get_gemm(spec, default_cache())
        out = torch.full((m, n), float("nan"), device=a.device, dtype=a.dtype)
        kern(a, b, out)
        errors[name] = float(f"{rel_err(out, ref):.3e}")
        runs[name] = lambda kern=kern, out=out: kern(a, b, out)
    return runs, errors


def plan_specs() -> dict:
    """Shape -> candidate kernel specs."""
    return {shape: [linear_spec(c) for c in search_space(*shape)] for shape in SHAPES}


def launch_us(fn) -> tuple[float, float]:
    """Microseconds per launch of ``fn`` (a tiny GEMM): (wall, host). Wall: 2000 launches
    back to back until they have run (host time, or the tiny kernel's own GPU time where
    longer: the two are not told apart). Host: 300 launches (fewer than the launch queue
    holds, so none waits for the GPU) until they are enqueued."""
    times = []
    for n, wait in ((2000, True), (300, False)):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if wait:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return times[0], times[1]


def measure_shape(m: int, n: int, k: int, specs: list[KernelSpec], built: dict) -> dict:
    """The shape's row: each candidate checked against cuBLAS and timed beside it, the
    leaders re-timed side by side, then the winner and cuBLAS in fresh rounds."""
    cache = default_cache()
    a, b = linear_operands(m, n, k)
    assert gemm_reason(a, b) is None
    out = torch.empty(m, n, device=a.device, dtype=torch.bfloat16)
    ref = torch.mm(a, b)

    def cublas() -> None:
        torch.mm(a, b, out=out)

    bench(cublas, rep=1000)  # bring the GPU to its steady clock
    ranked = []
    tried = []
    for spec in specs:
        kern = get_gemm(spec, cache)
        out.fill_(float("nan"))
        kern(a, b, out)
        torch.cuda.synchronize()
        err = rel_err(out, ref)
        if not err < 1e-2:
            print(f"  {spec.config.name()}: WRONG (rel err {err})")
            continue
        # Rank by the ratio to an adjacent cuBLAS timing: the GPU's clock drifts
        # (power, heat) over a search far more than the candidates differ.
        ms = bench(lambda kern=kern: kern(a, b, out))
        ratio = bench(cublas) / ms
        tried.append({"config": spec.config.name(), "ms": round(ms, 4), "vs_cublas": round(ratio, 4)})
        ranked.append((ratio, spec))
    # One timing each is noisy and the best of ~30 noisy ratios flatters its
    # config: the leaders are re-timed interleaved with cuBLAS before one is chosen.
    leaders = [spec for _, spec in sorted(ranked, key=lambda r: -r[0])[:FINALISTS]]
    ours = {s: (lambda k=get_gemm(s, cache): k(a, b, out)) for s in leaders}
    runs = side_by_side({"cublas": cublas} | ours, rounds=3)
    spec = min(leaders, key=runs.get)
    kern = get_gemm(spec, cache)
    final = side_by_side({"ours": lambda: kern(a, b, out), "cublas": cublas})
    ms, cublas_ms = final["ours"], final["cublas"]
    flops = 2 * m * n * k
    return {
        "shape": [m, n, k],
        "config": spec.config.name(),
        "ours_ms": round(ms, 4),
        "cublas_ms": round(cublas_ms, 4),
        "vs_cublas": round(cublas_ms / ms, 4),
        "tflops": round(flops / ms / 1e9, 1),
        "cublas_tflops": round(flops / cublas_ms / 1e9, 1),
        "compile_s": round(built[spec][2], 2),
        "candidates": sorted(tried, key=lambda t: -t["vs_cublas"]),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", metavar="PATH", default=None, help="where the results are written (default: nowhere)")
    ap.add_argument(
        "--workers",
        metavar="N",
        type=int,
        default=os.cpu_count() or 1,
        help="processes compiling the candidates (default: the CPU count, %(default)s)",
    )
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    cache = default_cache()

    # Compile every candidate of every shape up front, in parallel workers.
    plan = plan_specs()
    t0 = time.perf_counter()
    built = build_all((s for v in plan.values() for s in v), args.workers)
    compile_wall = time.perf_counter() - t0
    print(
        f"compiled {sum(b for _, b, _ in built.values())} kernels "
        f"({len(built)} specs) in {compile_wall:.1f}s wall with {args.workers} workers"
    )

    rows = []
    for (m, n, k), specs in plan.items():
        row = measure_shape(m, n, k, specs, built)
        rows.append(row)
        print(
            f"{m}x{n}x{k}: ours {row['ours_ms']:.4f} ms ({row['tflops']} TFLOP/s, {row['config']}) "
            f"cuBLAS {row['cublas_ms']:.4f} ms -> {row['vs_cublas']:.3f}x",
            flush=True,
        )

    # Overhead of one launch (tiny problem): wall time back to back, and host time alone.
    a = torch.randn(128, 128, device=dev).to(torch.bfloat16)
    out = torch.empty(128, 128, device=dev, dtype=torch.bfloat16)
    kern = get_gemm(spec_for(a, a, torch.bfloat16, GemmConfig(128, 128, 1, 1)), cache)
    launches = {"ours": lambda: kern(a, a, out), "torch_mm": lambda: torch.mm(a, a, out=out)}
    measured = {name: launch_us(fn) for name, fn in launches.items()}
    overhead = {name: round(wall, 1) for name, (wall, _) in measured.items()}
    enqueue = {name: round(host, 1) for name, (_, host) in measured.items()}

    ratios = [r["vs_cublas"] for r in rows]
    result = {
        **run_info(),
        "geomean_vs_cublas": round(geomean(ratios), 4),
        "min_vs_cublas": min(ratios),
        "launch_overhead_us": overhead,
        "enqueue_us": enqueue,
        "compile_wall_s": round(compile_wall, 1),
        "rows": rows,
    }
    hdr = f"{'M x N x K':>20} {'config':>24} {'ours ms':>9} {'cuBLAS ms':>9} {'ratio':>6} {'TFLOP/s':>8}"
    print(hdr)
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        print(
            f"{shape:>20} {r['config']:>24} {r['ours_ms']:>9.4f} {r['cublas_ms']:>9.4f} "
            f"{r['vs_cublas']:>6.3f} {r['tflops']:>8.1f}"
        )
    print(
        f"geomean vs cuBLAS {result['geomean_vs_cublas']:.3f}, min {result['min_vs_cublas']:.3f}; "
        f"per tiny launch: ours {overhead['ours']} us ({enqueue['ours']} us host), "
        f"torch.mm {overhead['torch_mm']} us ({enqueue['torch_mm']} us host)"
    )
    write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
