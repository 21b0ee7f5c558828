"""``python -m inductor_cutedsl``: the main job.

Compiles the default GEMM kernels for sm_90a into the kernel cache (ahead of time,
in parallel workers; a warm cache compiles nothing), then, on a Hopper GPU,
benchmarks them against cuBLAS and writes the table as JSON. Without a GPU it
says so and stops after the ahead-of-time build, so a GPU box sharing the cache
starts warm.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from . import gemm_bench
from .runtime import compiler
from .runtime.launch import default_cache


def gpu_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"GPU {torch.cuda.get_device_name()} is not sm_90 (Hopper)"
    return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m inductor_cutedsl", description=__doc__)
    ap.add_argument("--json", default="inductor_cutedsl-gemm.json", help="benchmark output")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)

    reason = gpu_reason()
    if reason:
        print(f"{reason}: kernels are compiled for sm_90a ahead of time, nothing is run.")
    cache = default_cache()
    specs = list(dict.fromkeys(s for v in gemm_bench.plan_specs().values() for s in v))
    t0 = time.perf_counter()
    built = compiler.build_many(specs, cache, args.workers)
    wall = time.perf_counter() - t0
    fresh = [(s, secs) for s, (_, now, secs) in built.items() if now]
    print(f"kernel cache {cache.root}{'' if cache.persistent else ' (memory only)'}: "
          f"{len(specs)} kernels, {len(fresh)} compiled now, {len(specs) - len(fresh)} cached, "
          f"{wall:.1f}s wall with {args.workers} workers")  # fmt: skip
    for spec, secs in sorted(fresh, key=lambda x: x[0].describe()):
        print(f"  built {spec.describe():60s} {secs:5.2f}s")
    if reason is None:
        gemm_bench.main(["--json", args.json, "--workers", str(args.workers)])


if __name__ == "__main__":
    main()
