"""How a GEMM still undecided at fusion time runs with its epilogue, measured.

Under max-autotune Inductor keeps a GEMM's candidates in a MultiTemplateBuffer until
fusion. Left alone it would compare its fastest Triton template *with* the epilogue
fused against "fastest candidate unfused + the epilogue kernel", with the unfused
figure taken from autotuning, and a CuteDSL winner would be swapped in without its
epilogue. So on the GEMM's first epilogue that our kernel can take, we decide among
three ways of running GEMM + epilogue, each really built and timed:

* ``fused``: our best candidate with the epilogue in its own epilogue (the best that
  can TMA-stage an M x N input, where the chain has one to stage), and
  ``fused_alt``: our best candidate of the other consumer schedule (pingpong if the
  best is cooperative, or the reverse) fused likewise. A cooperative kernel's tensor
  cores idle through each tile's epilogue, so an epilogue that reads an M x N operand
  can make the best cooperative tile slower fused than unfused; in pingpong one
  warpgroup's epilogue overlaps the other's mainloop;
* ``triton_fused``: Inductor's fastest Triton template with the epilogue fused (what
  stock Inductor would time; a fused Triton kernel can run well behind the same
  template alone);
* ``ours_separate`` / ``other_separate``: our candidate, or the fastest other one
  (cuBLAS, Triton), unfused, followed by the epilogue as its own Triton kernel.

All are measured side by side, as CUDA graph replays of the whole sequence (so the
separate ways pay their second kernel's launch gap and tail, as in a model), timed by
medians in interleaved rounds. In a compile without CUDA graphs each way is also
charged its launches' host time (``fair_timing.host_paced``): a separate way launches
two kernels where a fused one launches one, and a host-bound step pays for each.
Autotuning's figures only decide whether ours is worth a fused build: they are taken
one choice after another as the GPU heats, so they can rank apart two backends that
run level side by side.

The fastest way wins: ours fused renders our GEMM with the epilogue; Triton fused
finalizes the MultiTemplateBuffer as that Triton template, with the epilogue fused;
separate leaves the GEMM unfused, as the candidate that measured fastest here. When
ours is not worth measuring, Inductor decides as it would without us.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .. import config
from ..compat import autotune, codegen, ir_access
from ..compat.lazy import V
from ..lowering import fair_timing
from ..lowering.candidate import GemmCandidate
from ..lowering.template import GemmCaller
from ..runtime import compiler, records
from ..runtime.launch import default_cache
from ..runtime.support import FP8_DTYPES, STORE_DTYPES
from ..timing import Maker, side_by_side
from . import fusion
from .epilogue_translation import Translation

log = logging.getLogger("inductor_cutedsl.scheduler")

#: Ours is built fused only when its autotuning figure is within this factor of the
#: fastest candidate's: wide enough to cover how far autotuning's sequential figures
#: misorder backends against each other.
SCREEN = 1.15
#: A call is clear (``clear_call``) when ours autotuned at least this much faster than
#: every other choice: wider than autotuning's misordering of backends that run level.
CLEAR_MARGIN = 0.97
#: Bytes per millisecond above any Hopper part's memory bandwidth (the H200's is 4.8 TB/s):
#: a separate epilogue kernel's traffic at this rate takes less time than it can.
PEAK_BYTES_PER_MS = 5e9
#: The least time a second kernel adds to a CUDA graph's replay besides its own work (its
#: launch's gap), in ms.
KERNEL_GAP_MS = 0.001
#: Interleaved rounds of the side-by-side timings: with five ways, two rows of the
#: balanced order and their reverses, so each way follows its neighbours from both sides
#: (each round costs about 5 x 65 ms of compile time).
ROUNDS = 4
#: What ``side_by_side_ms`` measures, and the way each one stands for.
WAYS = {
    "fused": "cutedsl",
    "fused_alt": "cutedsl",
    "triton_fused": "triton",
    "ours_separate": "separate",
    "other_separate": "separate",
}

#: One record per measured decision in this process: {"gemm", "way", "ms": {way: ms}}.
decisions: list[dict] = []
#: Wall seconds of this process's decisions (compile time): in all (``decide_s``), and of
#: those, waiting for our fused builds (``builds_s``) and for the benchmark modules'
#: compiles (``modules_s``); the rest captures and measures the ways. ``reused``: the
#: decisions taken from a structurally equal one of the same graph (``decision_key``);
#: ``recorded``: those taken from an earlier compile's record (``runtime/records.py``);
#: ``clear``: those decided without measuring (``clear_call``).
stats = {"decide_s": 0.0, "builds_s": 0.0, "modules_s": 0.0, "reused": 0, "recorded": 0, "clear": 0}


@dataclasses.dataclass(frozen=True)
class Decision:
    """How a MultiTemplateBuffer runs with the epilogue it was decided for.

    ``way`` is "cutedsl" (``choice``, our GemmCaller, with the epilogue fused),
    "triton" (``choice``, a Triton template caller, with the epilogue fused) or
    "separate" (``choice``, the GEMM measured fastest unfused, then the epilogue's own
    kernel).
    ``consumer`` names the scheduler node the decision was measured with.
    """

    way: str
    choice: Any
    consumer: str


def _random_tensor(layout: Any, fill: bool) -> torch.Tensor:
    """A tensor laid out like an IR layout (random normal when ``fill``)."""
    size = [ir_access.size_hint(s) for s in layout.size]
    stride = [ir_access.size_hint(s) for s in layout.stride]
    offset = ir_access.size_hint(layout.offset)
    needed = offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))
    storage = torch.empty(needed, dtype=layout.dtype, device=layout.device)
    if fill and storage.element_size() == 1:  # 8-bit floats have no normal_
        storage.copy_(torch.randn(needed, device=layout.device))
    elif fill:
        storage.normal_()
    return storage.as_strided(size, stride, offset)


def _fused(caller: GemmCaller, tr: Translation) -> tuple[Any, GemmCandidate]:
    """(output buffer, candidate) of ``caller`` with ``tr`` fused."""
    out = V.graph.get_buffer(tr.outputs[-1])
    return out, fusion.fuse(caller.candidate, tr, STORE_DTYPES[out.get_dtype()])


def _fastest(timings: dict, keep: Callable[[Any], bool]) -> Any | None:
    chosen = [c for c in timings if keep(c)]
    return min(chosen, key=timings.__getitem__) if chosen else None


def _candidates(buffer: Any) -> tuple[GemmCaller | None, dict]:
    """(our fastest candidate if worth a fused build, else None; all finite timings)."""
    timings = {c: t for c, t in buffer.choice_timings().items() if math.isfinite(t)}
    caller = _fastest(timings, lambda c: isinstance(c, GemmCaller))
    return (caller if _in_range(caller, timings) else None), timings


def _in_range(choice: Any, timings: dict) -> bool:
    return choice is not None and timings[choice] <= SCREEN * min(timings.values())


def _fused_choice(caller: GemmCaller, timings: dict, tr: Translation) -> GemmCaller:
    """Our candidate for the ``fused`` way: the fastest, or where the chain has an input
    to stage (``fusion.stageable_input``), the fastest that can stage it, if in range.
    A staged input costs the kernel less than the same input loaded from global memory
    in the epilogue (docs/findings.md)."""
    index = fusion.stageable_input(tr.epilogue, 0, tr)
    if index is None:
        return caller
    in_dtype, out_dtype = tr.operands[index].dtype, V.graph.get_buffer(tr.outputs[-1]).get_dtype()
    best = _fastest(timings, lambda c: isinstance(c, GemmCaller) and fusion.stages(c.gemm_config, in_dtype, out_dtype))
    return best if isinstance(best, GemmCaller) and _in_range(best, timings) else caller


def _alternative(choice: GemmCaller, timings: dict) -> GemmCaller | None:
    """Our fastest candidate with the other consumer schedule than ``choice``'s, if it is
    worth a fused build."""
    pingpong = choice.gemm_config.pingpong
    alt = _fastest(timings, lambda c: isinstance(c, GemmCaller) and c.gemm_config.pingpong != pingpong)
    return alt if _in_range(alt, timings) else None


def _contenders(caller: GemmCaller, timings: dict, tr: Translation, triton: bool = True) -> dict[str, Any]:
    """The choice each way in ``WAYS`` runs (the GEMM of a separate way), for the ways
    that exist among these candidates (``triton``: whether a Triton template may take
    the epilogue)."""
    fused = _fused_choice(caller, timings, tr)
    ways = {
        "fused": fused,
        "fused_alt": _alternative(fused, timings),
        "triton_fused": _fastest(timings, ir_access.is_triton_template_caller) if triton else None,
        "ours_separate": caller,
        "other_separate": _fastest(timings, lambda c: not isinstance(c, GemmCaller)),
    }
    return {way: choice for way, choice in ways.items() if choice is not None}


def clear_call(caller: GemmCaller, timings: dict, tr: Translation, triton: bool, floor_ms: float) -> bool:
    """Whether our candidate fused with ``tr`` is the fastest way without measuring: ours
    autotuned faster by ``CLEAR_MARGIN`` than the least each other way can take, and the
    chain reads no M x N input and keeps no intermediate. Fused, the GEMM then writes its
    output once with a few register operations more. A separate way runs another choice's
    GEMM and then a kernel that reads and writes the output again: at least that GEMM's
    time and ``floor_ms`` (``separate_floor_ms``). A Triton template that may take the
    epilogue (``triton``) does it behind its own GEMM: at least that GEMM's time. An
    M x N input makes the call close (it can slow a cooperative tile's epilogue more than
    a separate kernel costs: docs/findings.md). ``config.measure_clear_calls`` measures
    these too."""
    if not may_be_clear(tr):
        return False
    least = [
        t if triton and ir_access.is_triton_template_caller(c) else t + floor_ms
        for c, t in timings.items()
        if not isinstance(c, GemmCaller)
    ]
    return not least or timings[caller] <= CLEAR_MARGIN * min(least)


def separate_floor_ms(buffer: Any, tr: Translation) -> float:
    """A lower bound on what running the chain ``tr`` as its own kernel adds after the GEMM
    writing ``buffer``: a kernel's gap, and reading the GEMM's output and writing the
    chain's outputs once, at more than the device's memory bandwidth."""
    graph = V.graph
    layouts = [buffer.get_layout(), *(graph.get_buffer(name).get_layout() for name in tr.outputs)]
    nbytes = sum(math.prod(ir_access.size_hint(s) for s in layout.size) * layout.dtype.itemsize for layout in layouts)
    return KERNEL_GAP_MS + nbytes / PEAK_BYTES_PER_MS


def may_be_clear(tr: Translation) -> bool:
    """Whether a chain can be a clear call (``clear_call``) for some timings: the part of
    the rule that reads no timings. A chain writing an fp8 output never is: its
    quantizing epilogue is more than a few register operations to our kernel, which fused
    ran slower than cuBLAS and a separate kernel together (docs/findings.md, fp8)."""
    if config.measure_clear_calls or tr.kept:
        return False
    if any(V.graph.get_buffer(name).get_dtype() in FP8_DTYPES for name in tr.outputs):
        return False
    return not any(_reads_m_by_n(op) for op in tr.operands)


def _reads_m_by_n(op: Any) -> bool:
    """Whether a chain input has an element per output element, rather than one per row
    or per column (a bias: stride 0 along M or N) that stays in cache."""
    s_m, s_n, _ = op.strides
    return s_m != 0 and s_n != 0


def _layout_key(layout: Any) -> tuple:
    """A layout as a decision depends on it: sizes and strides (as written, and their
    hints), offset and dtype."""
    exprs = (*layout.size, *layout.stride, layout.offset)
    return (str(layout.dtype), tuple(map(str, exprs)), tuple(ir_access.size_hint(e) for e in exprs))


def _choice_id(choice: Any) -> tuple:
    """What a contender is, not which object: our config, a Triton template's config, or
    an extern kernel's name (Triton callers' own names are numbered per GEMM)."""
    if isinstance(choice, GemmCaller):
        return ("cutedsl", choice.gemm_config.name())
    return (type(choice).__name__, getattr(choice, "description", "") or getattr(choice, "name", ""))


def decision_key(buffer: Any, contenders: dict[str, Any], tr: Translation, triton: bool) -> tuple:
    """What a decision's outcome depends on, structurally: the GEMM's input and output
    layouts, each way's contender, our fused kernels (their keys hold the epilogue, the
    config and the dtypes), the epilogue's operand and output layouts, and whether a
    Triton template may fuse. The layers of a model repeat one key: the first measures,
    the others take its way (a 32-layer model measured each layer's GEMMs otherwise)."""
    graph = V.graph
    return (
        str(buffer.get_device()),
        tuple(_layout_key(node.get_layout()) for node in ir_access.template_inputs(buffer)),
        _layout_key(buffer.get_layout()),
        tuple(sorted((way, _choice_id(c)) for way, c in contenders.items())),
        tuple(sorted((way, _fused(c, tr)[1].spec.key()) for way, c in contenders.items() if WAYS[way] == "cutedsl")),
        tuple(_layout_key(graph.get_buffer(op.buffer).get_layout()) for op in tr.operands),
        tuple(_layout_key(graph.get_buffer(name).get_layout()) for name in tr.outputs),
        len(tr.kept),
        triton,
    )


def start_fused_build(
    scheduler: Any,
    template: Any,
    tr: Translation,
    chain: Sequence[Any],
    triton: bool,
    early: dict,
    started: set | None = None,
) -> None:
    """Start what ``decide`` would need for this GEMM and chain, unless it would not
    decide: our fused builds (in compile workers), and the epilogue's and the fused
    Triton template's benchmark modules (in Inductor's compile pool). The work of
    several GEMMs then runs side by side instead of one decision after another (a cold
    compile spent most of the selection's seconds compiling these modules, serially).
    Modules go to ``early`` (the graph's, by ``_module_key``): each is taken once, by
    the decision that needs it. ``started``: the ``decision_key``s started for already
    (the graph's); a GEMM with one of them will take that decision, not measure."""
    if not ir_access.timings_ready(template.node):
        _start_untimed(scheduler, template, tr, chain, early, started)
        return
    caller, timings = _candidates(template.node)
    if caller is None:
        return
    if clear_call(caller, timings, tr, triton, separate_floor_ms(template.node, tr)):  # only its kernel is needed
        compiler.build_async(_fused(caller, tr)[1].spec, default_cache(), config.compile_workers)
        return
    contenders = _contenders(caller, timings, tr, triton)
    if started is not None:
        key = decision_key(template.node, contenders, tr, triton)
        if key in started:
            return
        started.add(key)
    for way, choice in contenders.items():
        if WAYS[way] == "cutedsl":
            compiler.build_async(_fused(choice, tr)[1].spec, default_cache(), config.compile_workers)
    for nodes, choice in _side_modules(template, chain, contenders).values():
        key = _module_key(nodes, choice)
        if key not in early:
            early[key] = codegen.nodes_module(scheduler, list(nodes), choice)


def _start_untimed(
    scheduler: Any, template: Any, tr: Translation, chain: Sequence[Any], early: dict, started: set | None
) -> None:
    """``start_fused_build`` for a GEMM not yet autotuned: only what needs no timings.

    Reading its timings here would run its autotuning now, at the first fusion check:
    a wait for every Triton precompile queued so far, then its benchmarks, one GEMM
    after another, before any fusion, where stock autotunes them after fusion and its
    fusion work overlaps the precompiles (docs/findings.md). So this starts our first
    listed candidate's fused build (the shortlist's best guess, and at 65-256 rows the
    only one) and, where the chain will be measured whatever the timings (it cannot be a
    clear call), the epilogue's benchmark module; the decision itself reads the timings
    and builds what else it needs. Layers that repeat one GEMM and chain start once."""
    ours = [c for c in template.node.choices if isinstance(c, GemmCaller)]
    if not ours:
        return
    candidate = _fused(ours[0], tr)[1]
    if started is not None:
        key = untimed_key(template.node, candidate, tr)
        if key in started:
            return
        started.add(key)
    compiler.build_async(candidate.spec, default_cache(), config.compile_workers)
    if may_be_clear(tr):  # a clear call measures nothing: its module would be compiled for naught
        return
    key = _module_key(chain, None)
    if key not in early:
        early[key] = codegen.nodes_module(scheduler, list(chain), None)


def untimed_key(buffer: Any, candidate: GemmCandidate, tr: Translation) -> tuple:
    """What ``_start_untimed`` starts depends on, structurally (``decision_key`` less the
    contenders, which need timings): a model's repeated layers share it."""
    graph = V.graph
    return (
        "untimed",
        str(buffer.get_device()),
        tuple(_layout_key(node.get_layout()) for node in ir_access.template_inputs(buffer)),
        _layout_key(buffer.get_layout()),
        candidate.spec.key(),
        tuple(_layout_key(graph.get_buffer(op.buffer).get_layout()) for op in tr.operands),
        tuple(_layout_key(graph.get_buffer(name).get_layout()) for name in tr.outputs),
        len(tr.kept),
    )


def _side_modules(template: Any, chain: Sequence[Any], contenders: dict[str, Any]) -> dict[str, tuple]:
    """The benchmark modules the ways of ``contenders`` time besides our kernels, as
    (nodes, Triton choice rendering the template or None): the epilogue alone, and the
    fused Triton template where that way exists."""
    modules = {"epilogue": (tuple(chain), None)}
    if "triton_fused" in contenders:
        modules["triton_fused"] = ((template, *chain), contenders["triton_fused"])
    return modules


def _module_key(nodes: Sequence[Any], triton_choice: Any) -> tuple:
    return tuple(n.get_name() for n in nodes), getattr(triton_choice, "name", None)


def _side_module(scheduler: Any, nodes: Sequence[Any], triton_choice: Any, early: dict) -> tuple[Any, Any]:
    """``codegen.nodes_module`` of ``nodes``: the one started early, if it was."""
    started = early.pop(_module_key(nodes, triton_choice), None)
    return started if started is not None else codegen.nodes_module(scheduler, list(nodes), triton_choice)


def _then(first: Maker, second: Maker) -> Maker:
    """A maker of a function running ``first``'s work, then ``second``'s."""

    def make() -> Callable[[], None]:
        a, b = first(), second()

        def both() -> None:
            a()
            b()

        return both

    return make


def await_modules(modules: Iterable[tuple[Any, Any]]) -> None:
    """Wait for the compiles of ``(future or None, module)`` benchmark modules. One that
    failed to compile fails its ways alone, when they are made (``module_run_fn``
    raises there, and the side-by-side measurement records that way as inf)."""
    for future, _ in modules:
        if future is not None:
            with contextlib.suppress(Exception):
                future.result()


def await_modules_before_measuring(modules: Iterable[tuple[Any, Any]], early: dict) -> None:
    """Wait for ``modules``, and for the graph's modules started early for other
    decisions (``early``): those compiling in this process's threads
    (``codegen.precompile_in_threads``) would take the GIL from the measurements."""
    await_modules([*modules, *early.values()])


def side_by_side_runs(
    scheduler: Any, template: Any, contenders: dict[str, Any], tr: Translation, chain: Sequence[Any], early: dict
) -> dict[str, Maker]:
    """Makers (see ``timing.graphed_run``) of one run of each way of ``contenders`` (see
    ``_contenders``). Code is generated and compiles start now (in worker processes);
    tensors are allocated when a maker runs."""
    fused = {way: _fused(c, tr) for way, c in contenders.items() if WAYS[way] == "cutedsl"}
    # Through the worker pool: a build started early for this chain (start_fused_build)
    # is waited for, not redone.
    builds = [compiler.build_async(c.spec, default_cache(), config.compile_workers) for _, c in fused.values()]
    modules = {
        name: _side_module(scheduler, nodes, choice, early)
        for name, (nodes, choice) in _side_modules(template, chain, contenders).items()
    }
    t0 = time.perf_counter()
    compiler.wait(builds)
    t1 = time.perf_counter()
    await_modules_before_measuring(modules.values(), early)
    stats["builds_s"] += t1 - t0
    stats["modules_s"] += time.perf_counter() - t1
    caller = contenders["ours_separate"]

    def ours(cand: GemmCandidate, layout: Any) -> Maker:
        def make() -> Callable[[], None]:
            inputs = caller.benchmark_inputs()
            named = dict(zip(cand.input_names, inputs))
            kept = set(tr.kept)
            for name, op in zip(cand.input_names[len(inputs) :], tr.operands):
                op_layout = V.graph.get_buffer(op.buffer).get_layout()
                named[name] = _random_tensor(op_layout, fill=op.buffer not in kept)
            result = _random_tensor(layout, fill=False)
            launch = cand.launcher()
            operands = [named[name] for name in cand.operand_args]
            stream = torch.cuda.current_stream().cuda_stream
            return lambda: launch(named["a"], named["b"], result, *operands, stream=stream)

        return make

    epilogue_run: Maker = lambda: codegen.module_run_fn(*modules["epilogue"])
    runs = {name: ours(cand, out.get_layout()) for name, (out, cand) in fused.items()}
    runs["ours_separate"] = _then(ours(caller.candidate, caller.layout), epilogue_run)
    if "other_separate" in contenders:
        runs["other_separate"] = _then(lambda: autotune.choice_run_fn(contenders["other_separate"]), epilogue_run)
    if "triton_fused" in modules:
        runs["triton_fused"] = lambda: codegen.module_run_fn(*modules["triton_fused"])
    return runs


def side_by_side_ms(runs: dict[str, Maker], device: Any) -> dict[str, float]:
    """Milliseconds of each run, measured side by side as CUDA graph replays (medians
    over interleaved rounds); inf for one that fails to build or run."""
    with torch.cuda.device(device):
        times = side_by_side(runs, ROUNDS)
    return {name: times.get(name, math.inf) for name in WAYS}


def fastest_way(times: dict[str, float]) -> str | None:
    """The name in ``WAYS`` of the fastest finite time, or None."""
    finite = {name: t for name, t in times.items() if math.isfinite(t)}
    return min(finite, key=finite.__getitem__) if finite else None


def decide(
    scheduler: Any,
    template: Any,
    tr: Translation,
    chain: Sequence[Any],
    consumer: str,
    triton: bool,
    early: dict,
    memo: dict | None = None,
) -> Decision | None:
    """How the GEMM of ``template`` runs with the epilogue ``chain`` (ending in the
    scheduler node ``consumer``), or None to leave it to Inductor (``triton``: whether
    a Triton template may take the epilogue; ``early``: the graph's benchmark modules
    started early; ``memo``: the graph's measured ways by ``decision_key``)."""
    buffer = template.node
    caller, timings = _candidates(buffer)
    names = f"{buffer.get_name()} + [{', '.join(n.get_name() for n in chain)}]"
    if caller is None:
        log.info("%s: left to Inductor (no CuteDSL candidate within %.2fx of the fastest)", names, SCREEN)
        return None
    if clear_call(caller, timings, tr, triton, separate_floor_ms(buffer, tr)):
        stats["clear"] += 1
        log.info(
            "%s: CuteDSL takes it, fused (a clear call: ours autotuned faster than any other way can run, "
            "no M x N input)",
            names,
        )
        return Decision("cutedsl", caller, consumer)
    contenders = _contenders(caller, timings, tr, triton)
    key = decision_key(buffer, contenders, tr, triton) if memo is not None else None
    way = memo.get(key) if memo is not None else None
    if way is not None:
        stats["reused"] += 1
        log.info("%s: %s, as its graph's GEMMs of the same key were measured", names, way)
        return _decision(buffer, contenders, way, consumer)
    device = str(buffer.get_device())
    # The regime too: without CUDA graphs the launches' host time counts (``launch_charges``).
    record = repr((key, fair_timing.regime()))
    if memo is not None:
        way = records.read("selection", record, device)
        if way in contenders:
            memo[key] = way
            stats["recorded"] += 1
            log.info("%s: %s, as an earlier compile measured", names, way)
            return _decision(buffer, contenders, way, consumer)
    t0 = time.perf_counter()
    with autotune.preserve_rng_state():
        runs = side_by_side_runs(scheduler, template, contenders, tr, chain, early)
        times = side_by_side_ms(runs, buffer.get_device())
        host = fair_timing.launch_charges(runs, times, buffer.get_device())
    stats["decide_s"] += time.perf_counter() - t0
    way = fastest_way({name: t + host.get(name, 0.0) for name, t in times.items()})
    if way is None:
        log.warning("%s: nothing measured; left to Inductor", names)
        return None
    if memo is not None:
        memo[key] = way
        records.write("selection", record, device, way)
    decision = _decision(buffer, contenders, way, consumer)
    configs = {w: c.gemm_config.name() for w, c in contenders.items() if isinstance(c, GemmCaller)}
    other = _fastest(timings, lambda c: not isinstance(c, GemmCaller))
    decisions.append(
        {
            "gemm": buffer.get_name(),
            "way": way,
            "ms": {k: round(v, 4) for k, v in times.items()},
            **({"host_ms": {k: round(v, 4) for k, v in host.items()}} if host else {}),
            "configs": configs,
            # What autotuning said beforehand, and what the chain reads: a rule that
            # decides without measuring is checked against these records.
            "autotune_ms": {
                "ours": round(timings[caller], 4),
                "other": None if other is None else round(timings[other], 4),
            },
            "m_by_n_inputs": sum(map(_reads_m_by_n, tr.operands)),
            "kept": len(tr.kept),
        }
    )
    log.info(
        "%s: %s (%s; ours: %s)",
        names,
        {
            "cutedsl": "CuteDSL takes it, fused",
            "triton": "Triton template takes it, fused",
            "separate": "GEMM unfused + epilogue kernel",
        }[decision.way],
        ", ".join(f"{k} {v:.4f} ms" for k, v in times.items()),
        ", ".join(f"{k} {v}" for k, v in configs.items()),
    )
    return decision


def _decision(buffer: Any, contenders: dict[str, Any], way: str, consumer: str) -> Decision:
    """``way``'s decision for ``buffer``, carried out where it is the buffer's own."""
    choice = contenders[way]
    if WAYS[way] == "separate":
        # The GEMM measured fastest here is the one that runs unfused, whatever autotuning's
        # sequential figures said (they can pick ours where cuBLAS + the epilogue is faster).
        codegen.prefer_choice(buffer, choice)
    return Decision(WAYS[way], choice, consumer)
