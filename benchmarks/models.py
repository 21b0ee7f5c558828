"""Transformer blocks of real model families: stock max-autotune vs max-autotune with inductor_cutedsl.

    python -m benchmarks.models --json benchmarks/results/h200-models.json
    python -m benchmarks.models --blocks gpt2:prefill,qwen2 --runs inference --json part1.json
    python -m benchmarks.models --combine part1.json part2.json --json benchmarks/results/h200-models.json

In pieces (a time limit per command): each piece starts only the blocks it expects to
finish within its budget and carries the earlier pieces' rows forward; repeat it, with
its result as the next piece's --resume, until it lists no block left:

    python -m benchmarks.models --budget 480 --resume prev.json --json next.json

The default rows are Hugging Face ``transformers`` model classes (``hf-llama``,
``hf-mistral``, ``hf-qwen2``, ``hf-phi3``, ``hf-gpt2``, ``hf-bert``, ``hf-vit``: two
layers at a published model's dimensions, random weights from configs, bf16, no
downloads; ``hf_blocks``), the code users compile. Without ``transformers`` the rows are
the hand-written blocks, which also stay selectable by name (``gpt2``, ``llama``, ...):
each written the way its family's models write it, (batch, seq, hidden) activations,
Linear layers, attention through F.scaled_dot_product_attention on (B, H, T, D) views,
rotary embeddings left out.

Per block (family x size x run), stock and ours are compiled in one process, in each
mode, and measured on the same tensors, interleaved: wall time per call, GPU time (the
sum of the kernel times under the profiler, in each mode; the row's ``gpu_speedup`` is
the CUDA-graph mode's, whose choices both sides rank by GPU time), host time per call, which GEMMs ran our
kernel, what fused, the fusion bound, and the error against stock and eager. Compile
time is ``benchmarks.compile``'s (fresh processes, empty caches): the compiles here
share one process and its caches, and stock compiles on torch's ptxas as fair stock
does (``harness.stock_on_torch_ptxas``): it spares the device stock's doubled template
compiles, and stock's choices are benchmarked as a user of a torch without the
mismatch would have them. Both sides keep their Triton kernels' tuned configs across
compiles, as fair stock does (``harness.stock_keeps_tuned_configs``): the backend
compiled second runs the configs the first one's tuning found for the kernels both
generate. Results are rewritten after every block, so a run cut short keeps its rows;
``--combine`` merges partial runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import statistics
import time
import traceback
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from inductor_cutedsl import disable, enable
from inductor_cutedsl.cli.block import RMSNorm
from inductor_cutedsl.cli.report import CUTEDSL_KERNEL, kernel_times
from inductor_cutedsl.cli.run import TOLERANCE, compile_options
from inductor_cutedsl.timing import enqueue_ms, rotations

from . import hf_blocks
from .harness import (
    BACKENDS,
    geomean_or_none,
    launch_api_calls,
    median_interval,
    plain,
    ratio,
    rel_err,
    run_info,
    side_by_side_rounds,
    stamped,
    stock_as_fair_stock,
    suite_device,
    write_json,
)

# ---------------------------------------------------------------------------------------
# The blocks


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's block. Sizes are (batch, seq): ``prefill`` near 4096 tokens,
    ``small`` at most 256."""

    hidden: int
    heads: int
    mlp: int
    norm: str  # "layer" (LayerNorm) or "rms" (RMSNorm)
    mlp_kind: str  # "gelu_tanh", "gelu_erf", "swiglu" (gate and up Linear), "swiglu_fused" (gate_up + chunk)
    prefill: tuple[int, int]
    small: tuple[int, int]
    kv_heads: int | None = None  # grouped-query attention; None: one kv head per q head
    bias: bool = False  # a bias on every Linear
    qkv_bias: bool = False  # a bias on the q/k/v projections only
    fused_qkv: bool = False  # one Linear for q, k and v
    post_norm: bool = False  # x = norm(x + f(x)) rather than x = x + f(norm(x))
    causal: bool = True
    eps: float = 1e-5
    train: bool = False  # also measured as a training step


HAND_WRITTEN: dict[str, Family] = {
    "gpt2": Family(
        hidden=1024,
        heads=16,
        mlp=4096,
        norm="layer",
        mlp_kind="gelu_tanh",
        bias=True,
        fused_qkv=True,
        prefill=(2, 2048),
        small=(2, 128),
        train=True,
    ),
    "llama": Family(
        hidden=2048,
        heads=32,
        kv_heads=8,
        mlp=8192,
        norm="rms",
        mlp_kind="swiglu",
        prefill=(2, 2048),
        small=(2, 128),
        train=True,
    ),
    "qwen2": Family(
        hidden=1536,
        heads=12,
        kv_heads=2,
        mlp=8960,
        norm="rms",
        mlp_kind="swiglu",
        qkv_bias=True,
        eps=1e-6,
        prefill=(2, 2048),
        small=(2, 128),
    ),
    "phi3": Family(
        hidden=3072,
        heads=32,
        mlp=8192,
        norm="rms",
        mlp_kind="swiglu_fused",
        fused_qkv=True,
        prefill=(2, 2048),
        small=(2, 128),
        train=True,
    ),
    "bert": Family(
        hidden=768,
        heads=12,
        mlp=3072,
        norm="layer",
        mlp_kind="gelu_erf",
        bias=True,
        post_norm=True,
        causal=False,
        eps=1e-12,
        prefill=(8, 512),
        small=(2, 128),
    ),
    # An image of 14 x 14 patches and a class token: 197 tokens per image.
    "vit": Family(
        hidden=768,
        heads=12,
        mlp=3072,
        norm="layer",
        mlp_kind="gelu_erf",
        bias=True,
        fused_qkv=True,
        causal=False,
        eps=1e-6,
        prefill=(16, 197),
        small=(1, 197),
    ),
}
#: Every family: the hand-written blocks, and the ``transformers`` classes where
#: ``transformers`` is installed (``hf_blocks``).
FAMILIES: dict[str, Family | hf_blocks.HFFamily] = {
    **HAND_WRITTEN,
    **(hf_blocks.FAMILIES if hf_blocks.available() else {}),
}
#: What the suite measures by default: the ``transformers`` classes, as users run them,
#: where they are installed. The hand-written blocks stay selectable by name (and serve
#: the fp8, distributed and CLI benchmarks); they are the default only without them.
DEFAULT_FAMILIES: tuple[str, ...] = tuple(hf_blocks.FAMILIES) if hf_blocks.available() else tuple(HAND_WRITTEN)
SIZES = ("prefill", "small")
RUNS = ("inference", "train")
CUDAGRAPHS, NO_CUDAGRAPHS = "max-autotune", "max-autotune-no-cudagraphs"
MODES = (CUDAGRAPHS, NO_CUDAGRAPHS)


