"""The entry point that Inductor-generated code calls.

A generated kernel module does, at import::

    _launch = launcher('<KernelSpec JSON>', scalars=(...))

which loads the kernel (memo, disk cache, or compile), and then, per call,
``_launch(a, b, out, *tensor_operands, stream=stream)``. Shapes and strides are
read from the tensors, so one module serves every size of a dynamic graph.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import torch

from ..kernels.epilogue import Epilogue
from .launch import get_gemm
from .spec import KernelSpec
from .support import pairs_reason


def operand_view(t: torch.Tensor, view, batch: int, m: int, n: int) -> torch.Tensor:
    """The (L, M, N) view an epilogue reads: ``view`` is None (broadcast ``t`` as it
    is) or ((stride_m, stride_n, stride_l), offset) from the translated indexing."""
    if view is None:
        return t
    (s_m, s_n, s_l), offset = view
    return t.as_strided((batch, m, n), (s_l, s_m, s_n), t.storage_offset() + offset)


def launcher(
    spec_json: str, scalars: Sequence[float] = (), views: Sequence = ()
) -> Callable[..., None]:
    """``scalars``: values of the epilogue's scalar operands, in declaration order;
    ``views``: per tensor operand, how to read it (see ``operand_view``)."""
    spec = KernelSpec.from_json(spec_json)
    kernel = get_gemm(spec)
    kinds = [op.is_tensor for op in spec.epilogue.operands]
    paired = [op.pairs for op in spec.epilogue.operands if op.is_tensor]
    fallback = functools.cache(lambda: get_gemm(unpaired(spec)))  # keyed and loaded once
    scalars = tuple(float(s) for s in scalars)
    views = tuple(views) or (None,) * sum(kinds)

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *tensors: torch.Tensor, stream: int
    ) -> None:
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b.shape[-1]
        ops = [operand_view(x, v, batch, m, n) for x, v in zip(tensors, views)]
        run = kernel
        if any(p and pairs_reason(x.expand(batch, m, n)) for p, x in zip(paired, ops)):
            run = fallback()
        t, s = iter(ops), iter(scalars)
        run(a, b, out, *(next(t) if is_tensor else next(s) for is_tensor in kinds), stream=stream)

    return launch


def unpaired(spec: KernelSpec) -> KernelSpec:
    """``spec`` reading every operand one element per load: what runs when a tensor
    does not meet a ``pairs`` declaration made from Inductor's layouts (a misaligned
    graph input, another size of a dynamic graph)."""
    epi = spec.epilogue
    ops = tuple(dataclasses.replace(op, pairs=False) for op in epi.operands)
    return dataclasses.replace(spec, epilogue=Epilogue(epi.name, epi.source, ops))
