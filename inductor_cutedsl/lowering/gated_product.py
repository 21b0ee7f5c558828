"""``act(gate) * up`` as one Triton kernel: the pointwise half of the alternative that a
dual GEMM is measured against (what Inductor generates for it after two GEMMs)."""

from __future__ import annotations

import functools

import torch


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def gated_product_kernel(g_ptr, u_ptr, h_ptr, numel, cols, ld, ACT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        src = (offs // cols) * ld + offs % cols  # gate and up may be column ranges of wider rows
        g = tl.load(g_ptr + src, mask=mask).to(tl.float32)
        u = tl.load(u_ptr + src, mask=mask).to(tl.float32)
        if ACT == 0:  # silu
            a = g / (1.0 + tl.exp(-g))
        elif ACT == 1:  # gelu_tanh
            a = 0.5 * g * (1.0 + tl.extra.cuda.libdevice.tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
        elif ACT == 2:  # gelu_erf
            a = 0.5 * g * (1.0 + tl.extra.cuda.libdevice.erf(g * 0.7071067811865476))
        else:  # relu
            a = tl.maximum(g, 0.0)
        a = a.to(h_ptr.dtype.element_ty).to(tl.float32)
        tl.store(h_ptr + offs, (a * u).to(h_ptr.dtype.element_ty), mask=mask)

    return gated_product_kernel


_ACT = {"silu": 0, "gelu_tanh": 1, "gelu_erf": 2, "relu": 3}


def gated_product(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up, contiguous, of two (M, N) tensors of one shape, dtype and strides
    with unit column stride (e.g. the two halves of one GEMM's (M, 2N) output)."""
    if gate.dim() != 2 or gate.shape != up.shape or gate.stride() != up.stride() or gate.stride(1) != 1:
        raise ValueError(
            f"gate {tuple(gate.shape)}/{gate.stride()} and up {tuple(up.shape)}/{up.stride()}: "
            "two (M, N) tensors of one layout with unit column stride"
        )
    h = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    numel, block = gate.numel(), 1024
    grid = (-(-numel // block),)
    _kernel()[grid](gate, up, h, numel, gate.shape[1], gate.stride(0), ACT=_ACT[activation], BLOCK=block)
    return h
