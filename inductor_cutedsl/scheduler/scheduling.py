"""Inductor's CUDA scheduling, plus epilogue fusion into CuteDSL GEMMs.

``can_fuse_vertical`` accepts a pointwise consumer of one of our GEMMs when the
whole chain translates (``node_translation``); buffers of the chain that are read
elsewhere are kept as extra outputs (two at most). A GEMM still undecided after
autotuning (a MultiTemplateBuffer) is decided on its first epilogue that translates:
ours fused, a Triton template fused, or unfused plus the epilogue's own kernel,
whichever measures fastest (``selection``); the patched ``speedup_by_fusion`` then
carries that decision out instead of measuring again (``fusion_verdict``). Otherwise
Inductor decides as it would without us. ``codegen_template`` renders the GEMM with
the composed epilogue, the chain's operands as extra inputs and the chain's last
buffer as output, and logs every consumer left outside with the reason. Everything
else is the stock behaviour.

Installed by ``enable()`` when ``config.epilogue_fusion`` is on.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, Sequence

from .. import config
from ..errors import Unsupported
from ..compat import codegen, ir_access
from ..compat.lazy import V
from ..lowering.candidate import GemmCandidate
from ..lowering.choices import CuteDSLChoices
from ..lowering.template import GemmTemplateBuffer, gemm_template
from ..runtime import compiler
from ..runtime.launch import default_cache
from ..runtime.spec import ALIGNMENT
from ..runtime.support import OUT_DTYPES, STORE_DTYPES
from . import selection
from .epilogue_translation import Translation
from .fusion import fuse
from .node_translation import translate_nodes

log = logging.getLogger("inductor_cutedsl.scheduler")


def render_source(buffer: Any) -> tuple[GemmCandidate, list] | None:
    """(candidate, input nodes) to render ``buffer`` as our GEMM: our template buffer,
    or a MultiTemplateBuffer whose epilogue one of our candidates won."""
    if isinstance(buffer, GemmTemplateBuffer):
        return buffer.candidate, list(buffer.inputs)
    decision = selection.decision_of(buffer)
    if decision is None or decision.way != "cutedsl":
        return None
    return decision.choice.candidate, list(decision.choice.input_nodes)


def gemm_template_node(node: Any) -> Any | None:
    """The SchedulerNode of our GEMM template heading ``node``, if there is one."""
    if not node.is_template():
        return None
    template = next(n for n in node.get_nodes() if n.is_template())
    return template if render_source(template.node) is not None else None


def fusion_verdict(node1: Any, node2: Any) -> bool | None:
    """Whether to fuse ``node2`` into ``node1`` where we measured it already, else None.

    Our GEMM takes every epilogue that translates (``can_fuse_vertical`` checked it). A
    MultiTemplateBuffer decided for ``node2`` with a Triton template fused is finalized
    as that template here, where the fusion is accepted; one decided unfused takes no
    epilogue at all."""
    if gemm_template_node(node1) is not None:
        return True
    template = selection.bare_template(node1)
    decision = selection.decision_of(template.node) if template is not None else None
    if decision is None:
        return None
    buffer = template.node
    if decision.way == "separate":
        return False
    if decision.way == "triton" and decision.consumer == node2.get_name():
        codegen.finalize_as_triton(buffer, decision.choice)
        return True
    return None


def pairs_through_view(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether ``node2`` is a candidate epilogue of our GEMM ``node1`` (ours, or still
    undecided) that reads its output: Inductor may see other loops than the GEMM's
    (a model's (B, T, N) consumer of a (B*T, N) GEMM) and refuse to pair them, while
    our translation can prove the indexing (``can_fuse_vertical`` then decides)."""
    if node2.is_template() or node2.is_reduction() or node2.has_aliasing_or_mutation():
        return False
    if gemm_template_node(node1) is None and selection.undecided_multi_template(node1) is None:
        return False
    return bool(node1.get_buffer_names() & {dep.name for dep in node2.read_writes.reads})


def view_score(scheduler: Any, node1: Any, node2: Any) -> int:
    """A fusion score for a pair ``pairs_through_view`` admits: the bytes of the GEMM
    output that ``node2`` would no longer read back (Inductor's score counts matching
    dependencies only, and a view matches none)."""
    if not pairs_through_view(scheduler, node1, node2):
        return 0
    return sum(scheduler.dep_size_hint(dep) for dep in node1.read_writes.writes)


def _mnl(template_node: Any) -> tuple[int, int, int]:
    size = [ir_access.size_hint(s) for s in template_node.node.get_size()]
    return (size[-2], size[-1], size[0] if len(size) == 3 else 1)


def _epilogue_chain(node1: Any, node2: Any = None) -> list[Any]:
    chain = [n for n in node1.get_nodes() if not n.is_template()]
    return chain + (list(node2.get_nodes()) if node2 is not None else [])


