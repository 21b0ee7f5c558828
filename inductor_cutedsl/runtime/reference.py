"""A kernel spec computed with torch operations: the reference of every kernel we build.

``epilogue(A @ B, m, n, l, ops)`` is evaluated on whole (L, M, N) tensors: the epilogue's
own source, with the names it sees (``kernels.epilogue_math.NAMESPACE``) backed by torch
instead of the DSL. The DSL helpers themselves (``gelu_tanh``, ``sigmoid``, ``select``,
``round_to``, ...) run here as they are written, bound to torch-backed ``cute``,
``cutlass`` and ``Float32``: the formulas a kernel compiles are the ones this module
evaluates, so comparing it with torch eager on CPU checks the kernel's arithmetic
without a GPU.

Two users:
- the launcher's fallback (``generated.launcher``): a kernel that fails to build, to
  load or at its first launch is replaced by this computation, which gives what stock
  Inductor's kernels give up to rounding, so a user's compiled program still runs;
- the tests, in float64 (``namespace(torch.float64)``), against torch eager.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Sequence
from typing import Any

import torch

from ..kernels.epilogue import Epilogue
from .spec import KernelSpec
from .support import operand_args

#: The DSL's narrow float types, as ``round_to`` names them.
NARROW = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float8_e4m3fn": torch.float8_e4m3fn}
#: The largest finite e4m3 value: a cast to it saturates, as the kernel's conversion does.
E4M3_MAX = 448.0


def _kw_free(fn):
    """``fn`` taking and ignoring the DSL's keyword options (``fastmath=``)."""
    return lambda *args, **options: fn(*args)


def _math(dtype: torch.dtype) -> types.SimpleNamespace:
    def tensor(x):
        return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=dtype)

    unary = {
        name: getattr(torch, name)
        for name in (
            "exp",
            "exp2",
            "expm1",
            "log",
            "log1p",
            "log2",
            "erf",
            "rsqrt",
            "sqrt",
            "abs",
            "sin",
            "cos",
            "tanh",
        )
    }
    ns = {name: _kw_free(lambda x, fn=fn: fn(tensor(x))) for name, fn in unary.items()}
    ns["max"] = _kw_free(lambda a, b: torch.maximum(tensor(a), tensor(b)))
    ns["min"] = _kw_free(lambda a, b: torch.minimum(tensor(a), tensor(b)))
    ns["pow"] = _kw_free(lambda a, b: torch.pow(tensor(a), tensor(b)))
    return types.SimpleNamespace(**ns)


def saturate(x: torch.Tensor, narrow: torch.dtype) -> torch.Tensor:
    """``x`` rounded to ``narrow`` as the kernel converts (fp8 saturates at +-448)."""
    if narrow == torch.float8_e4m3fn:
        x = x.clamp(-E4M3_MAX, E4M3_MAX)
    return x.to(narrow)


@functools.cache
def namespace(dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The names an epilogue source sees, computing on torch tensors of ``dtype``: the
    DSL helpers of ``kernels.epilogue_math`` rebound to torch-backed ``cute``,
    ``cutlass``, ``Float32`` and ``Int32``. ``round_to`` alone is torch's own cast (the
    DSL's converts through DSL types that have no torch counterpart to bind)."""
    from ..kernels import epilogue_math

    def as_float(x):
        return x.to(dtype) if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=dtype)

    scope: dict[str, Any] = dict(vars(epilogue_math))
    scope.update(
        cute=types.SimpleNamespace(math=_math(dtype), arch=types.SimpleNamespace(rcp_approx=lambda x: 1.0 / x)),
        cutlass=types.SimpleNamespace(select_=lambda c, a, b: torch.where(c, as_float(a), as_float(b))),
        Float32=as_float,
        Int32=int,
    )
    for name in epilogue_math.NAMESPACE:
        fn = getattr(epilogue_math, name)
        if isinstance(fn, types.FunctionType):
            scope[name] = types.FunctionType(fn.__code__, scope, name, fn.__defaults__, fn.__closure__)
    scope["round_to"] = lambda x, narrow: saturate(as_float(x), NARROW[narrow]).to(dtype)
    return {name: scope[name] for name in epilogue_math.NAMESPACE}


def evaluate(
    epilogue: Epilogue, acc: Any, m: Any, n: Any, l: Any, ops: Sequence[Any], dtype: torch.dtype = torch.float32
) -> Any:
    """The epilogue's result for accumulator ``acc`` (a tensor, or a (gate, up) pair),
    coordinates ``m, n, l`` and loaded operands ``ops``, computed in ``dtype``."""
    if epilogue.source is None:  # the identity
        return acc
    scope = dict(namespace(dtype))
    exec(compile(epilogue.source, f"<epilogue {epilogue.name}>", "exec"), scope)
    return scope["epilogue"](acc, m, n, l, list(ops))


def _lmn(t: torch.Tensor, args: tuple[int, int, int, int], shape: tuple[int, int, int]) -> torch.Tensor:
    """The (L, M, N) view of ``t`` that operand arguments ``args`` (``operand_args``) address."""
    address, s_m, s_n, s_l = args
    offset = t.storage_offset() + (address - t.data_ptr()) // t.element_size()
    return t.as_strided(shape, (s_l, s_m, s_n), offset)


def run(
    spec: KernelSpec,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    operands: Sequence[Any],
    scalars: Sequence[float] = (),
    views: Sequence[Any] = (),
    out_view: Any = None,
    b_up: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Write into ``out`` what the kernel of ``spec`` would, given the launch's tensors:
    ``operands`` are the epilogue's tensor operands in order (scalars come from
    ``scalars``), read through ``views`` (see ``generated.launcher``); ``out_view`` as
    ``CompiledGemm.launch`` takes it."""
    batch = a.shape[0] if a.dim() == 3 else 1
    m, n = a.shape[-2], b.shape[-1]
    shape = (batch, m, n)
    products = [b] if not spec.dual else [b, b_up]
    accs = [torch.matmul(a.to(dtype), w.to(dtype)).reshape(shape) for w in products]
    acc = accs[0] if not spec.dual else tuple(accs)
    views = tuple(views) or (None,) * len(operands)
    tensors, values, outputs = iter(zip(operands, views)), [], []
    scalar_values = iter(scalars)
    for decl in spec.epilogue.operands:
        if not decl.is_tensor:
            values.append(float(next(scalar_values)))
            continue
        tensor, view = next(tensors)
        lmn = _lmn(tensor, operand_args(tensor, view, batch, m, n), shape)
        if decl.is_output:
            outputs.append(lmn)
        else:
            values.append(lmn.to(dtype))
    coords = (
        torch.arange(m, device=a.device).view(1, m, 1),
        torch.arange(n, device=a.device).view(1, 1, n),
        torch.arange(batch, device=a.device).view(batch, 1, 1),
    )
    result = evaluate(spec.epilogue, acc, *coords, values, dtype)
    results = list(result) if outputs else [result]
    if out_view is None:
        target = out.view(shape) if out.dim() == 2 else out
    else:
        (s_m, s_n, s_l), offset = out_view
        target = out.as_strided(shape, (s_l, s_m, s_n), out.storage_offset() + offset)
    for dest, value in zip([target, *outputs], results):
        value = torch.as_tensor(value, dtype=dtype, device=a.device).broadcast_to(shape)
        dest.copy_(saturate(value, dest.dtype) if dest.dtype in NARROW.values() else value)
