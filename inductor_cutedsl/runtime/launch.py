"""Load exported kernels and launch them on torch tensors.

A launch passes raw pointers, sizes and strides (no DLPack conversion) on the
current torch stream.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import config
from ..kernels.config import (
    PROMOTE_NONE,
    PROMOTE_TILE,
    GemmConfig,
    dual_shortlist,
    promote_reason,
    promotion_mode,
    shortlist,
)
from ..kernels.epilogue import GATED_ACTIVATIONS, IDENTITY, Epilogue, gated, scaled
from . import native
from .cache import KernelCache, default_cache
from .compiler import build
from .fast_call import F32, I32, I64, PTR, FastCaller
from .spec import ALIGNMENT, KernelSpec
from .support import (
    FP8_DTYPES,
    KERNEL_AB_DTYPES,
    OUT_DTYPES,
    STORE_DTYPES,
    ArgumentTypeError,
    a_major,
    b_major,
    declared_args,
    gated_reason,
    gemm_reason,
    leading_stride,
    operand_args,
    operands_reason,
    pairs_reason,
    scale_mode,
    scales_reason,
    single_batch_stride,
    type_reason,
)

log = logging.getLogger("inductor_cutedsl.launch")

_memo: dict[str, CompiledGemm] = {}
_memo_lock = threading.Lock()


@functools.cache
def max_active_clusters(cluster_size: int, device_index: int) -> int:
    """Clusters resident at once on the device (queried once per process and size),
    asked of the driver directly (``native.resident_clusters``); through the DSL only
    where that fails."""
    with torch.cuda.device(device_index):
        try:
            return native.resident_clusters(cluster_size)
        except Exception as exc:
            log.debug("resident clusters through the DSL: %s", exc)
        import cutlass.utils

        return cutlass.utils.HardwareInfo().get_max_active_clusters(cluster_size)


def _batch_stride(t: torch.Tensor, rows: int, ld: int) -> int:
    return t.stride(0) if t.dim() == 3 else single_batch_stride(rows, ld, t.element_size())


def entry_kinds(spec: KernelSpec) -> list[str]:
    """The kind (``fast_call``'s) of each parameter of ``spec``'s exported entry (see
    ``Sm90Gemm.make_entry``), in order."""
    kinds = [PTR, PTR, PTR, I32, I32, I32, I32, I64, I64, I64, I64, I64, I64, I32, I32]
    if spec.dual:  # the up weight: pointer, leading and batch strides
        kinds += [PTR, I64, I64]
    if spec.config.stream_k:  # partial sums (fp32), flags (int64), the launch's token
        kinds += [PTR, PTR, I64]
    for op in spec.epilogue.operands:
        kinds += [PTR, I64, I64, I64] if op.is_tensor else [F32]
    kinds.append(PTR)  # stream
    return kinds


def entry_signature(spec: KernelSpec) -> tuple[list[str], dict[int, tuple[Any, int]]]:
    """``entry_kinds``, and for each pointer its DSL element type and alignment in bytes,
    for the DSL's generic call. The types come from the kernels' own table
    (``kernels.dtypes``): a pointer typed apart from the kernel's operand would be read
    as another format."""
    import cutlass

    from ..kernels.dtypes import DSL_TYPES as dt

    kinds = entry_kinds(spec)
    # The pointers' types in the order ``entry_kinds`` places them (the stream, last, is
    # no typed pointer): their positions are read from the kinds, not worked out again.
    types = [(dt[spec.ab_dtype], ALIGNMENT)] * 2 + [(dt[spec.out_dtype], ALIGNMENT)]
    if spec.dual:
        types.append((dt[spec.ab_dtype], ALIGNMENT))
    if spec.config.stream_k:
        types += [(cutlass.Float32, 16), (cutlass.Int64, 8)]
    types += [(dt[op.dtype], op.align_bytes) for op in spec.epilogue.operands if op.is_tensor]
    pointers = [i for i, kind in enumerate(kinds[:-1]) if kind == PTR]
    assert len(pointers) == len(types), (pointers, types)
    ptr_types = dict(zip(pointers, types))
    return kinds, ptr_types


class CompiledGemm:
    """A loaded kernel: ``gemm(a, b, out, *operands)`` writes ``out``; a dual kernel's
    (``KernelSpec.dual``) ``b`` is the gate weight, and ``b_up`` the up weight."""

    def __init__(self, spec: KernelSpec, object_path: str, native_load: bool = True) -> None:
        """Load ``object_path`` through the DSL's runtime library (``native``), else,
        where that fails or ``native_load`` is off, through the DSL itself."""
        self.spec = spec
        self.native = False
        if native_load and torch.cuda.is_available():  # the runtime needs a device to load on
            try:
                kernel = native.NativeKernel(Path(object_path).read_bytes(), spec.symbol())
            except (native.NativeLoadError, OSError) as exc:
                log.info("loading %s through the DSL: %s", spec.describe(), exc)
            else:
                self.call: Any = native.NativeCaller(kernel, entry_kinds(spec))
                self.native = True
                return
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute

        self._module = cute.runtime.load_module(str(object_path))
        kinds, ptr_types = entry_signature(spec)
        make_ptr, gmem = cute.runtime.make_ptr, cute.AddressSpace.gmem

        def to_dsl_args(values):
            out = [
                make_ptr(ptr_types[i][0], v, gmem, ptr_types[i][1]) if i in ptr_types else v
                for i, v in enumerate(values[:-1])
            ]
            return out + [cuda.CUstream(values[-1])]

        self.call = FastCaller(getattr(self._module, spec.symbol()), kinds, to_dsl_args)

    def __call__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        *operands,
        stream: int | None = None,
        b_up: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Launch on ``stream`` (a raw CUDA stream handle), by default torch's current
        one; as a programmatic dependent where ``config.programmatic_launch`` is on."""
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b.shape[-1]
        args: list = []
        for op, value in zip(self.spec.epilogue.operands, operands):
            if op.is_tensor:
                args += declared_args(op, value, None, batch, m, n)
            else:
                args.append(float(value))
        self.launch(a, b, out, args, stream, b_up=b_up, programmatic=config.programmatic_launch)
        return out

    def launch(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        operand_values: list,
        stream: int | None,
        out_view=None,
        b_up: torch.Tensor | None = None,
        programmatic: bool = False,
    ) -> None:
        """Launch with the epilogue operands already flat, as the entry takes them:
        per tensor operand ``declared_args``, per scalar a float. ``out_view``:
        ((stride_m, 1, stride_l), offset) where ``out`` is not laid out as the GEMM's
        (L, M, N) output itself (a fused consumer's (B, T, N) buffer). ``b_up``: a dual
        kernel's up weight (required there), shaped and laid out as ``b``.
        ``programmatic``: launch as a programmatic dependent of the stream's previous
        kernel (``config.programmatic_launch``)."""
        out_offset, sizes, up = self.layout(a, b, out, out_view, b_up, programmatic)
        args = [a.data_ptr(), b.data_ptr(), out.data_ptr() + out_offset, *sizes]
        if up:
            assert b_up is not None  # ``layout`` gives the up weight's strides only from it
            args += [b_up.data_ptr(), *up]
        if stream is None:
            stream = torch.cuda.current_stream(a.device).cuda_stream
        if self.spec.config.stream_k:
            # The grid's resident clusters: what ``layout`` passed the kernel (memoized).
            clusters = max_active_clusters(self.spec.config.cluster_size, a.device.index)
            partials, flags, token = stream_k_buffers(self.spec.config, clusters, a.device, stream)
            args += [partials.data_ptr(), flags.data_ptr(), token]
        self.call(*args, *operand_values, stream)

    def layout(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        out_view=None,
        b_up: torch.Tensor | None = None,
        programmatic: bool = False,
    ) -> tuple[int, tuple, tuple]:
        """What a launch passes besides addresses, operands and stream, read from the
        tensors' sizes and strides only (so a launcher may reuse it while they stay):
        (bytes to add to ``out``'s address, the entry's values after the three
        pointers (m, n, k, l, leading and batch strides, resident clusters, 1 where
        ``programmatic``: launched as a programmatic dependent), a dual
        kernel's up-weight strides after its pointer, else ())."""
        spec = self.spec
        m, k = a.shape[-2], a.shape[-1]
        n = b.shape[-1]
        batch = a.shape[0] if a.dim() == 3 else 1
        lda = leading_stride(a, spec.a_major == "k")
        ldb = leading_stride(b, spec.b_major == "n")
        if out_view is None:
            out_offset, ldd = 0, out.stride(-2)
            out_batch = _batch_stride(out, m, ldd)
        else:
            (ldd, _, out_batch), offset = out_view
            out_offset = offset * out.element_size()
            out_batch = out_batch if batch > 1 else single_batch_stride(m, ldd, out.element_size())
        sizes = (
            m,
            n,
            k,
            batch,
            lda,
            ldb,
            ldd,
            _batch_stride(a, m if spec.a_major == "k" else k, lda),
            _batch_stride(b, k if spec.b_major == "n" else n, ldb),
            out_batch,
            max_active_clusters(spec.config.cluster_size, a.device.index),
            int(programmatic),
        )
        up: tuple[int, ...] = ()
        if spec.dual:
            if b_up is None:
                raise ValueError(f"kernel {spec.describe()} needs the up weight (b_up)")
            ldbu = leading_stride(b_up, spec.b_major == "n")
            up = (ldbu, _batch_stride(b_up, k if spec.b_major == "n" else n, ldbu))
        return out_offset, sizes, up


#: Draws the stream-K tokens: its own generator, seeded from the OS, so that a
#: program seeding ``random`` does not make them repeat.
_tokens = random.Random(os.urandom(16))


def stream_k_token() -> int:
    """A stream-K launch's token: 62 random bits, never 0 (a cleared flag)."""
    return _tokens.getrandbits(62) | 1


def stream_k_buffers(
    cfg: GemmConfig, clusters: int, device: torch.device, stream: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A stream-K launch's scratch and token: a tile of fp32 partial sums per CTA, one
    int64 flag per CTA, and the value a flag takes once its partial sums are written.
    The flags are not zeroed (a CUDA graph would replay the zeroing as a node of its
    own): the kernel waits for this launch's token, which memory left by anything else
    holds with odds of 2^-62, and clears each flag it read, so a graph replaying the
    same token on the same memory finds them clear. From torch's allocator on the
    launch's stream, so reuse is stream-ordered."""
    ctas = clusters * cfg.cluster_size
    on_stream = (
        contextlib.nullcontext()
        if torch.cuda.current_stream(device).cuda_stream == stream
        else torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device))
    )
    with on_stream:
        partials = torch.empty(ctas * cfg.tile_m * cfg.tile_n, dtype=torch.float32, device=device)
        return partials, torch.empty(ctas, dtype=torch.int64, device=device), stream_k_token()


