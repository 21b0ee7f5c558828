"""Compile the fuzz's programs for an imaginary H200 on a machine without a GPU, strict:
a check that no program crashes the compile, run on every torch release the package
supports (only the GPU runs them; this is the part a torch upgrade breaks first).

    python -m tools.fake_compile_sweep                      # 200 random programs
    python -m tools.fake_compile_sweep --model-programs 100 --programs 0
    python -m tools.fake_compile_sweep --first 200 --programs 1000   # beyond the tested ones
    python -m tools.fake_compile_sweep --numerics --first 23 --programs 500  # and their values
    /tmp/v215/bin/python -m tools.fake_compile_sweep        # under another torch's venv

Each program of ``benchmarks.fuzz`` (``make_program``, ``make_model_program``) is traced
with its inputs as positional arguments and compiled through Inductor with the backend
on, as ``tests/fake_hopper.py`` fakes the device (candidate and fusion timings are
made up, our kernels really build for sm_90a). ``INDUCTOR_CUTEDSL_STRICT=1``: a failure
inside our code raises instead of falling back, and counts. Programs whose inputs mix
dtypes (fp8 with its scales) are skipped: the fake compile gives every input one dtype; so
are those that run a CUDA operation while traced, outside our code. Exits 1 if any
program crashed.

``--numerics`` checks values too, where the CPU can: a random program whose wrapper our
kernels compute whole (no Triton kernel left) runs through it on CPU, each launch
computed by the launcher's torch fallback, against float64 with the fuzzer's
tolerances; a value off its tolerance fails the sweep as a crash does. It checks the
lowering, the epilogue's translation and the wrapper's calls, not the kernels (the GPU
fuzz does); ``tests/test_fuzz_wrappers_cpu.py`` runs a fixed set of such programs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_one(program) -> str:
    """ "ok", "skipped: ..." or raises."""
    from fake_hopper import generation, traced_function

    inputs = program.inputs("cpu")
    names = sorted(inputs)
    dtypes = {inputs[n].dtype for n in names}
    if len(dtypes) != 1:
        return f"skipped: inputs of {len(dtypes)} dtypes"
    shapes = [tuple(inputs[n].shape) for n in names]
    out = generation(traced_function(program, names), *shapes, dtype=dtypes.pop(), backends=program.backends)
    return "ok" if "code" in out else "no code generated"


def compute_one(program) -> tuple[str, bool]:
    """``--numerics``: a random program compiled as ``compile_one`` does and, where our
    kernels compute its whole wrapper, run on CPU against float64 with the fuzzer's
    tolerances (``fake_hopper.fuzz_program_on_cpu``): (status, whether a value was
    wrong). A model program (several sizes, gradients) is compiled only."""
    from fake_hopper import fuzz_program_on_cpu

    if not hasattr(program, "run") or len({t.dtype for t in program.inputs("cpu").values()}) != 1:
        return compile_one(program), False
    _, bad = fuzz_program_on_cpu(program)
    if bad is None:
        return "ok (a Triton kernel stays in the wrapper: compiled, not run)", False
    if bad:
        return "WRONG " + "; ".join(description for _, description in bad.values()), True
    return "ok, computed on CPU within tolerance", False


def needs_a_gpu(exc: BaseException, trace: str) -> bool:
    """Whether ``exc`` is the CUDA runtime refusing a real operation (one the program
    runs on a device tensor while it is traced, such as a rotary table), raised outside
    our package: the fake device cannot compile that program."""
    return "CUDA driver version is insufficient" in str(exc) and "inductor_cutedsl/" not in trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=200, help="random programs, from the first (default %(default)s)")
    ap.add_argument("--model-programs", type=int, default=0, help="model-shaped programs (default %(default)s)")
    ap.add_argument(
        "--first", type=int, default=0, help="index of the first program of each kind (default %(default)s)"
    )
    ap.add_argument(
        "--numerics",
        action="store_true",
        help="also run each random program our kernels compute whole through its wrapper on CPU, "
        "against float64 (a value off its tolerance fails the sweep)",
    )
    args = ap.parse_args(argv)
    os.environ["INDUCTOR_CUTEDSL_STRICT"] = "1"
    os.environ.setdefault("INDUCTOR_CUTEDSL_PERSIST_DECISIONS", "0")
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    import torch

    import inductor_cutedsl  # noqa: F401  (installs the backend)
    from benchmarks import fuzz

    work = [fuzz.make_program(args.first + i) for i in range(args.programs)]
    work += [fuzz.make_model_program(args.first + i) for i in range(args.model_programs)]
    crashed, wrong = [], []
    for program in work:
        t0 = time.perf_counter()
        try:
            if args.numerics:
                status, off = compute_one(program)
                if off:
                    wrong.append(program.label)
            else:
                status = compile_one(program)
        except Exception as exc:
            trace = traceback.format_exc()
            if needs_a_gpu(exc, trace):
                status = "skipped: runs a CUDA operation while traced (needs a GPU)"
            else:
                status = f"CRASH {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                crashed.append((program.label, trace))
        print(f"{program.label}: {status} ({time.perf_counter() - t0:.1f} s)", flush=True)
    for label, trace in crashed:
        print(f"===== {label}\n{trace[-4000:]}")
    summary = f"torch {torch.__version__}: {len(work)} programs, {len(crashed)} crashed"
    print(summary + (f", {len(wrong)} computed a wrong value" if args.numerics else ""))
    return 1 if crashed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
