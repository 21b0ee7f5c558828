"""The one place that decides, for a GEMM, which candidate runs and which consumers fuse.

Inductor asks about fusion at four entry points (the choices handler's ``can_fuse``
score, ``Scheduler.can_fuse_vertical``, ``Scheduler.speedup_by_fusion`` and the CUDA
scheduling's ``can_fuse_vertical``); each is a thin adapter (``scheduling``,
``compat.codegen.install_fusion_hooks``) that asks this module. The rules:

- Our GEMM (a template buffer our candidate won at autotuning) takes every pointwise
  consumer chain that translates into its epilogue (``translate_chain``; the
  translation is the rule, and the same translation generates the code).
- A GEMM still undecided at fusion (a MultiTemplateBuffer with our candidates among
  its choices) is decided on its first consumer chain that translates: ours fused, a
  Triton template fused, or unfused plus the epilogue's own kernel, whichever measures
  fastest side by side (``selection.decide``). The decision is then carried out at
  every later question about that GEMM; until one is made, Inductor decides as it
  would without us.
- A consumer that reads the GEMM's output through a view (a (B, T, N) consumer of a
  (B*T, N) GEMM) pairs with it where our translation proves the indexing, which
  Inductor's dependency matching cannot.

Decisions are kept per graph being compiled (a weak map keyed by Inductor's graph,
with buffers named), not on Inductor's IR.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from .. import config
from ..compat import codegen, ir_access
from ..compat.lazy import V
from ..errors import Unsupported, fallback
from ..lowering.candidate import GemmCandidate
from ..lowering.template import GemmCaller, GemmTemplateBuffer
from ..runtime.spec import ALIGNMENT
from ..runtime.support import OUT_DTYPES, STORE_DTYPES
from . import selection
from .epilogue_translation import Translation
from .node_translation import translate_nodes

log = logging.getLogger("inductor_cutedsl.scheduler")

# Kept outputs leave by plain stores, not TMA: worth it for one or two (e.g. the
# pre-activation a backward pass needs), not as a general multi-output GEMM.
MAX_KEPT_OUTPUTS = 2


@dataclasses.dataclass
class GraphDecisions:
    """What was decided, and started, for one graph's GEMMs."""

    #: Buffer name of a decided MultiTemplateBuffer -> its decision (None: left to Inductor).
    ways: dict[str, selection.Decision | None] = dataclasses.field(default_factory=dict)
    #: Whether the fused builds of the graph's undecided GEMMs were started.
    builds_started: bool = False
    #: Benchmark modules started early (``selection.start_fused_build``), by module key.
    early_modules: dict = dataclasses.field(default_factory=dict)
    #: ``selection.decision_key`` -> the way measured for it: a GEMM of a key already
    #: measured in this graph (another layer of the model) takes that way.
    measured: dict = dataclasses.field(default_factory=dict)
    #: The ``decision_key``s (and ``untimed_key``s) early work was started for.
    started: set = dataclasses.field(default_factory=set)
    #: Undecided GEMMs (their template nodes) not autotuned when early work started: the
    #: part of it that needs timings waits for them (``_start_timed``).
    awaiting_timings: list = dataclasses.field(default_factory=list)


_graphs: weakref.WeakKeyDictionary[Any, GraphDecisions] = weakref.WeakKeyDictionary()


def graph_decisions() -> GraphDecisions:
    """The decisions of the graph being compiled in this thread."""
    graph = V.graph
    state = _graphs.get(graph)
    if state is None:
        state = _graphs[graph] = GraphDecisions()
    return state


# -- what a node is ------------------------------------------------------------------


def bare_template(node: Any) -> Any | None:
    """The template node of ``node`` if nothing is fused into it yet."""
    return node.get_nodes()[0] if node.is_template() and len(node.get_nodes()) == 1 else None


def decision_of(buffer: Any) -> selection.Decision | None:
    return graph_decisions().ways.get(buffer.get_name())


def undecided_multi_template(node: Any) -> Any | None:
    """``node`` if it is a bare MultiTemplateBuffer node (nothing fused into it yet)
    with CuteDSL candidates, not decided yet."""
    template = bare_template(node)
    if template is None:
        return None
    buffer = template.node
    if not ir_access.is_multi_template_buffer(buffer) or buffer.get_name() in graph_decisions().ways:
        return None
    return template if any(isinstance(c, GemmCaller) for c in buffer.choices) else None