def is_loaded(spec: KernelSpec) -> bool:
    """Whether this process has loaded the kernel of ``spec``."""
    return spec.key() in _memo


def loaded_kernels() -> int:
    """How many kernels this process has loaded (each built kernel it benchmarked or ran)."""
    return len(_memo)


def get_gemm(spec: KernelSpec, cache: KernelCache | None = None, path: Path | None = None) -> CompiledGemm:
    """The loaded kernel for ``spec``: memoized, else loaded from ``path`` (its object,
    already built) or from the disk cache, compiling it there on a miss."""
    key = spec.key()
    hit = _memo.get(key)
    if hit is not None:
        return hit
    with _memo_lock:
        if key not in _memo:
            if path is None:
                path, _ = build(spec, cache or default_cache())
            _memo[key] = CompiledGemm(spec, str(path))
        return _memo[key]


def spec_for(
    a: torch.Tensor,
    b: torch.Tensor,
    out_dtype: torch.dtype,
    config: GemmConfig,
    epilogue: Epilogue = IDENTITY,
    dual: bool = False,
    promote: int = 0,
) -> KernelSpec:
    majors = a_major(a), b_major(b)
    if majors[0] is None or majors[1] is None:
        raise ValueError(f"inductor_cutedsl cannot run this GEMM: an operand has no unit-stride mode ({majors})")
    return KernelSpec(
        config, KERNEL_AB_DTYPES[a.dtype], STORE_DTYPES[out_dtype], majors[0], majors[1], epilogue, dual, promote
    )


