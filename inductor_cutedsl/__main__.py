"""The command line: ``python -m inductor_cutedsl``, or the ``inductor-cutedsl`` script.

Nothing but argparse and the settings loads before the arguments are parsed: ``--help``
and a refused argument cost what ``import inductor_cutedsl`` costs. The jobs load after.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import config

DESCRIPTION = """\
The main job. On a Hopper GPU: compiles an embedded LLaMA-style transformer
block with stock max-autotune and with inductor_cutedsl, checks both against
eager, and reports the per-GEMM autotuning table, the block time ratio and the
cold and warm compile times (a JSON file and a PNG plot). Without a GPU: says
so, then compiles the block's CuteDSL kernels for sm_90a into the kernel cache
ahead of time, so that a GPU machine sharing the cache
(INDUCTOR_CUTEDSL_CACHE_DIR) starts warm."""

EPILOG = """\
--gemm-bench and --suite run instead of the main job and need a Hopper GPU:
without one they say so and exit with status 1."""

DEFAULT_JSON = {"main": "inductor_cutedsl-model.json", "gemm-bench": "inductor_cutedsl-gemm.json",
                "suite": "inductor_cutedsl-suite.json"}  # fmt: skip
DEFAULT_PNG = "inductor_cutedsl-model.png"
DEFAULT_TOKENS = 8192  # job.model.BlockSize(): batch 4, sequence 2048


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def _output(suffix: str):
    """An argparse type: a file path ending in ``suffix``, not an existing directory."""

    def check(text: str) -> str:
        if not text.endswith(suffix):
            raise argparse.ArgumentTypeError(f"{text!r} does not end in {suffix}")
        if os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text!r} is a directory")
        return text

    return check


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--gemm-bench", action="store_true",
                      help="instead of the main job: plain bf16 GEMMs, ours (best of a small per-shape search) "
                           "vs cuBLAS")  # fmt: skip
    what.add_argument("--suite", action="store_true",
                      help="instead of the main job: a small block of each model family of benchmarks/models.py, "
                           "inference, max-autotune with and without CUDA graphs (from a source checkout)")  # fmt: skip
    ap.add_argument("--json", metavar="PATH", type=_output(".json"), default=None,
                    help=f"where the results are written (default {DEFAULT_JSON['main']}; with --gemm-bench "
                         f"{DEFAULT_JSON['gemm-bench']}, with --suite {DEFAULT_JSON['suite']})")  # fmt: skip
    ap.add_argument("--png", metavar="PATH", type=_output(".png"), default=None,
                    help=f"where the main job's plot is written (default {DEFAULT_PNG})")
    ap.add_argument("--tokens", metavar="N", type=_positive, default=None,
                    help=f"tokens (batch x sequence) of the main job's block, and of the block compiled ahead "
                         f"of time without a GPU (default {DEFAULT_TOKENS}: batch 4, sequence 2048)")  # fmt: skip
    ap.add_argument("--workers", metavar="N", type=_positive, default=None,
                    help="processes compiling CuteDSL kernels in parallel, for the main job and --gemm-bench "
                         "(default INDUCTOR_CUTEDSL_COMPILE_WORKERS if set, else the CPU count up to 8: here "
                         f"{config.compile_workers})")  # fmt: skip
    return ap


def gpu_reason() -> str | None:
    """Why this machine cannot run the jobs that need a GPU, or None."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"GPU {torch.cuda.get_device_name()} is not sm_90 (Hopper)"
    return None


def main(argv: list[str] | None = None) -> None:
    # Named as it was run: `python -m inductor_cutedsl`, or the `inductor-cutedsl` script.
    prog = "python -m inductor_cutedsl" if os.path.basename(sys.argv[0]) == "__main__.py" else None
    ap = parser(prog)
    args = ap.parse_args(argv)
    job = "gemm-bench" if args.gemm_bench else "suite" if args.suite else "main"
    ignored = {"gemm-bench": ("png", "tokens"), "suite": ("png", "tokens", "workers")}.get(job, ())
    for option in ignored:
        if getattr(args, option) is not None:
            ap.error(f"--{option} does not apply to --{job}")
    workers = args.workers or config.compile_workers
    json_path = os.path.abspath(args.json or DEFAULT_JSON[job])

    reason = gpu_reason()
    if reason and job != "main":
        sys.exit(f"{ap.prog}: --{job} needs a Hopper GPU: {reason}. Nothing was run.")
    if job == "suite":
        from .job.suite import run_suite

        if run_suite(json_path) is not None:
            print(f"wrote {json_path}")
        return
    if job == "gemm-bench":
        from .bench import gemm

        gemm.main(["--json", json_path, "--workers", str(workers)])
        print(f"wrote {json_path}")
        return

    from .job.model import BlockSize

    size = BlockSize() if args.tokens is None else BlockSize(batch=1, seq=args.tokens)
    if reason:
        print(f"{reason}: nothing can run here. Compiling the block's CuteDSL kernels for sm_90a "
              f"ahead of time instead.", flush=True)  # fmt: skip
        from .job.precompile import precompile_block

        precompile_block(size, workers)
        return
    from .job.run import run

    run(size, json_path, os.path.abspath(args.png or DEFAULT_PNG))


if __name__ == "__main__":
    main()
