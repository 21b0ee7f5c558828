"""Composing a GEMM's own epilogue (bias, alpha/beta) with a translated pointwise chain,
and the template arguments of the fused kernel."""

from __future__ import annotations

import dataclasses

import torch

from .. import config
from ..kernels.config import GemmConfig
from ..kernels.epilogue import Epilogue
from ..lowering.candidate import GemmCandidate
from ..runtime.spec import KernelSpec
from ..runtime.support import staged_reason
from .epilogue_translation import OperandRef, Translation

_HEADER = "def epilogue("


def _renamed(source: str | None, name: str) -> str:
    if source is None or not source.startswith(_HEADER):
        raise ValueError("an epilogue source starts with `def epilogue(`")
    return f"def {name}(" + source[len(_HEADER) :]


def compose(base: Epilogue, gemm_out_dtype: str, fused: Epilogue, name: str) -> Epilogue:
    """``fused`` applied to what the GEMM (with ``base``) would have stored.

    Unfused, the pointwise chain reads the GEMM's output buffer, so the
    accumulator is rounded to that buffer's dtype first: the fused kernel computes
    exactly what the unfused pair did.
    """
    k = len(base.operands)
    lines = [] if base.is_identity else [_renamed(base.source, "_gemm_epilogue")]
    lines.append(_renamed(fused.source, "_fused_epilogue"))
    lines.append("def epilogue(acc, m, n, l, ops):")
    if not base.is_identity:
        lines.append(f"    acc = _gemm_epilogue(acc, m, n, l, ops[:{k}])")
    if gemm_out_dtype != "float32":
        lines.append(f"    acc = round_to(acc, {gemm_out_dtype!r})")
    lines.append(f"    return _fused_epilogue(acc, m, n, l, ops[{k}:])")
    return Epilogue(name, "\n".join(lines) + "\n", base.operands + fused.operands)


def _stageable(op: OperandRef) -> bool:
    """Whether ``op``'s layout allows TMA loads, as far as the graph shows: 16-bit and
    passing the launch-time rule with its offset for an address (sizes above 1: a
    broadcast shows in the strides). The launcher checks the tensor itself and falls
    back to global loads."""
    size = op.dtype.itemsize
    return size == 2 and staged_reason((op.offset * size, *op.strides), 1, 2, 2, size) is None


def stageable_input(epi: Epilogue, first_fused: int, tr: Translation) -> int | None:
    """Index in ``epi.operands`` of the first fused M x N input that TMA could stage, if
    ``config.staged_operands`` is on and there is one."""
    if not config.staged_operands:
        return None
    return next(
        (
            first_fused + i
            for i, op in enumerate(tr.operands)
            if epi.operands[first_fused + i].kind == "full" and _stageable(op)
        ),
        None,
    )


def stages(cfg: GemmConfig, in_dtype: torch.dtype, out_dtype: torch.dtype) -> bool:
    """Whether a kernel of ``cfg`` writing ``out_dtype`` can stage an input of
    ``in_dtype`` (in the store buffers when the two are the same)."""
    return cfg.stages_operands(out_dtype.itemsize, shared=in_dtype == out_dtype)


def staged(epi: Epilogue, first_fused: int, tr: Translation, spec: KernelSpec) -> Epilogue:
    """``epi`` with its first stageable fused input (``stageable_input``) declared
    ``staged`` (instead of paired), where the kernel of ``spec`` can stage one (a dual
    kernel stages none: its epilogue reads both accumulator halves)."""
    if spec.dual:
        return epi
    index = stageable_input(epi, first_fused, tr)
    if index is None or not stages(spec.config, tr.operands[index - first_fused].dtype, getattr(torch, spec.out_dtype)):
        return epi
    ops = list(epi.operands)
    ops[index] = dataclasses.replace(ops[index], pairs=False, staged=True)
    return dataclasses.replace(epi, operands=tuple(ops))


def fuse(candidate: GemmCandidate, tr: Translation, out_dtype: str) -> GemmCandidate:
    """``candidate`` with the translated chain ``tr`` fused in: the chain's operands
    become extra kernel inputs ``e0, e1, ...`` read through their views, and its
    result, of ``out_dtype``, the kernel's output, written through its view."""
    base = candidate.spec
    epi = compose(base.epilogue, base.out_dtype, tr.epilogue, f"{base.epilogue.name}+{tr.epilogue.name}")
    spec = dataclasses.replace(base, out_dtype=out_dtype)
    spec = dataclasses.replace(spec, epilogue=staged(epi, len(base.epilogue.operands), tr, spec))
    extra = tuple(f"e{i}" for i in range(len(tr.operands)))
    return dataclasses.replace(
        candidate,
        spec=spec,
        input_names=candidate.input_names + extra,
        operand_args=candidate.operand_args + extra,
        views=candidate.views + tuple((op.strides, op.offset) for op in tr.operands),
        out_view=tr.out_view,
    )