#: One record per GEMM generated with a fused epilogue in this process:
#: {"gemm": buffer, "size": [M, N], "ops": aten ops fused, "kept": extra outputs}.
fused_epilogues: list[dict] = []


def _aten_ops(nodes: Sequence[Any]) -> list[str]:
    ops = {
        str(getattr(o.target, "__name__", o.target)).split(".")[0]
        for n in nodes
        for o in n.node.get_origins()
        if o.op == "call_function"
    }
    return sorted(ops)


# Kept outputs leave by plain stores, not TMA: worth it for one or two (e.g. the
# pre-activation a backward pass needs), not as a general multi-output GEMM.
MAX_KEPT_OUTPUTS = 2


def translate_chain(scheduler: Any, template_node: Any, chain: Sequence[Any]) -> Translation:
    """The translated chain, or Unsupported with the reason."""
    source = render_source(template_node.node)
    if source is not None and any(op.is_output for op in source[0].spec.epilogue.operands):
        # Its epilogue returns a tuple (a dual GEMM keeping gate and up for backward).
        raise Unsupported(f"{template_node.get_name()} already writes extra outputs")
    for node in chain:
        if node.is_reduction():
            raise Unsupported(f"{node.get_name()} is a reduction")
        if node.is_template() or node.is_extern() or node.has_aliasing_or_mutation():
            raise Unsupported(f"{node.get_name()} is not a plain pointwise node")
    inside = {n.get_name() for n in chain} | {template_node.get_name()}
    try:
        tr = translate_nodes(
            template_node.node.get_name(),
            _mnl(template_node),
            chain,
            V.graph.get_dtype,
            keep_if=lambda name: ir_access.buffer_users_outside(scheduler, name, inside),
        )
    except Unsupported as exc:
        raise Unsupported(str(exc)) from exc
    if len(tr.kept) > MAX_KEPT_OUTPUTS:
        raise Unsupported(
            f"{len(tr.kept)} of its buffers are read elsewhere ({', '.join(tr.kept)}); "
            f"an epilogue writes at most {MAX_KEPT_OUTPUTS} besides its result"
        )
    out = V.graph.get_buffer(tr.outputs[-1])
    if out.get_dtype() not in STORE_DTYPES:
        raise Unsupported(f"output dtype {out.get_dtype()}")
    if out.get_dtype() not in OUT_DTYPES and not config.fp8:
        raise Unsupported(f"an {out.get_dtype()} output is off (INDUCTOR_CUTEDSL_FP8=1 allows it)")
    stride = out.get_layout().stride
    step = ALIGNMENT // out.get_dtype().itemsize  # TMA stores: 16-byte rows and batches
    if not ir_access.is_one(stride[-1]) or not all(ir_access.multiple_of(s, step) for s in stride[:-1]):
        raise Unsupported(f"output layout {list(stride)} is not row-major with 16-byte rows")
    if not ir_access.multiple_of(out.get_size()[-1], step):
        # The TMA store writes whole 16-byte units (runtime.support.row_width_reason): a
        # narrower output dtype than the GEMM's (fp8) may end its rows inside one.
        raise Unsupported(f"output width {out.get_size()[-1]} is not provably whole 16-byte units")
    return tr


def _consumers(template: Any) -> dict[str, Any]:
    """The scheduler nodes that read ``template``'s output, by name."""
    return {
        user.node.get_name(): user.node
        for buf in template.get_outputs()
        for user in buf.users
        if hasattr(user.node, "is_template")
    }


