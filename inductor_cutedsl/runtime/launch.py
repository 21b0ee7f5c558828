"""Load exported kernels and launch them on torch tensors.

A launch passes raw pointers, sizes and strides (no DLPack conversion) on the
current torch stream.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch

from .. import config
from ..kernels.config import GemmConfig, shortlist
from ..kernels.epilogue import IDENTITY, Epilogue
from .cache import KernelCache
from .compiler import build
from .fast_call import F32, I32, I64, PTR, FastCaller
from .spec import ALIGNMENT, KernelSpec
from .support import (
    AB_DTYPES,
    OUT_DTYPES,
    a_major,
    b_major,
    declared_args,
    gemm_reason,
    leading_stride,
    operands_reason,
    single_batch_stride,
)

_memo: dict[str, "CompiledGemm"] = {}
_memo_lock = threading.Lock()
_default_cache: KernelCache | None = None
_default_cache_for: str | None = None  # the config.cache_dir it was opened for


def default_cache() -> KernelCache:
    """The process's cache, at ``inductor_cutedsl.config.cache_dir`` (reopened if that changes)."""
    global _default_cache, _default_cache_for
    if _default_cache is None or config.cache_dir != _default_cache_for:
        _default_cache = KernelCache(config.cache_dir)
        _default_cache_for = config.cache_dir
    return _default_cache


@functools.lru_cache(maxsize=None)
def max_active_clusters(cluster_size: int, device_index: int) -> int:
    """Clusters resident at once on the device (queried once per process)."""
    from .. import arch  # noqa: F401
    import cutlass.utils

    with torch.cuda.device(device_index):
        return cutlass.utils.HardwareInfo().get_max_active_clusters(cluster_size)


def _batch_stride(t: torch.Tensor, rows: int, ld: int) -> int:
    return t.stride(0) if t.dim() == 3 else single_batch_stride(rows, ld, t.element_size())


class CompiledGemm:
    """A loaded kernel: ``gemm(a, b, out, *operands)`` writes ``out``."""

    def __init__(self, spec: KernelSpec, object_path: str) -> None:
        from .. import arch  # noqa: F401
        import cuda.bindings.driver as cuda
        import cutlass
        import cutlass.cute as cute

        self.spec = spec
        self._module = cute.runtime.load_module(str(object_path))
        dt = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}
        ops = spec.epilogue.operands
        # Entry parameters (see Sm90Gemm.make_entry): kinds for the fast path and
        # the DSL type of each pointer for the generic one.
        kinds = [PTR, PTR, PTR, I32, I32, I32, I32, I64, I64, I64, I64, I64, I64, I32]
        ptr_types = {0: (dt[spec.ab_dtype], ALIGNMENT), 1: (dt[spec.ab_dtype], ALIGNMENT),
                     2: (dt[spec.out_dtype], ALIGNMENT)}  # fmt: skip
        if spec.config.stream_k:  # partial sums (fp32) and flags (int32)
            ptr_types.update({len(kinds): (cutlass.Float32, 16), len(kinds) + 1: (cutlass.Int32, 4)})
            kinds += [PTR, PTR]
        for op in ops:
            if op.is_tensor:
                ptr_types[len(kinds)] = (dt[op.dtype], op.align_bytes)
                kinds += [PTR, I64, I64, I64]
            else:
                kinds.append(F32)
        kinds.append(PTR)  # stream
        make_ptr, gmem = cute.runtime.make_ptr, cute.AddressSpace.gmem

        def to_dsl_args(values):
            out = [
                make_ptr(ptr_types[i][0], v, gmem, ptr_types[i][1]) if i in ptr_types else v
                for i, v in enumerate(values[:-1])
            ]
            return out + [cuda.CUstream(values[-1])]

        self._call = FastCaller(getattr(self._module, spec.symbol()), kinds, to_dsl_args)

    def __call__(
        self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *operands, stream: int | None = None
    ) -> torch.Tensor:
        """Launch on ``stream`` (a raw CUDA stream handle), by default torch's current one."""
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b.shape[-1]
        args: list = []
        for op, value in zip(self.spec.epilogue.operands, operands):
            if op.is_tensor:
                args += declared_args(op, value, None, batch, m, n)
            else:
                args.append(float(value))
        self.launch(a, b, out, args, stream)
        return out

    def launch(
        self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, operand_values: list, stream: int | None
    ) -> None:
        """Launch with the epilogue operands already flat, as the entry takes them:
        per tensor operand ``declared_args``, per scalar a float."""
        spec = self.spec
        m, k = a.shape[-2], a.shape[-1]
        n = b.shape[-1]
        batch = a.shape[0] if a.dim() == 3 else 1
        lda = leading_stride(a, spec.a_major == "k")
        ldb = leading_stride(b, spec.b_major == "n")
        ldd = out.stride(-2)
        args = [
            a.data_ptr(), b.data_ptr(), out.data_ptr(),
            m, n, k, batch, lda, ldb, ldd,
            _batch_stride(a, m if spec.a_major == "k" else k, lda),
            _batch_stride(b, k if spec.b_major == "n" else n, ldb),
            _batch_stride(out, m, ldd),
            max_active_clusters(spec.config.cluster_size, a.device.index),
        ]  # fmt: skip
        if stream is None:
            stream = torch.cuda.current_stream(a.device).cuda_stream
        if spec.config.stream_k:
            partials, flags = stream_k_buffers(spec.config, args[-1], a.device, stream)
            args += [partials.data_ptr(), flags.data_ptr()]
        self._call(*args, *operand_values, stream)


