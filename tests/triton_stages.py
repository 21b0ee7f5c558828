"""Counting the compile stages Triton runs in a process: every stage (make_ttir ...
make_cubin) for a kernel it compiles, none for one found in its on-disk cache. Shared by
the scenario scripts (``ptxas_scenario``, ``pool_scenario``) and the tests; it imports
no torch, as the scenarios run as scripts where what a process imports matters."""

from __future__ import annotations

from collections.abc import Callable

#: Compile stages run in this process since counting began (``count_stages``).
STAGES_RUN = [0]


def count_stages() -> Callable[[], None]:
    """Count every compile stage Triton's CUDA backend runs in this process, through the
    stage table it hands each compile (``CUDABackend.add_stages``); the undo."""
    from triton.backends.nvidia.compiler import CUDABackend

    add_stages = CUDABackend.add_stages

    def counted_stages(self, stages, *args, **kwargs):
        add_stages(self, stages, *args, **kwargs)
        for name, stage in list(stages.items()):

            def counted(*a, _stage=stage, **k):
                STAGES_RUN[0] += 1
                return _stage(*a, **k)

            stages[name] = counted

    CUDABackend.add_stages = counted_stages

    def undo() -> None:
        CUDABackend.add_stages = add_stages

    return undo