class CuteDSLFusionChoices(CuteDSLChoices):
    """Inductor's choices with our candidates, scoring the fusions our GEMMs take."""

    @staticmethod
    def can_fuse(scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
        if shared_data_score == 0:  # no matching dependency: perhaps a view we prove
            shared_data_score = view_score(scheduler, node1, node2)
        return CuteDSLChoices.can_fuse(scheduler, node1, node2, shared_data_score)


#: Graphs whose fused candidate builds were started (``_start_fused_builds``).
_builds_started: weakref.WeakSet = weakref.WeakSet()


class CuteDSLFusionScheduling(codegen.cuda_combined_scheduling()):
    def can_fuse_vertical(self, node1: Any, node2: Any) -> bool:
        self._start_fused_builds()
        template = gemm_template_node(node1)
        if template is None:
            undecided = selection.undecided_multi_template(node1)
            if undecided is not None:
                self._decide(undecided, node1, node2)
                template = gemm_template_node(node1)
        if template is None:
            return super().can_fuse_vertical(node1, node2)
        return self._translate_pair(template, node1, node2) is not None

    def _start_fused_builds(self) -> None:
        """Once per graph, before its first fusion decision: for each undecided GEMM and
        each pointwise consumer whose chain translates, start building the fused kernels
        and compiling the benchmark modules the selection would time (the first fusion a
        GEMM is offered is usually one of these), so that they overlap instead of
        queueing behind each decision."""
        graph = V.graph
        if graph in _builds_started:
            return
        _builds_started.add(graph)
        for node in self.scheduler.nodes:
            template = selection.undecided_multi_template(node)
            if template is None:
                continue
            for consumer in _consumers(template).values():
                try:
                    chain = _epilogue_chain(template, consumer)
                    tr = translate_chain(self.scheduler, template, chain)
                    triton = codegen.stock_pairs(self.scheduler, template, consumer)
                    selection.start_fused_build(self.scheduler, template, tr, chain, triton)
                except Exception as exc:  # only a head start: the decision builds what it needs
                    log.debug("no early build for %s + %s: %s", template.get_name(), consumer.get_name(), exc)

    def _translate_pair(self, template: Any, node1: Any, node2: Any) -> Translation | None:
        """The chain of ``node1`` extended by ``node2``, translated; None if refused."""
        try:
            return translate_chain(self.scheduler, template, _epilogue_chain(node1, node2))
        except Unsupported as why:
            # Asked often per pair; the one INFO line per consumer comes at codegen.
            log.debug("cannot fuse %s into CuteDSL GEMM %s: %s", node2.get_name(), template.get_name(), why)
            return None

    def _decide(self, template: Any, node1: Any, node2: Any) -> None:
        """Decide an autotuned GEMM (MultiTemplateBuffer) on its first epilogue that
        translates (``selection.decide``); until one does, it stays undecided."""
        tr = self._translate_pair(template, node1, node2)
        if tr is None:
            return
        # A Triton template's epilogue codegen relies on matching dependencies: a pair
        # that only our translation admits (a view) is no Triton fusion.
        triton = codegen.stock_pairs(self.scheduler, node1, node2)
        try:
            decision = selection.decide(
                self.scheduler, template, tr, _epilogue_chain(node1, node2), node2.get_name(), triton
            )
        except Exception as exc:  # measuring failed: Inductor decides as it would without us
            log.warning("fused CuteDSL candidate for %s not considered: %s", template.get_name(), exc)
            decision = None
        setattr(template.node, selection.DECISION_ATTR, decision)

    def _log_unfused_consumers(self, template: Any, epilogue_nodes: Sequence[Any]) -> None:
        """One line per consumer of the GEMM left outside its epilogue, with the reason."""
        fused = {n.get_name() for n in epilogue_nodes}
        consumers = {name: node for name, node in _consumers(template).items() if name not in fused}
        for name, consumer in consumers.items():
            try:
                translate_chain(self.scheduler, template, [*epilogue_nodes, consumer])
                why = "the scheduler did not pair them (size, order or memory rule)"
            except Unsupported as exc:
                why = str(exc)
            log.info("not fusing %s into CuteDSL GEMM %s: %s", name, template.get_name(), why)
        if fused:
            log.info("fused %s into CuteDSL GEMM %s", ", ".join(sorted(fused)), template.get_name())

    def codegen_template(self, template_node: Any, epilogue_nodes: Sequence[Any], prologue_nodes: Sequence[Any]):
        template = gemm_template_node(template_node)
        if template is not None:
            self._log_unfused_consumers(template, epilogue_nodes)
        if template is None or not epilogue_nodes:
            return super().codegen_template(template_node, epilogue_nodes, prologue_nodes)
        assert not prologue_nodes, "CuteDSL GEMMs take no prologue"
        tr = translate_chain(self.scheduler, template, list(epilogue_nodes))
        buffer = template.node
        candidate, inputs = render_source(buffer)
        out = V.graph.get_buffer(tr.outputs[-1])
        fused = fuse(candidate, tr, STORE_DTYPES[out.get_dtype()])
        # Build now, in a worker: the generated module loads the kernel only after every
        # kernel of the graph is generated, so fused kernels compile in parallel meanwhile.
        compiler.build_async(fused.spec, default_cache(), config.compile_workers)
        inputs += [V.graph.get_buffer(op.buffer) for op in tr.operands]
        kernel = codegen.template_kernel(inputs, out)
        src = kernel.render(gemm_template().template, candidate=fused).finalize_all()
        # Never allocated: the GEMM's own output and the chain's intermediates, unless kept.
        V.graph.removed_buffers |= {buffer.get_name(), *tr.outputs[:-1]} - set(tr.kept)
        template.mark_run()
        for node in epilogue_nodes:
            node.mark_run()
        node_schedule = [template, *epilogue_nodes]
        with V.set_kernel_handler(kernel):
            kernel_name = self._cutedsl_scheduling.define_kernel(src, node_schedule)
        self.codegen_comment(node_schedule, kernel_name)
        kernel.call_kernel(kernel_name, buffer)
        self.free_buffers_in_scheduler()
        m, n, _ = _mnl(template)
        fused_epilogues.append(
            {"gemm": buffer.get_name(), "size": [m, n], "ops": _aten_ops(epilogue_nodes), "kept": list(tr.kept)}
        )
