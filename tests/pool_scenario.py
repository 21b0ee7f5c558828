"""One process of ``test_pool_builds_found``'s scenario (run as a script, in a fresh
interpreter, with ``pool_site/`` first on PYTHONPATH so that this process and Inductor's
compile subprocesses, which inherit the path, compile Triton kernels for sm_90 without a
GPU):

    python pool_scenario.py

As a process that compiles several graphs with our backend: the backend installed, a
Triton kernel compiled here first (autotuning's threads do so at lowering), Inductor's
compile subprocesses up, ``disable()`` and ``enable()`` (as between two graphs), then,
inside a fresh compilation cache, one of Inductor's own ``mm`` template choices built
by the subprocesses and compiled again here, as its first benchmark does. Prints one
JSON line: the compile stages that last compile ran (0: the subprocesses' build found),
those of the first graph's own compile (a miss: more than 0, so the count counts) and
the ptxas path this process ended with."""

from __future__ import annotations

import json
import os
import sys

import fake_hopper
import torch
from triton_stages import STAGES_RUN, count_stages


def template_choices() -> list[tuple[str, str]]:
    """(kernel name, module source) of Inductor's Triton ``mm`` template choices for one GEMM."""
    from torch._inductor import select_algorithm

    seen: list[tuple[str, str]] = []
    original = select_algorithm.TritonTemplateCaller.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        with open(self.bmreq.module_path) as f:
            seen.append((self.bmreq.kernel_name, f.read()))

    select_algorithm.TritonTemplateCaller.__init__ = init
    try:
        fake_hopper.generation(lambda a, b: a @ b, (256, 768), (768, 2304), backends="TRITON")
    finally:
        select_algorithm.TritonTemplateCaller.__init__ = original
    return seen


def compile_here(name: str, source: str) -> int:
    """Compile a generated kernel module in this process; the compile stages that ran."""
    from torch._inductor.codecache import PyCodeCache

    kernel = getattr(PyCodeCache.load(source), name)
    before = STAGES_RUN[0]
    kernel.precompile(warm_cache_only=True)
    return STAGES_RUN[0] - before


def main() -> None:
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.utils import fresh_cache

    import inductor_cutedsl
    from inductor_cutedsl import install

    choices = template_choices()
    count_stages()
    install._install_rest()  # as at a compilation's start
    with fresh_cache():  # the first graph
        first = compile_here(*choices[0])
        AsyncCompile.warm_pool()
        AsyncCompile.process_pool()
        AsyncCompile.wait_pool_ready()
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    with fresh_cache():  # a later graph
        name, source = choices[1]
        future = AsyncCompile().triton(name, source)
        getattr(future, "future", future).result(timeout=300)
        stages = compile_here(name, source)
    print(
        json.dumps(
            {
                "first_stages": first,
                "stages": stages,
                "ptxas": os.environ.get("TRITON_PTXAS_PATH"),
                "torch": torch.__version__,
            }
        )
    )
    sys.stdout.flush()
    os._exit(0)  # the compile subprocesses are not waited for


if __name__ == "__main__":
    main()
