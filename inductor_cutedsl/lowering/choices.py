"""Inductor's choices handler with CuteDSL GEMM candidates."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from .. import config
from ..compat import autotune, ir_access, settings
from ..compat.lazy import InductorChoices
from ..config import BACKEND_TOKEN
from ..errors import fallback
from .gemm_choices import GEMM_OPS, SCALED_OP, gemm_choices

log = logging.getLogger("inductor_cutedsl.lowering")


class CuteDSLChoices(InductorChoices):
    """Inductor's default heuristics, plus CuteDSL GEMM candidates."""

    def uuid(self) -> tuple:
        """Part of Inductor's compile cache key (newer Inductor refuses a choices class
        without it): which of our classes, our source and our settings."""
        return (f"{type(self).__module__}.{type(self).__qualname__}", *config.cache_key())

    def get_template_configs(self, kernel_inputs, templates, op_name, kwarg_overrides=None):
        # A thread's handler made while we were on, asked after disable() (or under other
        # settings): the configured handler answers, and serves the thread from now on.
        handler = settings.sync_thread_settings()
        if handler is not None and handler is not self:
            return handler.get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        try:
            ours, offered = _ours_once(kernel_inputs, op_name)
        except Exception as exc:  # a bug of ours: this GEMM gets stock's choices only
            fallback("candidates", op_name, exc, log)
            ours, offered = [], 0
        _asking.prune = bool(offered) and config.prune_triton
        try:
            choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        finally:
            _asking.prune = False
        if not choices and not offered and op_name in (*GEMM_OPS, "mm_plus_mm") and _only_backend_is_ours():
            # CUTEDSL is the only backend and this GEMM was refused: compile it with ATen
            # rather than leave Inductor with no choice at all. With another backend on,
            # no choice stays an error, as on stock Inductor.
            log.info("%s falls back to ATen (the only other backend is off)", op_name)
            aten, overrides = _aten_fallback(kernel_inputs, op_name)
            choices = super().get_template_configs(kernel_inputs, [aten], op_name, kwarg_overrides=overrides)
        return [*choices, *ours]

    def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name, kwarg_overrides=None):
        choices = super()._finalize_template_configs(
            template_choices, kernel_inputs, templates, op_name, kwarg_overrides
        )
        if not getattr(_asking, "prune", False):
            return choices
        try:
            return deepest_k_only(choices)
        except Exception as exc:  # a bug of ours: Triton keeps all its configs
            fallback("candidates", f"{op_name} (pruning Triton's configs)", exc, log)
            return choices


#: Per thread: whether the GEMM being asked for has our candidates (``prune_triton``).
_asking = threading.local()
#: The Triton template whose configs are pruned beside ours (mm and addmm use it).
PRUNED_TEMPLATE = "triton::mm"


def deepest_k_only(choices: list) -> list:
    """``choices`` (Inductor's KernelTemplateChoice objects, before they are made into
    callers) less the configs of Triton's mm template whose K block is not the deepest
    among them; every other template's choices as they are. Beside our candidates, every
    Triton win in the measured autotunings was such a config (docs/findings.md), and each
    choice dropped is a Triton compile and a benchmark saved."""

    def block_k(ktc) -> int | None:
        if getattr(ktc.template, "uid", None) != PRUNED_TEMPLATE:
            return None
        value = ktc.params.to_kwargs().get("BLOCK_K")
        return int(value) if value is not None else None

    depths = [block_k(c) for c in choices]
    deepest = max((d for d in depths if d is not None), default=None)
    return [c for c, d in zip(choices, depths) if d is None or d == deepest]


#: Per graph being lowered: GEMM -> how many CuteDSL choices it was offered. Newer
#: Inductor asks for one GEMM's choices several times (torch 2.14: ATen's with addmm's
#: bias as given, then the templates' with it expanded); ours join the first ask only,
#: or Inductor would time each of them once per ask. A GEMM is told apart by the FX
#: node being lowered and its two operand nodes (the asks share them; one FX node may
#: lower several GEMMs, as the gated MLP's alternative does).
_offered: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()


def _ours_once(kernel_inputs, op_name: str) -> tuple[list, int]:
    """(our choices to add to this ask, how many this GEMM has been offered in all)."""
    site = ir_access.lowering_site()
    nodes: Sequence[Any] = kernel_inputs.nodes() if site is not None else ()
    if len(nodes) < 2:  # not inside a graph's lowering (or no operands): nothing to repeat
        ours = gemm_choices(kernel_inputs, op_name)
        return ours, len(ours)
    assert site is not None  # nodes are read only inside a lowering
    graph, fx_node = site
    a, b = nodes[:2] if op_name == SCALED_OP else nodes[-2:]
    key = (fx_node, op_name, id(a), id(b))
    seen = _offered.setdefault(graph, {})
    if key in seen:
        return [], seen[key]
    ours = gemm_choices(kernel_inputs, op_name)
    seen[key] = len(ours)
    return ours, len(ours)


def _only_backend_is_ours() -> bool:
    return settings.autotune_backend_tokens() == [BACKEND_TOKEN]


def _aten_fallback(kernel_inputs, op_name: str):
    """ATen's choice for this GEMM and its kwargs: an output dtype other than the
    inputs' (``torch.bmm(a, b, out_dtype=...)``) needs ATen's ``*_dtype`` kernel."""
    out_dtype = ir_access.kernel_out_dtype(kernel_inputs)
    if out_dtype is not None and op_name in ("mm", "bmm"):
        choice = autotune.aten_dtype_choice(op_name)
        return choice, {choice.uid: {"out_dtype": out_dtype}}
    return autotune.aten_choice(op_name), None