def _check_types(what: str, *checks: tuple) -> None:
    """Refuse an argument of the wrong type: ``checks`` are (name, value, type, optional)."""
    for name, value, want, optional in checks:
        if why := type_reason(name, value, want, optional):
            raise ArgumentTypeError(f"inductor_cutedsl cannot run this {what}: {why}")


def _promoting(config: Any, first: Callable[[], GemmConfig]) -> tuple[Any, int]:
    """A promoting fp8 kernel's config (``first()``, its shortlist's first, where none is
    given) and the mode it promotes in: the one that config has registers for."""
    config = first() if config is None else config
    return config, promotion_mode(config) if isinstance(config, GemmConfig) else PROMOTE_TILE


def _config_reason(config, out_bytes: int, dual: bool = False, in_bytes: int = 2, promote: int = 0) -> str | None:
    if config is None:
        return None
    why = (
        config.invalid_reason(in_bytes, out_bytes)
        or (config.dual_reason() if dual else None)
        or (config.promotion_reason(promote) if promote else None)
    )
    return f"config {config.name()}: {why}" if why else None


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *operands,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    config: GemmConfig | None = None,
    epilogue: Epilogue = IDENTITY,
    promote: int = 0,
) -> torch.Tensor:
    """``epilogue(a @ b)`` with our kernel.

    fp8 (e4m3) operands must both be K-major and need ``out_dtype`` (or ``out``);
    ``promote=1`` adds their partial sums into fp32 every k-tile of 128 (PyTorch's
    ``use_fast_accum=False``), 2 the same by column halves overlapped with the other
    half's MMAs (``kernels.config.PROMOTE_HALVES``), 3 into two partial-sum sets in
    turn (``PROMOTE_ALTERNATE``), 0 accumulates in the MMA only.

    Raises ValueError for inputs it refuses, naming the argument (``a``, ``b``, ``out``,
    ``out_dtype``, ``config``, ``epilogue`` or an operand by its declared name); an
    argument of the wrong type raises ``support.ArgumentTypeError``, which is both a
    TypeError and a ValueError. An epilogue whose source cannot be compiled raises
    ValueError naming the epilogue and the line (``kernels.epilogue_math.EpilogueError``).
    """
    _check_types(
        "GEMM",
        ("a", a, torch.Tensor, False),
        ("b", b, torch.Tensor, False),
        ("out", out, torch.Tensor, True),
        ("out_dtype", out_dtype, torch.dtype, True),
        ("config", config, GemmConfig, True),
        ("epilogue", epilogue, Epilogue, False),
    )
    reason = gemm_reason(a, b, out, out_dtype) or promote_reason(promote, a.dtype in FP8_DTYPES)
    if reason is None:
        reason = operands_reason(epilogue, operands, a.shape[0] if a.dim() == 3 else 1, a.shape[-2], b.shape[-1])
    if reason is None:
        out_dtype = out.dtype if out is not None else out_dtype or a.dtype
        reason = _config_reason(config, out_dtype.itemsize, in_bytes=a.element_size(), promote=promote)
    if reason:
        raise ValueError(f"inductor_cutedsl cannot run this GEMM: {reason}")
    if out is None:
        shape = (*a.shape[:-1], b.shape[-1])
        out = torch.empty(shape, dtype=out_dtype, device=a.device)
    if config is None:
        batch = a.shape[0] if a.dim() == 3 else 1
        config = shortlist(a.shape[-2], b.shape[-1], a.shape[-1], batch, promote=promote)[0]
    get_gemm(spec_for(a, b, out.dtype, config, epilogue, promote=promote))(a, b, out, *operands)
    return out


