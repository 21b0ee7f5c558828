"""Autotuning: ATen's choices, benchmark requests, the feedback hook and the benchmark hook.

Read against torch 2.11 to 2.15 (``AlgorithmSelectorCache.benchmark_choices`` takes
``is_collective`` in each).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def aten_choice(op_name: str) -> Any:
    """Inductor's ATen (cuBLAS) ExternKernelChoice for a GEMM op."""
    from torch._inductor.kernel import bmm, mm, mm_plus_mm

    return {
        "mm": mm.aten_mm,
        "addmm": mm.aten_addmm,
        "bmm": bmm.aten_bmm,
        "baddbmm": bmm.aten_baddbmm,
        "mm_plus_mm": mm_plus_mm.aten_mm_plus_mm,
    }[op_name]


def aten_dtype_choice(op_name: str) -> Any:
    """ATen's ExternKernelChoice for mm / bmm with an ``out_dtype`` of their own."""
    from torch._inductor.kernel import bmm, mm

    return {"mm": mm.aten_mm_dtype, "bmm": bmm.aten_bmm_dtype}[op_name]


@contextlib.contextmanager
def feedback_saver(fn: Callable[..., None]) -> Iterator[None]:
    """Call ``fn(timings, name, input_nodes, choices, profile_fn, precompile_times)``
    after every autotuning benchmark inside the block."""
    from torch._inductor import select_algorithm

    cache = select_algorithm.get_algorithm_selector_cache()
    cache.add_feedback_saver(fn)
    try:
        yield
    finally:
        cache.feedback_saver_fns.remove(fn)


def is_extern_caller(choice: Any) -> bool:
    """Whether an autotuning choice is an ATen (extern kernel) call, cuBLAS for GEMMs."""
    from torch._inductor.select_algorithm import ExternKernelCaller

    return isinstance(choice, ExternKernelCaller)


def choice_run_fn(choice: Any) -> Callable[[], Any]:
    """A function running autotuning choice ``choice`` (ATen, Triton or ours) once, on
    random inputs and an output laid out as its own benchmark request's."""
    request = choice.bmreq
    inputs = [meta.to_tensor() for meta in request.input_tensor_meta]
    return request.make_run_fn(*inputs, out=request.output_tensor_meta.to_tensor())


def preserve_rng_state() -> contextlib.AbstractContextManager:
    """Random benchmark inputs must not move the user's RNG (as in Inductor's autotuning)."""
    from torch._dynamo.utils import preserve_rng_state as preserve

    return preserve()


def install_benchmark_hook(adjust: Callable[[dict, Callable[[Any], Callable[[], Any]]], dict]) -> Any:
    """Pass every autotuning pass's timings through ``adjust(timings, run_fn)``, where
    ``run_fn(choice)`` makes a function that runs one choice's kernel on the inputs
    Inductor timed it on (its benchmark request's run function; a choice with a
    ``benchmark_inputs()`` method gets those inputs instead). Returns what
    ``restore_benchmark_hook`` needs."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    original = AlgorithmSelectorCache.__dict__["benchmark_choices"]

    def benchmark_choices(cls, choices, autotune_args, is_collective=False):
        timings = original.__func__(cls, choices, autotune_args, is_collective)
        if is_collective:
            return timings

        def run_fn(choice):
            inputs, out = autotune_args.get_benchmark_tensors(cls._is_extern(choice)).unpack()
            own = getattr(choice, "benchmark_inputs", None)
            return choice.bmreq.make_run_fn(*(own() if own else inputs), out=out)

        return adjust(timings, run_fn)

    AlgorithmSelectorCache.benchmark_choices = classmethod(benchmark_choices)
    return original


def restore_benchmark_hook(original: Any) -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    AlgorithmSelectorCache.benchmark_choices = original