def stream_k_buffers(
    cfg: GemmConfig, clusters: int, device: torch.device, stream: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stream-K launch's scratch: a tile of fp32 partial sums per CTA, and one flag
    per CTA, zeroed for every launch (a CUDA graph captures the zeroing with the
    kernel). From torch's allocator on the launch's stream, so reuse is stream-ordered."""
    ctas = clusters * cfg.cluster_size
    on_stream = (
        contextlib.nullcontext()
        if torch.cuda.current_stream(device).cuda_stream == stream
        else torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device))
    )
    with on_stream:
        partials = torch.empty(ctas * cfg.tile_m * cfg.tile_n, dtype=torch.float32, device=device)
        return partials, torch.zeros(ctas, dtype=torch.int32, device=device)


def get_gemm(spec: KernelSpec, cache: KernelCache | None = None) -> CompiledGemm:
    """The loaded kernel for ``spec``: memoized, from the disk cache, or compiled."""
    key = spec.key()
    hit = _memo.get(key)
    if hit is not None:
        return hit
    with _memo_lock:
        if key not in _memo:
            path, _ = build(spec, cache or default_cache())
            _memo[key] = CompiledGemm(spec, str(path))
        return _memo[key]


def spec_for(
    a: torch.Tensor,
    b: torch.Tensor,
    out_dtype: torch.dtype,
    config: GemmConfig,
    epilogue: Epilogue = IDENTITY,
) -> KernelSpec:
    return KernelSpec(
        config, AB_DTYPES[a.dtype], OUT_DTYPES[out_dtype], a_major(a), b_major(b), epilogue
    )


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *operands,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    config: GemmConfig | None = None,
    epilogue: Epilogue = IDENTITY,
) -> torch.Tensor:
    """``epilogue(a @ b)`` with our kernel; raises ValueError for inputs it refuses."""
    reason = gemm_reason(a, b, out, out_dtype) or operands_reason(
        epilogue, operands, a.shape[0] if a.dim() == 3 else 1, a.shape[-2], b.shape[-1]
    )
    if reason:
        raise ValueError(f"inductor_cutedsl cannot run this GEMM: {reason}")
    if out is None:
        shape = (*a.shape[:-1], b.shape[-1])
        out = torch.empty(shape, dtype=out_dtype or a.dtype, device=a.device)
    if config is None:
        batch = a.shape[0] if a.dim() == 3 else 1
        config = shortlist(a.shape[-2], b.shape[-1], a.shape[-1], batch)[0]
    get_gemm(spec_for(a, b, out.dtype, config, epilogue))(a, b, out, *operands)
    return out