def scaled_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale_result: torch.Tensor | None = None,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    use_fast_accum: bool = False,
    out: torch.Tensor | None = None,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """``torch._scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype=...,
    use_fast_accum=...)`` with our kernel: ``((a @ b) * scale_a * scale_b + bias) /
    scale_result`` in fp32, then cast (an fp8 output saturates at +-448; ``scale_result``
    only with an fp8 output, as ``scales_reason`` says). ``a``
    (M x K) row-major and ``b`` (K x N) column-major e4m3; scales fp32, each tensor-wise
    or row-wise ((M, 1) for A, (1, N) for B). Without ``use_fast_accum`` the fp8 partial sums
    are promoted into fp32 every k-tile (128 of K), in the mode the config has registers for
    (``kernels.config.promotion_mode``). Raises ValueError for what it refuses."""
    reason = scales_reason(a, b, scale_a, scale_b, bias, out.dtype if out is not None else out_dtype, scale_result)
    if reason:
        raise ValueError(f"inductor_cutedsl cannot run this scaled GEMM: {reason}")
    mode_a = scale_mode(scale_a.shape, scale_a.dtype, a.shape[-2], 1)
    mode_b = scale_mode(scale_b.shape, scale_b.dtype, 1, b.shape[-1])
    assert mode_a is not None and mode_b is not None  # scales_reason refused any other scale
    epi = scaled(mode_a, mode_b, OUT_DTYPES[bias.dtype] if bias is not None else None, scale_result is not None)
    operands = (scale_a, scale_b, *(t for t in (bias, scale_result) if t is not None))
    promote = PROMOTE_NONE
    if not use_fast_accum:
        first = lambda: shortlist(a.shape[-2], b.shape[-1], a.shape[-1], promote=PROMOTE_TILE)[0]
        config, promote = _promoting(config, first)
    return gemm(
        a,
        b,
        *operands,
        out=out,
        out_dtype=None if out is not None else out_dtype,
        config=config,
        epilogue=epi,
        promote=promote,
    )


