"""Replay Inductor scheduler nodes through the epilogue translator.

A pointwise node iterates over the GEMM's output, but Inductor may have merged
its loops (``[M*N]`` for a contiguous chain, ``[L*M, N]``, ...). Each loop
variable is rewritten as the linear combination of (l, m, n) it stands for, and
index expressions are simplified under the coordinates' ranges, so that
``ModularIndexing(N*m + n, 1, N)`` becomes ``n`` and only provably linear
accesses survive.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from .. import _compat
from .epilogue_translation import EpilogueTranslator, Translation, finish

M_SYM, N_SYM, L_SYM = sympy.symbols("cutedsl_m cutedsl_n cutedsl_l", integer=True, nonnegative=True)


def loop_coordinates(var_sizes: Sequence[int], mnl_sizes: tuple[int, int, int]) -> list[sympy.Expr]:
    """(l, m, n) expression of each loop variable, when the loops merge [L, M, N] in order."""
    big_m, big_n, big_l = mnl_sizes
    dims = [(L_SYM, big_l), (M_SYM, big_m), (N_SYM, big_n)]
    dims = [d for d in dims if d[1] != 1]
    exprs: list[sympy.Expr] = []
    for size in var_sizes:
        group, product = [], 1
        while dims and product < size:
            sym, extent = dims.pop(0)
            group.append((sym, extent))
            product *= extent
        if product != size:
            raise NotImplementedError(f"loops {list(var_sizes)} do not tile the GEMM output {mnl_sizes}")
        expr, stride = sympy.Integer(0), 1
        for sym, extent in reversed(group):
            expr, stride = expr + sym * stride, stride * extent
        exprs.append(expr)
    if dims:
        raise NotImplementedError(f"loops {list(var_sizes)} cover less than the GEMM output {mnl_sizes}")
    return exprs


def translate_nodes(
    acc_buffer: str,
    mnl_sizes: tuple[int, int, int],
    nodes: Sequence[Any],
    dtype_of: Callable[[str], torch.dtype],
    name: str = "fused",
    keep_if: Callable[[str], bool] = lambda buffer: False,
) -> Translation:
    """Translate a chain of pointwise scheduler nodes consuming ``acc_buffer``.

    ``keep_if(buffer)``: whether the GEMM's output or an intermediate of the chain
    must still be written (something outside the chain reads it).
    """
    big_m, big_n, big_l = mnl_sizes
    ranges = {M_SYM: big_m, N_SYM: big_n, L_SYM: big_l}
    tr = EpilogueTranslator(
        acc_buffer,
        (M_SYM, N_SYM, L_SYM),
        mnl_sizes,
        dtype_of,
        simplify=lambda e: _compat.simplify_with_ranges(e, ranges),
    )
    for node in nodes:
        var_sizes, reduce_sizes = _compat.node_ranges(node)
        if reduce_sizes:
            raise NotImplementedError(f"{node.get_name()} is a reduction")
        sizes = [_compat.size_hint(s) for s in var_sizes]
        _compat.replay_node(node, loop_coordinates(sizes, mnl_sizes), tr)
    keep = tuple(b for b in (acc_buffer, *tr.outputs[:-1]) if keep_if(b))
    return finish(tr, name, keep)
