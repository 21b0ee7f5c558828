"""Composing a GEMM's own epilogue (bias, alpha/beta) with a translated pointwise chain."""
from __future__ import annotations

from ..kernels.epilogue import Epilogue

_HEADER = "def epilogue("


def _renamed(source: str, name: str) -> str:
    if not source.startswith(_HEADER):
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
