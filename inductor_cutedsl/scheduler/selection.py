"""Which implementation of a GEMM + epilogue wins, when the GEMM is still undecided.

Under max-autotune Inductor keeps a GEMM's candidates in a MultiTemplateBuffer
until fusion, and then benchmarks only Triton candidates with the epilogue fused:
a CuteDSL winner would be swapped in without its epilogue. Here our best candidate
is timed *with* the epilogue fused, and it takes the GEMM only when it beats both
alternatives:

* the fastest candidate unfused plus the epilogue as its own kernel (cuBLAS + Triton);
* every Triton candidate with the epilogue fused. A fused Triton kernel does all its
  unfused work and more, so its unfused time bounds it from below: beating the fastest
  unfused Triton time beats them all without compiling each one.

Autotuning's figures screen first (no fused compile when ours cannot win). The
decision itself is measured side by side: our kernel plain and fused, the fastest
other candidate, the fastest Triton candidate and the epilogue kernel, each as a CUDA
graph replay, timed by medians in interleaved rounds. Autotuning timed the choices
one after another as the GPU heated: at 8192x8192x8192 it read cuBLAS at 1.40 ms and
the best Triton GEMM at 1.53 ms, where side by side in a model they run within 2% of
each other, and a fused kernel of ours taken on those figures ran 3% behind stock's
fused Triton kernel.

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
from ..timing import graph_median, interleaved
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


def _fastest(timings: dict, keep: Callable[[Any], bool]) -> Any | None:
    chosen = [c for c in timings if keep(c)]
    return min(chosen, key=timings.get) if chosen else None


def _candidates(buffer: Any) -> tuple[GemmCaller | None, dict, dict, float]:
    """(our fastest candidate or None, all finite timings, ours, the Triton floor)."""
    timings = {c: t for c, t in buffer.choice_timings().items() if math.isfinite(t)}
    ours = {c: t for c, t in timings.items() if isinstance(c, GemmCaller)}
    caller = min(ours, key=ours.get) if ours else None
    triton = _fastest(timings, _compat.is_triton_template_caller)
    return caller, timings, ours, math.inf if triton is None else timings[triton]


def start_fused_build(template: Any, tr: Translation) -> None:
    """Start building (in a compile worker) what ``fused_winner`` would time for this
    GEMM and chain, unless the rule would not get that far: the selection's builds
    then run side by side instead of one after another."""
    caller, _, ours, triton_floor = _candidates(template.node)
    if caller is not None and ours[caller] < triton_floor:
        _, spec, _ = _fused(caller, tr)
        compiler.build_async(spec, default_cache(), config.compile_workers)


#: Interleaved rounds of the side-by-side timings in ``side_by_side_ms``.
ROUNDS = 3
#: What ``side_by_side_ms`` measures.
SIDE_BY_SIDE = ("ours", "fused", "other", "triton", "epilogue")


def side_by_side_ms(
    scheduler: Any, buffer: Any, caller: GemmCaller, tr: Translation, chain: Sequence[Any]
) -> dict[str, float]:
    """Milliseconds, measured side by side (see the module doc), of: ``ours`` (our
    candidate plain), ``fused`` (with ``tr`` fused; compiled now if needed), ``other``
    (the fastest other unfused candidate), ``triton`` (the fastest Triton candidate
    unfused) and ``epilogue`` (``chain`` as its own kernel); inf for a missing one."""
    out, spec, kwargs = _fused(caller, tr)
    # Through the worker pool: a build started early for this chain (start_fused_build)
    # is waited for, not redone.
    compiler.wait([compiler.build_async(spec, default_cache(), config.compile_workers)])
    inputs = caller.benchmark_inputs()
    named = dict(zip(kwargs["argnames"], inputs))
    kept = set(tr.kept)
    for name, op in zip(kwargs["argnames"][len(inputs) :], tr.operands):
        layout = _compat.V.graph.get_buffer(op.buffer).get_layout()
        named[name] = _random_tensor(layout, fill=op.buffer not in kept)

    def ours(kw: dict, spec_json: str, result: torch.Tensor) -> Callable[[], Callable[[], None]]:
        scalars, views = ast.literal_eval(kw["scalars_literal"]), ast.literal_eval(kw["views_literal"])
        launch = launcher(spec_json, scalars, views)
        operands = [named[name] for name in kw["operand_args"]]
        return lambda: lambda: launch(
            named["a"], named["b"], result, *operands, stream=torch.cuda.current_stream().cuda_stream
        )

    _, timings, _, _ = _candidates(buffer)
    other = _fastest(timings, lambda c: not isinstance(c, GemmCaller))
    triton = _fastest(timings, _compat.is_triton_template_caller)
    runs = {
        "ours": ours(caller.render_kwargs, ast.literal_eval(caller.render_kwargs["spec_literal"]),
                     _random_tensor(caller.layout, fill=False)),
        "fused": ours(kwargs, spec.to_json(), _random_tensor(out.get_layout(), fill=False)),
    }  # fmt: skip
    if other is not None:
        runs["other"] = lambda: _compat.choice_run_fn(other)
    if triton is not None and triton is not other:
        runs["triton"] = lambda: _compat.choice_run_fn(triton)
    # The light epilogue kernel last: a GEMM timed right after it reads fast (session 6:
    # cuBLAS 7% ahead of ours there, level elsewhere). So only ``ours`` follows it, and
    # reading ours fast only makes "GEMM + separate epilogue" look cheaper: the rule errs
    # toward not fusing, and the fused kernel and the others each follow a GEMM.
    runs["epilogue"] = lambda: _compat.nodes_run_fn(scheduler, chain)
    with torch.cuda.device(out.get_device()):
        times = interleaved({name: graph_median(make) for name, make in runs.items()}, ROUNDS)
    if triton is not None and triton is other:
        times["triton"] = times["other"]
    return {name: times.get(name, math.inf) for name in SIDE_BY_SIDE}


def ours_fused_wins(
    ours_unfused: float,
    best_unfused: float,
    triton_floor: float,
    epilogue_ms: Callable[[], float],
    side_by_side: Callable[[], dict],
) -> tuple[bool, dict[str, float]]:
    """The decision rule, measuring only what it needs (a fused compile is the dear part).

    Screen on autotuning's figures: ``ours_unfused`` (our best candidate alone),
    ``best_unfused`` (the best of all candidates alone), ``triton_floor`` (the best
    Triton candidate alone, inf if none) and ``epilogue_ms()``. Then decide on
    ``side_by_side()`` (see ``side_by_side_ms``). Returns (ours wins, the times used).
    """
    times = {"ours_unfused": ours_unfused, "best_unfused": best_unfused, "triton_floor": triton_floor}
    if ours_unfused >= triton_floor:
        return False, times  # fusing cannot make ours faster than its unfused self
    times["epilogue"] = epilogue_ms()
    if ours_unfused >= best_unfused + times["epilogue"]:
        return False, times
    side = side_by_side()
    times.update({f"side_{name}": ms for name, ms in side.items()})
    separate = min(side["ours"], side["other"]) + side["epilogue"]
    return side["fused"] < min(separate, side["triton"]), times


def fused_winner(scheduler: Any, template: Any, tr: Translation, chain: Sequence[Any]) -> GemmCaller | None:
    """Our candidate that should take the GEMM with the epilogue ``chain``, or None."""
    buffer = template.node
    caller, timings, ours, triton_floor = _candidates(buffer)
    if caller is None:
        return None

    def side_by_side() -> dict:
        try:
            return side_by_side_ms(scheduler, buffer, caller, tr, chain)
        except Exception as exc:  # a fused variant that fails is simply not chosen
            log.warning("CuteDSL fused candidate for %s failed: %s", buffer.get_name(), exc)
            return dict.fromkeys(SIDE_BY_SIDE, math.inf)

    with _compat.preserve_rng_state():
        won, times = ours_fused_wins(
            ours[caller], min(timings.values()), triton_floor,
            lambda: _compat.benchmark_nodes(scheduler, chain), side_by_side,
        )  # fmt: skip
    log.info(
        "%s + [%s]: %s (%s)", buffer.get_name(), ", ".join(n.get_name() for n in chain),
        "CuteDSL takes it, fused" if won else "left to Inductor",
        ", ".join(f"{k} {v:.4f} ms" for k, v in times.items()),
    )  # fmt: skip
    return caller if won else None
