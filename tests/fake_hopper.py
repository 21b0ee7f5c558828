"""Inductor compiling for an imaginary H200, on a machine without a GPU.

Inductor's CUDA path asks the driver for device properties, RNG state and the
Triton target, and benchmarks candidates on the GPU. Here those answers are
faked (an sm_90 device; candidate timings, epilogue timings and fused-kernel
timings given by the test) and compilation stops at the generated wrapper code,
which the tests inspect. Everything of ours runs for real: the lowering, the
candidate builds (compiled for sm_90a in worker processes), the fusion decisions
and the code generation. Nothing runs on a device.
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Callable, Iterator
from unittest import mock

import torch
from torch._inductor import config as inductor_config

PROPS = types.SimpleNamespace(
    name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=141 * 2**30,
    max_threads_per_multi_processor=2048, warp_size=32, regs_per_multiprocessor=65536,
    shared_memory_per_block_optin=232448, shared_memory_per_multiprocessor=233472,
    L2_cache_size=60 * 2**20, gcnArchName="", uuid="fake", clock_rate=1980000,
    memory_clock_rate=2619000, memory_bus_width=6144,
)  # fmt: skip


class _Generated(Exception):
    """Raised with the wrapper code where Inductor would load and run it."""


class _TritonDriver:
    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cuda", 0)

    def get_device_interface(self):
        return torch.cuda

    def is_active(self):
        return True


def _timing(choice) -> float:
    """Unfused candidate times: ours fastest (in shortlist order), then the rest."""
    return 0.1 if type(choice).__name__ == "GemmCaller" else 1.0


@contextlib.contextmanager
def fake_hopper(
    candidate_ms: Callable[[object], float] = _timing,
    epilogue_ms: float = 0.05,
    fused_ms: float = 0.11,
    backends: str = "CUTEDSL",
    triton_fused_ms: float = 0.2,
    build_epilogue_kernel: bool = False,
) -> Iterator[dict]:
    """Inside: compiling for "cuda" works and yields ``{"code": wrapper source}``.

    Times in ms: ``candidate_ms(choice)`` unfused candidates (in autotuning and side by
    side), ``epilogue_ms`` any epilogue as its own kernel, ``fused_ms`` our fused
    candidate, ``triton_fused_ms`` a Triton candidate with the epilogue fused. With ``build_epilogue_kernel`` our
    selection really generates the epilogue's own benchmark module (its source lands
    in ``out["epilogue_modules"]``); loading it (a Triton compile) and timing it are faked."""
    from triton.runtime.driver import driver as triton_driver

    import inductor_cutedsl.scheduler.selection as selection
    from inductor_cutedsl import _compat

    out: dict = {}

    def autotune(self, name, input_nodes, layout, input_gen_fns, choices, *args, **kwargs):
        return {c: candidate_ms(c) + 1e-5 * i for i, c in enumerate(choices)}  # distinct, in order

    def side_by_side_ms(scheduler, buffer, caller, tr, chain):
        """The selection's side-by-side figures: the candidates' own times, ours fused
        at ``fused_ms`` and the epilogue at ``epilogue_ms``."""
        timings = buffer.choice_timings()
        others = [t for c, t in timings.items() if type(c).__name__ != "GemmCaller"]
        triton = [t for c, t in timings.items() if _compat.is_triton_template_caller(c)]
        return {
            "ours": timings[caller], "fused": fused_ms, "other": min(others, default=math.inf),
            "triton": min(triton, default=math.inf), "epilogue": epilogue_ms,
        }  # fmt: skip

    def compile_to_module(self):
        out["code"] = self.codegen()[0].value
        raise _Generated()

    patches = [
        mock.patch("torch.cuda.is_available", lambda: True),
        mock.patch("torch.cuda.device_count", lambda: 1),
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.get_device_properties", lambda *a, **k: PROPS),
        mock.patch("torch.cuda._get_device_properties", lambda *a, **k: PROPS, create=True),
        mock.patch("torch.cuda.get_device_capability", lambda *a, **k: (9, 0)),
        mock.patch("torch.cuda._lazy_init", lambda: None),
        mock.patch("torch.cuda._exchange_device", lambda idx: 0),
        mock.patch("torch.cuda._maybe_exchange_device", lambda idx: 0),
        mock.patch("torch.cuda.get_rng_state", lambda *a, **k: torch.zeros(16, dtype=torch.uint8)),
        mock.patch("torch.cuda.set_rng_state", lambda *a, **k: None),
        mock.patch("torch._subclasses.fake_tensor.init_gpu_context", lambda device: None),
        mock.patch("torch._inductor.fx_passes.joint_graph.lazy_init", lambda *a, **k: None),
        mock.patch("torch._inductor.fx_passes.post_grad.lazy_init", lambda *a, **k: None),
        mock.patch("torch._inductor.select_algorithm.AlgorithmSelectorCache.autotune", autotune),
        mock.patch("torch._inductor.scheduler.Scheduler.benchmark_fused_nodes", lambda s, n: (epilogue_ms, "")),
        mock.patch(
            "torch._inductor.scheduler.Scheduler.benchmark_codegened_module",
            lambda s, module, device: (triton_fused_ms, ""),
        ),
        mock.patch("torch._inductor.graph.GraphLowering.compile_to_module", compile_to_module),
        mock.patch.object(selection, "side_by_side_ms", side_by_side_ms),
    ]
    if build_epilogue_kernel:
        out["epilogue_modules"] = []

        def load(source: str, *args, **kwargs):
            out["epilogue_modules"].append(source)
            return types.SimpleNamespace(get_args=lambda: [], call=lambda args: None)

        patches += [
            mock.patch.object(_compat, "benchmark_gpu", lambda fn: (fn(), epilogue_ms)[1]),
            mock.patch("inductor_cutedsl.timing.graphed", lambda fn: fn),  # no CUDA graphs here
            mock.patch("torch._inductor.codecache.PyCodeCache.load", load),
        ]
    else:
        patches.append(mock.patch.object(_compat, "benchmark_nodes", lambda scheduler, nodes: epilogue_ms))
    from torch.utils._triton import has_triton

    with contextlib.ExitStack() as stack:
        # Cached per process: whichever of a CPU compile or this fake GPU asked first
        # would otherwise answer for the other.
        has_triton.cache_clear()
        stack.callback(has_triton.cache_clear)
        for p in patches:
            stack.enter_context(p)
        stack.enter_context(mock.patch.object(triton_driver, "_active", _TritonDriver()))
        stack.enter_context(
            inductor_config.patch(
                max_autotune=True, max_autotune_gemm_backends=backends, force_disable_caches=True,
                pattern_matcher=False,
            )
        )  # fmt: skip
        yield out


def generated_code(fn: Callable, *shapes: tuple[int, ...], dtype=torch.bfloat16, **fake) -> str:
    """The wrapper code Inductor generates for ``fn`` on fake CUDA inputs of ``shapes``."""
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    with fake_hopper(**fake) as out:
        with FakeTensorMode():
            args = [torch.empty(s, device="cuda", dtype=dtype) for s in shapes]
        try:
            compile_fx(torch.fx.symbolic_trace(fn), args)
        except Exception as exc:
            if "code" not in out:
                raise
            if not isinstance(exc, _Generated) and "_Generated" not in repr(exc):
                raise
    return out["code"]
