"""Which inputs the kernel can take: every refusal comes with its reason.

A GEMM the kernel cannot compute exactly as asked is refused here (and then
offered no CuteDSL candidate); it is never run on a guess.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from ..arch import SM_MAJOR, SM_MINOR
from ..kernels.epilogue import Epilogue, EpilogueOperand
from .spec import ALIGNMENT

AB_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
# 8-bit operands (both K-major; scales are the epilogue's business).
FP8_DTYPES = {torch.float8_e4m3fn: "float8_e4m3fn"}
KERNEL_AB_DTYPES = {**AB_DTYPES, **FP8_DTYPES}
OUT_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
# What the kernel's output D may be: an fp8 D is converted with saturation to +-448
# (as Triton's conversion, so a fused cast computes what stock Inductor's kernel does).
# Epilogue operands and kept outputs stay OUT_DTYPES.
STORE_DTYPES = {**OUT_DTYPES, **FP8_DTYPES}


def _aligned(nbytes: int) -> bool:
    return nbytes % ALIGNMENT == 0


def row_width_reason(n: int, dtype: torch.dtype) -> str | None:
    """Why an output N wide cannot be stored, if it cannot. The kernel's TMA store
    writes whole 16-byte units: a row that ends inside one (N x item size not a
    multiple of 16 bytes) would get the rest of that unit written past N (measured on
    the H200: columns N up to the next 16 bytes, into a padded row's padding, a
    concatenation's neighbour, or past the end of the storage)."""
    if not _aligned(n * dtype.itemsize):
        return (
            f"output rows of {n} x {dtype} are {n * dtype.itemsize} bytes, not a multiple of "
            f"{ALIGNMENT} (the TMA store would write past column {n})"
        )
    return None


def _contiguous_mode(t: torch.Tensor) -> str | None:
    """'last' if the matrix (..., R, C) is row-major, 'first' if column-major, else None."""
    rows, cols = t.size(-2), t.size(-1)
    if t.stride(-1) == 1 and (rows == 1 or t.stride(-2) >= cols):
        return "last"
    if t.stride(-2) == 1 and (cols == 1 or t.stride(-1) >= rows):
        return "first"
    return None


# Kernel operand majors by which matrix mode is contiguous.
A_MAJOR = {"last": "k", "first": "m"}  # A is (..., M, K)
B_MAJOR = {"last": "n", "first": "k"}  # B is (..., K, N)


def a_major(a: torch.Tensor) -> str | None:
    """'k' if A (..., M, K) is row-major, 'm' if column-major, None if neither."""
    mode = _contiguous_mode(a)
    return A_MAJOR[mode] if mode is not None else None


def b_major(b: torch.Tensor) -> str | None:
    """'n' if B (..., K, N) is row-major, 'k' if column-major, None if neither."""
    mode = _contiguous_mode(b)
    return B_MAJOR[mode] if mode is not None else None


def leading_stride(t: torch.Tensor, major_is_last: bool) -> int:
    """Stride of the non-contiguous matrix mode."""
    return t.stride(-2) if major_is_last else t.stride(-1)


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError, and a ValueError as every refusal
    of ``runtime.gemm`` and ``runtime.gated_gemm`` is."""


def type_reason(name: str, value, want: type | tuple[type, ...], optional: bool = False) -> str | None:
    """Why ``value``, the argument ``name``, is not a ``want``, if it is not."""
    if isinstance(value, want) or (optional and value is None):
        return None
    spoken = {torch.Tensor: "tensor", torch.dtype: "torch.dtype"}
    names = " or ".join(spoken.get(t, t.__name__) for t in (want if isinstance(want, tuple) else (want,)))
    return f"{name} is a {type(value).__name__}, not a {names}" + (" (or None)" if optional else "")


def device_reason(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"tensor on {device.type}, not a CUDA device"
    cap = torch.cuda.get_device_capability(device)
    if cap != (SM_MAJOR, SM_MINOR):
        return f"device is sm_{cap[0]}{cap[1]}, kernel is built for sm_90a only"
    return None


def _named_device_reason(name: str, device: torch.device) -> str | None:
    """``device_reason`` naming the argument ``name``."""
    why = device_reason(device)
    return f"{name}: {why}" if why else None


def _alignment_reason(name: str, t: torch.Tensor, ld: int) -> str | None:
    """TMA needs 16-byte aligned base, leading stride and batch stride."""
    es = t.element_size()
    if not _aligned(t.data_ptr()):
        return f"{name} base pointer {t.data_ptr():#x} is not {ALIGNMENT}-byte aligned"
    if not _aligned(ld * es):
        return f"{name} leading stride {ld} is not a multiple of {ALIGNMENT} bytes"
    if t.dim() == 3 and t.size(0) > 1:
        if t.stride(0) == 0:
            return f"{name} has a broadcast batch (batch stride 0)"
        if not _aligned(t.stride(0) * es):
            return f"{name} batch stride {t.stride(0)} is not a multiple of {ALIGNMENT} bytes"
    return None


def gemm_reason(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, out_dtype=None, *, b_name: str = "b"
) -> str | None:
    """None if ``out = a @ b`` (2-D, or 3-D batched) can run, else why not, naming the
    argument at fault (``b_name``: what the caller calls ``b``)."""
    for name, value in (("a", a), (b_name, b)):
        if why := type_reason(name, value, torch.Tensor):
            return why
    if why := type_reason("out", out, torch.Tensor, optional=True):
        return why
    if why := type_reason("out_dtype", out_dtype, torch.dtype, optional=True):
        return why
    if a.dim() not in (2, 3) or b.dim() != a.dim():
        return f"unsupported ranks: a is {a.dim()}-D, {b_name} is {b.dim()}-D (want both 2-D or both 3-D)"
    if a.dim() == 3 and a.size(0) != b.size(0):
        return f"batch sizes differ (a {a.size(0)}, {b_name} {b.size(0)})"
    if a.size(-1) != b.size(-2):
        return f"inner sizes differ (a has K={a.size(-1)} columns, {b_name} has {b.size(-2)} rows)"
    if min(a.size(-2), a.size(-1), b.size(-1)) == 0:
        return f"empty GEMM (a is {tuple(a.shape)}, {b_name} is {tuple(b.shape)})"
    if a.dtype not in KERNEL_AB_DTYPES or b.dtype != a.dtype:
        return f"operand dtypes a {a.dtype} / {b_name} {b.dtype} unsupported (bf16, fp16 or fp8 e4m3, equal)"
    if out is not None:
        shape = (*a.shape[:-1], b.shape[-1])
        if tuple(out.shape) != shape:
            return f"out: output shape {tuple(out.shape)} is not the product's {shape}"
        if out_dtype is not None and out.dtype != out_dtype:
            return f"out is {out.dtype} but out_dtype is {out_dtype}"
    if out is None and out_dtype is None and a.dtype in FP8_DTYPES:
        return "out_dtype: fp8 operands need an output dtype (bf16, fp16, fp32 or fp8 e4m3)"
    out_dtype = out.dtype if out is not None else (out_dtype or a.dtype)
    if out_dtype not in STORE_DTYPES:
        return (
            f"output dtype {out_dtype} unsupported ({'out' if out is not None else 'out_dtype'}; "
            "want one of bf16, fp16, fp32, fp8 e4m3)"
        )
    for name, t in (("a", a), (b_name, b), ("out", out)):
        if t is not None and (reason := _named_device_reason(name, t.device)):
            return reason
    if len({t.device for t in (a, b, out) if t is not None}) > 1:
        return f"a, {b_name}{' and out' if out is not None else ''} are on different devices"
    am, bm = a_major(a), b_major(b)
    if am is None:
        return f"a has no unit-stride matrix mode (strides {tuple(a.stride())})"
    if bm is None:
        return f"{b_name} has no unit-stride matrix mode (strides {tuple(b.stride())})"
    if a.dtype in FP8_DTYPES and (am, bm) != ("k", "k"):
        return (
            f"fp8 operands must both be K-major (Hopper's fp8 MMA): a row-major, {b_name} column-major "
            f"(the .t() of an N x K tensor); got a {am.upper()}-major, {b_name} {bm.upper()}-major"
        )
    reason = _alignment_reason("a", a, leading_stride(a, am == "k")) or _alignment_reason(
        b_name, b, leading_stride(b, bm == "n")
    )
    if reason:
        return reason
    if reason := row_width_reason(b.size(-1), out_dtype):
        return f"out: {reason}" if out is not None else reason
    if out is not None:
        if out.stride(-1) != 1:
            return f"out is not row-major (strides {tuple(out.stride())}; the kernel stores row-major D)"
        return _alignment_reason("out", out, out.stride(-2))
    return None


def scale_mode(shape: Sequence[int], dtype: torch.dtype, rows: int, cols: int) -> str | None:
    """'tensor' (one fp32 value) or 'row' (an fp32 (rows, cols) vector: one value per
    row of A for ``scale_a``, per column of B for ``scale_b``) for a scale of ``shape``
    and ``dtype``; None if it is neither."""
    if dtype != torch.float32:
        return None
    if tuple(shape) == (rows, cols):
        return "row"
    return "tensor" if math.prod(shape) == 1 else None


def scales_reason(
    a: torch.Tensor, b: torch.Tensor, scale_a, scale_b, bias=None, out_dtype=None, scale_result=None
) -> str | None:
    """None if ``torch._scaled_mm(a, b, scale_a, scale_b, bias, scale_result,
    out_dtype=...)`` can run as our kernel, else why not: e4m3 A row-major and B
    column-major (``gemm_reason``), fp32 scales, each tensor-wise or row-wise ((M, 1) for
    A, (1, N) for B), a bias of N values in a 16- or 32-bit float, and ``scale_result``
    one fp32 value, for an fp8 output only (torch ignores it for other outputs, so
    passing it there is refused as a likely mistake)."""
    for name, value in (("scale_a", scale_a), ("scale_b", scale_b)):
        if why := type_reason(name, value, torch.Tensor):
            return why
    if why := type_reason("bias", bias, torch.Tensor, optional=True):
        return why
    if a.dtype not in FP8_DTYPES:
        return f"a is {a.dtype}: scaled GEMMs take fp8 e4m3 operands"
    if why := gemm_reason(a, b, out_dtype=out_dtype or torch.bfloat16):
        return why
    m, n = a.shape[-2], b.shape[-1]
    modes = (scale_mode(scale_a.shape, scale_a.dtype, m, 1), scale_mode(scale_b.shape, scale_b.dtype, 1, n))
    if None in modes:
        return (
            f"scales {tuple(scale_a.shape)} {scale_a.dtype} and {tuple(scale_b.shape)} {scale_b.dtype}: "
            f"want fp32, each one value (tensor-wise) or ({m}, 1) and (1, {n}) (row-wise)"
        )
    if bias is not None and (bias.dtype not in OUT_DTYPES or tuple(bias.shape) != (n,)):
        return f"bias {tuple(bias.shape)} {bias.dtype}: want {n} values of bf16, fp16 or fp32"
    if scale_result is not None:
        if (
            not isinstance(scale_result, torch.Tensor)
            or scale_result.dtype != torch.float32
            or scale_result.numel() != 1
        ):
            return "scale_result: want one fp32 value (a 0-dim or one-element tensor)"
        if out_dtype not in FP8_DTYPES:
            return "scale_result: only an fp8 output has one (torch ignores it for other outputs)"
    return None


def gated_reason(
    a: torch.Tensor,
    b_gate: torch.Tensor,
    b_up: torch.Tensor,
    out: torch.Tensor | None = None,
    out_dtype=None,
    scales: tuple | None = None,
) -> str | None:
    """None if a dual kernel can compute ``out`` from ``a @ b_gate`` and ``a @ b_up``, else
    why not: each product as ``gemm_reason`` requires, and the two weights alike in
    shape and major (one kernel reads both the same way; two column ranges of one
    fused weight qualify). fp8 operands need ``scales`` (scale_a, scale_gate,
    scale_up), each product's as ``scales_reason`` requires, the two weights' in the
    same mode; other operands take none."""
    fp8 = isinstance(a, torch.Tensor) and a.dtype in FP8_DTYPES
    if fp8 != (scales is not None):
        return "scales: fp8 operands need (scale_a, scale_gate, scale_up), other operands none"
    if scales is not None:
        if not isinstance(scales, (tuple, list)) or len(scales) != 3:
            return "scales must be three tensors (scale_a, scale_gate, scale_up)"
        scale_a, *scale_bs = scales
        for b, scale_b in zip((b_gate, b_up), scale_bs):
            if reason := scales_reason(a, b, scale_a, scale_b, None, out.dtype if out is not None else out_dtype):
                return reason
        n = b_gate.shape[-1]
        if len({scale_mode(s.shape, s.dtype, 1, n) for s in scale_bs}) != 1:
            return "scale_gate and scale_up differ in mode (both tensor-wise or both row-wise)"
    for name, b in (("b_gate", b_gate), ("b_up", b_up)):
        if reason := gemm_reason(a, b, out, out_dtype, b_name=name):
            return reason
    if b_gate.shape != b_up.shape:
        return f"b_gate and b_up differ in shape ({tuple(b_gate.shape)} vs {tuple(b_up.shape)})"
    if b_major(b_gate) != b_major(b_up):
        return f"b_gate and b_up differ in major (strides {tuple(b_gate.stride())} vs {tuple(b_up.stride())})"
    return None


def operand_args(t: torch.Tensor, view, batch: int, m: int, n: int) -> tuple[int, int, int, int]:
    """(address, stride_m, stride_n, stride_l) of the (L, M, N) view an epilogue reads,
    as the kernel entry takes them: ``view`` is None (``t`` broadcast as ``expand``
    would) or ((stride_m, stride_n, stride_l), offset) from the translated indexing.
    Plain integer work: no view tensor is made on the launch path."""
    if view is not None:
        (s_m, s_n, s_l), offset = view
        return t.data_ptr() + offset * t.element_size(), s_m, s_n, s_l
    shape, stride = t.shape, t.stride()
    pad = 3 - len(shape)
    if pad < 0:
        raise ValueError(f"operand of shape {tuple(shape)} does not broadcast to {(batch, m, n)}")
    strides = []
    for i, size in enumerate((batch, m, n)):
        if i < pad:
            strides.append(0)
        elif shape[i - pad] == size:
            strides.append(stride[i - pad])
        elif shape[i - pad] == 1:
            strides.append(0)
        else:
            raise ValueError(f"operand of shape {tuple(shape)} does not broadcast to {(batch, m, n)}")
    s_l, s_m, s_n = strides
    return t.data_ptr(), s_m, s_n, s_l


def pairs_reason(args: tuple[int, int, int, int], n: int) -> str | None:
    """Why the (L, M, N) operand view ``args`` (see ``operand_args``) cannot be read
    two columns per load (see ``EpilogueOperand``), if it cannot."""
    address, s_m, s_n, s_l = args
    if s_n != 1 and n > 1:
        return "its N stride is not 1"
    if s_m % 2 or s_l % 2:
        return f"its M or L stride is odd ({s_m}, {s_l})"
    if address % 4:
        return "its address is not 4-byte aligned"
    if n % 2:
        return f"N ({n}) is odd"
    return None


def staged_reason(args: tuple[int, int, int, int], batch: int, m: int, n: int, itemsize: int) -> str | None:
    """Why the (L, M, N) operand view ``args`` cannot be TMA-loaded (see
    ``EpilogueOperand.staged``), if it cannot."""
    address, s_m, s_n, s_l = args
    if s_n != 1 and n > 1:
        return "its N stride is not 1"
    if (s_m == 0 and m > 1) or (s_l == 0 and batch > 1):
        return "it is broadcast (TMA needs non-zero strides)"
    if (s_m * itemsize) % 16 or (s_l * itemsize) % 16:
        return f"its M or L stride ({s_m}, {s_l}) is not a multiple of 16 bytes"
    if address % 16:
        return "its address is not 16-byte aligned"
    return None


def single_batch_stride(rows: int, ld: int, itemsize: int) -> int:
    """An L stride for a tensor of one batch: never read, but a TMA descriptor wants it
    non-zero and 16-byte aligned."""
    step = ALIGNMENT // itemsize
    return -(-max(rows * ld, 1) // step) * step


def declared_args(
    decl: EpilogueOperand, t: torch.Tensor, view, batch: int, m: int, n: int
) -> tuple[int, int, int, int]:
    """``operand_args`` as the kernel compiled for ``decl`` takes them: a staged operand
    of a single batch gets a TMA-acceptable L stride in place of its zero one."""
    args = operand_args(t, view, batch, m, n)
    if decl.staged and batch == 1 and args[3] == 0:
        args = (*args[:3], single_batch_stride(m, args[1], t.element_size()))
    return args


def declaration_reason(
    decl: EpilogueOperand, args: tuple[int, int, int, int], batch: int, m: int, n: int, itemsize: int
) -> str | None:
    """Why the operand view ``args`` breaks ``decl``'s ``pairs`` or ``staged`` load
    declaration, if it does."""
    if decl.pairs and (why := pairs_reason(args, n)):
        return f"declared for paired loads but {why}"
    if decl.staged and (why := staged_reason(args, batch, m, n, itemsize)):
        return f"declared for TMA staging but {why}"
    return None


def operands_reason(epilogue: Epilogue, operands, batch: int, m: int, n: int) -> str | None:
    """Epilogue operands must match their declared kind once broadcast to (L, M, N)."""
    if len(operands) != len(epilogue.operands):
        declared = ", ".join(f"{d.name} ({d.kind})" for d in epilogue.operands) or "none"
        return f"epilogue {epilogue.name} takes {len(epilogue.operands)} operands ({declared}), got {len(operands)}"
    for decl, value in zip(epilogue.operands, operands):
        if not decl.is_tensor:
            if isinstance(value, torch.Tensor):
                return f"operand {decl.name} is a scalar, got a tensor"
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return f"operand {decl.name} is a scalar: want a float, got a {type(value).__name__}"
            continue
        if not isinstance(value, torch.Tensor):
            return f"operand {decl.name} must be a {decl.dtype} tensor, got a {type(value).__name__}"
        if OUT_DTYPES.get(value.dtype) != decl.dtype:
            return f"operand {decl.name} must be a {decl.dtype} tensor, got {value.dtype}"
        try:
            args = operand_args(value, None, batch, m, n)
        except ValueError:
            return f"operand {decl.name} of shape {tuple(value.shape)} does not broadcast to {(batch, m, n)}"
        _, s_m, s_n, s_l = args
        if (decl.kind == "row" and m > 1 and s_m != 0) or (decl.kind == "col" and n > 1 and s_n != 0):
            return f"operand {decl.name} is not a {decl.kind} vector"
        if decl.kind == "one" and any(s != 0 and size > 1 for s, size in ((s_l, batch), (s_m, m), (s_n, n))):
            return f"operand {decl.name} is not a single value"
        if decl.is_output and any(s == 0 and size > 1 for s, size in ((s_l, batch), (s_m, m), (s_n, n))):
            return f"output operand {decl.name} is broadcast (each element must be written once)"
        if why := declaration_reason(decl, args, batch, m, n, value.element_size()):
            return f"operand {decl.name} is {why}"
    named = [(f"operand {d.name}", v) for d, v in zip(epilogue.operands, operands) if d.is_tensor]
    return next(filter(None, (_named_device_reason(name, v.device) for name, v in named)), None)