def render_source(buffer: Any) -> tuple[GemmCandidate, list] | None:
    """(candidate, input nodes) to render ``buffer`` as our GEMM: our template buffer,
    or a MultiTemplateBuffer whose epilogue one of our candidates won."""
    if isinstance(buffer, GemmTemplateBuffer):
        return buffer.candidate, list(buffer.inputs)
    decision = decision_of(buffer)
    if decision is None or decision.way != "cutedsl":
        return None
    return decision.choice.candidate, list(decision.choice.input_nodes)


def gemm_template_node(node: Any) -> Any | None:
    """The SchedulerNode of our GEMM template heading ``node``, if there is one."""
    if not node.is_template():
        return None
    template = next(n for n in node.get_nodes() if n.is_template())
    return template if render_source(template.node) is not None else None


def mnl(template_node: Any) -> tuple[int, int, int]:
    """(M, N, L) of a GEMM template node's output."""
    size = [ir_access.size_hint(s) for s in template_node.node.get_size()]
    return (size[-2], size[-1], size[0] if len(size) == 3 else 1)


def epilogue_chain(node1: Any, node2: Any = None) -> list[Any]:
    """The pointwise nodes fused into ``node1`` so far, then ``node2``'s."""
    chain = [n for n in node1.get_nodes() if not n.is_template()]
    return chain + (list(node2.get_nodes()) if node2 is not None else [])


def consumers(template: Any) -> dict[str, Any]:
    """The scheduler nodes that read ``template``'s output, by name."""
    return {
        user.node.get_name(): user.node
        for buf in template.get_outputs()
        for user in buf.users
        if hasattr(user.node, "is_template")
    }


# -- the fusion rule ------------------------------------------------------------------


def translate_chain(scheduler: Any, template_node: Any, chain: Sequence[Any]) -> Translation:
    """The translated chain, or Unsupported with the reason."""
    source = render_source(template_node.node)
    if source is not None and any(op.is_output for op in source[0].spec.epilogue.operands):
        # Its epilogue returns a tuple (a dual GEMM keeping gate and up for backward).
        raise Unsupported(f"{template_node.get_name()} already writes extra outputs", "kept-outputs")
    for node in chain:
        if node.is_reduction():
            raise Unsupported(f"{node.get_name()} is a reduction", "reduction")
        if node.is_template() or node.is_extern() or node.has_aliasing_or_mutation():
            raise Unsupported(f"{node.get_name()} is not a plain pointwise node", "not-pointwise")
    inside = {n.get_name() for n in chain} | {template_node.get_name()}
    tr = translate_nodes(
        template_node.node.get_name(),
        mnl(template_node),
        chain,
        V.graph.get_dtype,
        keep_if=lambda name: ir_access.buffer_users_outside(scheduler, name, inside),
    )
    if len(tr.kept) > MAX_KEPT_OUTPUTS:
        raise Unsupported(
            f"{len(tr.kept)} of its buffers are read elsewhere ({', '.join(tr.kept)}); "
            f"an epilogue writes at most {MAX_KEPT_OUTPUTS} besides its result",
            "kept-outputs",
        )
    out = V.graph.get_buffer(tr.outputs[-1])
    if out.get_dtype() not in STORE_DTYPES:
        raise Unsupported(f"output dtype {out.get_dtype()}", "dtype")
    if out.get_dtype() not in OUT_DTYPES and not config.fp8:
        raise Unsupported(f"an {out.get_dtype()} output is off (INDUCTOR_CUTEDSL_FP8=1 allows it)", "fp8-off")
    stride = out.get_layout().stride
    step = ALIGNMENT // out.get_dtype().itemsize  # TMA stores: 16-byte rows and batches
    if not ir_access.is_one(stride[-1]) or not all(ir_access.multiple_of(s, step) for s in stride[:-1]):
        raise Unsupported(f"output layout {list(stride)} is not row-major with 16-byte rows", "tma-alignment")
    if not ir_access.multiple_of(out.get_size()[-1], step):
        # The TMA store writes whole 16-byte units (runtime.support.row_width_reason): a
        # narrower output dtype than the GEMM's (fp8) may end its rows inside one.
        raise Unsupported(f"output width {out.get_size()[-1]} is not provably whole 16-byte units", "tma-alignment")
    return tr


