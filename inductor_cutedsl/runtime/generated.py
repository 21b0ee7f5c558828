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
from .support import declaration_reason, declared_args


def launcher(
    spec_json: str, scalars: Sequence[float] = (), views: Sequence = ()
) -> Callable[..., None]:
    """``scalars``: values of the epilogue's scalar operands, in declaration order;
    ``views``: per tensor operand, how to read it (see ``operand_args``)."""
    spec = KernelSpec.from_json(spec_json)
    kernel = get_gemm(spec)
    fallback = functools.cache(lambda: get_gemm(unpaired(spec)))  # keyed and loaded once
    scalars = tuple(float(s) for s in scalars)
    views = tuple(views) or (None,) * sum(op.is_tensor for op in spec.epilogue.operands)
    # Per operand: (is a tensor, its declaration, its view or its scalar value).
    t_views, s_values = iter(views), iter(scalars)
    plan = tuple(
        (True, op, next(t_views)) if op.is_tensor else (False, op, next(s_values))
        for op in spec.epilogue.operands
    )

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *tensors: torch.Tensor, stream: int
    ) -> None:
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b.shape[-1]
        run, values, t = kernel, [], iter(tensors)
        for is_tensor, op, what in plan:
            if not is_tensor:
                values.append(what)
                continue
            tensor = next(t)
            args = declared_args(op, tensor, what, batch, m, n)
            if declaration_reason(op, args, batch, m, n, tensor.element_size()):
                run = fallback()
            values += args
        run.launch(a, b, out, values, stream)

    return launch


def unpaired(spec: KernelSpec) -> KernelSpec:
    """``spec`` reading every operand one element per global load: what runs when a
    tensor does not meet a ``pairs`` or ``staged`` declaration made from Inductor's
    layouts (a misaligned graph input, another size of a dynamic graph)."""
    epi = spec.epilogue
    ops = tuple(dataclasses.replace(op, pairs=False, staged=False) for op in epi.operands)
    return dataclasses.replace(spec, epilogue=Epilogue(epi.name, epi.source, ops))
