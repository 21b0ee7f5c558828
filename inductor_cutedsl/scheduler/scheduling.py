"""Inductor's CUDA scheduling and choices handler, adapted for epilogue fusion into our GEMMs.

Thin adapters: every fusion question goes to ``decisions`` (the one place that decides),
and any internal failure there falls back to Inductor's own answer (``errors.fallback``).
What is ours here is rendering: ``codegen_template`` renders our GEMM with the composed
epilogue, the chain's operands as extra inputs and the chain's last buffer as output,
and logs every consumer left outside with the reason. Everything else is the stock
behaviour.

Installed by ``enable()`` when ``config.epilogue_fusion`` is on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .. import config
from ..compat import codegen
from ..compat.lazy import CuteDSLTemplateBuffer, V
from ..errors import fallback
from ..lowering.choices import CuteDSLChoices
from ..lowering.template import gemm_template
from ..runtime import compiler
from ..runtime.launch import default_cache
from ..runtime.support import STORE_DTYPES
from . import decisions
from .fusion import fuse

log = logging.getLogger("inductor_cutedsl.scheduler")

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


def _what(node1: Any, node2: Any) -> str:
    return f"{node1.get_name()} + {node2.get_name()}"


def fusion_verdict(node1: Any, node2: Any) -> bool | None:
    """``decisions.fusion_verdict``, None (Inductor measures) on an internal failure."""
    try:
        return decisions.fusion_verdict(node1, node2)
    except Exception as exc:
        fallback("fusion decision", _what(node1, node2), exc, log)
        return None


def pairs_through_view(scheduler: Any, node1: Any, node2: Any) -> bool:
    """``decisions.pairs_through_view`` where nothing ``node2`` reads is computed from
    ``node1`` by a node between them; False (Inductor's rule stands) on an internal failure."""
    try:
        return decisions.pairs_through_view(scheduler, node1, node2) and not codegen.computed_between(
            scheduler, node1, node2
        )
    except Exception as exc:
        fallback("fusion decision", _what(node1, node2), exc, log)
        return False


class CuteDSLFusionChoices(CuteDSLChoices):
    """Inductor's choices with our candidates, scoring the fusions our GEMMs take."""

    @staticmethod
    def can_fuse(scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
        if shared_data_score == 0:  # no matching dependency: perhaps a view we prove
            try:
                shared_data_score = decisions.view_score(scheduler, node1, node2)
            except Exception as exc:
                fallback("fusion decision", _what(node1, node2), exc, log)
        return CuteDSLChoices.can_fuse(scheduler, node1, node2, shared_data_score)


def holds_cutedsl_template(node: Any) -> bool:
    """Whether scheduler node ``node`` is, or has fused into it, a CuteDSL template."""
    return any(isinstance(n.node, CuteDSLTemplateBuffer) for n in node.get_nodes())


class CuteDSLScheduling(codegen.cuda_combined_scheduling()):  # type: ignore[misc]  # loaded late
    """Inductor's CUDA scheduling, with our GEMMs kept out of horizontal fusion: Inductor
    hands a pair holding a CuteDSL template to its CuteDSL scheduling, whose horizontal
    rule is not implemented and raises (its only CuteDSL templates were Blackwell grouped
    GEMMs, never beside another kernel of the graph)."""

    def can_fuse_horizontal(self, node1: Any, node2: Any) -> bool:
        if holds_cutedsl_template(node1) or holds_cutedsl_template(node2):
            return False
        return super().can_fuse_horizontal(node1, node2)


class CuteDSLFusionScheduling(CuteDSLScheduling):
    def can_fuse_vertical(self, node1: Any, node2: Any) -> bool:
        try:
            ours = decisions.can_fuse_vertical(self.scheduler, node1, node2)
        except Exception as exc:
            fallback("fusion decision", _what(node1, node2), exc, log)
            ours = None
        return super().can_fuse_vertical(node1, node2) if ours is None else ours

    def codegen_template(self, template_node: Any, epilogue_nodes: Sequence[Any], prologue_nodes: Sequence[Any]):
        template = decisions.gemm_template_node(template_node)
        if template is None:
            return super().codegen_template(template_node, epilogue_nodes, prologue_nodes)
        for name, why in decisions.unfused_consumers(self.scheduler, template, epilogue_nodes).items():
            log.info("not fusing %s into CuteDSL GEMM %s: %s", name, template.get_name(), why)
        if not epilogue_nodes:
            return super().codegen_template(template_node, epilogue_nodes, prologue_nodes)
        assert not prologue_nodes, "CuteDSL GEMMs take no prologue"
        try:
            rendered = self._render_fused(template, epilogue_nodes)
        except Exception as exc:
            # Nothing is emitted yet: the GEMM alone, then its consumers as Inductor's own kernels.
            fallback("codegen", f"{template.get_name()} with {len(epilogue_nodes)} fused node(s)", exc, log)
            self._codegen_unfused(template_node, epilogue_nodes)
            return
        log.info("fused %s into CuteDSL GEMM %s", ", ".join(n.get_name() for n in epilogue_nodes), template.get_name())
        self._emit_fused(template, epilogue_nodes, *rendered)

    def _codegen_unfused(self, template_node: Any, epilogue_nodes: Sequence[Any]) -> None:
        """The GEMM alone, then each node of its epilogue as Inductor's own kernel. The
        scheduler counted the fused node's internal buffers as last used by it: they
        are freed once the epilogue nodes that read them have been emitted, not after
        the GEMM."""
        internal = {b for n in (template_node, *epilogue_nodes) for b in n.get_buffer_names()}
        deferred = self.scheduler.buffer_names_to_free & internal
        self.scheduler.buffer_names_to_free -= deferred
        super().codegen_template(template_node, [], [])
        for node in epilogue_nodes:
            self.codegen_node(node)
        self.scheduler.buffer_names_to_free |= deferred
        self.free_buffers_in_scheduler()

    def _render_fused(self, template: Any, epilogue_nodes: Sequence[Any]) -> tuple:
        """(translation, kernel, source) of our GEMM ``template`` with ``epilogue_nodes``
        fused into its epilogue: everything short of emitting it (no side effect on the graph)."""
        tr = decisions.translate_chain(self.scheduler, template, list(epilogue_nodes))
        source = decisions.render_source(template.node)
        assert source is not None  # gemm_template_node found our GEMM here
        candidate, inputs = source
        out = V.graph.get_buffer(tr.outputs[-1])
        fused = fuse(candidate, tr, STORE_DTYPES[out.get_dtype()])
        inputs += [V.graph.get_buffer(op.buffer) for op in tr.operands]
        kernel = codegen.template_kernel(gemm_template().kernel_type, inputs, out)
        src = kernel.render(gemm_template().template, candidate=fused).finalize_all()
        # Build now, in a worker: the generated module loads the kernel only after every
        # kernel of the graph is generated, so fused kernels compile in parallel meanwhile.
        compiler.build_async(fused.spec, default_cache(), config.compile_workers)
        return tr, kernel, src

    def _emit_fused(self, template: Any, epilogue_nodes: Sequence[Any], tr: Any, kernel: Any, src: str) -> None:
        """Emit the rendered fused kernel into the graph's code and call it."""
        buffer = template.node
        # Never allocated: the GEMM's own output and the chain's intermediates, unless kept.
        V.graph.removed_buffers |= {buffer.get_name(), *tr.outputs[:-1]} - set(tr.kept)
        # Inductor's CuteDSL codegen (``CuteDSLScheduling.codegen_template``) takes no
        # epilogue and only a CuteDSLTemplateBuffer, which a MultiTemplateBuffer decided
        # for ours is not: the same steps, with our kernel, source and epilogue nodes.
        template.mark_run()
        for node in epilogue_nodes:
            node.mark_run()
        node_schedule = [template, *epilogue_nodes]
        with V.set_kernel_handler(kernel):
            kernel_name = self._cutedsl_scheduling.define_kernel(src, node_schedule)
        self.codegen_comment(node_schedule, kernel_name)
        kernel.call_kernel(kernel_name, buffer)
        self.free_buffers_in_scheduler()
        m, n, _ = decisions.mnl(template)
        fused_epilogues.append(
            {"gemm": buffer.get_name(), "size": [m, n], "ops": _aten_ops(epilogue_nodes), "kept": list(tr.kept)}
        )
