"""The embedded default model: one LLaMA-style transformer block in bf16.

RMSNorm -> q/k/v projections -> attention -> o projection -> residual ->
RMSNorm -> gated MLP (silu(gate) * up -> down) -> residual. With the default
sizes its GEMMs are those of the kernel benchmark (8192 tokens, hidden 4096,
MLP 14336).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class BlockSize:
    batch: int = 4
    seq: int = 2048
    hidden: int = 4096
    heads: int = 32
    mlp: int = 14336

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def gemms(self) -> list[tuple[str, int, int, int]]:
        """(name, M, N, K) of every forward GEMM: y = x @ W^T."""
        t, h, f = self.tokens, self.hidden, self.mlp
        return [
            ("q_proj", t, h, h),
            ("k_proj", t, h, h),
            ("v_proj", t, h, h),
            ("o_proj", t, h, h),
            ("gate_proj", t, f, h),
            ("up_proj", t, f, h),
            ("down_proj", t, h, f),
        ]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, size: BlockSize) -> None:
        super().__init__()
        h = size.hidden
        self.size = size
        self.attn_norm, self.mlp_norm = RMSNorm(h), RMSNorm(h)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(h, h, bias=False) for _ in range(4))
        self.gate_proj = nn.Linear(h, size.mlp, bias=False)
        self.up_proj = nn.Linear(h, size.mlp, bias=False)
        self.down_proj = nn.Linear(size.mlp, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        heads = self.size.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, heads, h // heads).transpose(1, 2)

        y = self.attn_norm(x)
        q, k, v = split(self.q_proj(y)), split(self.k_proj(y)), split(self.v_proj(y))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, h))
        y = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


def make_block(size: BlockSize, device: str = "cuda", seed: int = 0) -> tuple[LlamaBlock, torch.Tensor]:
    """The block with small random weights, and a random input batch."""
    torch.manual_seed(seed)
    block = LlamaBlock(size).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in block.parameters():
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
    x = torch.randn(size.batch, size.seq, size.hidden, device=device).to(torch.bfloat16)
    return block, x