class Attention(nn.Module):
    def __init__(self, f: Family, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads = f.heads, f.kv_heads or f.heads
        self.head_dim = hidden // f.heads
        self.causal = f.causal
        self.widths = [hidden, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim]
        bias = f.bias or f.qkv_bias
        if f.fused_qkv:
            self.qkv = nn.Linear(hidden, sum(self.widths), bias=bias)
        else:
            self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, w, bias=bias) for w in self.widths)
        self.o_proj = nn.Linear(hidden, hidden, bias=f.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if hasattr(self, "qkv"):
            q, k, v = self.qkv(x).split(self.widths, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kv_heads != self.heads:  # each kv head serves a group of q heads (HF's repeat_kv)
            group = self.heads // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, group, t, self.head_dim).reshape(b, self.heads, t, -1)
            v = v[:, :, None].expand(b, self.kv_heads, group, t, self.head_dim).reshape(b, self.heads, t, -1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, f: Family, hidden: int, width: int) -> None:
        super().__init__()
        self.kind = f.mlp_kind
        if self.kind in ("gelu_tanh", "gelu_erf"):
            self.fc1, self.fc2 = nn.Linear(hidden, width, bias=f.bias), nn.Linear(width, hidden, bias=f.bias)
        elif self.kind == "swiglu":
            self.gate_proj = nn.Linear(hidden, width, bias=f.bias)
            self.up_proj = nn.Linear(hidden, width, bias=f.bias)
            self.down_proj = nn.Linear(width, hidden, bias=f.bias)
        elif self.kind == "swiglu_fused":
            self.gate_up_proj = nn.Linear(hidden, 2 * width, bias=f.bias)
            self.down_proj = nn.Linear(width, hidden, bias=f.bias)
        else:
            raise ValueError(f"unknown MLP kind {self.kind!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.kind == "swiglu_fused":
            gate, up = self.gate_up_proj(x).chunk(2, -1)
            return self.down_proj(F.silu(gate) * up)
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh" if self.kind == "gelu_tanh" else "none"))


class Block(nn.Module):
    """One transformer block of ``f``, its widths divided by ``scale`` (the CPU tests'
    tiny blocks; the head count stays)."""

    def __init__(self, f: Family, scale: int = 1) -> None:
        super().__init__()
        hidden, width = f.hidden // scale, f.mlp // scale
        if hidden * scale != f.hidden or hidden % f.heads or width * scale != f.mlp:
            raise ValueError(f"scale {scale} does not divide the widths into {f.heads} whole heads")
        self.norm1, self.norm2 = (
            nn.LayerNorm(hidden, eps=f.eps) if f.norm == "layer" else RMSNorm(hidden, eps=f.eps) for _ in range(2)
        )
        self.attn, self.mlp = Attention(f, hidden), MLP(f, hidden, width)
        self.post_norm = f.post_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.post_norm:
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.mlp(x))
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def loss_direction(
    shape: torch.Size, device: torch.device | str, dtype: torch.dtype = torch.float32, seed: int = 0
) -> torch.Tensor:
    """The fixed random direction a training loss projects a block's output on
    (``ScalarLoss``): seeded, the same values in every dtype, of unit norm over the whole
    output, so that the loss and its gradients keep the scale of one output element
    whatever the token count."""
    direction = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (direction / direction.norm()).to(device=device, dtype=dtype)


def output_direction(block: nn.Module, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``loss_direction`` in the shape of the block's output on ``x`` (one eager call)."""
    with torch.no_grad():
        shape = block(x).shape
    return loss_direction(shape, x.device, dtype)


class ScalarLoss(nn.Module):
    """A training step's loss over the block's output: its projection on a fixed random
    direction, one scalar to backpropagate.

    The loss must depend on every weight. A norm of the output (``mean(out**2)``) does
    not: where the block ends in a normalisation, as a transformers body ends in its final
    RMSNorm, that norm is fixed by the last norm's weight alone, so every other gradient
    is zero in exact arithmetic and any bf16 compile returns rounding noise for it, which
    no accuracy check can judge. A random direction makes each gradient a real quantity."""

    def __init__(self, block: nn.Module, direction: torch.Tensor) -> None:
        super().__init__()
        self.block = block
        self.register_buffer("direction", direction)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if out.shape != self.direction.shape:
            raise ValueError(f"the block's output {tuple(out.shape)} is not the loss's {tuple(self.direction.shape)}")
        return (out.float() * self.direction).sum()


def make_block(
    family: str, size: str, device: str = "cuda", dtype: torch.dtype = torch.bfloat16, scale: int = 1, seed: int = 0
) -> tuple[nn.Module, torch.Tensor]:
    """The block with deterministic, well-scaled weights (normal, std 0.02; biases too,
    so that bias epilogues compute something; norm weights near 1) and a randn input; a
    ``transformers`` class with its own initialisation, seeded (``hf_blocks``)."""
    f = FAMILIES[family]
    torch.manual_seed(seed)
    if isinstance(f, hf_blocks.HFFamily):
        with torch.device(device):
            model = hf_blocks.build(f, scale)
        return model.to(dtype=dtype), hf_blocks.example_input(f, size, scale, device, dtype)
    batch, seq = getattr(f, size)
    block = Block(f, scale).to(device=device, dtype=dtype)
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.normal_(0.0, 0.02)
            if p.dim() == 1 and "norm" in name and name.endswith("weight"):
                p.add_(1.0)
    x = torch.randn(batch, seq, f.hidden // scale, device=device).to(dtype)
    return block, x


@dataclasses.dataclass(frozen=True)
class BlockId:
    family: str
    size: str
    run: str  # "inference": forward under no_grad; "train": forward + backward of a scalar loss

    @property
    def name(self) -> str:
        return f"{self.family}:{self.size}:{self.run}"

    @staticmethod
    def parse(text: str) -> BlockId:
        family, size, run = text.split(":")
        bid = BlockId(family, size, run)
        if family not in FAMILIES or size not in SIZES or run not in RUNS:
            raise ValueError(
                f"unknown block {text!r}: FAMILY:SIZE:RUN with FAMILY in {sorted(FAMILIES)}, "
                f"SIZE in {list(SIZES)}, RUN in {list(RUNS)}"
            )
        return bid


def describe(bid: BlockId, scale: int = 1) -> dict:
    """A row's identity: the block and its token count."""
    f = FAMILIES[bid.family]
    batch, seq = getattr(f, bid.size)
    return {
        "block": bid.name,
        "family": bid.family,
        "size": bid.size,
        "run": bid.run,
        "batch": batch,
        "seq": seq,
        "tokens": batch * seq,
        "hidden": f.hidden // scale,
    }


# ---------------------------------------------------------------------------------------
# What one call runs


def target_of(block: nn.Module, run: str, x: torch.Tensor) -> nn.Module:
    """What is compiled: the block, or for a training step the block with its loss (whose
    direction takes the shape of one eager output)."""
    return block if run == "inference" else ScalarLoss(block, output_direction(block, x))


def make_step(
    fn: Callable, x: torch.Tensor, run: str, params: list[torch.Tensor], cudagraphs: bool = False
) -> Callable[[], list[torch.Tensor]]:
    """One call of the block through ``fn`` (eager or compiled), returning what it
    computed: the output, or for a training step the loss and every gradient (input's
    and parameters'). A training step drops the previous gradients first, so every call
    does the same work. Under CUDA graphs each call starts a new step, as a training or
    serving loop would: the previous call's outputs are not read again."""
    if run == "inference":

        def step() -> list[torch.Tensor]:
            if cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.no_grad():
                return [fn(x)]

        return step

    forward, backward = train_phases(fn, x, params, cudagraphs)

    def train_step() -> list[torch.Tensor]:
        loss = forward()
        backward(loss)
        return [loss, x.grad, *(p.grad for p in params)]

    return train_step


def train_phases(
    fn: Callable, x: torch.Tensor, params: list[torch.Tensor], cudagraphs: bool = False
) -> tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], None]]:
    """A training step cut into its forward (the previous gradients dropped first; under
    CUDA graphs a new step begun) and its backward, which ``make_step`` runs in turn
    (apart, a probe can time each phase)."""

    def forward() -> torch.Tensor:
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        x.grad = None
        for p in params:
            p.grad = None
        return fn(x)

    return forward, lambda loss: loss.backward()


def outputs(step: Callable[[], list[torch.Tensor]]) -> list[torch.Tensor]:
    """One call's results, copied (a CUDA graph's outputs are overwritten by its next replay)."""
    return [t.detach().clone() for t in step()]


def profiled_mode(modes: list[str]) -> str:
    """The mode whose profile gives a row's GPU figures: with CUDA graphs where the row
    runs it, as a user's ``max-autotune`` does."""
    return CUDAGRAPHS if CUDAGRAPHS in modes else modes[0]


def uses_cudagraphs(mode: str) -> bool:
    return bool(torch._inductor.list_mode_options(mode).get("triton.cudagraphs", False))


def compile_block(target: nn.Module, mode: str) -> Callable:
    """``target`` compiled in ``mode``, with the GEMM backends as now configured (so stock
    and ours stay two dynamo entries). The FX graph cache is off so that every compile
    generates its code (captured for the fusion bound) and records its fused epilogues;
    the autotuning results and Triton kernels of one mode's compile serve the other's."""
    return torch.compile(target, options={**compile_options(mode), "fx_graph_cache": False})


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Stock Inductor inside for "stock" (our backend is restored after), ours for "ours"."""
    if name == "ours":
        enable()
        yield
        return
    disable()
    try:
        yield
    finally:
        enable()


@contextlib.contextmanager
def captured_code(into: list[str]) -> Iterator[list[str]]:
    """Every wrapper module Inductor generates inside, appended to ``into`` (through
    ``GraphLowering.save_output_code``, the hook Inductor's own tests patch)."""
    from torch._inductor.graph import GraphLowering

    prior = GraphLowering.save_output_code

    def save(code: str) -> None:
        into.append(code)
        if prior is not None:
            prior(code)

    GraphLowering.save_output_code = save
    try:
        yield into
    finally:
        GraphLowering.save_output_code = prior


# ---------------------------------------------------------------------------------------
# Reading Inductor's wrapper code: which GEMMs ran, and which pointwise kernels read a
# GEMM's output directly (the kernels a fused epilogue could absorb).

_KERNEL_SOURCE = re.compile(r"'''.*?'''", re.S)
_KERNEL_DEF = re.compile(r"^def (\w+)\(([^)]*)\)", re.M)
_RUN = re.compile(r"^\s*(\w+)\.run\((.*)\)\s*$")
_EXTERN = re.compile(r"^\s*extern_kernels\.(\w+)\((.*)\)\s*$")
_ASSIGN = re.compile(r"^\s*(\w+) = (.+)$")
_KWARG = re.compile(r"^\s*(\w+)\s*=(?!=)\s*(.*)$", re.S)
_NAME = re.compile(r"^\s*(?:reinterpret_tensor\(\s*)?([A-Za-z_]\w*)")
#: The wrapper's names of GEMM kernels, by kind (extern GEMM calls are matched apart).
GEMM_KERNEL_PREFIXES = {"template": "triton_tem_", "cutedsl": "cutedsl_"}
POINTWISE_PREFIX = "triton_poi_"


def split_args(text: str) -> list[str]:
    """A call's arguments, split at the commas outside brackets."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        args.append(text[start:].strip())
    return args


def buffer_name(arg: str) -> str | None:
    """The buffer an argument passes (``buf3``, ``reinterpret_tensor(buf3, ...)``), or
    None for a literal."""
    m = _NAME.match(arg)
    return m.group(1) if m else None


def _alias_of(rhs: str) -> str | None:
    """The buffer an assignment's right side names as a whole or reinterprets."""
    m = re.match(r"reinterpret_tensor\((\w+),", rhs) or re.match(r"([A-Za-z_]\w*)\s*(?:;|#|$)", rhs)
    return m.group(1) if m else None


@dataclasses.dataclass
class WrapperAnalysis:
    #: Every GEMM launched, in order: ("extern", op), ("template", kernel) or ("cutedsl", kernel).
    gemms: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Triton pointwise kernels that read a buffer a GEMM wrote, as the GEMM left it.
    pointwise_after_gemm: list[str] = dataclasses.field(default_factory=list)


def analyse_wrapper(code: str, into: WrapperAnalysis | None = None) -> WrapperAnalysis:
    """Follow one wrapper module's launches in order.

    Rules: memory holds a GEMM output after an extern ``*mm*`` call writes it
    (``out=``) or a GEMM kernel (Triton template, ours) writes it; any other write
    ends that. An alias (``bufB = bufA``, ``reinterpret_tensor(bufA, ...)``) is the
    same memory. A Triton kernel reads its arguments bound to ``in_ptr*``,
    ``in_out_ptr*`` and template inputs, and writes those bound to ``out_ptr*`` and
    ``in_out_ptr*`` (its signature is in the module). A kernel whose signature is not
    there (ours) writes the buffers it is the first to touch after their allocation
    or reuse, and reads the rest. Reductions (``triton_red_``, ``triton_per_``) are
    not pointwise and never count."""
    out = into if into is not None else WrapperAnalysis()
    params = {name: [p.split(":")[0].strip() for p in split_args(args)] for name, args in _KERNEL_DEF.findall(code)}
    root: dict[str, str] = {}  # alias -> the buffer whose memory it is
    gemm_out: set[str] = set()  # memory holding a GEMM's output
    fresh: set[str] = set()  # memory allocated or reused, not yet written

    def mem(name: str) -> str:
        return root.get(name, name)

    def written(buf: str, by_gemm: bool) -> None:
        fresh.discard(buf)
        (gemm_out.add if by_gemm else gemm_out.discard)(buf)

    for line in _KERNEL_SOURCE.sub("''", code).splitlines():
        if m := _EXTERN.match(line):
            op, args = m.groups()
            is_gemm = "mm" in op
            if is_gemm:
                out.gemms.append(("extern", op))
            for arg in split_args(args):
                kw = _KWARG.match(arg)
                if kw and kw.group(1) == "out" and (buf := buffer_name(kw.group(2))):
                    written(mem(buf), is_gemm)
        elif m := _RUN.match(line):
            kernel, args = m.groups()
            kind = next((k for k, prefix in GEMM_KERNEL_PREFIXES.items() if kernel.startswith(prefix)), None)
            if kind:
                out.gemms.append((kind, kernel))
            names = params.get(kernel)
            reads, writes = [], []
            for i, arg in enumerate(a for a in split_args(args) if not _KWARG.match(a)):
                buf = buffer_name(arg)
                if buf is None:
                    continue
                buf = mem(buf)
                param = names[i] if names is not None and i < len(names) else None
                if param is None:
                    (writes if names is None and buf in fresh else reads).append(buf)
                    continue
                if not param.startswith("out_ptr"):
                    reads.append(buf)
                if "out_ptr" in param:
                    writes.append(buf)
            reads_gemm_output = any(b in gemm_out for b in reads)
            if kernel.startswith(POINTWISE_PREFIX) and reads_gemm_output and kernel not in out.pointwise_after_gemm:
                out.pointwise_after_gemm.append(kernel)
            for buf in writes:
                written(buf, kind is not None)
        elif m := _ASSIGN.match(line):
            name, rhs = m.groups()
            alias = _alias_of(rhs)
            if alias is not None:
                root[name] = mem(alias)
                if "# reuse" in rhs:
                    fresh.add(root[name])
            else:
                root.pop(name, None)
                written(name, False)
                if rhs.startswith("empty_strided"):
                    fresh.add(name)
    return out


def analyse_wrappers(codes: Iterable[str]) -> WrapperAnalysis:
    """``analyse_wrapper`` over every module of a compile (forward and backward graphs).
    Kernel names are numbered per module, so a name may stand for two kernels; one that
    reads a GEMM output in any module counts."""
    result = WrapperAnalysis()
    for code in codes:
        analyse_wrapper(code, result)
    return result


# ---------------------------------------------------------------------------------------
# Profiles, bounds and the summary (pure: tested on the CPU)

#: GEMM kernels other than ours, by their GPU names (cuBLAS's nvjet / xmma / *gemm*, Triton templates).
OTHER_GEMM_KERNEL = re.compile(r"gemm|nvjet|xmma|" + GEMM_KERNEL_PREFIXES["template"], re.I)


def merge_profiles(profiles: list[list[dict]]) -> dict:
    """Several ``kernel_times`` profiles of one function (rows with "kernel", "launches"
    and "ms" per call) as one: the median total per call in us, and each kernel's median
    time (0 in a profile that lacks it), longest first."""
    names = list(dict.fromkeys(row["kernel"] for rows in profiles for row in rows))
    by_name = [{row["kernel"]: row for row in rows} for rows in profiles]
    kernels = []
    for name in names:
        us = statistics.median(rows[name]["ms"] * 1e3 if name in rows else 0.0 for rows in by_name)
        launches = max(rows[name]["launches"] for rows in by_name if name in rows)
        kernels.append({"kernel": name, "launches": launches, "us": round(us, 2)})
    total = statistics.median(sum(row["ms"] for row in rows) * 1e3 for rows in profiles)
    return {"us": round(total, 2), "kernels": sorted(kernels, key=lambda k: -k["us"])}


def gemm_kernels(kernels: list[dict]) -> list[dict]:
    """The GEMM kernels of a merged profile, each marked ours or not."""
    rows = []
    for k in kernels:
        ours = CUTEDSL_KERNEL in k["kernel"]
        if ours or OTHER_GEMM_KERNEL.search(k["kernel"]):
            rows.append({**k, "ours": ours})
    return rows


def fusion_bound(profile: dict, absorbable: Iterable[str]) -> tuple[float | None, list[dict]]:
    """Stock GPU time over stock GPU time less its ``absorbable`` kernels (pointwise
    kernels reading a GEMM output): what fused epilogues could gain at most, on GEMMs
    as fast as stock's. Returns the bound and those kernels' rows."""
    names = set(absorbable)
    rows = [k for k in profile["kernels"] if k["kernel"] in names]
    rest = profile["us"] - sum(k["us"] for k in rows)
    return (round(profile["us"] / rest, 4) if rest > 0 else None), rows


#: The chrome trace's categories of GPU work: kernels, copies and fills.
GPU_TRACE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def launch_of(event: dict) -> str | None:
    """A kernel event's launch shape, ``"grid X,Y,Z block X,Y,Z regs R smem S"``, from the
    trace's arguments (None for copies and fills, which have none). Two kernels of one
    source that run at different speeds ran different autotuned configs where their
    shapes differ, and the same config elsewhere (placement, or what ran beside them)."""
    args = event.get("args") or {}
    if "grid" not in args or "block" not in args:
        return None
    dims = " ".join(f"{key} {','.join(str(v) for v in args[key])}" for key in ("grid", "block"))
    return f"{dims} regs {args.get('registers per thread', '?')} smem {args.get('shared memory', '?')}"


def timeline_of(trace: dict) -> list[dict]:
    """The GPU work of a profiler's chrome trace in the order it ran: each kernel, copy
    or fill with its start (µs after the first began), its duration, the idle time
    before it (``gap_us``, negative where it overlapped the one before) and, for a
    kernel, its launch shape (``launch_of``). A kernel that reads slow in the profile's
    sums may be waiting on, or running beside, what came before it, or running another
    config; the sums cannot say, the order and the shapes can."""
    # Ordered by start alone: a copy's shape (None) does not compare with a kernel's.
    events = sorted(
        (
            (float(e["ts"]), float(e.get("dur", 0.0)), e["name"], launch_of(e))
            for e in trace.get("traceEvents", [])
            if e.get("ph") == "X" and e.get("cat") in GPU_TRACE_CATEGORIES
        ),
        key=lambda event: event[0],
    )
    out: list[dict] = []
    for ts, dur, name, launch in events:
        start = ts - events[0][0]
        gap = start - (out[-1]["start_us"] + out[-1]["us"]) if out else 0.0
        entry = {"kernel": name, "start_us": round(start, 2), "us": round(dur, 2), "gap_us": round(gap, 2)}
        if launch is not None:
            entry["launch"] = launch
        out.append(entry)
    return out


def dump_block(directory: str, bid: BlockId, codes: dict, timelines: dict) -> str:
    """Write what a block's figures rest on beside them: each backend's wrapper code (the
    kernels' sources) and its profiled mode's GPU timeline, to
    ``directory/BLOCK.json.gz``; returns the path."""
    import gzip

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, bid.name.replace(":", "-") + ".json.gz")
    with gzip.open(path, "wt") as f:
        json.dump({"block": bid.name, "wrappers": codes, "timelines": timelines}, f)
    return path


def _min(values: list[float]) -> float | None:
    return min(values) if values else None


#: Ratios worked out from interleaved rounds (``with_round_figures``): the figure, the
#: timings it comes from, and whether it reads ours / stock (host) or stock / ours (wall).
ROUND_FIGURES = (("host_ratio", "host_us", "ours"), ("wall_speedup", "wall_ms", "stock"))


def with_round_figures(row: dict) -> dict:
    """``row`` with its host and wall figures worked out from its rounds, per mode:
    ``host_ratio`` (ours / stock) and ``wall_speedup`` (stock / ours), each the median of
    its rounds' ratios, and ``host_ratio_interval`` and ``wall_speedup_interval``, the
    95% interval of that median (``harness.median_interval``).

    The rounds, not the two sides' medians: both sides of one round share the host's
    state (clock, other load), which moves between rounds by a quarter either way, and
    the ratio of two medians taken over such rounds can fall far from every round's
    ratio. The interval says when a ratio beyond 1 is more than that noise. A mode whose
    rounds were not kept keeps the ratio it was written with, or else takes the ratio
    of its two sides' times."""
    out = dict(row)
    for figure, timings, numerator in ROUND_FIGURES:
        denominator = "stock" if numerator == "ours" else "ours"
        ratios, intervals = dict(row.get(figure, {})), {}
        for mode, times in row.get(timings, {}).items():
            if not isinstance(times, dict):  # a file from before host time was per mode: one flat {"stock", "ours"}
                continue
            rounds = [v for v in times.get("round_ratios") or [] if v is not None]
            if rounds:
                ratios[mode] = round(statistics.median(rounds), 4)
            elif mode not in ratios:
                ratios[mode] = ratio(times.get(numerator), times.get(denominator))
            interval = median_interval(rounds)
            if interval:
                intervals[mode] = list(interval)
        if ratios:
            out[figure] = ratios
        if intervals:
            out[f"{figure}_interval"] = intervals
    return out


def summarize(rows: list[dict], info: dict) -> dict:
    """The result file: summary figures over the rows that measured them (a failed row
    counts in none), then the rows, then where they ran (``suite_device``)."""
    rows = [with_round_figures(r) for r in rows]
    ok = [r for r in rows if "error" not in r]
    gpu = [r["gpu_speedup"] for r in ok if r.get("gpu_speedup") is not None]
    bound = [r["bound"] for r in ok if r.get("bound") is not None]
    wall = {mode: [r["wall_speedup"][mode] for r in ok if mode in r.get("wall_speedup", {})] for mode in MODES}
    host = [v for r in ok for v in r.get("host_ratio", {}).values() if v is not None]
    host_low = [low for r in ok for low, _ in r.get("host_ratio_interval", {}).values()]
    wall_high = {
        mode: [r["wall_speedup_interval"][mode][1] for r in ok if mode in r.get("wall_speedup_interval", {})]
        for mode in MODES
    }
    return {
        "gpu_speedup_geomean": geomean_or_none(gpu),
        "gpu_speedup_min": _min(gpu),
        "gpu_bound_geomean": geomean_or_none(bound),
        "wall_speedup_geomean_cudagraphs": geomean_or_none(wall[CUDAGRAPHS]),
        "wall_speedup_min_cudagraphs": _min(wall[CUDAGRAPHS]),
        "wall_speedup_geomean_no_cudagraphs": geomean_or_none(wall[NO_CUDAGRAPHS]),
        "wall_speedup_min_no_cudagraphs": _min(wall[NO_CUDAGRAPHS]),
        # The lowest high end of the rows' 95% intervals: below 1, some row runs slower
        # than stock beyond what its rounds' spread explains.
        "wall_speedup_interval_high_min_cudagraphs": _min(wall_high[CUDAGRAPHS]),
        "wall_speedup_interval_high_min_no_cudagraphs": _min(wall_high[NO_CUDAGRAPHS]),
        # Ours over stock, every row in every mode: above 1 is host time we added.
        "host_ratio_max": max(host) if host else None,
        "host_ratio_geomean": geomean_or_none(host),
        # The highest low end of the rows' 95% intervals: above 1, some row and mode
        # costs the host more than stock beyond what its rounds' spread explains.
        "host_ratio_interval_low_max": max(host_low) if host_low else None,
        "rows": rows,
        "device": suite_device(rows, info),
        "torch": info.get("torch"),
    }


def merge_rows(rows: Iterable[dict]) -> list[dict]:
    """Rows of several partial runs, one per block, in order of first appearance. Rows
    of one block merge key by key, the later winning, except: a failed row leaves a row
    that did not fail as it is, and a measured row replaces a failed one whole."""
    merged: dict[str, dict] = {}
    for row in rows:
        old = merged.get(row["block"])
        if old is None:
            merged[row["block"]] = dict(row)
        elif "error" in row and "error" not in old:
            continue
        elif "error" in old and "error" not in row and "gpu_us" in row:
            merged[row["block"]] = dict(row)
        else:
            old.update(row)
    return list(merged.values())


def combine(results: list[dict]) -> dict:
    """Several result files as one, summary figures computed again over the merged rows."""
    info = next(({"device": r.get("device"), "torch": r.get("torch")} for r in results if r.get("device")), {})
    return summarize(merge_rows(row for r in results for row in stamped(r)), info)


def _fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or a dash as wide."""
    if value is not None:
        return format(value, spec)
    width = int(re.match(r"\D*(\d*)", spec).group(1) or 0)
    return "-".ljust(width) if spec.startswith("<") else "-".rjust(width)


def print_table(result: dict) -> None:
    head = (
        f"{'block':<24} {'GPU us stock/ours':>19} {'GPU x':>6} {'bound':>6} {'wall cg':>7} {'no-cg':>6} "
        f"{'host x cg/no-cg':>15}  {'our GEMMs':>9}  fused"
    )
    print("\n" + head)
    for r in result["rows"]:
        if "error" in r:
            print(f"{r['block']:<24} FAILED: {r['error'][:150]}")
            continue
        gpu, host, wall = r.get("gpu_us", {}), r.get("host_ratio", {}), r.get("wall_speedup", {})
        ours_gemms = r.get("gemm_kernels", {}).get("ours", [])
        launches = sum(k["launches"] for k in ours_gemms)
        mine = sum(k["launches"] for k in ours_gemms if k["ours"])
        fused = "; ".join("+".join(f["ops"]) for f in r.get("fused", [])) or "-"
        print(
            f"{r['block']:<24} {_fmt(gpu.get('stock'), '9.1f')}/{_fmt(gpu.get('ours'), '<9.1f')} "
            f"{_fmt(r.get('gpu_speedup'), '6.3f')} {_fmt(r.get('bound'), '6.3f')} "
            f"{_fmt(wall.get(CUDAGRAPHS), '7.3f')} {_fmt(wall.get(NO_CUDAGRAPHS), '6.3f')} "
            f"{_fmt(host.get(CUDAGRAPHS), '7.3f')}/{_fmt(host.get(NO_CUDAGRAPHS), '<7.3f')}  "
            f"{f'{mine:g}/{launches:g}' if ours_gemms else '-':>9}  {fused[:80]}"
        )
    summary = {k: v for k, v in result.items() if k not in ("rows",)}
    print(json.dumps(summary))


# ---------------------------------------------------------------------------------------
# Measurements on the GPU


class GpuProbe:
    """The measurements that need the GPU (the CPU tests stand a fake in its place).
    Each takes {"stock": step, "ours": step} and measures both interleaved."""

    profile_rounds = 4  # profiles per contender, in a balanced order
    profile_calls = 10  # calls per profile
    #: Host rounds per contender: a training step's ratio moves between rounds by about a
    #: quarter either way (the rows' ``round_ratios``; findings.md, Host time), and
    #: ``host_ratio_max`` is judged over every row and mode: the median's error falls as
    #: the root of the rounds, and a round costs only a sleep and a few calls.
    host_rounds = 40
    max_queued_launches = 400  # well inside the GPU's launch queue: enqueueing never blocks

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def quiet(self, timeout: float = 600) -> dict:
        """Wait for our builds still in flight (a compile may leave speculative ones
        running in worker processes), at most ``timeout`` seconds, then say how loaded
        the host is: host-bound timings move with whatever else takes the CPU."""
        from inductor_cutedsl.runtime import compiler

        t0 = time.perf_counter()
        waited = compiler.wait_idle(timeout=timeout)
        return {
            "builds_waited": waited,
            "waited_s": round(time.perf_counter() - t0, 1),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }

    def loop_ms(self, steps: dict, calls: int = 50, rounds: int = 4) -> dict:
        """Median ms per call of ``calls`` back-to-back calls and one sync, in
        interleaved rounds: what a loop without CUDA graphs sees (each call's host
        work overlaps the previous call's GPU work; no L2 flush between calls)."""
        times: dict = {name: [] for name in steps}
        for order in rotations(list(steps), rounds):
            for name in order:
                steps[name]()
                self.synchronize()
                t0 = time.perf_counter()
                for _ in range(calls):
                    steps[name]()
                self.synchronize()
                times[name].append((time.perf_counter() - t0) / calls * 1e3)
        return {name: round(statistics.median(t), 4) for name, t in times.items()}

    #: Wall rounds per contender and the ms of calls in each. A small row's step is set
    #: by the host, and a round's stock / ours moved from 0.40 to 1.16 over ten rounds of
    #: 200 ms (the GPT-2-class small inference row, CUDA graphs): many short rounds give
    #: the median a narrower error than a few long ones, for the same time.
    wall_rounds = 40
    wall_rep_ms = 50

    def wall_ms(self, steps: dict) -> dict:
        """Median ms per call over interleaved rounds (``side_by_side_rounds``: do_bench on
        the stream, host included where it is longer than the GPU's work), and each
        round's stock / ours ratio (``round_ratios``): how far one run's ratio can be
        trusted where the host sets the pace."""
        rounds = side_by_side_rounds(steps, self.wall_rounds, self.wall_rep_ms)
        out: dict = {name: round(statistics.median(t), 4) for name, t in rounds.items()}
        if set(rounds) == set(BACKENDS):
            out["round_ratios"] = [round(s / o, 4) for s, o in zip(rounds["stock"], rounds["ours"], strict=True)]
        return out

    trace_calls = 3  # calls of a timeline (``timeline``)

    def timeline(self, step: Callable[[], object]) -> list[dict]:
        """The GPU's work through ``trace_calls`` calls of ``step`` (after one more),
        in order (``timeline_of``)."""
        import tempfile

        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        step()
        self.synchronize()
        with profiler(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(self.trace_calls):
                step()
            self.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                return timeline_of(json.load(f))

    def profile(self, steps: dict) -> dict:
        """Each step's kernels under the profiler, merged over interleaved rounds
        (``merge_profiles``): a kernel's time depends on the clock the one before left."""
        runs: dict = {name: [] for name in steps}
        for order in rotations(list(steps), self.profile_rounds):
            for name in order:
                runs[name].append(kernel_times(steps[name], calls=self.profile_calls, top=None, name_chars=None))
        return {name: merge_profiles(profiles) for name, profiles in runs.items()}

    def launches(self, steps: dict) -> dict:
        """Each step's graph replays and kernels launched alone, per call
        (``harness.launch_api_calls``)."""
        return {name: launch_api_calls(step, self.profile_calls) for name, step in steps.items()}

    def host_us(self, steps: dict, launches: dict) -> dict:
        """Host time per call: calls enqueued behind a GPU sleep long enough that the GPU
        starts none of them while the host times them (``gpu_busy`` says whether it held
        every time), so nothing the GPU does can slow the host. Few enough calls that
        their launches fit in the launch queue. Medians over interleaved rounds, with
        each round's ours / stock (``round_ratios``): small steps move between rounds."""
        calls = {n: max(2, min(20, int(self.max_queued_launches // max(launches[n], 1)))) for n in steps}
        times: dict = {name: [] for name in steps}
        busy = True
        for order in rotations(list(steps), self.host_rounds):
            for name in order:
                ms, pure = enqueue_ms(steps[name], calls[name])
                busy &= pure
                times[name].append(ms * 1e3)
        rounds = [ratio(ours, stock) for stock, ours in zip(times["stock"], times["ours"])]
        return {
            **{name: round(statistics.median(t), 1) for name, t in times.items()},
            "calls": calls,
            "gpu_busy": busy,
            "round_ratios": rounds,
        }


class AccuracyError(AssertionError):
    pass


def decision_marks() -> tuple[int, int, int]:
    """Where this process's logs of ours' decisions stand (``decisions_since``)."""
    from inductor_cutedsl.lowering import fair_timing, gated
    from inductor_cutedsl.scheduler import selection

    return len(selection.decisions), len(gated.decisions), len(fair_timing.decisions)


def decisions_since(marks: tuple[int, int, int]) -> dict:
    """What the epilogue selection, the gated MLP's lowering and fair timing measured
    and decided since ``marks`` (``decision_marks``), as plain JSON."""
    from inductor_cutedsl.lowering import fair_timing, gated
    from inductor_cutedsl.scheduler import selection

    return plain(
        {
            "epilogue": selection.decisions[marks[0] :],
            "gated": gated.decisions[marks[1] :],
            "gemm": fair_timing.decisions[marks[2] :],
        }
    )


#: Inductor's loggers of a Triton kernel's tuning at its first call: each config's timing
#: (``CachingAutotuner.benchmark_all_configs``), coordinate descent's steps and the winner.
TUNING_LOGGERS = ("torch._inductor.runtime.triton_heuristics", "torch._inductor.runtime.coordinate_descent_tuner")
#: Marks in the tuning log: the block, backend and mode whose first call tunes next.
tuning_log = logging.getLogger("benchmarks.models.tuning")


def log_tuning(path: str) -> logging.Handler:
    """Write Inductor's tuning log (``TUNING_LOGGERS`` at DEBUG) and the compiles' marks
    (``tuning_log``) to ``path``, not to the screen; returns the handler. Two kernels of
    one source that run different configs were tuned apart: the timings each config
    measured say whether the tuner saw the difference the profile sees."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(relativeCreated)d %(name)s: %(message)s"))
    for name in (*TUNING_LOGGERS, tuning_log.name):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
        logger.propagate = False
    return handler


def measure_block(
    bid: BlockId,
    row: dict,
    modes: list[str],
    probe: GpuProbe,
    *,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    scale: int = 1,
    compile_fn: Callable = compile_block,
    first: str = "stock",
    dump: str | None = None,
) -> None:
    """Fill ``row`` with the block's figures (as far as it gets: an exception leaves
    what was measured before it).

    Each backend compiles once per mode, the mode without CUDA graphs first; stock under
    ``disable()``. The wrapper code read (which GEMMs ran, the bound's kernels, the dump),
    the row's ``fused`` epilogues and its ``decisions`` are the profiled mode's: each
    mode's compile autotunes and fuses apart and numbers its kernels in its own order,
    so another mode's kernel names can miss the profile's kernels or name others, and its
    decisions need not be the ones the profile's kernels rest on. The first call compiles
    (a training step's backward compiles at its first backward), so it runs in its
    backend's state. Outputs are compared after two more calls, the first replay of a
    CUDA graph. With ``dump`` (a directory) the wrapper code and the profiled mode's GPU
    timeline of each backend are written there (``dump_block``)."""
    from inductor_cutedsl.scheduler import scheduling

    block, x = make_block(bid.family, bid.size, device, dtype, scale)
    params = list(block.parameters())
    if bid.run == "train":
        x.requires_grad_(True)
    target = target_of(block, bid.run, x)
    eager = outputs(make_step(target, x, bid.run, params))
    order = sorted(modes, key=lambda m: uses_cudagraphs(m))
    profiled = profiled_mode(modes)
    steps: dict = {b: {} for b in BACKENDS}
    outs: dict = {b: {} for b in BACKENDS}
    codes: dict = {b: [] for b in BACKENDS}
    row["compile_s_in_process"] = {b: {} for b in BACKENDS}
    # Autotuning results and Triton kernels of the first backend's compile serve the
    # second's: ``first`` picks who pays for them (in-process compile times only).
    row["compiled_first"] = first
    for name in sorted(BACKENDS, key=lambda b: b != first):
        with backend(name):
            for mode in order:
                fused_before = len(scheduling.fused_epilogues)
                decided_before = decision_marks()
                tuning_log.info("%s %s %s", bid.name, name, mode)
                step = make_step(compile_fn(target, mode), x, bid.run, params, uses_cudagraphs(mode))
                with captured_code(codes[name]) if mode == profiled else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    step()
                    probe.synchronize()
                row["compile_s_in_process"][name][mode] = round(time.perf_counter() - t0, 1)
                if name == "ours":
                    # Each mode decides apart (fair timing's regime), and the GPU figures
                    # are the CUDA-graph mode's: its decisions are the ones they rest on.
                    decided = decisions_since(decided_before)
                    row.setdefault("decisions_by_mode", {})[mode] = decided
                    if mode == profiled:  # (plain JSON: a size may be a sympy integer)
                        row["fused"] = plain(scheduling.fused_epilogues[fused_before:])
                        row["decisions"] = decided
                step()
                outs[name][mode] = outputs(step)
                steps[name][mode] = step
    analysis = {b: analyse_wrappers(codes[b]) for b in BACKENDS}
    row["gemm_sites"] = {b: [list(g) for g in analysis[b].gemms] for b in BACKENDS}
    # Per output (a training step's loss, then each gradient): its distances, the worst
    # over the modes. The row's figures are the worst outputs'.
    per_output = [
        {
            "stock_vs_eager": max(rel_err(outs["stock"][m][i], ref) for m in modes),
            "ours_vs_eager": max(rel_err(outs["ours"][m][i], ref) for m in modes),
            "ours_vs_stock": max(rel_err(outs["ours"][m][i], outs["stock"][m][i]) for m in modes),
        }
        for i, ref in enumerate(eager)
    ]
    row["rel_err"] = {key: max(errs[key] for errs in per_output) for key in per_output[0]}
    row["rel_err_outputs"] = [{key: round(err, 5) for key, err in errs.items()} for errs in per_output]
    # Each output of ours must match stock within bf16 tolerance and be no further from
    # eager than that, unless stock's own compile is further from eager on that output: a
    # bf16 gradient whose value is a small difference of large terms (a query or key
    # projection's under near-uniform attention) differs between any two compiles and
    # eager by rounding alone. Ours is then held to twice stock's own distance, output by
    # output, so a wrong output that stock computes well still fails.
    for i, errs in enumerate(per_output):
        limit = max(TOLERANCE, 2 * errs["stock_vs_eager"])
        for key in ("ours_vs_stock", "ours_vs_eager"):
            if not errs[key] < limit:
                raise AccuracyError(f"{bid.name}: output {i} {key} rel err {errs[key]:.3e} >= {limit:.3e}")
    del eager, outs

    row["host_state"] = probe.quiet()
    wall = {mode: probe.wall_ms({b: steps[b][mode] for b in BACKENDS}) for mode in modes}
    row["wall_ms"] = wall  # its figure, ``wall_speedup``, is its rounds' (``with_round_figures``)
    # Cross-checked by a plain loop of calls, as a serving or training loop runs them:
    # where the host sets the pace (no CUDA graphs; a training step's autograd between
    # its two graphs) the two measures can disagree.
    loops = {mode: probe.loop_ms({b: steps[b][mode] for b in BACKENDS}) for mode in modes}
    row["wall_loop_ms"] = loops
    row["wall_loop_speedup"] = {mode: ratio(t["stock"], t["ours"]) for mode, t in loops.items()}

    # GPU time in each mode. Without CUDA graphs ours ranks short GEMMs by GPU time plus
    # launch host time (``fair_timing.regime``), so its kernels there may trade GPU time
    # for host time by design, which the wall and host figures count. The row's GPU
    # figures (``gpu_speedup``, the bound, the kernels) are the CUDA-graph mode's, where
    # both sides' choices are ranked by GPU time; ``gpu_speedup_by_mode`` has both.
    profs = {mode: probe.profile({b: steps[b][mode] for b in BACKENDS}) for mode in modes}
    for mode_prof in profs.values():
        if any(CUTEDSL_KERNEL in k["kernel"] for k in mode_prof["stock"]["kernels"]):
            raise AssertionError(f"{bid.name}: the stock compile ran CuteDSL kernels: the comparison would be void")
    prof = profs[profiled]
    row["profiled_mode"] = profiled
    row["gpu_speedup_by_mode"] = {mode: ratio(p["stock"]["us"], p["ours"]["us"]) for mode, p in profs.items()}
    row["gpu_us"] = {b: prof[b]["us"] for b in BACKENDS}
    row["gpu_speedup"] = ratio(prof["stock"]["us"], prof["ours"]["us"])
    row["bound"], row["bound_kernels"] = fusion_bound(prof["stock"], analysis["stock"].pointwise_after_gemm)
    if not codes["stock"]:
        row["bound_note"] = "no wrapper code captured: the bound counts no kernel"
    row["gemm_kernels"] = {b: gemm_kernels(prof[b]["kernels"]) for b in BACKENDS}
    row["kernels"] = {b: prof[b]["kernels"] for b in BACKENDS}
    if dump:
        timelines = {b: probe.timeline(steps[b][profiled]) for b in BACKENDS}
        row["dump"] = os.path.basename(dump_block(dump, bid, codes, timelines))
    # Host time in every mode: a CUDA graph's replay still runs the wrapper's Python and,
    # in training, autograd between the two graphs. The profiled launches bound the calls
    # that fit in the launch queue (a graph's replay takes no more than its kernels).
    launches = {b: sum(k["launches"] for k in prof[b]["kernels"]) for b in BACKENDS}
    row["host_us"] = {mode: probe.host_us({b: steps[b][mode] for b in BACKENDS}, launches) for mode in modes}
    row.update(with_round_figures(row))
    # Whether each step replays its CUDA graphs or runs its wrapper (launching kernels one
    # by one): a graphed step's wall time above its kernels' is the host's.
    row["launches_per_call"] = {mode: probe.launches({b: steps[b][mode] for b in BACKENDS}) for mode in modes}


def release() -> None:
    """Free the block's GPU memory and compiled code before the next block. Only here,
    after both backends are done: a reset between two compiles makes the first recompile.
    The reset also drops our backend's compile hook, so the backend is installed again."""
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    disable()
    enable()


def run_blocks(
    blocks: list[BlockId],
    modes: list[str],
    json_path: str | None,
    *,
    probe: GpuProbe | None = None,
    info: dict | None = None,
    prior: list[dict] | None = None,
    retry_failed: bool = False,
    budget: float | None = None,
    **measure_kw,
) -> dict:
    """Measure each block in turn, rewriting ``json_path`` after each. A block that
    fails records its error and the run goes on.

    The ``prior`` rows (an earlier run's) are kept; a block they hold measured (or
    failed, unless ``retry_failed``) is not run again. With a ``budget`` (seconds from
    now), a block starts only if it is expected to end within it: it is expected to take
    as long as the longest block of its run so far, or for a first training block twice
    the longest block so far."""
    probe = probe or GpuProbe()
    info = info if info is not None else run_info()
    rows: list[dict] = list(prior or [])

    done = {r["block"] for r in merge_rows(rows) if "gpu_us" in r or ("error" in r and not retry_failed)}
    result = summarize(merge_rows(rows), info)
    if rows:
        write_json(result, json_path)
    start, seconds, left = time.perf_counter(), {run: [] for run in RUNS}, []
    for bid in blocks:
        if bid.name in done:
            print(f"== {bid.name}: done in the earlier run, skipped", flush=True)
            continue
        every = [t for ts in seconds.values() for t in ts]
        expected = max(seconds[bid.run] or [t * (2 if bid.run == "train" else 1) for t in every] or [0.0])
        if budget is not None and time.perf_counter() - start + expected > budget:
            print(
                f"== {bid.name}: not started (expected {expected:.0f} s, "
                f"{budget - (time.perf_counter() - start):.0f} s of the budget left)",
                flush=True,
            )
            left.append(bid.name)
            continue
        row = {**describe(bid, measure_kw.get("scale", 1)), "device": info.get("device")}
        t0 = time.perf_counter()
        print(f"== {bid.name} ({row['tokens']} tokens)", flush=True)
        try:
            measure_block(bid, row, modes, probe, **measure_kw)
        except Exception as exc:
            traceback.print_exc()
            row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            release()
        row["seconds"] = round(time.perf_counter() - t0, 1)
        seconds[bid.run].append(row["seconds"])
        rows.append(row)
        result = summarize(merge_rows(rows), info)
        write_json(result, json_path)
        print(f"{bid.name}: {_block_line(row)} [{row['seconds']} s]", flush=True)
    print_table(result)
    if left:
        print(f"not started (run again with --resume): {','.join(left)}")
    return result


def _rounds_note(row: dict, figure: str, mode: str, spread: list[float]) -> str:
    """The rounds' range of a row's ``figure`` in ``mode``, and its median's 95% interval."""
    interval = row.get(f"{figure}_interval", {}).get(mode)
    within = f", median within {interval[0]}-{interval[1]} at 95%" if interval else ""
    return f"rounds {min(spread)}-{max(spread)}{within}"


def _block_line(row: dict) -> str:
    if "error" in row:
        return f"FAILED {row['error'][:300]}"
    parts = []
    if "gpu_us" in row:
        parts.append(
            f"GPU {row['gpu_us']['stock']:.1f}/{row['gpu_us']['ours']:.1f} us = {row.get('gpu_speedup')}x "
            f"(bound {row.get('bound')})"
        )
    for mode, speedup in row.get("wall_speedup", {}).items():
        spread = row.get("wall_ms", {}).get(mode, {}).get("round_ratios")
        parts.append(
            f"wall {mode} {speedup}x" + (f" ({_rounds_note(row, 'wall_speedup', mode, spread)})" if spread else "")
        )
    parts += [f"loop {mode} {speedup}x" for mode, speedup in row.get("wall_loop_speedup", {}).items()]
    if "host_state" in row:
        parts.append(f"load {row['host_state']['loadavg_1m']} after {row['host_state']['builds_waited']} builds")
    for mode, host in row.get("host_us", {}).items():
        spread = host.get("round_ratios")
        parts.append(
            f"host {mode} {host['stock']}/{host['ours']} us = {row.get('host_ratio', {}).get(mode)}x"
            + (f" ({_rounds_note(row, 'host_ratio', mode, spread)})" if spread else "")
        )
    return ", ".join(parts) or "-"


# ---------------------------------------------------------------------------------------
# Command line


def parse_blocks(text: str) -> list[tuple[str, str]]:
    """``--blocks``: comma-separated FAMILY or FAMILY:SIZE; a family alone means both sizes."""
    picked = []
    for token in filter(None, (t.strip() for t in text.split(","))):
        family, _, size = token.partition(":")
        if family not in FAMILIES:
            raise argparse.ArgumentTypeError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        if size and size not in SIZES:
            raise argparse.ArgumentTypeError(f"unknown size {size!r} in {token!r} (known: {', '.join(SIZES)})")
        picked += [(family, s) for s in ([size] if size else SIZES)]
    if not picked:
        raise argparse.ArgumentTypeError("no block named")
    return list(dict.fromkeys(picked))


def comma_choices(known: Iterable[str], what: str) -> Callable[[str], list[str]]:
    known = list(known)

    def parse(text: str) -> list[str]:
        picked = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in picked if t not in known]
        if bad or not picked:
            raise argparse.ArgumentTypeError(f"unknown {what} {bad or text!r} (known: {', '.join(known)})")
        return list(dict.fromkeys(picked))

    return parse


def select(blocks: list[tuple[str, str]], runs: list[str]) -> list[BlockId]:
    """The blocks to measure, in the order named: each (family, size) in every run asked
    for; training only for the families that train."""
    return [BlockId(f, s, r) for f, s in blocks for r in runs if r == "inference" or FAMILIES[f].train]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--blocks",
        type=parse_blocks,
        default=parse_blocks(",".join(DEFAULT_FAMILIES)),
        help=f"comma-separated FAMILY or FAMILY:SIZE (families: {', '.join(FAMILIES)}; sizes: "
        f"{', '.join(SIZES)}; a family alone: both sizes; hf-*: transformers classes). Default: "
        f"{', '.join(DEFAULT_FAMILIES)}",
    )
    ap.add_argument(
        "--runs",
        type=comma_choices(RUNS, "run"),
        default=list(RUNS),
        help="inference (forward under no_grad) and/or train (forward + backward; only the families "
        f"{', '.join(f for f in FAMILIES if FAMILIES[f].train)}). Default: both",
    )
    ap.add_argument(
        "--modes",
        type=comma_choices(MODES, "mode"),
        default=list(MODES),
        help=f"torch.compile modes to time, comma-separated. Default: {','.join(MODES)}",
    )
    ap.add_argument("--json", default=None, help="result file, rewritten after every block")
    ap.add_argument(
        "--resume",
        metavar="FILE",
        help="an earlier run's result file (if it exists): its rows are kept in --json, and the "
        "blocks it holds measured (or failed) are skipped",
    )
    ap.add_argument(
        "--compile-first",
        choices=BACKENDS,
        default="stock",
        help="which backend compiles first in each block's process and so pays for the autotuning "
        "both share (default stock)",
    )
    ap.add_argument("--retry-failed", action="store_true", help="with --resume: run the failed blocks again")
    ap.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="start no block that would likely end later than SECONDS from the start (expected: the "
        "longest block of its run so far; a first training block, twice the longest block); "
        "the blocks left are listed for a --resume run",
    )
    ap.add_argument(
        "--dump",
        metavar="DIR",
        help="write each block's wrapper code and GPU timeline (kernels in the order they ran, "
        "with the gaps between them) of both backends to DIR/BLOCK.json.gz",
    )
    ap.add_argument(
        "--log-tuning",
        metavar="FILE",
        help="write Inductor's tuning of the Triton kernels (each config's timing, coordinate "
        "descent's steps), each compile marked by block, backend and mode, to FILE",
    )
    ap.add_argument(
        "--combine",
        nargs="+",
        metavar="FILE",
        help="merge these result files' rows into --json (summary figures computed again); no GPU",
    )
    return ap


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    if args.combine:
        results = []
        for path in args.combine:
            with open(path) as f:
                results.append(json.load(f))
        result = combine(results)
        write_json(result, args.json)
        print_table(result)
        return result
    if not torch.cuda.is_available():
        print("no CUDA GPU on this machine: the model suite needs a Hopper GPU; nothing measured")
        return None
    # Static shapes, as in a first compile: every block reuses Block.forward's code, so
    # dynamo must not take a new block's sizes for sizes that vary. A block that would
    # fall back to eager after too many recompiles fails instead.
    # Our lowering's and scheduler's decisions, with their reasons, go to the log.
    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("inductor_cutedsl").setLevel(logging.INFO)
    if args.log_tuning:
        log_tuning(args.log_tuning)
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    stock_as_fair_stock()
    blocks = select(args.blocks, args.runs)
    if not blocks:
        print("no block to measure: training runs only for " + ", ".join(f for f in FAMILIES if FAMILIES[f].train))
        return None
    prior = None
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            prior = stamped(json.load(f))
    return run_blocks(
        blocks,
        args.modes,
        args.json,
        prior=prior,
        retry_failed=args.retry_failed,
        budget=args.budget,
        first=args.compile_first,
        dump=args.dump,
    )


if __name__ == "__main__":
    main()
