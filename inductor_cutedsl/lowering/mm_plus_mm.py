"""``a @ b + c @ d`` as a GEMM and an addmm over its output where our kernel can take them.

With max-autotune, Inductor's post-grad patterns lower the sum of two matmuls of the
same shapes (in a training step, the input's gradient through two projections of one
input: k and v, gate and up) to ``tuned_mm_plus_mm``, whose choices are ATen's
``_mm_plus_mm`` (two cuBLAS calls, each with cuBLAS's host cost) and Triton's
``mm_plus_mm`` template; our candidates are not among them. Lowered as
``addmm(a @ b, c, d)``, each GEMM is autotuned with every backend's choices, ours
included: the second adds the first's output as a full-matrix C, in our epilogue,
Triton's or cuBLAS's (beta = 1). Where cuBLAS wins both GEMMs, they are the cuBLAS
calls of ATen's ``_mm_plus_mm``, but for one copy: out of place, ATen's ``addmm``
copies C into its output first, where ``_mm_plus_mm`` adds in place (docs/design.md has
the figures, and why the stock lowering is not taken back there). An ``add(mm, mm)``,
as Inductor lowers pairs of unequal shapes, would cost more: cuBLAS takes no epilogue,
so the add would be a third kernel and a second pass over the output.

The decision is made per pattern, on the IR: both products must be GEMMs our kernel
takes (dtype, device, layouts). Anything else, or a failure here, keeps Inductor's own
lowering (``errors.fallback``).
"""

from __future__ import annotations

import logging
from typing import Any

from .. import config
from ..compat import ir_access
from ..errors import Unsupported, fallback
from .gemm_choices import check_plain_gemm

log = logging.getLogger("inductor_cutedsl.lowering")

#: One record per pattern split in this process: the four operands' sizes (what the tests read).
splits: list[dict] = []


def split_reason(mats: tuple[Any, ...]) -> str | None:
    """Why ``a @ b + c @ d`` (IR nodes ``mats``) keeps Inductor's ``mm_plus_mm``; None
    where it is lowered as two GEMMs and an add: both GEMMs must be ones our kernel takes
    as their operands are laid out (``gemm_choices.check_plain_gemm``), or the split would
    only take Triton's template away."""
    if not config.enabled or not config.split_mm_plus_mm:
        return "split_mm_plus_mm is off"
    try:
        check_plain_gemm(mats[0], mats[1])
        check_plain_gemm(mats[2], mats[3])
    except Unsupported as exc:
        return str(exc)
    return None


def _split(mat1: Any, mat2: Any, mat3: Any, mat4: Any) -> Any:
    """``addmm(mat1 @ mat2, mat3, mat4)``: the second GEMM takes the first's output as C."""
    import torch
    from torch._inductor.lowering import lowerings

    aten = torch.ops.aten
    return lowerings[aten.addmm](lowerings[aten.mm](mat1, mat2), mat3, mat4)


def wrap(original: Any) -> Any:
    """``tuned_mm_plus_mm`` that splits the patterns ``split_reason`` allows."""

    def tuned_mm_plus_mm(mat1: Any, mat2: Any, mat3: Any, mat4: Any, *, layout: Any = None) -> Any:
        try:
            if layout is None:
                # Realized, as either lowering realizes them (``mm_args``): an operand that
                # is still a view of a computed value (a 3-D gradient reshaped to 2-D) has
                # no strides to check before.
                mat1, mat2, mat3, mat4 = (ir_access.realized(m) for m in (mat1, mat2, mat3, mat4))
            kept = "a layout was given" if layout is not None else split_reason((mat1, mat2, mat3, mat4))
        except Exception as exc:  # a bug of ours: Inductor's own lowering
            fallback("candidates", "mm_plus_mm", exc, log)
            kept = "failed"
        if kept is not None:
            log.debug("mm_plus_mm kept: %s", kept)
            return original(mat1, mat2, mat3, mat4, layout=layout)
        try:
            summed = _split(mat1, mat2, mat3, mat4)
        except Exception as exc:  # a bug of ours: Inductor's own lowering
            # GEMMs lowered before the failure have no reader and are dropped with the
            # graph's other dead buffers.
            fallback("lowering", "mm_plus_mm", exc, log)
            return original(mat1, mat2, mat3, mat4, layout=layout)
        splits.append({"sizes": [[ir_access.size_hint(s) for s in m.get_size()] for m in (mat1, mat2, mat3, mat4)]})
        return summed

    tuned_mm_plus_mm.splits_for_cutedsl = True  # type: ignore[attr-defined]
    return tuned_mm_plus_mm


def install() -> Any:
    """Wrap Inductor's ``tuned_mm_plus_mm`` (the post-grad pattern looks it up at each
    match); returns what ``restore`` needs, or None where nothing was changed."""
    from torch._inductor.kernel import mm_plus_mm

    original = getattr(mm_plus_mm, "tuned_mm_plus_mm", None)
    if original is None or getattr(original, "splits_for_cutedsl", False):
        return None
    mm_plus_mm.tuned_mm_plus_mm = wrap(original)
    return original


def restore(original: Any) -> None:
    if original is not None:
        from torch._inductor.kernel import mm_plus_mm

        mm_plus_mm.tuned_mm_plus_mm = original
