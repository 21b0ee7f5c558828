"""The entry point that Inductor-generated code calls.

A generated kernel module does, at import::

    _launch = launcher('<KernelSpec JSON>', scalars=(...))

which loads the kernel (memo, disk cache, or compile), and then, per call,
``_launch(a, b, out, *tensor_operands, stream=stream)``. Shapes and strides are
read from the tensors, so one module serves every size of a dynamic graph.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from .launch import get_gemm
from .spec import KernelSpec


def launcher(spec_json: str, scalars: Sequence[float] = ()) -> Callable[..., None]:
    """``scalars`` are the values of the epilogue's scalar operands, in declaration order."""
    spec = KernelSpec.from_json(spec_json)
    kernel = get_gemm(spec)
    kinds = [op.is_tensor for op in spec.epilogue.operands]
    scalars = tuple(float(s) for s in scalars)

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *tensors: torch.Tensor, stream: int
    ) -> None:
        t, s = iter(tensors), iter(scalars)
        kernel(a, b, out, *(next(t) if is_tensor else next(s) for is_tensor in kinds), stream=stream)

    return launch
