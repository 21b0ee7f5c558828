"""The entry point that Inductor-generated code calls.

A generated kernel module does, at import::

    from inductor_cutedsl.runtime.generated import launcher, KernelSpec, GemmConfig, Epilogue, EpilogueOperand
    _launch = launcher(KernelSpec(...), scalars=(...), views=(...), out_view=...)

which loads the kernel (memo, disk cache, or compile), and then, per call,
``_launch(a, b, out, *tensor_operands, stream=stream)`` (a dual kernel's up weight as
``b_up=``). Shapes and strides are
read from the tensors, so one module serves every size of a dynamic graph. The spec
is written as the dataclasses' own constructor calls (``lowering.candidate``), whose
names this module exports.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import torch

from ..kernels.config import GemmConfig
from ..kernels.epilogue import Epilogue, EpilogueOperand
from .launch import get_gemm
from .spec import KernelSpec
from .support import declaration_reason, declared_args

__all__ = ["launcher", "KernelSpec", "GemmConfig", "Epilogue", "EpilogueOperand"]


def launcher(
    spec: KernelSpec, scalars: Sequence[float] = (), views: Sequence = (), out_view=None
) -> Callable[..., None]:
    """``scalars``: values of the epilogue's scalar operands, in declaration order;
    ``views``: per tensor operand, how to read it (see ``operand_args``); ``out_view``:
    how the output is written, where not as the GEMM's own (see ``CompiledGemm.launch``)."""
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
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *tensors: torch.Tensor, stream: int,
        b_up: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
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
        run.launch(a, b, out, values, stream, out_view, b_up=b_up)

    return launch


def unpaired(spec: KernelSpec) -> KernelSpec:
    """``spec`` reading every operand one element per global load: what runs when a
    tensor does not meet a ``pairs`` or ``staged`` declaration made from Inductor's
    layouts (a misaligned graph input, another size of a dynamic graph)."""
    epi = spec.epilogue
    ops = tuple(dataclasses.replace(op, pairs=False, staged=False) for op in epi.operands)
    return dataclasses.replace(spec, epilogue=Epilogue(epi.name, epi.source, ops))