def gated_gemm(
    a: torch.Tensor,
    b_gate: torch.Tensor,
    b_up: torch.Tensor,
    act: str = "silu",
    *,
    bias_gate: torch.Tensor | None = None,
    bias_up: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    keep: bool = False,
    keep_out: tuple[torch.Tensor, torch.Tensor] | None = None,
    config: GemmConfig | None = None,
    scales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    use_fast_accum: bool = False,
):
    """``act(a @ b_gate + bias_gate) * (a @ b_up + bias_up)`` as one dual kernel (A read
    once for both products); raises ValueError for inputs it refuses, naming the
    argument (wrong types: ``support.ArgumentTypeError``, a TypeError and a ValueError).

    fp8 (e4m3) operands, K-major, take ``scales`` (scale_a, scale_gate, scale_up) as
    ``torch._scaled_mm`` does (fp32, tensor-wise or row-wise, the two weights' alike):
    each product is ``(a @ b) * scale_a * scale_b`` before its bias, as two
    ``_scaled_mm`` calls compute it, and ``out_dtype`` (or ``out``) is required. Without
    ``use_fast_accum`` their partial sums are promoted into fp32 every k-tile, in the
    mode the config has registers for (``kernels.config.promotion_mode``).

    ``b_gate`` and ``b_up`` (K x N, alike in layout) may be two weights or two column
    ranges of one fused weight (``w.chunk(2, -1)`` views). Biases are length-N vectors.
    Returns ``out``, or with ``keep`` (or ``keep_out``, the two tensors to write)
    ``(out, gate, up)``: the pre-activations with their biases, of ``out``'s dtype
    unless ``keep_out`` says otherwise.
    """
    _check_types(
        "gated GEMM",
        ("a", a, torch.Tensor, False),
        ("b_gate", b_gate, torch.Tensor, False),
        ("b_up", b_up, torch.Tensor, False),
        ("act", act, str, False),
        ("bias_gate", bias_gate, torch.Tensor, True),
        ("bias_up", bias_up, torch.Tensor, True),
        ("out", out, torch.Tensor, True),
        ("out_dtype", out_dtype, torch.dtype, True),
        ("keep_out", keep_out, (tuple, list), True),
        ("config", config, GemmConfig, True),
        ("scales", scales, (tuple, list), True),
    )
    reason = gated_reason(a, b_gate, b_up, out, out_dtype, scales)
    if reason is None and act not in GATED_ACTIVATIONS:
        reason = f"act: activation {act!r} not in {GATED_ACTIVATIONS}"
    if reason is None and keep_out is not None and len(keep_out) != 2:
        reason = "keep_out must be two tensors (gate, up)"
    for name, t in (
        ("bias_gate", bias_gate),
        ("bias_up", bias_up),
        *zip(("keep_out[0]", "keep_out[1]"), keep_out or ()),
    ):
        if reason is None and t is not None and not (isinstance(t, torch.Tensor) and t.dtype in OUT_DTYPES):
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            reason = f"{name} is {got}: biases and kept outputs must be tensors of {sorted(map(str, OUT_DTYPES))}"
    fp8 = scales is not None
    promote = PROMOTE_NONE
    if reason is None and fp8 and not use_fast_accum:
        first = lambda: dual_shortlist(a.shape[-2], b_gate.shape[-1], a.shape[-1], promote=PROMOTE_TILE)[0]
        config, promote = _promoting(config, first)
    if reason is None:
        out_dtype = out.dtype if out is not None else out_dtype or a.dtype
        reason = _config_reason(config, out_dtype.itemsize, True, a.element_size(), promote)
    if reason is None:
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b_gate.shape[-1]
        keep = keep or keep_out is not None
        shape = (*a.shape[:-1], n)
        out = out if out is not None else torch.empty(shape, dtype=out_dtype, device=a.device)
        if keep and keep_out is None:
            keep_out = (
                torch.empty(shape, dtype=out_dtype, device=a.device),
                torch.empty(shape, dtype=out_dtype, device=a.device),
            )
        kept = tuple(keep_out or ())
        bias_gate_dtype, bias_up_dtype = (None if t is None else OUT_DTYPES[t.dtype] for t in (bias_gate, bias_up))
        keep_dtype = OUT_DTYPES[kept[0].dtype] if kept else None
        # Kept outputs are written two columns per store where both allow it.
        pairs = keep_dtype in ("bfloat16", "float16") and all(
            isinstance(t, torch.Tensor)
            and tuple(t.shape) == shape  # else operands_reason refuses it
            and pairs_reason(operand_args(t, None, batch, m, n), n) is None
            for t in kept
        )
        modes = None
        if scales is not None:
            sa, sb = scales[0], scales[1]
            mode_a, mode_b = scale_mode(sa.shape, sa.dtype, m, 1), scale_mode(sb.shape, sb.dtype, 1, n)
            assert mode_a is not None and mode_b is not None  # gated_reason refused any other scale
            modes = (mode_a, mode_b)
        epilogue = gated(act, bias_gate_dtype, bias_up_dtype, keep_dtype, keep_pairs=pairs, scales=modes)
        operands = [t for t in (*(scales or ()), bias_gate, bias_up, *kept) if t is not None]
        # The output checked again where it was made here: its rows must be 16-byte aligned.
        reason = gated_reason(a, b_gate, b_up, out, scales=scales) or operands_reason(epilogue, operands, batch, m, n)
    if reason:
        raise ValueError(f"inductor_cutedsl cannot run this gated GEMM: {reason}")
    assert out is not None  # made above where not given
    config = config or dual_shortlist(m, n, a.shape[-1], batch)[0]
    spec = spec_for(a, b_gate, out.dtype, config, epilogue, dual=True, promote=promote)
    get_gemm(spec)(a, b_gate, out, *operands, b_up=b_up)
    return (out, *kept) if keep else out