def translate_pair(scheduler: Any, template: Any, node1: Any, node2: Any) -> Translation | None:
    """The chain of ``node1`` extended by ``node2``, translated; None if refused."""
    try:
        return translate_chain(scheduler, template, epilogue_chain(node1, node2))
    except Unsupported as why:
        # Asked often per pair; the one INFO line per consumer comes at codegen.
        log.debug("cannot fuse %s into CuteDSL GEMM %s: %s", node2.get_name(), template.get_name(), why)
    except Exception as exc:  # a bug of the translation: this pair is not fused
        fallback("epilogue translation", f"{template.get_name()} + {node2.get_name()}", exc, log)
    return None


def pairs_through_view(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether ``node2`` is a candidate epilogue of our GEMM ``node1`` (ours, or still
    undecided) that reads its output: Inductor may see other loops than the GEMM's
    and refuse to pair them, while our translation can prove the indexing
    (``can_fuse_vertical`` then decides)."""
    if node2.is_template() or node2.is_reduction() or node2.has_aliasing_or_mutation():
        return False
    if gemm_template_node(node1) is None and undecided_multi_template(node1) is None:
        return False
    return bool(node1.get_buffer_names() & {dep.name for dep in node2.read_writes.reads})


def view_score(scheduler: Any, node1: Any, node2: Any) -> int:
    """A fusion score for a pair ``pairs_through_view`` admits: the bytes of the GEMM
    output that ``node2`` would no longer read back (Inductor's score counts matching
    dependencies only, and a view matches none)."""
    if not pairs_through_view(scheduler, node1, node2):
        return 0
    return sum(scheduler.dep_size_hint(dep) for dep in node1.read_writes.writes)


# -- deciding ---------------------------------------------------------------------------


def can_fuse_vertical(scheduler: Any, node1: Any, node2: Any) -> bool | None:
    """Whether ``node2`` fuses into ``node1`` by our rules, or None where ``node1`` is
    no GEMM of ours (Inductor's rule answers). An undecided GEMM is decided here, on
    its first consumer chain that translates."""
    start_fused_builds(scheduler)
    template = gemm_template_node(node1)
    if template is None:
        undecided = undecided_multi_template(node1)
        if undecided is not None:
            _decide(scheduler, undecided, node1, node2)
            template = gemm_template_node(node1)
    if template is None:
        # Only our view rule (``pairs_through_view``) pairs a template with a consumer
        # that Inductor's own rules refuse. Unless our GEMM takes it, it is no fusion at
        # all: a Triton template's epilogue codegen reads the consumer's loads of the GEMM
        # output as its accumulator at the same element, so a consumer that reads another
        # one (rotary embedding's rotate_half) would compute another number.
        if node1.is_template() and not codegen.stock_pairs(scheduler, node1, node2):
            return False
        return None
    return translate_pair(scheduler, template, node1, node2) is not None


def fusion_verdict(node1: Any, node2: Any) -> bool | None:
    """Whether to fuse ``node2`` into ``node1`` where we measured it already, else None
    (``Scheduler.speedup_by_fusion`` then measures as it would).

    Our GEMM takes every epilogue that translates (``can_fuse_vertical`` checked it). A
    MultiTemplateBuffer decided for ``node2`` with a Triton template fused is finalized
    as that template here, where the fusion is accepted; one decided unfused takes no
    epilogue at all."""
    if gemm_template_node(node1) is not None:
        return True
    template = bare_template(node1)
    decision = decision_of(template.node) if template is not None else None
    if template is None or decision is None:
        return None
    if decision.way == "separate":
        return False
    if decision.way == "triton" and decision.consumer == node2.get_name():
        codegen.finalize_as_triton(template.node, decision.choice)
        return True
    return None


def start_fused_builds(scheduler: Any) -> None:
    """Once per graph, before its first fusion decision: for each undecided GEMM and
    each pointwise consumer whose chain translates, start building the fused kernels
    and compiling the benchmark modules the selection would time (the first fusion a
    GEMM is offered is usually one of these), so that they overlap instead of
    queueing behind each decision. A GEMM not yet autotuned gets only what needs no
    timings (``selection.start_fused_build``); the rest is started once its timings
    are there (``_start_timed``)."""
    state = graph_decisions()
    if state.builds_started:
        return
    state.builds_started = True
    for node in scheduler.nodes:
        template = undecided_multi_template(node)
        if template is not None:
            if not ir_access.timings_ready(template.node):
                state.awaiting_timings.append(template)
            _start_for(scheduler, state, template)


def _start_timed(scheduler: Any) -> None:
    """After a decision: the early work that needs timings, for the GEMMs that waited for
    them and have them now (autotuned meanwhile), once each; those fused or decided
    meanwhile need none. Their timings are read, not made: no GEMM is autotuned here
    ahead of its own decision."""
    state = graph_decisions()
    waiting = []
    for template in state.awaiting_timings:
        if scheduler.name_to_fused_node.get(template.get_name()) is not template:
            continue  # something was fused into it
        if undecided_multi_template(template) is None:
            continue
        if ir_access.timings_ready(template.node):
            _start_for(scheduler, state, template)
        else:
            waiting.append(template)
    state.awaiting_timings = waiting


def _start_for(scheduler: Any, state: GraphDecisions, template: Any) -> None:
    """``selection.start_fused_build`` for each consumer of ``template`` whose chain
    translates."""
    for consumer in consumers(template).values():
        try:
            chain = epilogue_chain(template, consumer)
            tr = translate_chain(scheduler, template, chain)
            triton = codegen.stock_pairs(scheduler, template, consumer)
            selection.start_fused_build(scheduler, template, tr, chain, triton, state.early_modules, state.started)
        except Exception as exc:  # only a head start: the decision builds what it needs
            log.debug("no early build for %s + %s: %s", template.get_name(), consumer.get_name(), exc)


def _decide(scheduler: Any, template: Any, node1: Any, node2: Any) -> None:
    """Decide an autotuned GEMM (MultiTemplateBuffer) on its first epilogue that
    translates (``selection.decide``); until one does, it stays undecided. A failure
    while measuring leaves it to Inductor, as stock would decide."""
    tr = translate_pair(scheduler, template, node1, node2)
    if tr is None:
        return
    # A Triton template's epilogue codegen relies on matching dependencies: a pair
    # that only our translation admits (a view) is no Triton fusion.
    triton = codegen.stock_pairs(scheduler, node1, node2)
    state = graph_decisions()
    buffer = template.node
    try:
        decision = selection.decide(
            scheduler,
            template,
            tr,
            epilogue_chain(node1, node2),
            node2.get_name(),
            triton,
            state.early_modules,
            state.measured,
        )
    except Exception as exc:
        fallback("fusion decision", f"{buffer.get_name()} + {node2.get_name()}", exc, log)
        decision = None
    state.ways[buffer.get_name()] = decision
    try:
        _start_timed(scheduler)
    except Exception as exc:  # only a head start: each decision builds what it needs
        log.debug("no early work after deciding %s: %s", buffer.get_name(), exc)


def unfused_consumers(scheduler: Any, template: Any, epilogue_nodes: Sequence[Any]) -> dict[str, str]:
    """Each consumer of the GEMM left outside its epilogue, with the reason. Only a
    report: a failure to find the consumers leaves the kernel as it was decided."""
    fused = {n.get_name() for n in epilogue_nodes}
    reasons: dict[str, str] = {}
    try:
        found = consumers(template)
    except Exception as exc:
        fallback("fusion decision", f"the consumers of {template.get_name()}", exc, log)
        return reasons
    for name, consumer in found.items():
        if name in fused:
            continue
        try:
            translate_chain(scheduler, template, [*epilogue_nodes, consumer])
            reasons[name] = "the scheduler did not pair them (size, order or memory rule) [not-paired]"
        except Unsupported as exc:
            reasons[name] = f"{exc} [{exc.rule}]"
        except Exception as exc:
            fallback("epilogue translation", f"{template.get_name()} + {name}", exc, log)
            reasons[name] = f"its translation failed ({type(exc).__name__})"
    return reasons
