"""One process of ``test_triton_ptxas``'s scenario (run as a script, so that Triton's
per-process memo of the ptxas version starts empty):

    python ptxas_scenario.py worker          # compiles kernel_b, as an Inductor worker
    python ptxas_scenario.py parent OTHER plain|align

The parent compiles kernel_a first (on the bundled ptxas), has a worker compile kernel_b
on ``OTHER`` (``TRITON_PTXAS_PATH``, as Inductor's workers set it), then compiles
kernel_b itself, after ``environment.align_triton_ptxas`` with ``align`` (then undoes the
alignment and aligns again, and compiles kernel_b once more); it prints JSON lines: how
many compile stages ran each time (0: found in the on-disk cache). ``pool_scenario.py``
counts its stages the same way (``triton_stages``)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton_stages import STAGES_RUN, count_stages


@triton.jit
def kernel_a(x, n: tl.constexpr):
    tl.store(x + tl.arange(0, n), tl.arange(0, n))


@triton.jit
def kernel_b(x, n: tl.constexpr):
    tl.store(x + tl.arange(0, n), tl.arange(0, n) * 3)


def stages_run(fn) -> int:
    """Compile ``fn`` for sm_90; the number of compile stages that ran."""
    src = triton.compiler.ASTSource(fn=fn, signature={"x": "*fp32", "n": "constexpr"}, constexprs={"n": 16})
    before = STAGES_RUN[0]
    triton.compile(src, target=GPUTarget("cuda", 90, 32))
    return STAGES_RUN[0] - before


def parent(other: str, align: bool) -> None:
    from torch._inductor.runtime import compile_tasks

    from inductor_cutedsl.compat import environment

    first = stages_run(kernel_a)
    subprocess.run([sys.executable, __file__, "worker"], env={**os.environ, "TRITON_PTXAS_PATH": other}, check=True)
    change = None
    if align:  # torch's own ptxas stands in for OTHER; torch runs its setter once (functools.cache)
        setter = functools.cache(lambda: os.environ.setdefault("TRITON_PTXAS_PATH", other))
        compile_tasks._set_triton_ptxas_path = setter
        change = environment.align_triton_ptxas()
    else:
        os.environ["TRITON_PTXAS_PATH"] = other  # as Inductor sets it at its first in-process compile
    print(
        json.dumps(
            {
                "first": first,
                "again": stages_run(kernel_b),
                "undo": change is not None,
                "path": os.environ.get("TRITON_PTXAS_PATH"),
            }
        )
    )
    if change is not None:
        change.undo()
        print(json.dumps({"after_undo": os.environ.get("TRITON_PTXAS_PATH")}))
        # disable() then enable(), as a process that compiles several graphs may do
        realigned = environment.align_triton_ptxas()
        print(
            json.dumps(
                {
                    "realigned": realigned is not None,
                    "path": os.environ.get("TRITON_PTXAS_PATH"),
                    "again": stages_run(kernel_b),
                }
            )
        )


if __name__ == "__main__":
    count_stages()
    if sys.argv[1] == "worker":
        assert stages_run(kernel_b) > 0
    else:
        parent(sys.argv[2], sys.argv[3] == "align")
