"""Which implementation of a GEMM + epilogue wins, when the GEMM is still undecided.

Under max-autotune Inductor keeps a GEMM's candidates in a MultiTemplateBuffer
until fusion, and then benchmarks only Triton candidates with the epilogue fused:
a CuteDSL winner would be swapped in without its epilogue. Here our best candidate
is timed *with* the epilogue fused, on the same benchmarker Inductor uses, and it
takes the GEMM only when it beats both alternatives:

* the fastest candidate unfused plus the epilogue as its own kernel (cuBLAS + Triton);
* every Triton candidate with the epilogue fused. A fused Triton kernel does all its
  unfused work and more, so its unfused time bounds it from below: beating the fastest
  unfused Triton time beats them all without compiling each one.

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


def _candidates(buffer: Any) -> tuple[GemmCaller | None, dict, dict, float]:
    """(our fastest candidate or None, all finite timings, ours, the Triton floor)."""
    timings = {c: t for c, t in buffer.choice_timings().items() if math.isfinite(t)}
    ours = {c: t for c, t in timings.items() if isinstance(c, GemmCaller)}
    triton = [t for c, t in timings.items() if _compat.is_triton_template_caller(c)]
    caller = min(ours, key=ours.get) if ours else None
    return caller, timings, ours, min(triton, default=math.inf)


def start_fused_build(template: Any, tr: Translation) -> None:
    """Start building (in a compile worker) what ``fused_winner`` would time for this
    GEMM and chain, unless the rule would not get that far: the selection's builds
    then run side by side instead of one after another."""
    caller, _, ours, triton_floor = _candidates(template.node)
    if caller is not None and ours[caller] < triton_floor:
        _, spec, _ = _fused(caller, tr)
        compiler.build_async(spec, default_cache(), config.compile_workers)


#: Interleaved rounds of (unfused, fused) timings in ``fused_ms``.
ROUNDS = 3


def fused_ms(caller: GemmCaller, tr: Translation, unfused_ms: float) -> float:
    """Milliseconds of ``caller``'s kernel with ``tr`` fused (compiled now if needed),
    on the scale of ``unfused_ms``, its autotuning time without the epilogue.

    The GPU's clock drifts with heat and power between autotuning and now, so the
    fused and unfused kernels are timed here in interleaved rounds and their ratio
    scales ``unfused_ms``: the result compares fairly with the other autotuning times.
    """
    out, spec, kwargs = _fused(caller, tr)
    # Through the worker pool: a build started early for this chain (start_fused_build)
    # is waited for, not redone.
    compiler.wait([compiler.build_async(spec, default_cache(), config.compile_workers)])
    inputs = caller.benchmark_inputs()
    named = dict(zip(kwargs["argnames"], inputs))
    kept = set(tr.kept)
    for name, op in zip(kwargs["argnames"][len(inputs) :], tr.operands):
        buffer = _compat.V.graph.get_buffer(op.buffer)
        named[name] = _random_tensor(buffer.get_layout(), fill=op.buffer not in kept)

    def timed(kw: dict, spec_json: str, result: torch.Tensor) -> Callable[[], float]:
        launch = launcher(spec_json, ast.literal_eval(kw["scalars_literal"]), ast.literal_eval(kw["views_literal"]))
        operands = [named[name] for name in kw["operand_args"]]
        # As CUDA graphs: the fused launch does more in Python than the plain one, which
        # on a short GEMM would be timed as kernel time (fused read 1.9x the plain
        # kernel at 1024 x 4096 x 4096 on the H200, where the kernels differ by 8%).
        replay = graphed(lambda: launch(
            named["a"], named["b"], result, *operands,
            stream=torch.cuda.current_stream().cuda_stream,
        ))  # fmt: skip
        return lambda: _compat.benchmark_gpu(replay)

    times = interleaved({
        "plain": timed(caller.render_kwargs, ast.literal_eval(caller.render_kwargs["spec_literal"]),
                       _random_tensor(caller.layout, fill=False)),
        "fused": timed(kwargs, spec.to_json(), _random_tensor(out.get_layout(), fill=False)),
    }, ROUNDS)  # fmt: skip
    return unfused_ms * times["fused"] / times["plain"]


def ours_fused_wins(
    ours_unfused: float,
    best_unfused: float,
    triton_floor: float,
    epilogue_ms: Callable[[], float],
    ours_fused_ms: Callable[[], float],
) -> tuple[bool, dict[str, float]]:
    """The decision rule, measuring only what it needs (a fused compile is the dear part).

    ``ours_unfused``: our best candidate alone; ``best_unfused``: the best of all
    candidates alone; ``triton_floor``: the best Triton candidate alone (inf if none).
    Returns (ours wins, the times measured).
    """
    times = {"ours_unfused": ours_unfused, "best_unfused": best_unfused, "triton_floor": triton_floor}
    if ours_unfused >= triton_floor:
        return False, times  # fusing cannot make ours faster than its unfused self
    times["epilogue"] = epilogue_ms()
    separate = best_unfused + times["epilogue"]
    if ours_unfused >= separate:
        return False, times
    times["ours_fused"] = ours_fused_ms()
    return times["ours_fused"] < min(separate, triton_floor), times


def fused_winner(scheduler: Any, template: Any, tr: Translation, chain: Sequence[Any]) -> GemmCaller | None:
    """Our candidate that should take the GEMM with the epilogue ``chain``, or None."""
    buffer = template.node
    caller, timings, ours, triton_floor = _candidates(buffer)
    if caller is None:
        return None

    def ours_fused() -> float:
        try:
            return fused_ms(caller, tr, ours[caller])
        except Exception as exc:  # a fused variant that fails is simply not chosen
            log.warning("CuteDSL fused candidate for %s failed: %s", buffer.get_name(), exc)
            return math.inf

    with _compat.preserve_rng_state():
        won, times = ours_fused_wins(
            ours[caller], min(timings.values()), triton_floor,
            lambda: _compat.benchmark_nodes(scheduler, chain), ours_fused,
        )  # fmt: skip
    log.info(
        "%s + [%s]: %s (%s)", buffer.get_name(), ", ".join(n.get_name() for n in chain),
        "CuteDSL takes it, fused" if won else "left to Inductor",
        ", ".join(f"{k} {v:.4f} ms" for k, v in times.items()),
    )  # fmt: skip
    return caller if won else None
