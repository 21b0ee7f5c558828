"""Inductor's CUDA scheduling, its fusion rules, and benchmark modules of scheduler nodes.

Read against torch 2.11 to 2.15 (``Scheduler.can_fuse_vertical`` takes keyword
arguments from 2.14 on; ``register_backend_for_device`` takes an FX wrapper from 2.11).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch


def install_cuda_scheduling(scheduling_cls: Any) -> Any:
    """Make ``scheduling_cls`` Inductor's "cuda" scheduling (from the next graph on).

    Returns the previous registration, for ``restore_cuda_scheduling``. Registering a
    device also sets its custom graph pass and codegen config, to None unless given: the
    ones already registered for "cuda" (a user's or a vendor's) are passed on unchanged.
    """
    from torch._inductor.codegen import common

    common.init_backend_registration()
    prior = common.device_codegens["cuda"]
    common.register_backend_for_device(
        "cuda",
        scheduling_cls,
        prior.wrapper_codegen,
        prior.cpp_wrapper_codegen,
        prior.fx_wrapper_codegen,
        common.custom_backend_passes.get("cuda"),
        common.custom_backend_codegen_configs.get("cuda"),
    )
    return prior


def restore_cuda_scheduling(prior: Any) -> None:
    from torch._inductor.codegen import common

    common.device_codegens["cuda"] = prior


def cuda_combined_scheduling() -> Any:
    from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling

    return CUDACombinedScheduling


def template_kernel(kernel_type: type, input_nodes: list, output_node: Any) -> Any:
    """A CuteDSL template kernel of ``kernel_type`` (a ``CuteDSLTemplateKernel``) to
    render with (the name is filled in at define time)."""
    from torch._inductor.utils import Placeholder

    return kernel_type(kernel_name=str(Placeholder.KERNEL_NAME), input_nodes=input_nodes, output_node=output_node)


def nodes_module(scheduler: Any, nodes: Sequence[Any], triton_choice: Any = None) -> tuple[Any, Any]:
    """(compile future or None, module) of ``nodes`` generated as one Inductor kernel's
    benchmark module (random arguments of its own), its compile started in Inductor's
    worker pool. ``nodes`` may start with a MultiTemplateBuffer's node, rendered as
    ``triton_choice`` (as ``Scheduler.speedup_by_fusion`` does).

    Until Inductor's compile subprocesses are up, ``Scheduler.compile_kernel`` starts no
    compile, and the module's kernels would compile at its first run, in the compiling
    thread; they are then compiled in Inductor's compile threads instead, as its
    autotuning compiles its Triton choices while the subprocesses are not up.

    The module's kernels are generated without coordinate-descent tuning: a kernel that
    carries it tunes itself at its first run, compiling each neighbouring config in the
    compiling thread (seconds per kernel), and a benchmark module's kernel is never the
    graph's (it is named and keyed apart), so that tuning would be paid for nothing.
    Stock's fusion benchmarks time a module's configs without it as well
    (``benchmark_all_configs``)."""
    from torch._inductor import config as inductor_config

    template = nodes[0].node
    with (
        template.swap_as_triton_caller(triton_choice) if triton_choice is not None else contextlib.nullcontext(),
        inductor_config.patch(coordinate_descent_tuning=False),
    ):
        future, module = scheduler.compile_kernel(list(nodes))
    if future is None:
        future = precompile_in_threads(module)
    return future, module


def precompile_in_threads(module: Any) -> Any:
    """A future of the Triton kernels of ``module`` compiled (and their launchers made)
    in Inductor's compile threads, on this thread's CUDA device; None where Inductor
    compiles in one thread only, or the module has no kernel."""
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kernels = [k for k in vars(module).values() if isinstance(k, CachingAutotuner)]
    if not kernels or get_compile_threads() <= 1:
        return None
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def compile_all() -> None:
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            for kernel in kernels:
                kernel.precompile()  # under the kernel's lock: a first run meanwhile waits

    return AsyncCompile.pool().submit(compile_all)


def module_run_fn(future: Any, module: Any) -> Callable[[], Any]:
    """A function running ``nodes_module``'s kernel on arguments of its own, again on
    the same ones each call.

    Not ``Scheduler.benchmark_fused_nodes``: that times a kernel which updates a buffer
    in place as (copy + kernel) - copy, and the copy leaves the buffer in L2, so a large
    in-place epilogue can read faster than memory bandwidth allows. The pointwise
    chains we fuse index linearly, so the kernel can simply run again on the same
    arguments.
    """
    if future is not None:
        future.result()
    args = module.get_args()
    return lambda: module.call(list(args))  # ``call`` may empty its list


def install_fusion_hooks(
    verdict: Callable[[Any, Any], bool | None], pairs_through_view: Callable[[Any, Any, Any], bool]
) -> dict:
    """Patch the scheduler's fusion rules for our GEMMs; returns what ``restore_fusion_hooks``
    needs.

    ``Scheduler.speedup_by_fusion`` answers ``verdict(node1, node2)`` at once where it is
    not None: there our backend has already measured the ways to run the pair. Where it
    is None, Inductor's own rule measures, its benchmark kernels tuned as stock tunes
    them unless ``config.tune_fusion_benchmarks`` is off (see ``stock_fusion_rule``).
    ``Scheduler.can_fuse_vertical`` also passes a pair that it refuses only because
    ``node2`` reads ``node1``'s output with other loops than ``node1`` writes it (a
    (B, T, N) view of a (B*T, N) GEMM) where ``pairs_through_view(scheduler, node1,
    node2)``: our translation proves that indexing itself, and nothing ``node2`` reads
    may be computed from ``node1`` by a node between them (``computed_between``)."""
    from torch._inductor.scheduler import FusionResult, Scheduler

    saved = {"speedup_by_fusion": Scheduler.speedup_by_fusion, "can_fuse_vertical": Scheduler.can_fuse_vertical}
    # Per scheduler, the (template, consumer) pairs Inductor's benchmark refused outright.
    # Inductor remembers the pairs it accepts (``seen_template_fusions``) but not these,
    # and benchmarks them again in every fusion round; the nodes (named by what is fused
    # in them) are the same, so the answer is too.
    refused: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()

    def speedup_by_fusion(self, node1, node2, **kwargs):
        decided = verdict(node1, node2)
        if decided is not None:
            return FusionResult.fuse(decided)
        pair = (node1.get_name(), node2.get_name())
        seen = refused.setdefault(self, set())
        if pair in seen:
            return FusionResult.fuse(False)
        with stock_fusion_rule():
            result = saved["speedup_by_fusion"](self, node1, node2, **kwargs)
        if node1.is_template() and result.should_fuse is False and result.callable_fn is None:
            seen.add(pair)
        return result

    # Some releases pass keyword arguments (2.14: ``index_equivalent_dep_names``): they go
    # through to Inductor's rule unchanged.
    def can_fuse_vertical(self, node1, node2, **kwargs):
        if saved["can_fuse_vertical"](self, node1, node2, **kwargs):
            return True
        return pairs_through_view(self, node1, node2)

    can_fuse_vertical.__wrapped__ = saved["can_fuse_vertical"]  # type: ignore[attr-defined]
    Scheduler.speedup_by_fusion = speedup_by_fusion
    Scheduler.can_fuse_vertical = can_fuse_vertical
    return saved


def stock_fusion_rule() -> contextlib.AbstractContextManager:
    """The settings Inductor's own fusion benchmarks (``Scheduler.speedup_by_fusion``) run
    under where our hook hands a pair to them.

    Inductor generates a kernel it times alone (``benchmark_fused_nodes``) with
    coordinate-descent tuning, so its first run tunes it: a compile in the compiling
    thread per config tried, seconds per kernel, while our builds and Triton's template
    compiles hold the CPUs; the most of ours' fusion-decision time beyond stock's
    (docs/findings.md, Compile time). With ``config.tune_fusion_benchmarks`` (the
    default) that tuning stays: the kernel stands for the graph's own, which is tuned
    after fusion, and timed untuned it overstates the unfused way, so the rule can fuse
    where the fused template is slower (docs/findings.md). Off, it is timed as generated."""
    from torch._inductor import config as inductor_config

    from .. import config

    if config.tune_fusion_benchmarks:
        return contextlib.nullcontext()
    return inductor_config.patch(coordinate_descent_tuning=False)


def restore_fusion_hooks(saved: dict) -> None:
    from torch._inductor.scheduler import Scheduler

    for name, original in saved.items():
        setattr(Scheduler, name, original)


def computed_between(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether ``node2`` reads a buffer (not ``node1``'s) made by a node that depends on
    ``node1``: fusing them would run ``node2`` before its input exists."""
    own, ops = node1.get_buffer_names(), node1.get_operation_names()
    for dep in node2.unmet_dependencies:
        name = scheduler.mutation_renames.get(dep.name, dep.name)
        if name in own:
            continue
        op_name = scheduler.name_to_buf[name].defining_op_name()
        if ops & scheduler.name_to_fused_node[op_name].ancestors:
            return True
    return False


def stock_pairs(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether Inductor's own rules pair ``node2`` with ``node1``: their memory
    dependencies match (what a Triton template's epilogue codegen relies on)."""
    from torch._inductor.scheduler import Scheduler

    stock = getattr(Scheduler.can_fuse_vertical, "__wrapped__", Scheduler.can_fuse_vertical)
    return scheduler.score_fusion_memory(node1, node2) > 0 and stock(scheduler, node1, node2)


def prefer_choice(buffer: Any, choice: Any) -> None:
    """Make ``choice`` MultiTemplateBuffer ``buffer``'s fastest unfused choice, the one
    ``Scheduler.finalize_multi_template_buffers`` renders it as (its cached timings
    are edited in place: nothing else reads them after the fusion decision)."""
    timings = buffer.choice_timings()
    fastest = min(timings.values())
    if timings[choice] > fastest:
        timings[choice] = math.nextafter(fastest, 0.0)


def finalize_as_triton(buffer: Any, choice: Any) -> None:
    """Render MultiTemplateBuffer ``buffer`` as Triton template ``choice`` (as Inductor
    does when a fused Triton template wins its epilogue benchmark)."""
    buffer.finalize_as_triton_caller(choice)
