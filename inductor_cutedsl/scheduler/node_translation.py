"""Replay Inductor scheduler nodes through the epilogue translator.

A pointwise node iterates over the GEMM's output, but its loops need not be the
output's (L, M, N): Inductor merges contiguous dims (``[M*N]``, ``[L*M, N]``) and a
model's consumer iterates the (B, T, N) view of a (B*T, N) GEMM, splitting M. The
loops and the output's dims are cut into common "atoms" (the coarsest refinement of
both as row-major factorizations); each loop variable is replayed as the combination
of atoms it spans, so every index comes out as a polynomial in the atoms, which
``Coordinates.linear`` maps back to (m, n, l) or refuses. Loops whose extents admit
no common refinement do not tile the output and are refused.

The atoms only say how the loops could cover the output in row-major order; the
translator's rules (the GEMM output read element-for-element by every node, or a
buffer of the chain read as it was stored) prove that they do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from ..compat import ir_access
from ..errors import Unsupported
from .epilogue_translation import Coordinates, EpilogueTranslator, Translation, finish

M_SYM, N_SYM, L_SYM = sympy.symbols("cutedsl_m cutedsl_n cutedsl_l", integer=True, nonnegative=True)


def _cuts(sizes: Sequence[int]) -> list[int]:
    cuts, product = [], 1
    for size in sizes:
        product *= size
        cuts.append(product)
    return cuts


def loop_view(var_sizes: Sequence[int], mnl_sizes: tuple[int, int, int]) -> tuple[list[sympy.Expr], Coordinates]:
    """(expression of each loop variable over atoms, the atoms as output coordinates),
    when the loops, outermost first, cover the output [L, M, N] in row-major order."""
    big_m, big_n, big_l = mnl_sizes
    dims = [(sym, extent) for sym, extent in ((L_SYM, big_l), (M_SYM, big_m), (N_SYM, big_n)) if extent != 1]
    loops = [size for size in var_sizes if size != 1]
    covered, total = math.prod(loops), math.prod(e for _, e in dims)
    if covered < total:
        raise Unsupported(f"loops {list(var_sizes)} cover less than the GEMM output {mnl_sizes}", "loops")
    if covered > total:
        raise Unsupported(f"loops {list(var_sizes)} do not tile the GEMM output {mnl_sizes}", "loops")
    cuts = sorted(set(_cuts(loops)) | set(_cuts([e for _, e in dims])))
    extents = [c // p for p, c in zip([1, *cuts], cuts)]
    if any(c % p for p, c in zip([1, *cuts], cuts)):
        raise Unsupported(f"loops {list(var_sizes)} do not tile the GEMM output {mnl_sizes}", "loops")

    # A dim made of a single atom keeps its own symbol; a split one gets one per part.
    atoms: list[tuple[sympy.Symbol, int]] = []
    dim_atoms: dict[sympy.Symbol, list[tuple[sympy.Symbol, int]]] = {}
    cut_i = 0
    for sym, extent in dims:
        parts = []
        product = 1
        while product < extent:
            parts.append(extents[cut_i])
            product *= extents[cut_i]
            cut_i += 1
        names = (
            [sym]
            if len(parts) == 1
            else [sympy.Symbol(f"{sym.name}{i}", integer=True, nonnegative=True) for i in range(len(parts))]
        )
        atoms += list(zip(names, parts))
        weights = [math.prod(parts[i + 1 :]) for i in range(len(parts))]
        dim_atoms[sym] = list(zip(names, weights))

    exprs: list[sympy.Expr] = []
    next_atom = 0
    for size in var_sizes:
        if size == 1:
            exprs.append(sympy.Integer(0))
            continue
        group, product = [], 1
        while product < size:
            group.append(atoms[next_atom])
            product *= atoms[next_atom][1]
            next_atom += 1
        expr, stride = sympy.Integer(0), 1
        for sym, extent in reversed(group):
            expr, stride = expr + sym * stride, stride * extent
        exprs.append(expr)
    coords = Coordinates(
        tuple(atoms),
        tuple(tuple(dim_atoms.get(sym, ())) for sym in (M_SYM, N_SYM, L_SYM)),
        ir_access.simplify_with_ranges,
    )
    return exprs, coords


def loop_coordinates(var_sizes: Sequence[int], mnl_sizes: tuple[int, int, int]) -> list[sympy.Expr]:
    """Each loop variable's expression over the atoms (see ``loop_view``)."""
    return loop_view(var_sizes, mnl_sizes)[0]


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
    tr = EpilogueTranslator(acc_buffer, (M_SYM, N_SYM, L_SYM), mnl_sizes, dtype_of)
    for node in nodes:
        var_sizes, reduce_sizes = ir_access.node_ranges(node)
        if reduce_sizes:
            raise Unsupported(f"{node.get_name()} is a reduction", "reduction")
        exprs, coords = loop_view([ir_access.size_hint(s) for s in var_sizes], mnl_sizes)
        tr.begin_node(node.get_name(), coords)
        ir_access.replay_node(node, exprs, tr)
        tr.end_node()
    keep = tuple(b for b in (acc_buffer, *tr.outputs[:-1]) if keep_if(b))
    return finish(tr, name, keep)
