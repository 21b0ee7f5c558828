"""The command line: ``python -m inductor_cutedsl``, or the ``inductor-cutedsl`` script.

Nothing but argparse and the settings loads before the arguments are parsed: ``--help``
and a refused argument cost what ``import inductor_cutedsl`` costs. The job loads after.
The benchmarks live outside the package (``benchmarks/`` in a source checkout).
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config

DESCRIPTION = """\
The main job. On a Hopper GPU: compiles an embedded LLaMA-style transformer
block with stock max-autotune and with inductor_cutedsl, checks both against
eager, and reports the per-GEMM autotuning table, the block time ratio and the
cold and warm compile times (a JSON file and a PNG plot). Without a GPU: says
so, then compiles the block's CuteDSL kernels for sm_90a into the kernel cache
ahead of time, so that a GPU machine sharing the cache
(INDUCTOR_CUTEDSL_CACHE_DIR) starts warm."""

EPILOG = """\
Benchmarks (plain GEMMs, epilogues, model blocks, fp8, compile time) run from a
source checkout: python -m benchmarks.models --help, and docs/performance.md."""

DEFAULT_JSON = "inductor_cutedsl-model.json"
DEFAULT_PNG = "inductor_cutedsl-model.png"
DEFAULT_TOKENS = 8192  # cli.block.BlockSize(): batch 4, sequence 2048


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
    ap = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--json",
        metavar="PATH",
        type=_output(".json"),
        default=None,
        help=f"where the results are written (default {DEFAULT_JSON})",
    )
    ap.add_argument(
        "--png",
        metavar="PATH",
        type=_output(".png"),
        default=None,
        help=f"where the main job's plot is written (default {DEFAULT_PNG})",
    )
    ap.add_argument(
        "--tokens",
        metavar="N",
        type=_positive,
        default=None,
        help=f"tokens (batch x sequence) of the main job's block, and of the block compiled ahead "
        f"of time without a GPU (default {DEFAULT_TOKENS}: batch 4, sequence 2048)",
    )
    ap.add_argument(
        "--workers",
        metavar="N",
        type=_positive,
        default=None,
        help="processes compiling CuteDSL kernels in parallel "
        "(default INDUCTOR_CUTEDSL_COMPILE_WORKERS if set, else the CPU count up to 8: here "
        f"{config.compile_workers})",
    )
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
    try:
        config.validate()
    except config.SettingError as exc:
        ap.error(str(exc))
    workers = args.workers or config.compile_workers
    json_path = os.path.abspath(args.json or DEFAULT_JSON)
    reason = gpu_reason()
    from .block import BlockSize

    size = BlockSize() if args.tokens is None else BlockSize(batch=1, seq=args.tokens)
    if reason:
        print(
            f"{reason}: nothing can run here. Compiling the block's CuteDSL kernels for sm_90a ahead of time instead.",
            flush=True,
        )
        for option in ("json", "png"):
            if getattr(args, option) is not None:
                print(f"--{option} {getattr(args, option)}: nothing written (the results need a Hopper GPU)")
        from .precompile import precompile_block

        precompile_block(size, workers)
        return
    from .run import run

    run(size, json_path, os.path.abspath(args.png or DEFAULT_PNG))
