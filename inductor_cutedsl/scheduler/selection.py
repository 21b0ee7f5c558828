"""Which implementation of a GEMM + epilogue wins, when the GEMM is still undecided.

Under max-autotune Inductor keeps a GEMM's candidates in a MultiTemplateBuffer
until fusion, and then benchmarks only Triton candidates with the epilogue fused:
a CuteDSL winner would be swapped in without its epilogue. Here our best candidate
is timed *with* the epilogue fused, on the same benchmarker Inductor uses, and it
takes the GEMM only when it beats both alternatives:

* the fastest candidate unfused plus the epilogue as its own kernel (cuBLAS + Triton);
* the Triton candidates with the epilogue fused. A fused Triton kernel does all its
  unfused work and more, so its unfused time bounds it from below: beating the fastest
  unfused Triton time beats them all without compiling any. Short of that bound, the
  fastest Triton candidate is compiled with the epilogue and timed beside ours (as
  Inductor's own epilogue benchmark times one Triton candidate, the fastest).

When ours does not clearly win, Inductor's own comparison runs as it would without us.
"""
from __future__ import annotations

import ast
import logging
import math
from typing import Any, Callable, Sequence

import torch

from .. import _compat, config
from ..lowering.template import GemmCaller
from ..runtime import compiler
from ..runtime.generated import launcher
from ..runtime.launch import default_cache
from ..runtime.spec import KernelSpec
from ..runtime.support import OUT_DTYPES
from ..timing import graphed, interleaved
from .epilogue_translation import Translation
from .fusion import fused_render_kwargs

log = logging.getLogger("inductor_cutedsl.scheduler")

#: Set on a MultiTemplateBuffer once decided: the GemmCaller that takes it with its epilogue, or None.
CHOSEN_ATTR = "_cutedsl_fused_choice"


def undecided_multi_template(node: Any) -> Any | None:
    """``node`` if it is a bare MultiTemplateBuffer node (nothing fused into it yet)
    with CuteDSL candidates, not decided yet."""
    if not node.is_template() or len(node.get_nodes()) != 1:
        return None
    template = node.get_nodes()[0]
    buffer = template.node
    if not _compat.is_multi_template_buffer(buffer) or hasattr(buffer, CHOSEN_ATTR):
        return None
    return template if any(isinstance(c, GemmCaller) for c in buffer.choices) else None


def _random_tensor(layout: Any, fill: bool) -> torch.Tensor:
    """A tensor laid out like an IR layout (random normal when ``fill``)."""
    size = [_compat.size_hint(s) for s in layout.size]
    stride = [_compat.size_hint(s) for s in layout.stride]
    offset = _compat.size_hint(layout.offset)
    needed = offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))
    storage = torch.empty(needed, dtype=layout.dtype, device=layout.device)
    if fill:
        storage.normal_()
    return storage.as_strided(size, stride, offset)


def _fused(caller: GemmCaller, tr: Translation) -> tuple[Any, KernelSpec, dict]:
    """(output buffer, kernel spec, template arguments) of ``caller`` with ``tr`` fused."""
    out = _compat.V.graph.get_buffer(tr.outputs[-1])
    spec, kwargs = fused_render_kwargs(caller.render_kwargs, tr, OUT_DTYPES[out.get_dtype()])
    return out, spec, kwargs


def _candidates(buffer: Any) -> tuple[GemmCaller | None, dict, dict, Any]:
    """(our fastest candidate or None, all finite timings, ours, the fastest Triton
    candidate or None)."""
    timings = {c: t for c, t in buffer.choice_timings().items() if math.isfinite(t)}
    ours = {c: t for c, t in timings.items() if isinstance(c, GemmCaller)}
    triton = {c: t for c, t in timings.items() if _compat.is_triton_template_caller(c)}
    caller = min(ours, key=ours.get) if ours else None
    return caller, timings, ours, min(triton, key=triton.get) if triton else None


def start_fused_build(template: Any, tr: Translation) -> None:
    """Start building (in a compile worker) what ``fused_winner`` would time for this
    GEMM and chain, unless the rule would not get that far: the selection's builds
    then run side by side instead of one after another."""
    caller, timings, ours, triton = _candidates(template.node)
    if caller is not None and (triton is None or ours[caller] < timings[triton]):
        _, spec, _ = _fused(caller, tr)
        compiler.build_async(spec, default_cache(), config.compile_workers)


#: Interleaved rounds of (our unfused kernel, the contender) timings in ``_scaled_ms``.
ROUNDS = 3


def _ours_unfused(caller: GemmCaller) -> tuple[dict, Callable[[], None]]:
    """(benchmark inputs by argument name, our unfused kernel's launch as a CUDA graph)."""
    named = dict(zip(caller.render_kwargs["argnames"], (m.to_tensor() for m in caller.bmreq.input_tensor_meta)))
    return named, _graphed_launch(
        caller.render_kwargs, ast.literal_eval(caller.render_kwargs["spec_literal"]), named,
        _random_tensor(caller.layout, fill=False),
    )  # fmt: skip


def _graphed_launch(kw: dict, spec_json: str, named: dict, result: torch.Tensor) -> Callable[[], None]:
    """Our kernel on ``named`` inputs as a CUDA graph: the fused launch does more in
    Python than the plain one, which on a short GEMM would be timed as kernel time (a
    fused candidate read 1.9x the plain kernel at 1024 x 4096 x 4096 on the H200, where
    the kernels differ by 8%)."""
    launch = launcher(spec_json, ast.literal_eval(kw["scalars_literal"]), ast.literal_eval(kw["views_literal"]))
    operands = [named[name] for name in kw["operand_args"]]
    return graphed(lambda: launch(
        named["a"], named["b"], result, *operands, stream=torch.cuda.current_stream().cuda_stream
    ))  # fmt: skip


