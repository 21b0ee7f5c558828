"""``python -m inductor_cutedsl``: the main job.

On a Hopper GPU: compiles the embedded LLaMA-style block with stock max-autotune
and with inductor_cutedsl, checks both against eager, and reports the per-GEMM
autotuning table, the block time ratio and cold/warm compile times (JSON + PNG).
Without a GPU: says so, then compiles the block's CuteDSL kernels for sm_90a into
the kernel cache ahead of time, so a GPU box sharing the cache starts warm.
``--gemm-bench`` runs the plain-GEMM benchmark against cuBLAS instead; ``--suite``
runs one block of each model family of ``benchmarks/models.py`` (without a GPU it
says so and does nothing else).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from . import config
from .kernels import IDENTITY
from .job.model import BlockSize
from .lowering.gemm_choices import candidate_specs
from .runtime import compiler
from .runtime.launch import default_cache


def gpu_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"GPU {torch.cuda.get_device_name()} is not sm_90 (Hopper)"
    return None


def precompile_block(size: BlockSize, workers: int) -> None:
    """Build the CuteDSL candidates of the block's GEMMs into the kernel cache."""
    specs = list(dict.fromkeys(
        spec
        for _, m, n, k in size.gemms()
        for spec in candidate_specs((m, n, k, 1), "bfloat16", "bfloat16", "k", "k", IDENTITY)
    ))  # fmt: skip
    cache = default_cache()
    if not cache.persistent:
        raise SystemExit(f"the kernel cache directory {cache.read_only or config.cache_dir or ''} is not "
                         "writable: nothing compiled now would be kept (set INDUCTOR_CUTEDSL_CACHE_DIR)")  # fmt: skip
    t0 = time.perf_counter()
    built = compiler.build_many(specs, cache, workers)
    fresh = sorted((s.describe(), secs) for s, (_, now, secs) in built.items() if now)
    print(f"kernel cache {cache.root}{'' if cache.persistent else ' (memory only)'}: "
          f"{len(specs)} kernels for the block's GEMMs, {len(fresh)} compiled now, "
          f"{len(specs) - len(fresh)} already cached, {time.perf_counter() - t0:.1f}s with "
          f"{workers} workers")  # fmt: skip
    for name, secs in fresh:
        print(f"  built {name:60s} {secs:5.2f}s")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def main(argv: list[str] | None = None) -> None:
    # Named as it was run: `python -m inductor_cutedsl`, or the `inductor-cutedsl` script.
    prog = "python -m inductor_cutedsl" if os.path.basename(sys.argv[0]) == "__main__.py" else None
    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    ap.add_argument("--json", default=None,
                    help="result file (default inductor_cutedsl-model.json, with --suite inductor_cutedsl-suite.json)")
    ap.add_argument("--png", default="inductor_cutedsl-model.png", help="the main job's plot")
    ap.add_argument("--tokens", type=_positive, default=None, help="batch*seq (default 8192)")
    ap.add_argument("--workers", type=_positive, default=config.compile_workers,
                    help="processes compiling CuteDSL kernels (default %(default)s)")
    ap.add_argument("--gemm-bench", action="store_true", help="plain GEMMs vs cuBLAS instead")
    ap.add_argument("--suite", action="store_true",
                    help="one block of each model family (benchmarks/models.py: small size, inference, "
                         "max-autotune with and without CUDA graphs) instead")  # fmt: skip
    args = ap.parse_args(argv)
    size = BlockSize() if args.tokens is None else BlockSize(batch=1, seq=args.tokens)

    reason = gpu_reason()
    if args.suite:
        if reason:
            print(f"{reason}: the model suite needs a Hopper GPU; nothing to run here.")
            return
        from .job.suite import run_suite

        run_suite(os.path.abspath(args.json or "inductor_cutedsl-suite.json"))
        return
    args.json = args.json or "inductor_cutedsl-model.json"
    if reason:
        print(f"{reason}: nothing can run here. Compiling the default block's CuteDSL "
              f"kernels for sm_90a ahead of time instead.")  # fmt: skip
        precompile_block(size, args.workers)
        return
    if args.gemm_bench:
        from . import gemm_bench

        gemm_bench.main(["--json", args.json, "--workers", str(args.workers)])
        return
    from .job.run import run

    run(size, os.path.abspath(args.json), os.path.abspath(args.png))


if __name__ == "__main__":
    main()