def _scaled_ms(unfused_ms: float, plain: Callable[[], None], other: Callable[[], None]) -> float:
    """``other``'s milliseconds on the scale of ``unfused_ms``, the autotuning time of
    our unfused kernel ``plain``: the GPU's clock drifts with heat and power between
    autotuning and now, so both are timed here in interleaved rounds and their ratio
    scales ``unfused_ms``, which then compares fairly with the other autotuning times."""
    times = interleaved({
        "plain": lambda: _compat.benchmark_gpu(plain),
        "other": lambda: _compat.benchmark_gpu(other),
    }, ROUNDS)  # fmt: skip
    return unfused_ms * times["other"] / times["plain"]


def fused_ms(caller: GemmCaller, tr: Translation, unfused_ms: float) -> float:
    """Milliseconds of ``caller``'s kernel with ``tr`` fused (compiled now if needed),
    on the scale of ``unfused_ms``, its autotuning time without the epilogue."""
    out, spec, kwargs = _fused(caller, tr)
    # Through the worker pool: a build started early for this chain (start_fused_build)
    # is waited for, not redone.
    compiler.wait([compiler.build_async(spec, default_cache(), config.compile_workers)])
    named, plain = _ours_unfused(caller)
    kept = set(tr.kept)
    for name, op in zip(kwargs["argnames"][len(caller.bmreq.input_tensor_meta) :], tr.operands):
        buffer = _compat.V.graph.get_buffer(op.buffer)
        named[name] = _random_tensor(buffer.get_layout(), fill=op.buffer not in kept)
    fused = _graphed_launch(kwargs, spec.to_json(), named, _random_tensor(out.get_layout(), fill=False))
    return _scaled_ms(unfused_ms, plain, fused)


def triton_fused_ms(
    scheduler: Any, template: Any, chain: Sequence[Any], triton: Any, caller: GemmCaller, unfused_ms: float
) -> float:
    """Milliseconds of Triton candidate ``triton`` with ``chain`` fused, as Inductor's
    epilogue benchmark compiles it, on the scale of ``unfused_ms`` (``caller``'s
    autotuning time, its kernel timed beside, as in ``fused_ms``)."""
    source = _compat.fused_triton_template_source(scheduler, template.node, triton, [template, *chain])
    run = _compat.benchmark_module_run(source, template.get_device())
    return _scaled_ms(unfused_ms, _ours_unfused(caller)[1], graphed(run))


def ours_fused_wins(
    ours_unfused: float,
    best_unfused: float,
    triton_floor: float,
    epilogue_ms: Callable[[], float],
    ours_fused_ms: Callable[[], float],
    triton_fused_ms: Callable[[], float],
) -> tuple[bool, dict[str, float]]:
    """The decision rule, measuring only what it needs (a fused compile is the dear part).

    ``ours_unfused``: our best candidate alone; ``best_unfused``: the best of all
    candidates alone; ``triton_floor``: the best Triton candidate alone (inf if none);
    ``triton_fused_ms()``: that Triton candidate with the epilogue fused.
    Returns (ours wins, the times measured).
    """
    times = {"ours_unfused": ours_unfused, "best_unfused": best_unfused, "triton_floor": triton_floor}
    if ours_unfused >= triton_floor:
        return False, times  # behind Triton before any epilogue: not worth a fused compile
    times["epilogue"] = epilogue_ms()
    separate = best_unfused + times["epilogue"]
    if ours_unfused >= separate:
        return False, times
    times["ours_fused"] = ours_fused_ms()
    if times["ours_fused"] >= separate:
        return False, times
    if times["ours_fused"] < triton_floor:
        return True, times  # below every fused Triton kernel's lower bound
    times["triton_fused"] = triton_fused_ms()
    return times["ours_fused"] < times["triton_fused"], times


def fused_winner(scheduler: Any, template: Any, tr: Translation, chain: Sequence[Any]) -> GemmCaller | None:
    """Our candidate that should take the GEMM with the epilogue ``chain``, or None."""
    buffer = template.node
    caller, timings, ours, triton = _candidates(buffer)
    if caller is None:
        return None

    def measured(what: str, fn: Callable[[], float], if_failed: float) -> Callable[[], float]:
        """``fn``, or ``if_failed`` (a time that cannot make ours win) if it raises."""

        def measure() -> float:
            try:
                return fn()
            except Exception as exc:  # a kernel that fails to build or run is not chosen
                log.warning("%s for %s failed: %s", what, buffer.get_name(), exc)
                return if_failed

        return measure

    with _compat.preserve_rng_state():
        won, times = ours_fused_wins(
            ours[caller], min(timings.values()), timings[triton] if triton is not None else math.inf,
            lambda: _compat.benchmark_nodes(scheduler, chain),
            measured("CuteDSL fused candidate", lambda: fused_ms(caller, tr, ours[caller]), math.inf),
            measured("Triton fused candidate", lambda: triton_fused_ms(
                scheduler, template, chain, triton, caller, ours[caller]), 0.0),
        )  # fmt: skip
    log.info(
        "%s + [%s]: %s (%s)", buffer.get_name(), ", ".join(n.get_name() for n in chain),
        "CuteDSL takes it, fused" if won else "left to Inductor",
        ", ".join(f"{k} {v:.4f} ms" for k, v in times.items()),
    )  # fmt: skip
    return caller if won else None
