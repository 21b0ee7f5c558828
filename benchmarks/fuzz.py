"""Seeded fuzzing of inductor_cutedsl against float64, on an H200.

    python -m benchmarks.fuzz --json benchmarks/results/h200-fuzz.json
    python -m benchmarks.fuzz --budget 520 --resume benchmarks/results/h200-fuzz.json \\
        --json benchmarks/results/h200-fuzz.json
    python -m benchmarks.fuzz --precompile          # the runtime cases' kernels, on any machine

Three kinds of work, each drawn from its own seed so that any one can be rebuilt alone:

* runtime cases (``--runtime-cases``): ``runtime.gemm``, ``gated_gemm`` and
  ``scaled_gemm`` calls over the configuration space the package offers (the configs
  ``shortlist`` and ``dual_shortlist`` give over many shapes, and hand-picked corners:
  stream-K, pingpong, 64-row tiles, store buffers, fp8 promotion modes, dual kernels
  keeping their pre-activations, staged and paired operands). A kernel spec is built
  once and serves every size, so the specs are few (``SPECS``) and the cases many: odd
  sizes, batches, padded leading dimensions, storage offsets, broadcast and strided
  operands, every output inside a larger buffer poisoned with NaN whose padding must
  stay NaN. Some cases are drawn flawed (``Case.flaw``): the runtime must refuse
  them, by the rule the flaw breaks.
* random programs (``--programs``): one GEMM (linear, matmul, bmm, addmm, baddbmm) and
  a random chain of pointwise consumers, kept intermediates, a second GEMM, compiled
  with max-autotune and CuteDSL as the GEMM backend.
* model-shaped programs (``--model-programs``): MLPs on 3-D activations, both gated MLP
  forms, attention with head views and bmm, baddbmm, fp8 ``_scaled_mm`` with scales and
  bias, forward and backward, dynamic token counts (``mark_dynamic``; never more
  recompiles than stock Inductor) and CUDA graphs.

Every result is compared with float64 (relative norm error, per-dtype tolerance); every
buffer a compiled program allocates is filled with NaN first. The backend runs strict
(``INDUCTOR_CUTEDSL_STRICT=1``): an internal failure raises and counts as a crash. Every
refusal is classified by the rule it names (``classify``); one matching no rule, or a
rule the case or program was not drawn to meet (``Program.allowed_rules``), is
``unexplained`` and fails the run, as do ``wrong`` results and ``crashes``.

The work runs in ``--jobs`` processes, each a fixed slice of the items; ``--budget``
stops starting items when the time is nearly spent, and ``--resume`` continues a
previous result file where it stopped (items are keyed, so a rerun never repeats one).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from inductor_cutedsl import errors
from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.kernels.config import PROMOTE_TILE, dual_shortlist, promotion_mode, shortlist

from .harness import rel_err, run_info, write_json

SEED = 20261201
DEFAULT_JSON = "benchmarks/results/h200-fuzz.json"

BF, FP, F32, F8 = "bfloat16", "float16", "float32", "float8_e4m3fn"
SHORT = {BF: "bf16", FP: "fp16", F32: "fp32", F8: "e4m3"}
TORCH_DTYPES = {BF: torch.bfloat16, FP: torch.float16, F32: torch.float32, F8: torch.float8_e4m3fn}
E4M3_MAX = 448.0

# Relative norm error against float64, by output dtype: rounding the output dominates
# (bf16 2^-9, fp16 2^-11, e4m3 2^-4), plus the epilogue's approximate tanh/exp/rcp.
TOL = {BF: 1.5e-2, FP: 5e-3, F32: 5e-3, F8: 7e-2}
# fp8 without promotion: the wgmma accumulates with about 14 bits (tests/test_fp8_gpu.py).
FAST_ACCUM_TOL = 2e-2
# Compiled programs: against float64, at most this, or twice what eager in the program's
# dtype is off by itself (a chain of bf16 roundings, or a bf16 backward, is that far
# from float64 whatever runs it).
PROGRAM_TOL = {BF: 3e-2, FP: 1e-2, F32: 1e-3}


# --- Refusals and their rules ---------------------------------------------------------

#: The rules of the compile path's refusals: ``Unsupported.rule`` is one of these.
PACKAGE_RULES: tuple[str, ...] = tuple(getattr(errors, "RULES", ()))
#: Every rule a refusal may name, and the reasons that name it, first match wins. A
#: reason that names its rule itself (``Unsupported.rule``, or a trailing "[rule]" as the
#: package logs them) needs no pattern; the runtime's refusals (a ValueError's text) and
#: the log lines that carry a bare reason do. The patterns give the package's rule for
#: each reason its source words (tests/test_fuzz_cases.py renders them all and checks).
#: A reason matching none is unexplained.
RULES: tuple[tuple[str, str], ...] = (
    ("config", r"^config \S+: |^promote: "),
    ("measured-slower", r"measured faster|left to Inductor \(no CuteDSL candidate within"),
    ("not-paired", r"the scheduler did not pair them"),
    ("backend-off", r"is not in max_autotune_gemm_backends"),
    ("max-autotune-off", r"max-autotune is off"),
    ("codegen-blocked", r"^AOT compilation|cpp_wrapper is on"),
    ("fp8-off", r"fp8 candidates are off|output is off \(INDUCTOR_CUTEDSL_FP8"),
    ("device", r"not a CUDA device|kernel is built for sm_90a|tensor has no device|are on different devices"),
    (
        "argument-type",
        r"is an? \S+, not an? |keep_out must be two tensors|takes \S+ operands \(|"
        r"fp8 operands need an output dtype|^out is \S+ but out_dtype is",
    ),
    (
        "shape",
        r"unsupported ranks|batch sizes differ|inner sizes differ|^empty GEMM|is not the product's|"
        r"does not broadcast to|b_gate and b_up differ in shape",
    ),
    ("dual-config", r"no dual config fits|^a dual kernel's|^a dual kernel has no"),
    ("fp8-layout", r"fp8 operands must both be K-major"),
    ("scaled-mm-v2", r"^torch\._scaled_mm_v2"),
    ("scale-result", r"scale_result"),
    (
        "scale-mode",
        r"CuteDSL takes fp32 scales|^scales .* want fp32|scales differ in mode|scale_up differ in mode|"
        r"^scales: fp8 operands need|^scales must be three tensors",
    ),
    ("beta-zero", r"^beta == 0"),
    ("operand-alignment", r"declared for paired loads|declared for TMA staging"),
    (
        "tma-alignment",
        r"not a multiple of \S+ bytes|is not \S+-byte aligned|not row-major with 16-byte rows|"
        r"not provably whole 16-byte units|^output rows of .* not a multiple of|"
        r"rows or offset are not 16-byte aligned",
    ),
    ("broadcast-batch", r"broadcast batch"),
    (
        "layout",
        r"no unit-stride matrix mode|^out is not row-major|are not contiguous along mode|"
        r"weights are laid out differently|b_gate and b_up differ in major",
    ),
    ("operand-kind", r"is not a \S+ vector|is not a single value|^output operand \S+ is broadcast|is a scalar"),
    (
        "dtype",
        r"operand dtypes|output dtype|^bias |^dtypes |must be an? \S+ tensor, got|with dtype \S+ \(|"
        r"^cast to|has dtype|biases and kept outputs must be tensors|not fp8$|take fp8 e4m3 operands",
    ),
    ("activation", r"activation .* not in"),
    ("kept-outputs", r"already writes extra outputs|of its buffers are read elsewhere"),
    ("reduction", r"is a reduction"),
    ("not-pointwise", r"is not a plain pointwise node"),
    ("store-mode", r"^store mode"),
    ("unsupported-op", r"has no CuteDSL epilogue translation|^a NaN constant"),
    ("loops", r"^loops \S.* (?:cover less than|do not tile)"),
    ("chain-shape", r"the epilogue stores nothing|the chain does not read the GEMM output"),
    (
        "indexing",
        r"indirect indexing|^index |not element-for-element|reads neither the GEMM output|"
        r"negative stride or offset|is read transposed",
    ),
)
_RULE_PATTERNS = [(rule, re.compile(pattern)) for rule, pattern in RULES]
KNOWN_RULES = frozenset(rule for rule, _ in RULES) | frozenset(PACKAGE_RULES)
#: What the runtime's refusals start with (``runtime.launch``).
_RUNTIME_PREFIX = re.compile(r"^inductor_cutedsl cannot run this (?:scaled |gated )?GEMM: ")
#: Argument names the runtime puts before a reason it got from a shared check.
_ARGUMENT_PREFIX = re.compile(r"^(?:out|a|b|b_gate|b_up|operand \S+): (?=\S)")
#: A rule named at the end of a reason, as the package logs them: "... [rule]".
_NAMED_RULE = re.compile(r"\[([a-z0-9-]+)\]\s*$")


def classify(reason: object) -> str | None:
    """The rule a refusal names: ``Unsupported.rule``, or a known rule in brackets at
    its end, else the first of ``RULES`` whose pattern the reason matches; None when none does."""
    rule = getattr(reason, "rule", "")
    if rule:
        return rule
    text = _RUNTIME_PREFIX.sub("", str(reason).strip())
    named = _NAMED_RULE.search(text)
    if named and named.group(1) in KNOWN_RULES:
        return named.group(1)
    for candidate in (text, _ARGUMENT_PREFIX.sub("", text)):
        for name, pattern in _RULE_PATTERNS:
            if pattern.search(candidate):
                return name
    return None


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One refusal seen while compiling: ``where`` it was logged (``gemm``: no candidate
    for a GEMM; ``fusion``: a consumer left unfused; ``gated``: no dual kernel;
    ``selection``: left to Inductor by measurement), what, why, and its rule."""

    where: str
    subject: str
    reason: str
    rule: str | None


#: The log lines of the lowering and the scheduler that report a refusal, by how their
#: format starts: (where, index among the arguments of the reason, None for the whole
#: message). An argument that carries its rule (an ``Unsupported``) is the reason wherever
#: it stands.
REFUSAL_LOGS = {
    "no CuteDSL candidate for ": ("gemm", 1),
    "not fusing ": ("fusion", 2),
    "gated %s: no dual kernel: ": ("gated", 1),
    "%s: left to Inductor ": ("selection", None),
    # Nothing measured is a failure, not a refusal: no rule matches it, so it is unexplained.
    "%s: nothing measured": ("selection", None),
}
REFUSAL_LOGGERS = ("inductor_cutedsl.lowering", "inductor_cutedsl.scheduler")


class _RefusalHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.refusals: list[Refusal] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str):
            return
        found = next(((w, i) for start, (w, i) in REFUSAL_LOGS.items() if record.msg.startswith(start)), None)
        if found is None:
            return
        where, index = found
        args = record.args if isinstance(record.args, tuple) else ()
        ruled = [a for a in args if getattr(a, "rule", "")]
        if ruled:
            reason = ruled[0]
        elif index is not None and len(args) > index:
            reason = args[index]
        else:
            reason = record.getMessage()
        self.refusals.append(Refusal(where, str(args[0]) if args else "", str(reason), classify(reason)))


@contextlib.contextmanager
def captured_refusals() -> Iterator[list[Refusal]]:
    """The refusals the lowering and the scheduler log inside the block (their INFO
    lines, caught whatever the logging configuration)."""
    handler = _RefusalHandler()
    loggers = [logging.getLogger(name) for name in REFUSAL_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if lg.getEffectiveLevel() > logging.INFO:
            lg.setLevel(logging.INFO)
    try:
        yield handler.refusals
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


# --- Runtime cases: epilogues and their float64 references ----------------------------


def _source(*lines: str) -> str:
    return "def epilogue(acc, m, n, l, ops):\n" + "".join(f"    {line}\n" for line in lines)


ACTIVATIONS64: dict[str, Callable] = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_erf": F.gelu,
}


@dataclasses.dataclass(frozen=True)
class FuzzEpilogue:
    """An epilogue and its float64 reference, written independently of its source:
    ``reference(acc, ops, (m, n, l))`` returns the output's value, then one value per
    ``out`` operand. ``acc``: the (L, M, N) float64 product; ``ops``: the operands in
    declaration order (tensors in float64 as given, broadcasting to (L, M, N); ``out``
    operands None); m, n, l: index tensors shaped to broadcast likewise."""

    epilogue: E.Epilogue
    reference: Callable

    @property
    def name(self) -> str:
        return self.epilogue.name


def identity() -> FuzzEpilogue:
    return FuzzEpilogue(E.IDENTITY, lambda acc, ops, mnl: (acc,))


def bias_act(act: str, kind: str, dtype: str) -> FuzzEpilogue:
    return FuzzEpilogue(E.bias_activation(act, kind, dtype), lambda acc, ops, mnl: (ACTIVATIONS64[act](acc + ops[0]),))


def row_relu(dtype: str) -> FuzzEpilogue:
    return bias_act("relu", "row", dtype)


def col_silu(dtype: str) -> FuzzEpilogue:
    return bias_act("silu", "col", dtype)


def addmm_scalars(kind: str, dtype: str) -> FuzzEpilogue:
    """``torch.addmm``'s beta * C + alpha * acc."""
    return FuzzEpilogue(E.addmm(True, kind, dtype), lambda acc, ops, mnl: (ops[1] * acc + ops[2] * ops[0],))


def row_keep(dtype: str, keep_dtype: str, pairs: bool = False) -> FuzzEpilogue:
    """A kept pre-activation (an ``out`` operand), with ``pairs`` written two columns per store."""
    epi = E.Epilogue(
        f"row_gelu_keep_{keep_dtype}{'_pairs' if pairs else ''}",
        _source("pre = acc + ops[0]", "return gelu_tanh(pre), pre"),
        (E.EpilogueOperand("bias", "row", dtype), E.EpilogueOperand("pre", "out", keep_dtype, pairs)),
    )
    return FuzzEpilogue(epi, lambda acc, ops, mnl: (ACTIVATIONS64["gelu_tanh"](acc + ops[0]), acc + ops[0]))


def all_kinds(keep_dtype: str) -> FuzzEpilogue:
    """Every operand kind in one epilogue: row, col, full, scalar and out."""
    epi = E.Epilogue(
        f"all_kinds_{keep_dtype}",
        _source("pre = ops[3] * acc + ops[0] + ops[1]", "return tanh(pre) * ops[2] + pre, pre"),
        (
            E.EpilogueOperand("row", "row", FP),
            E.EpilogueOperand("col", "col", BF),
            E.EpilogueOperand("full", "full", BF),
            E.EpilogueOperand("alpha", "scalar"),
            E.EpilogueOperand("pre", "out", keep_dtype),
        ),
    )

    def reference(acc, ops, mnl):
        pre = ops[3] * acc + ops[0] + ops[1]
        return torch.tanh(pre) * ops[2] + pre, pre

    return FuzzEpilogue(epi, reference)


def paired_gate(dtype: str) -> FuzzEpilogue:
    """A full operand read two columns per load."""
    epi = E.Epilogue(
        f"paired_gate_{dtype}",
        _source("return silu(acc) * ops[0]"),
        (E.EpilogueOperand("gate", "full", dtype, pairs=True),),
    )
    return FuzzEpilogue(epi, lambda acc, ops, mnl: (F.silu(acc) * ops[0],))


def scaled_rows(bias: str) -> FuzzEpilogue:
    """``torch._scaled_mm``'s row-wise scales and bias, as an explicit epilogue."""
    return FuzzEpilogue(E.scaled("row", "row", bias), lambda acc, ops, mnl: (acc * ops[0] * ops[1] + ops[2],))


def staged_residual(dtype: str) -> FuzzEpilogue:
    """A full operand TMA-loaded into shared memory."""
    epi = E.Epilogue(
        f"staged_residual_{dtype}",
        _source("return relu(acc) + ops[0]"),
        (E.EpilogueOperand("r", "full", dtype, staged=True),),
    )
    return FuzzEpilogue(epi, lambda acc, ops, mnl: (torch.relu(acc) + ops[0],))


def masked(dtype: str) -> FuzzEpilogue:
    """The coordinates: a causal-style mask that moves with the batch index."""
    epi = E.Epilogue(
        f"masked_{dtype}",
        _source("return select(n > m + l, Float32(0.0), acc * ops[0])"),
        (E.EpilogueOperand("scale", "col", dtype),),
    )

    def reference(acc, ops, mnl):
        m, n, l = mnl
        return (torch.where(n > m + l, torch.zeros_like(acc), acc * ops[0]),)

    return FuzzEpilogue(epi, reference)


def math_unary() -> FuzzEpilogue:
    """The math functions a translated epilogue calls, on the accumulator."""
    epi = E.Epilogue(
        "math_unary",
        _source(
            "x = acc * Float32(0.125)",
            "a = cute.math.erf(x) * cute.math.exp(cute.math.min(x, Float32(2.0))) + cute.math.log1p(cute.math.abs(x))",
            "b = cute.math.expm1(cute.math.min(x, Float32(1.0))) - cute.math.log2(Float32(1.0) + x * x)",
            "e = cute.math.min(cute.math.max(x, Float32(-4.0)), Float32(8.0))",
            "c = cute.math.log(Float32(0.5) + cute.math.abs(x)) + cute.math.exp2(e)",
            "return a + b * tanh(x) + c * sigmoid(x)",
        ),
    )

    def reference(acc, ops, mnl):
        x = acc * 0.125
        a = torch.erf(x) * torch.exp(x.clamp(max=2.0)) + torch.log1p(x.abs())
        b = torch.expm1(x.clamp(max=1.0)) - torch.log2(1.0 + x * x)
        # exp2 bounded above: an fp16 output holds at most 65504 (2 ** 16 overflows it).
        c = torch.log(0.5 + x.abs()) + torch.exp2(x.clamp(min=-4.0, max=8.0))
        return (a + b * torch.tanh(x) + c * torch.sigmoid(x),)

    return FuzzEpilogue(epi, reference)


def math_operand(dtype: str) -> FuzzEpilogue:
    """Binary math, division, powers and reciprocals with a full operand (one sine:
    each costs the kernel's compile some 15 s)."""
    epi = E.Epilogue(
        f"math_operand_{dtype}",
        _source(
            "r = ops[0]",
            "a = cute.math.rsqrt(Float32(1.0) + acc * acc) * cute.math.sin(acc)",
            "a = a + cute.math.exp2(-cute.math.abs(r)) * cute.math.sqrt(cute.math.abs(acc))",
            "b = fdiv(acc, Float32(2.0) + cute.math.abs(r)) + cute.math.max(acc, r)",
            "b = b - cute.math.min(acc, Float32(0.5) * r)",
            "c = cute.math.pow(cute.math.abs(r) + Float32(1.0), Float32(1.5))",
            "c = c * reciprocal(Float32(1.0) + cute.math.abs(acc))",
            "return a + b + c",
        ),
        (E.EpilogueOperand("r", "full", dtype),),
    )

    def reference(acc, ops, mnl):
        r = ops[0]
        a = torch.rsqrt(1.0 + acc * acc) * torch.sin(acc) + torch.exp2(-r.abs()) * torch.sqrt(acc.abs())
        b = acc / (2.0 + r.abs()) + torch.maximum(acc, r) - torch.minimum(acc, 0.5 * r)
        c = torch.pow(r.abs() + 1.0, 1.5) / (1.0 + acc.abs())
        return (a + b + c,)

    return FuzzEpilogue(epi, reference)


def rounded(narrow: str) -> FuzzEpilogue:
    """An explicit cast in the chain: rounds through ``narrow`` before a scalar scale."""
    epi = E.Epilogue(
        f"rounded_{narrow}",
        _source(f"return round_to(acc + ops[0], {narrow!r}) * ops[1]"),
        (E.EpilogueOperand("bias", "row", F32), E.EpilogueOperand("s", "scalar")),
    )
    narrow_dtype = TORCH_DTYPES[narrow]
    return FuzzEpilogue(epi, lambda acc, ops, mnl: ((acc + ops[0]).to(narrow_dtype).double() * ops[1],))


def two_keeps(keep_dtype: str) -> FuzzEpilogue:
    """Two kept intermediates, the most an epilogue writes besides its result."""
    epi = E.Epilogue(
        f"two_keeps_{keep_dtype}",
        _source("pre = acc + ops[0]", "act = sigmoid(pre)", "return relu(pre) * act, pre, act"),
        (
            E.EpilogueOperand("bias", "row", BF),
            E.EpilogueOperand("pre", "out", keep_dtype),
            E.EpilogueOperand("act", "out", F32),
        ),
    )

    def reference(acc, ops, mnl):
        pre = acc + ops[0]
        return torch.relu(pre) * torch.sigmoid(pre), pre, torch.sigmoid(pre)

    return FuzzEpilogue(epi, reference)


def where_compare(dtype: str) -> FuzzEpilogue:
    """A comparison and a select between the accumulator and two operands."""
    epi = E.Epilogue(
        f"where_{dtype}",
        _source("return select(acc > ops[0], acc, ops[1] * Float32(0.5))"),
        (E.EpilogueOperand("t", "row", dtype), E.EpilogueOperand("f", "full", dtype)),
    )
    return FuzzEpilogue(epi, lambda acc, ops, mnl: (torch.where(acc > ops[0], acc, ops[1] * 0.5),))


# --- Runtime cases: the kernel specs ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Gated:
    """A ``gated_gemm`` spec: ``act(A @ B_gate + bias_gate) * (A @ B_up + bias_up)``."""

    act: str
    bias_gate: str | None = None  # dtypes of the row biases, None for none
    bias_up: str | None = None
    keep: str | None = None  # dtype of the kept pre-activations, None: not kept
    pairs: bool = False  # kept outputs laid out for two-column stores
    fused: bool = False  # B_gate and B_up: two column ranges of one weight
    # fp8 operands: (scale_a, the weights' scales) modes; fast accumulation or promotion.
    scales: tuple[str, str] | None = None
    fast_accum: bool = False


@dataclasses.dataclass(frozen=True)
class Scaled:
    """A ``scaled_gemm`` spec (fp8 operands): scales per tensor or row, a bias, a
    result scale (fp8 output), and fast accumulation or promotion."""

    scale_a: str = "tensor"
    scale_b: str = "tensor"
    bias: str | None = None
    scale_result: bool = False
    fast_accum: bool = False


@dataclasses.dataclass(frozen=True)
class FuzzSpec:
    """One kernel spec of the fuzz, and the runtime entry that reaches it: ``gemm``
    with ``fuzz_epilogue``, ``gated_gemm`` (``gated``) or ``scaled_gemm`` (``scaled``)."""

    config: GemmConfig
    ab_dtype: str
    out_dtype: str
    a_major: str  # "k": A row-major, "m": column-major
    b_major: str  # "n": B row-major, "k": column-major
    fuzz_epilogue: FuzzEpilogue | None = None
    promote: int = 0  # fp8 ``gemm``: partial sums promoted every k-tile, in this mode
    gated: Gated | None = None
    scaled: Scaled | None = None
    origin: str = "corner"  # a hand-picked corner, or the offered-config group it was drawn from

    @property
    def api(self) -> str:
        return "gated" if self.gated else "scaled" if self.scaled else "gemm"

    @property
    def epilogue(self) -> E.Epilogue:
        if self.gated:
            g = self.gated
            return E.gated(g.act, g.bias_gate, g.bias_up, g.keep, keep_pairs=g.pairs, scales=g.scales)
        if self.scaled:
            s = self.scaled
            return E.scaled(s.scale_a, s.scale_b, s.bias, s.scale_result)
        return self.fuzz_epilogue.epilogue

    @property
    def takes_scales(self) -> bool:
        """Whether the entry takes ``_scaled_mm``'s scales (``scaled_gemm``, or
        ``gated_gemm`` of fp8 operands): 2-D operands, promotion unless fast."""
        return self.scaled is not None or (self.gated is not None and self.gated.scales is not None)

    @property
    def kernel_promote(self) -> int:
        """The promotion mode of the kernel the runtime runs."""
        if self.takes_scales:
            fast = self.scaled.fast_accum if self.scaled else self.gated is not None and self.gated.fast_accum
            return 0 if fast else promotion_mode(self.config)
        return self.promote

    def kernel_spec(self):
        """The ``KernelSpec`` the runtime builds and runs for this spec's cases."""
        from inductor_cutedsl.runtime import KernelSpec

        return KernelSpec(
            self.config,
            self.ab_dtype,
            self.out_dtype,
            self.a_major,
            self.b_major,
            self.epilogue,
            dual=self.gated is not None,
            promote=self.kernel_promote,
        )

    def reference(self, acc, ops: list, mnl) -> tuple:
        """The float64 values of the output and of each ``out`` operand (``acc``: the
        product, a (gate, up) pair for a gated spec)."""
        if self.gated:
            g, rest = self.gated, iter(ops)
            gate, up = acc
            if g.scales:  # each product times A's scale and its weight's
                scale_a = next(rest)
                gate, up = gate * scale_a * next(rest), up * scale_a * next(rest)
            gate = gate + next(rest) if g.bias_gate else gate
            up = up + next(rest) if g.bias_up else up
            out = ACTIVATIONS64[g.act](gate) * up
            return (out, gate, up) if g.keep else (out,)
        if self.scaled:
            s = self.scaled
            value = acc * ops[0] * ops[1] + (ops[2] if s.bias else 0.0)
            return (value / ops[-1] if s.scale_result else value,)
        return tuple(self.fuzz_epilogue.reference(acc, ops, mnl))

    def tolerance(self, dtype: str) -> float:
        fast = self.ab_dtype == F8 and self.kernel_promote == 0
        return max(TOL[dtype], FAST_ACCUM_TOL) if fast else TOL[dtype]

    def invalid_reason(self) -> str | None:
        """Why the kernel cannot be built, by the config's own rules (the kernel class
        checks the same when it compiles; tests/test_fuzz_cases.py runs its checks)."""
        in_bytes, out_bytes = TORCH_DTYPES[self.ab_dtype].itemsize, TORCH_DTYPES[self.out_dtype].itemsize
        cfg = self.config
        why = cfg.invalid_reason(in_bytes, out_bytes) or (cfg.dual_reason() if self.gated else None)
        if why is None and self.kernel_promote:
            why = cfg.promotion_reason(self.kernel_promote)
        if why is None and self.ab_dtype == F8 and (self.a_major, self.b_major) != ("k", "k"):
            why = "fp8 operands are K-major"
        staged = [op for op in self.epilogue.operands if op.staged]
        shared = bool(staged) and staged[0].dtype == self.out_dtype
        if why is None and staged and (self.ab_dtype == F8 or not cfg.stages_operands(out_bytes, shared)):
            why = "the config cannot stage an operand"
        return why

    def id(self) -> str:
        return (
            f"{self.api}-{self.config.name()}-{SHORT[self.ab_dtype]}to{SHORT[self.out_dtype]}-"
            f"A{self.a_major}B{self.b_major}-{self.epilogue.name}"
            + (f"-p{self.kernel_promote}" if self.kernel_promote else "")
        )


CFG_COOP = GemmConfig(128, 256, 2, 1, False, True, 1)
CFG_PINGPONG = GemmConfig(128, 128, 1, 2, True, False, 1)
CFG_TALL = GemmConfig(256, 128, 2, 2, False, False, 8, 64)
CFG_PP64 = GemmConfig(64, 256, 2, 1, True, True, 8)
CFG_BUFFERS = GemmConfig(128, 256, 1, 2, False, False, 8, 64, 4)
CFG_STREAM_K = GemmConfig(128, 256, 2, 1, False, False, 8, 64, stream_k=True)
CFG_PROMOTE = GemmConfig(128, 128, 1, 2, False, True, 1)  # registers for three accumulators
CFG_PROMOTE_WIDE = GemmConfig(128, 192, 2, 1, False, True, 1)  # for two
CFG_DUAL = GemmConfig(128, 256, 2, 1, False, True, 1, 64)
CFG_DUAL_PP = GemmConfig(64, 256, 2, 1, True, False, 1)
CFG_DUAL_PROMOTE_PP = GemmConfig(64, 128, 1, 1, True, True, 1)  # a promoting dual pingpong tile
CFG_DUAL_STREAM_K = GemmConfig(128, 128, 1, 1, False, True, 1, stream_k=True)  # decode's dual tile

#: Hand-picked corners of the space: each schedule, tile and store-buffer extreme
#: with every operand kind, major, dtype and load declaration.
CORNER_SPECS: tuple[FuzzSpec, ...] = (
    FuzzSpec(CFG_COOP, BF, BF, "k", "n", identity()),
    FuzzSpec(CFG_PINGPONG, FP, FP, "m", "k", identity()),
    FuzzSpec(CFG_TALL, BF, F32, "k", "k", identity()),
    FuzzSpec(CFG_PP64, FP, F32, "m", "n", identity()),
    FuzzSpec(CFG_STREAM_K, BF, BF, "m", "n", identity()),
    FuzzSpec(CFG_BUFFERS, BF, BF, "k", "k", row_relu(BF)),
    FuzzSpec(CFG_STREAM_K, BF, BF, "k", "k", row_relu(F32)),
    FuzzSpec(CFG_COOP, FP, FP, "m", "n", col_silu(F32)),
    FuzzSpec(CFG_TALL, BF, BF, "k", "n", col_silu(BF)),
    FuzzSpec(CFG_PINGPONG, BF, BF, "k", "n", addmm_scalars("full", BF)),
    FuzzSpec(CFG_PP64, BF, F32, "m", "k", addmm_scalars("full", FP)),
    FuzzSpec(CFG_TALL, FP, FP, "k", "k", row_keep(FP, FP)),
    FuzzSpec(CFG_PINGPONG, FP, BF, "m", "n", row_keep(BF, F32)),
    FuzzSpec(CFG_PP64, BF, BF, "m", "k", all_kinds(BF)),
    FuzzSpec(CFG_STREAM_K, FP, F32, "k", "n", all_kinds(F32)),
    FuzzSpec(CFG_COOP, BF, F32, "m", "k", all_kinds(F32)),
    FuzzSpec(CFG_BUFFERS, BF, BF, "m", "n", paired_gate(BF)),
    FuzzSpec(CFG_PINGPONG, FP, FP, "k", "k", paired_gate(FP)),
    FuzzSpec(CFG_TALL, BF, BF, "m", "k", staged_residual(BF)),
    FuzzSpec(CFG_COOP, FP, F32, "k", "n", staged_residual(FP)),
    FuzzSpec(CFG_COOP, BF, BF, "k", "k", row_keep(BF, BF, pairs=True)),
    FuzzSpec(CFG_STREAM_K, BF, BF, "k", "n", masked(F32)),
    FuzzSpec(CFG_PP64, FP, FP, "m", "n", math_unary()),
    FuzzSpec(CFG_BUFFERS, BF, F32, "k", "k", math_operand(BF)),
    FuzzSpec(CFG_PINGPONG, BF, BF, "m", "k", rounded(FP)),
    FuzzSpec(CFG_TALL, FP, BF, "k", "n", two_keeps(FP)),
    FuzzSpec(CFG_COOP, BF, FP, "m", "n", where_compare(BF)),
    # fp8 operands (both K-major): fast accumulation, each promotion mode, an fp8 output.
    FuzzSpec(CFG_COOP, F8, BF, "k", "k", identity()),
    FuzzSpec(CFG_PROMOTE, F8, F32, "k", "k", scaled_rows(BF), promote=1),
    FuzzSpec(CFG_PROMOTE_WIDE, F8, BF, "k", "k", col_silu(BF), promote=2),
    FuzzSpec(CFG_PROMOTE, F8, FP, "k", "k", addmm_scalars("row", F32), promote=3),
    FuzzSpec(CFG_PINGPONG, F8, F8, "k", "k", row_relu(BF)),
    FuzzSpec(CFG_PROMOTE, F8, BF, "k", "k", scaled=Scaled("row", "row", BF)),
    FuzzSpec(CFG_COOP, F8, F8, "k", "k", scaled=Scaled("tensor", "row", FP, scale_result=True, fast_accum=True)),
    # Dual (gated) kernels: kept pre-activations (paired and not), both weight forms.
    FuzzSpec(CFG_DUAL, BF, BF, "k", "k", gated=Gated("silu", keep=BF, pairs=True, fused=True)),
    FuzzSpec(CFG_DUAL_PP, FP, FP, "m", "n", gated=Gated("gelu_tanh", FP, F32, keep=F32)),
    FuzzSpec(CFG_DUAL, BF, F32, "k", "n", gated=Gated("relu", BF, BF, keep=BF, pairs=False)),
    FuzzSpec(CFG_DUAL_PP, BF, BF, "k", "k", gated=Gated("gelu_erf", fused=True)),
    # fp8 dual kernels: each promoting config, fast accumulation, scale modes, stream-K.
    FuzzSpec(CFG_PROMOTE, F8, BF, "k", "k", gated=Gated("silu", BF, BF, scales=("row", "row"))),
    FuzzSpec(CFG_DUAL, F8, BF, "k", "k", gated=Gated("gelu_tanh", scales=("tensor", "tensor"), fast_accum=True)),
    FuzzSpec(CFG_DUAL_PROMOTE_PP, F8, F32, "k", "k", gated=Gated("relu", F32, scales=("tensor", "row"), fused=True)),
    FuzzSpec(CFG_DUAL_STREAM_K, F8, BF, "k", "k", gated=Gated("silu", scales=("row", "tensor"))),
)

#: Shapes (M, N, K, batch) whose shortlists make up the configs the package offers.
OFFER_SHAPES = tuple(
    (m, n, 4096, batch)
    for m in (1, 64, 256, 1000, 4096, 8192)
    for n in (64, 256, 1024, 4096, 14336)
    for batch in (1, 4)
)


def _group(cfg: GemmConfig) -> str:
    """A config's name without its swizzle: configs that differ only there share a group."""
    return re.sub(r"_r([mn])\d+", r"_r\1", cfg.name())


def offered_configs() -> dict[str, dict[str, list[GemmConfig]]]:
    """Every config the package's shortlists offer over ``OFFER_SHAPES``, by kind
    ("plain", "promote": fp8 with promoted partial sums, "dual") and group."""
    found: dict[str, set[GemmConfig]] = {"plain": set(), "promote": set(), "dual": set()}
    for m, n, k, batch in OFFER_SHAPES:
        found["plain"].update(shortlist(m, n, k, batch, limit=64, graphs=True))
        found["promote"].update(shortlist(m, n, k, batch, limit=64, promote=PROMOTE_TILE))
        found["dual"].update(dual_shortlist(m, n, k, batch, limit=64))
    groups: dict[str, dict[str, list[GemmConfig]]] = {}
    for kind, configs in found.items():
        for cfg in sorted(configs):
            groups.setdefault(kind, {}).setdefault(_group(cfg), []).append(cfg)
    return groups


def _draw_epilogue(rng: random.Random, ab: str) -> FuzzEpilogue:
    dtype = rng.choice([BF, FP, F32])
    pick = rng.randrange(12)
    if pick < 3:
        return bias_act(rng.choice(sorted(ACTIVATIONS64)), rng.choice(["row", "col"]), dtype)
    makers = [
        lambda: identity(),
        lambda: addmm_scalars(rng.choice(["row", "col", "full"]), dtype),
        lambda: row_keep(rng.choice([BF, FP]), rng.choice([BF, FP, F32])),
        lambda: all_kinds(rng.choice([BF, F32])),
        lambda: paired_gate(rng.choice([BF, FP])),
        lambda: staged_residual(ab if ab != F8 else BF),
        lambda: masked(dtype),
        lambda: math_unary(),
        lambda: math_operand(rng.choice([BF, FP])),
    ]
    return makers[pick - 3]()


def _drawn_spec(rng: random.Random, kind: str, group: str, configs: list[GemmConfig]) -> FuzzSpec:
    """A spec drawn for one group of offered configs: a config of the group, and dtypes,
    majors and an epilogue or entry that the config can build."""
    for _ in range(100):
        cfg = rng.choice(configs)
        majors = (rng.choice("km"), rng.choice("nk"))
        if kind == "dual":
            ab = rng.choice([BF, FP])
            keep = rng.choice([None, None, BF, FP, F32])
            gated = Gated(
                rng.choice(sorted(E.GATED_ACTIVATIONS)),
                rng.choice([None, BF, FP, F32]),
                rng.choice([None, BF, F32]),
                keep,
                pairs=keep in (BF, FP) and rng.random() < 0.6,
                fused=rng.random() < 0.4,
            )
            spec = FuzzSpec(cfg, ab, rng.choice([ab, ab, F32]), *majors, gated=gated, origin=group)
        elif kind == "promote":
            out = rng.choice([BF, BF, FP, F32, F8])
            if rng.random() < 0.6:
                scaled = Scaled(
                    rng.choice(["tensor", "row"]),
                    rng.choice(["tensor", "row"]),
                    rng.choice([None, BF, FP, F32]),
                    scale_result=out == F8,
                )
                spec = FuzzSpec(cfg, F8, out, "k", "k", scaled=scaled, origin=group)
            else:
                spec = FuzzSpec(
                    cfg, F8, out, "k", "k", _draw_epilogue(rng, F8), promote=rng.choice([1, 2, 3]), origin=group
                )
        else:
            ab = rng.choice([BF, BF, FP])
            out = rng.choice([ab, ab, F32, BF if ab == FP else FP, F8])
            spec = FuzzSpec(cfg, ab, out, *majors, _draw_epilogue(rng, ab), origin=group)
        if spec.invalid_reason() is None:
            return spec
    raise AssertionError(f"no buildable spec drawn for {kind} group {group}")


def drawn_specs() -> list[FuzzSpec]:
    """One spec per group of offered configs (plain, promoting fp8, dual), each from its own seed."""
    return [
        _drawn_spec(random.Random(f"{SEED}-spec-{kind}-{group}"), kind, group, configs)
        for kind, groups in offered_configs().items()
        for group, configs in groups.items()
    ]


def _distinct(specs: Sequence[FuzzSpec]) -> list[FuzzSpec]:
    """``specs`` without the ones whose kernel an earlier one already builds."""
    seen, out = set(), []
    for spec in specs:
        key = spec.kernel_spec()
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


#: The fuzz's kernel specs: the corners, then one drawn per group of offered configs.
SPECS: list[FuzzSpec] = _distinct([*CORNER_SPECS, *drawn_specs()])


# --- Runtime cases: sizes, layouts and values drawn per spec ---------------------------


@dataclasses.dataclass(frozen=True)
class View:
    """A strided view into a flat storage of ``numel`` elements."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        return self.offset + sum((s - 1) * st for s, st in zip(self.size, self.stride, strict=True)) + 1

    def make(self, dtype: torch.dtype, device, fill: str = "randn") -> tuple[torch.Tensor, torch.Tensor]:
        """(storage, view): randn values, positive ones (``fill="positive"``: scales),
        NaN (``"nan"``) or uninitialised (``"empty"``)."""
        if fill == "randn":
            storage = torch.randn(self.numel, device=device).to(dtype)
        elif fill == "positive":
            storage = (torch.rand(self.numel, device=device) + 0.5).to(dtype)
        elif fill == "nan":
            storage = torch.full((self.numel,), float("nan"), dtype=dtype, device=device)
        else:
            storage = torch.empty(self.numel, dtype=dtype, device=device)
        return storage, storage.as_strided(self.size, self.stride, self.offset)


@dataclasses.dataclass(frozen=True)
class Operand:
    kind: str  # an EpilogueOperand kind
    dtype: str
    view: View | None = None  # tensors
    value: float = 0.0  # scalars
    positive: bool = False  # values in [0.5, 1.5) (scales)


#: The rule each flaw a case may be drawn with breaks, and so the rule its refusal must name.
FLAW_RULES = {
    "a ld": "tma-alignment",
    "b base": "tma-alignment",
    "out base": "tma-alignment",
    "out width": "tma-alignment",
    "a strided": "layout",
    "out colmajor": "layout",
    "a broadcast": "broadcast-batch",
    "operand": "operand-alignment",
    "out operand broadcast": "operand-kind",
    "up major": "layout",
    "scale shape": "scale-mode",
    "fp8 major": "fp8-layout",
}
FLAW_RATE = 0.07


@dataclasses.dataclass(frozen=True)
class Case:
    spec_index: int
    number: int
    m: int
    n: int
    k: int
    batch: int | None  # None: 2-D
    a: View
    b: View
    out: View
    operands: tuple[Operand, ...]  # the epilogue's declared operands, in order
    b_up: View | None = None  # a gated spec's up weight
    flaw: str = ""  # drawn flawed on purpose (``FLAW_RULES``): the runtime must refuse it

    @property
    def expect_ok(self) -> bool:
        return not self.flaw

    @property
    def spec(self) -> FuzzSpec:
        return SPECS[self.spec_index]

    def describe(self) -> str:
        views = f"a {self.a}, b {self.b}, out {self.out}" + (f", b_up {self.b_up}" if self.b_up else "")
        ops = "; ".join(f"{o.kind} {o.view or o.value}" for o in self.operands)
        return (
            f"case {self.spec_index}/{self.number} {self.spec.id()} m={self.m} n={self.n} k={self.k} "
            f"batch={self.batch} flaw={self.flaw or '-'}: {views}; operands: {ops}"
        )


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def _size(rng: random.Random, big: int) -> int:
    pick = rng.random()
    if pick < 0.15:
        return rng.randint(1, 8)
    if pick < 0.35:
        return rng.choice([64, 128, 256, 512]) + rng.choice([-1, 0, 1])
    if pick < 0.9:
        return rng.randint(9, big)
    return rng.randint(big, 2 * big)


def _matrix(
    rng: random.Random, rows: int, cols: int, major_last: bool, batch: int | None, itemsize: int, flaw: str = ""
) -> View:
    """A (batch?, rows, cols) matrix, row-major if ``major_last``, with its leading
    dimension padded (16-byte multiples), its batches spaced and a storage offset
    (16-byte multiples), unless ``flaw`` breaks one: "ld" or "base" misaligned, "strided"
    (no unit-stride mode), "broadcast" (batch stride 0)."""
    step = 16 // itemsize
    inner, outer = (cols, rows) if major_last else (rows, cols)
    ld = _round_up(inner, step) + step * rng.choice([0, 0, 0, 1, 3])
    if flaw == "ld":
        ld += 1
    offset = step * rng.choice([0, 0, 1, 5]) + (1 if flaw == "base" else 0)
    stride = (ld, 1) if major_last else (1, ld)
    if flaw == "strided":
        stride = (2 * ld, 2) if major_last else (2, 2 * ld)
    if batch is None:
        return View((rows, cols), stride, offset)
    batch_stride = outer * ld * (2 if flaw == "strided" else 1) + step * rng.choice([0, 0, 2])
    if flaw == "broadcast":
        batch_stride = 0
    return View((batch, rows, cols), (batch_stride, *stride), offset)


def _operand(rng: random.Random, decl: E.EpilogueOperand, m: int, n: int, batch: int | None, flaw: str) -> Operand:
    """An operand as its declaration allows: broadcast, strided, padded or offset;
    ``flaw`` "operand" misaligns a paired or staged one, "out operand broadcast" makes
    an output broadcast along M."""
    if not decl.is_tensor:
        return Operand(decl.kind, decl.dtype, value=round(rng.uniform(-2.0, 2.0), 3))
    itemsize = TORCH_DTYPES[decl.dtype].itemsize
    lead = () if batch is None else (batch,)
    if decl.kind == "row":
        step = rng.choice([1, 1, 2, 3])
        offset = rng.randint(0, 9)
        if batch is not None and rng.random() < 0.5:  # one row per batch
            bstride = n * step + rng.randint(0, 5)
            return Operand("row", decl.dtype, View((batch, 1, n), (bstride, n * step, step), offset))
        if rng.random() < 0.3:
            return Operand("row", decl.dtype, View((1, n), (n * step, step), offset))
        return Operand("row", decl.dtype, View((n,), (step,), offset))
    if decl.kind == "col":
        step = rng.choice([1, 1, 2, 5])
        offset = rng.randint(0, 9)
        if batch is not None and rng.random() < 0.5:
            bstride = m * step + rng.randint(0, 5)
            return Operand("col", decl.dtype, View((batch, m, 1), (bstride, step, 1), offset))
        return Operand("col", decl.dtype, View((m, 1), (step, 1), offset))
    if decl.kind == "out" and flaw == "out operand broadcast":
        return Operand("out", decl.dtype, View((*lead, m, n), (*(n for _ in lead), 0, 1), rng.randint(0, 7)))
    if decl.pairs or decl.staged:
        # Unit N stride; paired: even strides and 4-byte aligned base; staged: strides
        # and base 16-byte aligned, and no broadcast batch.
        align = 16 // itemsize if decl.staged else 2
        ld = _round_up(n, align) + align * rng.choice([0, 0, 1, 4])
        offset = align * rng.choice([0, 0, 1, 3]) + (1 if flaw == "operand" else 0)
        # A paired input may broadcast over L; an output never does.
        if batch is None or (decl.pairs and decl.kind == "full" and rng.random() < 0.3):
            return Operand(decl.kind, decl.dtype, View((m, n), (ld, 1), offset))
        bstride = m * ld + align * rng.choice([0, 1])
        return Operand(decl.kind, decl.dtype, View((batch, m, n), (bstride, ld, 1), offset))
    # full or out: any strides (out never broadcast), padded rows, any offset.
    offset = rng.randint(0, 17)
    ld = n + rng.choice([0, 0, 1, 8, 13])
    if decl.kind == "full" and rng.random() < 0.2:  # column-major
        ld = m + rng.choice([0, 3])
        stride2, outer = (1, ld), n
    else:
        stride2, outer = (ld, 1), m
    if batch is None or (decl.kind == "full" and rng.random() < 0.3):  # broadcast over L
        return Operand(decl.kind, decl.dtype, View((m, n), stride2, offset))
    bstride = outer * ld + rng.randint(0, 7)
    return Operand(decl.kind, decl.dtype, View((*lead, m, n), (bstride, *stride2), offset))


def _kept_operand(rng: random.Random, dtype: str, m: int, n: int, batch: int | None, pairs: bool) -> Operand:
    """A gated spec's kept pre-activation: laid out for two-column stores exactly when
    ``pairs`` (the runtime picks the paired kernel from the layout)."""
    lead = () if batch is None else (batch,)
    if pairs:
        ld, offset = _round_up(n, 2) + 2 * rng.choice([0, 0, 1, 4]), 2 * rng.randint(0, 5)
        bstride = m * ld + 2 * rng.choice([0, 1])
    else:  # an odd leading stride (or offset, when one row) rules out paired stores
        ld, offset = n + 2 * rng.randint(0, 4) + 1, rng.randint(0, 7)
        bstride = m * ld + rng.randint(0, 3)
        if dtype in (BF, FP) and m == 1:
            offset = 2 * offset + 1
    return Operand("out", dtype, View((*lead, m, n), (*((bstride,) if lead else ()), ld, 1), offset))


def _scale_operand(rng: random.Random, mode: str, which: str, m: int, n: int, flaw: bool) -> Operand:
    """A ``scaled_gemm`` scale: one value (of any shape holding one), or (M, 1) for A and
    (1, N) for B row-wise, strided; ``flaw``: B's scale as (N, 1), which is neither."""
    if flaw:
        return Operand("row", F32, View((n, 1), (1, 1), rng.randint(0, 3)), positive=True)
    if mode == "tensor":
        # (1, 1) is A's row-wise shape too when M is 1: the runtime then picks row-wise.
        size = rng.choice([(), (1,)] if which == "a" and m == 1 else [(), (1,), (1, 1)])
        return Operand("row", F32, View(size, (1,) * len(size), rng.randint(0, 3)), positive=True)
    step = rng.choice([1, 1, 2])
    if which == "a":
        return Operand("col", F32, View((m, 1), (step, 1), rng.randint(0, 5)), positive=True)
    return Operand("row", F32, View((1, n), (n * step, step), rng.randint(0, 5)), positive=True)


def _flaws(spec: FuzzSpec, batch: int | None, m: int) -> list[str]:
    flaws = ["a ld", "b base", "out base", "out width", "a strided", "out colmajor"]
    if batch is not None and batch > 1:
        flaws.append("a broadcast")
    decls = spec.epilogue.operands
    if spec.api == "gemm" and any(op.pairs or op.staged for op in decls):
        flaws.append("operand")
    if spec.api == "gemm" and m > 1 and any(op.is_output for op in decls):
        flaws.append("out operand broadcast")
    if spec.api == "gated" and spec.ab_dtype != F8:  # fp8 has one major ("fp8 major")
        flaws.append("up major")
    if spec.takes_scales:
        flaws.append("scale shape")
    if spec.ab_dtype == F8:
        flaws.append("fp8 major")
    return flaws


def make_case(spec_index: int, number: int) -> Case:
    """Case ``number`` of spec ``spec_index``: drawn from its own seed, so that any case
    can be rebuilt alone."""
    spec = SPECS[spec_index]
    rng = random.Random(f"{SEED}-{spec_index}-{number}")
    m, n, k = _size(rng, 700), _size(rng, 700), _size(rng, 600)
    batch = None if spec.takes_scales else rng.choice([None, None, None, 1, 2, 3, 4])
    flaw = rng.choice(_flaws(spec, batch, m)) if rng.random() < FLAW_RATE else ""
    ab_size = TORCH_DTYPES[spec.ab_dtype].itemsize
    out_size = TORCH_DTYPES[spec.out_dtype].itemsize
    # The output's rows are whole 16-byte units (runtime.support.row_width_reason), and
    # so even (paired operands read column pairs); a gated spec's two halves of one
    # weight are 16-byte aligned. "out width" draws a row that is not whole units.
    step = 16 // out_size if spec.api != "gated" else max(16 // out_size, 16 // ab_size)
    n = _round_up(n, step)
    if flaw == "out width":
        n += 16 // out_size // 2
    a = _matrix(
        rng,
        m,
        k,
        spec.a_major == "k",
        batch,
        ab_size,
        {"a ld": "ld", "a strided": "strided", "a broadcast": "broadcast"}.get(flaw, ""),
    )
    # "fp8 major": a row-major B, where the runtime takes only K-major fp8 operands.
    b_row_major = (spec.b_major == "n") != (flaw == "fp8 major")
    b_up = None
    if spec.gated and spec.gated.fused and flaw != "up major":
        # One weight of 2N columns: gate and up are its two column ranges.
        whole = _matrix(rng, k, 2 * n, b_row_major, batch, ab_size, "base" if flaw == "b base" else "")
        b = View((*whole.size[:-1], n), whole.stride, whole.offset)
        b_up = dataclasses.replace(b, offset=whole.offset + n * whole.stride[-1])
    else:
        b = _matrix(rng, k, n, b_row_major, batch, ab_size, "base" if flaw == "b base" else "")
        if spec.gated:
            b_up = _matrix(rng, k, n, b_row_major != (flaw == "up major"), batch, ab_size)
    out = _matrix(rng, m, n, flaw != "out colmajor", batch, out_size, "base" if flaw == "out base" else "")
    if spec.gated:
        g = spec.gated
        biases = [(dtype, E.EpilogueOperand("bias", "row", dtype)) for dtype in (g.bias_gate, g.bias_up) if dtype]
        operands = []
        if g.scales:  # A's scale, then the gate and up weights' (in one mode)
            operands += [_scale_operand(rng, g.scales[0], "a", m, n, False)]
            operands += [_scale_operand(rng, g.scales[1], "b", m, n, flaw == "scale shape") for _ in range(2)]
        operands += [_operand(rng, decl, m, n, batch, "") for _, decl in biases]
        if g.keep:
            operands += [_kept_operand(rng, g.keep, m, n, batch, g.pairs) for _ in range(2)]
    elif spec.scaled:
        s = spec.scaled
        operands = [
            _scale_operand(rng, s.scale_a, "a", m, n, False),
            _scale_operand(rng, s.scale_b, "b", m, n, flaw == "scale shape"),
        ]
        if s.bias:
            operands.append(Operand("row", s.bias, View((n,), (rng.choice([1, 1, 2]),), rng.randint(0, 5))))
        if s.scale_result:
            operands.append(_scale_operand(rng, "tensor", "r", m, n, False))
    else:
        operands = [_operand(rng, decl, m, n, batch, flaw) for decl in spec.epilogue.operands]
    return Case(spec_index, number, m, n, k, batch, a, b, out, tuple(operands), b_up, flaw)


def cases_for(spec_index: int, count: int, start: int = 0) -> list[Case]:
    return [make_case(spec_index, i) for i in range(start, start + count)]


@dataclasses.dataclass
class CaseTensors:
    """A case's tensors: ``values`` per declared operand (tensor or float), and each
    output (the result, then each ``out`` operand) as (storage, view, View)."""

    a: torch.Tensor
    b: torch.Tensor
    b_up: torch.Tensor | None
    out: torch.Tensor
    values: list
    outputs: list[tuple[torch.Tensor, torch.Tensor, View]]


def case_tensors(case: Case, device, fill: str = "randn") -> CaseTensors:
    """The case's tensors on ``device``: outputs NaN-filled, in NaN storage that is
    larger than they are; inputs ``fill``ed ("randn", or "empty" to test layouts only)."""
    spec = case.spec
    ab = TORCH_DTYPES[spec.ab_dtype]
    out_fill = "nan" if fill != "empty" else "empty"
    _, a = case.a.make(ab, device, fill)
    _, b = case.b.make(ab, device, fill)
    b_up = case.b_up.make(ab, device, fill)[1] if case.b_up is not None else None
    storage, out = case.out.make(TORCH_DTYPES[spec.out_dtype], device, out_fill)
    outputs, values = [(storage, out, case.out)], []
    for op in case.operands:
        if op.view is None:
            values.append(op.value)
        elif op.kind == "out":
            storage, view = op.view.make(TORCH_DTYPES[op.dtype], device, out_fill)
            outputs.append((storage, view, op.view))
            values.append(view)
        else:
            values.append(op.view.make(TORCH_DTYPES[op.dtype], device, "positive" if op.positive else fill)[1])
    return CaseTensors(a, b, b_up, out, values, outputs)


def run_case(case: Case, t: CaseTensors) -> None:
    """The runtime call of the case's entry (``gemm``, ``gated_gemm``, ``scaled_gemm``)."""
    from inductor_cutedsl.runtime import gated_gemm, gemm, scaled_gemm

    spec = case.spec
    values = iter(t.values)
    if spec.gated:
        g = spec.gated
        scales = (next(values), next(values), next(values)) if g.scales else None
        bias_gate = next(values) if g.bias_gate else None
        bias_up = next(values) if g.bias_up else None
        keep_out = (next(values), next(values)) if g.keep else None
        gated_gemm(
            t.a,
            t.b,
            t.b_up,
            g.act,
            bias_gate=bias_gate,
            bias_up=bias_up,
            out=t.out,
            keep_out=keep_out,
            config=spec.config,
            scales=scales,
            use_fast_accum=g.fast_accum,
        )
    elif spec.scaled:
        s = spec.scaled
        scale_a, scale_b = next(values), next(values)
        bias = next(values) if s.bias else None
        scale_result = next(values) if s.scale_result else None
        scaled_gemm(
            t.a,
            t.b,
            scale_a,
            scale_b,
            bias,
            scale_result,
            out_dtype=t.out.dtype,
            use_fast_accum=s.fast_accum,
            out=t.out,
            config=spec.config,
        )
    else:
        gemm(t.a, t.b, *t.values, out=t.out, config=spec.config, epilogue=spec.epilogue, promote=spec.promote)


def _untouched(storage: torch.Tensor, view: View) -> bool:
    """Whether every storage element outside ``view`` is still NaN."""
    outside = torch.ones(storage.numel(), dtype=torch.bool, device=storage.device)
    outside.as_strided(view.size, view.stride, view.offset).fill_(False)
    return bool(storage[outside].float().isnan().all())  # (fp8 compares as fp32)


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative norm error of ``got`` against float64 ``want`` (inf when not finite);
    an all-zero ``want`` asks for exact zeros."""
    want = want.expand(got.shape)
    if want.norm() == 0:
        return 0.0 if bool((got.double() == 0).all()) else math.inf
    return rel_err(got, want)


def case_reference(case: Case, t: CaseTensors) -> list[torch.Tensor]:
    """The float64 value of each output of the case, shaped as the output."""
    spec = case.spec
    batch = case.batch or 1
    shape = (batch, case.m, case.n)
    products = [t.b] if t.b_up is None else [t.b, t.b_up]
    accs = [torch.matmul(t.a.double(), w.double()).reshape(shape) for w in products]
    device = t.a.device
    mnl = (
        torch.arange(case.m, device=device).view(1, -1, 1),
        torch.arange(case.n, device=device).view(1, 1, -1),
        torch.arange(batch, device=device).view(-1, 1, 1),
    )
    ops = [
        None if op.kind == "out" else v.double() if torch.is_tensor(v) else v
        for op, v in zip(case.operands, t.values, strict=True)
    ]
    values = spec.reference(accs[0] if len(accs) == 1 else tuple(accs), ops, mnl)
    out = []
    for value, (_, view, _) in zip(values, t.outputs, strict=True):
        value = torch.as_tensor(value, dtype=torch.float64, device=device).expand(shape).reshape(view.shape)
        out.append(value.clamp(-E4M3_MAX, E4M3_MAX) if view.dtype == torch.float8_e4m3fn else value)
    return out


def check_case(case: Case, device="cuda") -> str | None:
    """Run one case: None when every output checked right, the refusal's message when
    the runtime refused it; AssertionError when an output is wrong, is written outside
    its view, or the runtime took a case drawn to be refused."""
    from inductor_cutedsl.runtime import launch

    spec = case.spec
    t = case_tensors(case, device)
    try:
        run_case(case, t)
    except ValueError as exc:
        return str(exc)
    if t.a.is_cuda:
        torch.cuda.synchronize()
    assert case.expect_ok, f"the runtime took a case drawn to be refused ({case.flaw})"
    assert launch.is_loaded(spec.kernel_spec()), f"the runtime ran another kernel than {spec.kernel_spec().describe()}"
    kinds = [spec.out_dtype] + [op.dtype for op in case.operands if op.kind == "out"]
    expected = case_reference(case, t)
    for index, ((storage, got, view), want, dtype) in enumerate(zip(t.outputs, expected, kinds, strict=True)):
        err = _err(got, want)
        assert err < spec.tolerance(dtype), f"output {index}: rel err {err:.3e} (tol {spec.tolerance(dtype)})"
        assert _untouched(storage, view), f"output {index}: written outside its view"
    return None


def judge_refusal(case: Case, reason: str) -> tuple[str | None, bool]:
    """(the refusal's rule, whether it is explained): a case drawn with a flaw must be
    refused by the rule the flaw breaks; a case drawn to run must not be refused."""
    rule = classify(reason)
    return rule, rule is not None and bool(case.flaw) and FLAW_RULES[case.flaw] == rule


# --- Random Inductor programs -----------------------------------------------------------

#: Pointwise consumers, each kept within a bounded range whatever it is given (clamped
#: before what grows fast), so that rounding stays relative to the values.
UNARY: dict[str, Callable] = {
    "exp": lambda y: torch.exp(y.clamp(-4, 4)),
    "exp2": lambda y: torch.exp2(y.clamp(-4, 4)),
    "expm1": lambda y: torch.expm1(y.clamp(-4, 3)),
    "log": lambda y: torch.log(y.abs() + 0.5),
    "log1p": lambda y: torch.log1p(y.abs()),
    "log2": lambda y: torch.log2(y.abs() + 1),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "rsqrt": lambda y: torch.rsqrt(y.abs() + 0.25),
    "sqrt": lambda y: torch.sqrt(y.abs() + 0.01),
    "abs": torch.abs,
    "neg": torch.neg,
    "reciprocal": lambda y: torch.reciprocal(y.abs() + 0.5),
    "relu": torch.relu,
    "square": lambda y: torch.square(y.clamp(-3, 3)),
    "sin": torch.sin,
    "cos": torch.cos,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
    "leaky_relu": lambda y: F.leaky_relu(y, 0.1),
    "softplus": F.softplus,
    "hardtanh": F.hardtanh,
    "pow": lambda y: torch.pow(y.abs().clamp(max=4) + 0.5, 1.5),
    "pow2": lambda y: y.clamp(-3, 3) ** 2,
    "const": lambda y: y * -0.75 + 0.25,
    # Drawn to be refused: no epilogue translation (both continuous, unlike sign alone).
    "sign": lambda y: y * torch.sign(y),
    "atan": torch.atan,
    # Drawn to be refused: a reduction consumer.
    "center": lambda y: y - y.mean(-1, keepdim=True),
}
#: Consumers that read a tensor of their own (each program input named after it).
OPERAND_OPS = ("add_row", "mul_col", "add_full", "sub_full", "div_row", "max_full", "min_row", "where_gt", "add_full_t")
#: What refuses the fusion of a consumer drawn to be refused, by op.
REFUSED_OPS = {"sign": "unsupported-op", "atan": "unsupported-op", "center": "reduction", "add_full_t": "indexing"}
POINTWISE = (
    tuple(op for op in UNARY if op not in REFUSED_OPS)
    + tuple(op for op in OPERAND_OPS if op not in REFUSED_OPS)
    + ("scale", "cast", "float", "keep")
)
#: Consumers written with an in-place op whose result nothing reads (``s.mul_(...)`` on a
#: copy, read through the copy): a pass that took such a call for dead would compute
#: another number. Drawn from a stream of their own, so the other draws stay as they were.
IN_PLACE_OPS = ("inplace_scale",)
GEMMS = ("linear", "linear_3d", "matmul", "matmul_t", "bmm", "addmm", "baddbmm")
#: The GEMM's input shapes are (batch, m, k) for these.
BATCHED = ("linear_3d", "bmm", "baddbmm")


@dataclasses.dataclass(frozen=True)
class Program:
    """A small graph: one GEMM (``gemm``), a chain of pointwise consumers (``ops``;
    "keep" returns the value so far as an extra output), optionally a second GEMM of
    ``second`` columns on the result."""

    index: int
    dtype: str
    gemm: str
    m: int
    n: int
    k: int
    batch: int
    ops: tuple[str, ...]
    second: int  # N of a second GEMM on the result, 0 for none
    scale: float
    alpha: float
    beta: float
    bias: str  # linear: "row" or "none"; addmm / baddbmm: C "row", "col" or "full"
    backends: str  # max_autotune_gemm_backends
    cudagraphs: bool

    @property
    def seed(self) -> int:
        return SEED + self.index

    @property
    def label(self) -> str:
        return (
            f"program {self.index} {self.dtype} {self.gemm} m={self.m} n={self.n} k={self.k} "
            f"[{' '.join(self.ops) or 'plain'}]{f' @{self.second}' if self.second else ''}"
        )

    def allowed_rules(self) -> set[str]:
        """The rules that may refuse part of this program: those it was drawn to meet.
        Inductor's scheduler may leave a consumer unpaired whatever the program."""
        rules = {"not-paired"}
        if "ATEN" in self.backends:
            rules.add("measured-slower")
        if self.second:
            rules.add("not-pointwise")
        if self.dtype == F32:
            rules.add("dtype")
        if any(size % 8 for size in (self.n, self.k, self.second or 8)):
            rules.add("tma-alignment")
        if any(size % 8 for size in (self.m, self.n, self.k, self.second or 8)):
            # Inductor pads odd sizes (pad_mm): a consumer then covers part of the padded
            # GEMM output, or reads it through a masked index (index_expr).
            rules |= {"loops", "unsupported-op"}
        if self.beta == 0.0 and self.gemm in ("addmm", "baddbmm"):
            rules.add("beta-zero")
        if self.ops.count("keep") > 2:
            rules.add("kept-outputs")
        rules.update(REFUSED_OPS[op] for op in self.ops if op in REFUSED_OPS)
        return rules

    def inputs(self, device, size: None = None) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        dtype = TORCH_DTYPES[self.dtype]

        def randn(*shape, scale=1.0):
            return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

        m, n, k, wscale = self.m, self.n, self.k, 1 / math.sqrt(self.k)
        x_shape = (self.batch, m, k) if self.gemm in BATCHED else (m, k)
        out_shape = (*x_shape[:-1], n)
        t = {"x": randn(*x_shape)}
        if self.gemm in ("bmm", "baddbmm"):
            t["w"] = randn(self.batch, k, n, scale=wscale)
        elif self.gemm in ("matmul", "addmm"):
            t["w"] = randn(k, n, scale=wscale)
        else:
            t["w"] = randn(n, k, scale=wscale)
        if self.gemm.startswith("linear") and self.bias == "row":
            t["bias"] = randn(n)
        if self.gemm in ("addmm", "baddbmm"):
            t["c"] = randn(*{"row": (n,), "col": (*out_shape[:-1], 1), "full": out_shape}[self.bias])
        if {"add_row", "div_row", "min_row", "where_gt"} & set(self.ops):
            t["row"] = randn(n)
        if "mul_col" in self.ops:
            t["col"] = randn(*out_shape[:-1], 1)
        if {"add_full", "sub_full", "max_full", "where_gt"} & set(self.ops):
            t["full"] = randn(*out_shape)
        if "add_full_t" in self.ops:
            t["full_t"] = randn(*out_shape[:-2], n, out_shape[-2])
        if self.second:
            t["w2"] = randn(n, self.second, scale=1 / math.sqrt(n))
        return t

    def sizes(self) -> list[int | None]:
        return [None]

    @property
    def grad_names(self) -> tuple[str, ...]:
        return ()

    def dynamic_dims(self) -> dict[str, int]:
        return {}

    def forward(self, t: dict[str, torch.Tensor], exact: bool = False) -> tuple[torch.Tensor, ...]:
        return self.run(t, exact)

    def run(self, t: dict[str, torch.Tensor], exact: bool = False) -> tuple[torch.Tensor, ...]:
        """The program on ``t``; ``exact``: in float64 (``t`` float64), where a cast to
        fp32 is no cast (a cast to 16 bits still rounds: the program asks for it)."""
        x, w = t["x"], t["w"]
        if self.gemm.startswith("linear"):
            y = F.linear(x, w, t.get("bias"))
        elif self.gemm == "matmul_t":
            y = x @ w.t()
        elif self.gemm == "bmm":
            y = torch.bmm(x, w)
        elif self.gemm == "addmm":
            y = torch.addmm(t["c"], x, w, beta=self.beta, alpha=self.alpha)
        elif self.gemm == "baddbmm":
            y = torch.baddbmm(t["c"], x, w, beta=self.beta, alpha=self.alpha)
        else:
            y = x @ w
        outs = []
        other = torch.float16 if self.dtype == BF else torch.bfloat16
        for op in self.ops:
            if op == "keep":
                outs.append(y)
            elif op in UNARY:
                y = UNARY[op](y)
            elif op == "add_row":
                y = y + t["row"]
            elif op == "mul_col":
                y = y * t["col"]
            elif op == "add_full":
                y = y + t["full"]
            elif op == "sub_full":
                y = y - t["full"]
            elif op == "div_row":
                y = y / (t["row"].abs() + 0.5)
            elif op == "max_full":
                y = torch.maximum(y, t["full"])
            elif op == "min_row":
                y = torch.minimum(y, t["row"])
            elif op == "where_gt":  # continuous: rounding that flips the comparison moves little
                y = torch.where(y > t["row"], y, t["row"] + (y - t["row"]) * t["full"])
            elif op == "add_full_t":
                y = y + t["full_t"].transpose(-1, -2)
            elif op == "scale":
                y = y * self.scale
            elif op == "inplace_scale":
                copy = y.clone()
                copy.mul_(0.5)  # nothing reads this call's result: the copy is read below
                y = copy + y
            elif op == "cast":
                y = y.to(other).to(y.dtype)
            elif op == "float" and not exact:
                y = y.float()
        if self.second:
            y = y.to(t["w2"].dtype) @ t["w2"]
        return (*outs, y)


def make_program(index: int) -> Program:
    """Program ``index``: its GEMM cycles through ``GEMMS``; a few are drawn to be
    refused in part (an fp32 GEMM, a size that breaks 16-byte rows, beta 0, an
    untranslatable or reducing consumer, three kept intermediates)."""
    rng = random.Random(f"{SEED}-program-{index}")
    gemm = GEMMS[index % len(GEMMS)]
    ops = [rng.choice(POINTWISE) for _ in range(rng.choice([0, 1, 2, 3, 3, 4, 5]))]
    if rng.random() < 0.1:
        ops.insert(rng.randint(0, len(ops)), rng.choice(sorted(REFUSED_OPS)))
    if rng.random() < 0.04:
        ops[:0] = ["keep", "exp", "keep", "sin", "keep", "relu"]
    in_place = random.Random(f"{SEED}-in-place-{index}")
    if in_place.random() < 0.1:
        ops.insert(in_place.randint(0, len(ops)), in_place.choice(IN_PLACE_OPS))
    if ops and ops[-1] == "keep":
        ops[-1] = "relu"
    odd = rng.random() < 0.08
    n = rng.choice([250, 99] if odd and rng.random() < 0.5 else [64, 136, 256, 264, 520, 1000, 2048])
    k = rng.choice([101, 67] if odd and n % 8 == 0 else [64, 72, 256, 520, 1024])
    return Program(
        index=index,
        dtype=F32 if rng.random() < 0.04 else rng.choice([BF, BF, FP]),
        gemm=gemm,
        m=rng.choice([1, 7, 33, 64, 100, 257, 512, 1000]),
        n=n,
        k=k,
        batch=rng.choice([2, 3, 4]),
        ops=tuple(ops),
        second=rng.choice([0, 0, 0, 72, 128, 512]),
        scale=round(rng.uniform(-2, 2), 3),
        alpha=rng.choice([1.0, 0.5]),
        beta=rng.choice([1.0, -1.5, 1.0, 0.0 if rng.random() < 0.3 else 1.0]),
        bias=rng.choice(["row", "col", "full"]) if gemm in ("addmm", "baddbmm") else rng.choice(["row", "none"]),
        backends=rng.choice(["CUTEDSL"] * 4 + ["CUTEDSL,ATEN"]),
        cudagraphs=rng.random() < 0.25,
    )


# --- Model-shaped programs ---------------------------------------------------------------

MODEL_KINDS = ("mlp", "gated", "attention", "bmm", "scaled")
GATED_ACTIVATIONS64 = {"silu": F.silu, "relu": F.relu, "gelu_tanh": ACTIVATIONS64["gelu_tanh"], "gelu_erf": F.gelu}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, exact: bool) -> torch.Tensor:
    """RMSNorm as LLaMA writes it: the mean square in fp32 (``exact``: in float64)."""
    wide = x if exact else x.float()
    return x * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * weight


@dataclasses.dataclass(frozen=True)
class ModelProgram:
    """A program shaped as models write theirs, on (batch, tokens, hidden) activations.

    kinds: ``mlp`` (Linear, activation, Linear, residual; ``form`` "pre" or "post"
    normalized), ``gated`` (``form`` "two" Linear layers or one "fused" gate_up Linear
    cut by chunk), ``attention`` (``form`` "fused" qkv + split or "separate"
    projections; head views, scores and context by matmul, softmax, output
    projection, residual), ``bmm`` (``form`` "bmm" or "baddbmm", activation, a second
    bmm), ``scaled`` (fp8 ``_scaled_mm`` with ``scale_modes`` and a bias, GELU and a
    residual). ``backward``: gradients of the input and every weight too; ``tokens``:
    several counts for a dynamic token dimension (``mark_dynamic``)."""

    index: int
    kind: str
    dtype: str
    batch: int
    tokens: tuple[int, ...]
    hidden: int
    inner: int
    heads: int
    act: str
    form: str
    bias: bool
    backward: bool
    dynamic: bool
    cudagraphs: bool
    backends: str
    scale_modes: tuple[str, str] = ("tensor", "tensor")
    fast_accum: bool = False
    beta: float = 1.0
    rotary: bool = False  # attention: a rotary embedding on q and k (reads across the head dim)

    @property
    def seed(self) -> int:
        return SEED + 100_000 + self.index

    @property
    def label(self) -> str:
        extra = [self.form] + [self.act] * (self.kind != "attention") + ["backward"] * self.backward
        extra += ["dynamic"] * self.dynamic
        extra += ["rotary"] * self.rotary
        extra += ["cudagraphs"] * self.cudagraphs
        extra += [f"scales={'/'.join(self.scale_modes)}"] if self.kind == "scaled" else []
        return (
            f"model {self.index} {self.kind} {self.dtype} B={self.batch} T={'/'.join(map(str, self.tokens))} "
            f"H={self.hidden} I={self.inner} [{' '.join(extra)}]"
        )

    def allowed_rules(self) -> set[str]:
        """The rules that may refuse part of this program, by what it is made of."""
        rules = {"not-paired"}
        if "ATEN" in self.backends or self.kind == "gated":
            rules.add("measured-slower")  # the dual kernel is measured against two GEMMs
        if self.kind in ("attention", "bmm", "gated"):
            rules.add("not-pointwise")  # a GEMM reading another's output (the dual kernel's: the down projection)
        if self.kind == "attention":
            rules |= {"reduction", "indexing"}  # softmax; head views copied out of the projections
            if 1 in self.tokens:  # one token: probabilities expanded with zero strides, no unit-stride mode
                rules.add("layout")
            if self.rotary:  # rotate_half reads another column, through a masked concatenation
                rules.add("unsupported-op")
        if self.kind == "mlp" and self.form == "post":
            rules.add("reduction")
        if self.kind == "bmm" and self.beta == 0.0:
            rules.add("beta-zero")
        sizes = [*(self.tokens if self.kind in ("attention", "bmm") else ()), self.hidden, self.inner]
        if self.dynamic or any(size % 8 for size in sizes):
            rules.add("tma-alignment")  # a width not provably whole 16-byte rows
        if self.kind == "attention" or (self.kind == "gated" and self.form == "fused"):
            rules.add("loops")  # head views and halves read part of a projection's output
        if self.dynamic or any(size % 8 for size in [*self.tokens, self.batch * min(self.tokens)]):
            # Padded rows (pad_mm): a consumer covers part of the GEMM output, or reads it
            # through a masked index (index_expr), as in the random programs.
            rules |= {"loops", "unsupported-op"}
        if self.backward:
            # Masks of a backward pass are bool loads; its consumers read transposed views.
            rules |= {"not-pointwise", "reduction", "indexing", "kept-outputs", "loops", "dtype"}
        return rules

    def sizes(self) -> list[int]:
        return list(self.tokens)

    @property
    def grad_names(self) -> tuple[str, ...]:
        """What a backward program differentiates: the input and every weight, but the
        mask and the key bias (softmax ignores a shift along its row: that gradient is
        zero, and float64's rounding noise has no relative error to compare)."""
        if not self.backward:
            return ()
        return tuple(name for name in self._param_shapes() if name not in ("mask", "bk")) + ("x",)

    def dynamic_dims(self) -> dict[str, int]:
        return {"x": 1} if self.dynamic else {}

    def _param_shapes(self) -> dict[str, tuple[int, ...]]:
        h, i = self.hidden, self.inner
        if self.kind == "mlp":
            shapes = {"w1": (i, h), "w2": (h, i), "norm": (h,)}
            if self.bias:
                shapes |= {"b1": (i,), "b2": (h,)}
        elif self.kind == "gated":
            shapes = {"wgu": (2 * i, h)} if self.form == "fused" else {"wg": (i, h), "wu": (i, h)}
            shapes["wd"] = (h, i)
            if self.bias:
                shapes |= {"bgu": (2 * i,)} if self.form == "fused" else {"bg": (i,), "bu": (i,)}
        elif self.kind == "attention":
            shapes = {"wqkv": (3 * h, h)} if self.form == "fused" else {"wq": (h, h), "wk": (h, h), "wv": (h, h)}
            shapes["wo"] = (h, h)
            if self.bias:
                shapes |= {"bqkv": (3 * h,)} if self.form == "fused" else {"bq": (h,), "bk": (h,), "bv": (h,)}
                shapes["bo"] = (h,)
            if not self.dynamic:
                shapes["mask"] = (self.tokens[0], self.tokens[0])
        elif self.kind == "bmm":
            shapes = {"w": (self.batch, h, i), "w2": (self.batch, i, h)}
            if self.form == "baddbmm":
                shapes["c"] = (self.batch, self.tokens[0], i) if self.bias else (i,)
        else:
            shapes = {"w": (i, h), "bias": (i,)} if self.bias else {"w": (i, h)}
        return shapes

    def inputs(self, device, tokens: int | None = None) -> dict[str, torch.Tensor]:
        """The weights (the same for every token count) and the activations for ``tokens``."""
        tokens = tokens or self.tokens[0]
        dtype = TORCH_DTYPES[self.dtype]
        gen = torch.Generator().manual_seed(self.seed)
        t = {}
        for name, shape in self._param_shapes().items():
            scale = 1 / math.sqrt(shape[-1]) if name.startswith("w") and len(shape) > 1 else 1.0
            if self.kind == "bmm" and name.startswith("w"):
                scale = 1 / math.sqrt(shape[-2])
            value = torch.randn(*shape, generator=gen) * scale
            if name == "norm":
                value = 1 + 0.1 * value
            elif name == "mask":  # additive: a causal mask, finite
                value = torch.triu(torch.full(shape, -30.0), diagonal=1)
            t[name] = value.to(device=device, dtype=dtype)
        gen.manual_seed(self.seed + tokens)
        if self.kind == "scaled":
            m, k, n = self.batch * tokens, self.hidden, self.inner
            t["x"] = (torch.randn(m, k, generator=gen) * 2).to(device=device, dtype=torch.float8_e4m3fn)
            t["w"] = (t["w"].float() * math.sqrt(k) * 2).to(torch.float8_e4m3fn)
            rows = (m, 1) if self.scale_modes[0] == "row" else ()
            cols = (1, n) if self.scale_modes[1] == "row" else ()
            t["scale_a"] = (torch.rand(rows, generator=gen) + 0.5).to(device)
            t["scale_b"] = ((torch.rand(cols, generator=gen) + 0.5) / math.sqrt(k) / 4).to(device)
            t["residual"] = torch.randn(m, n, generator=gen).to(device=device, dtype=dtype)
        else:
            t["x"] = torch.randn(self.batch, tokens, self.hidden, generator=gen).to(device=device, dtype=dtype)
        return t

    def forward(self, t: dict[str, torch.Tensor], exact: bool = False) -> tuple[torch.Tensor, ...]:
        """The program on ``t``; ``exact``: in float64 (fp8 values read as float64)."""
        x, get = t["x"], t.get
        if self.kind == "mlp":
            h = _rms_norm(x, t["norm"], exact) if self.form == "pre" else x
            y = F.linear(ACTIVATIONS64[self.act](F.linear(h, t["w1"], get("b1"))), t["w2"], get("b2"))
            return (x + y,) if self.form == "pre" else (F.layer_norm(x + y, (self.hidden,), t["norm"]),)
        if self.kind == "gated":
            act = GATED_ACTIVATIONS64[self.act]
            if self.form == "fused":
                gate, up = F.linear(x, t["wgu"], get("bgu")).chunk(2, -1)
                h = act(gate) * up
            else:
                h = act(F.linear(x, t["wg"], get("bg"))) * F.linear(x, t["wu"], get("bu"))
            return (x + F.linear(h, t["wd"]),)
        if self.kind == "attention":
            b, n, hidden = x.shape
            d = hidden // self.heads
            if self.form == "fused":
                q, k, v = F.linear(x, t["wqkv"], get("bqkv")).split(hidden, -1)
            else:
                q, k, v = (F.linear(x, t[f"w{p}"], get(f"b{p}")) for p in "qkv")
            q, k, v = (z.view(b, n, self.heads, d).transpose(1, 2) for z in (q, k, v))
            if self.rotary:
                q, k = _rotary(q, exact), _rotary(k, exact)
            scores = (q @ k.transpose(-2, -1)) * d**-0.5
            if "mask" in t:
                scores = scores + t["mask"]
            probs = scores.softmax(-1) if exact else scores.float().softmax(-1).to(scores.dtype)
            ctx = (probs @ v).transpose(1, 2).reshape(b, n, hidden)
            return (x + F.linear(ctx, t["wo"], get("bo")),)
        if self.kind == "bmm":
            if self.form == "baddbmm":
                y = torch.baddbmm(t["c"], x, t["w"], beta=self.beta, alpha=0.5)
            else:
                y = torch.bmm(x, t["w"])
            return (torch.bmm(ACTIVATIONS64[self.act](y), t["w2"]),)
        if exact:
            y = (x.double() @ t["w"].double().t()) * t["scale_a"].double() * t["scale_b"].double()
            y = y + t["bias"].double() if "bias" in t else y
        else:
            y = torch._scaled_mm(
                x,
                t["w"].t(),
                t["scale_a"],
                t["scale_b"],
                bias=get("bias"),
                out_dtype=TORCH_DTYPES[self.dtype],
                use_fast_accum=self.fast_accum,
            )
        return (ACTIVATIONS64[self.act](y) + t["residual"],)


def _rotary(z: torch.Tensor, exact: bool) -> torch.Tensor:
    """A rotary position embedding of (batch, heads, tokens, head dim) ``z``, as Llama's:
    ``z * cos + rotate_half(z) * sin``, the angles computed in the graph from the token
    positions (in float64 for the reference, else rounded to ``z``'s dtype)."""
    n, d = z.shape[-2], z.shape[-1]
    freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=z.device, dtype=torch.float64) / d))
    angles = torch.arange(n, device=z.device, dtype=torch.float64)[:, None] * freq[None, :]
    angles = torch.cat((angles, angles), -1)
    cos, sin = (a if exact else a.to(z.dtype) for a in (angles.cos(), angles.sin()))
    half = d // 2
    rotated = torch.cat((-z.narrow(-1, half, half), z.narrow(-1, 0, half)), -1)
    return z * cos + rotated * sin


def make_model_program(index: int) -> ModelProgram:
    """Model program ``index``: its kind cycles through ``MODEL_KINDS``."""
    rng = random.Random(f"{SEED}-model-{index}")
    kind = MODEL_KINDS[index % len(MODEL_KINDS)]
    hidden = rng.choice([128, 256, 384, 512, 768])
    inner = rng.choice([2 * hidden, 4 * hidden, 64 * round(8 * hidden / 3 / 64)])
    tokens = rng.choice([1, 7, 33, 64, 77, 128, 197, 256])
    dynamic = kind in ("mlp", "gated", "attention") and rng.random() < 0.25
    backward = kind in ("mlp", "gated", "attention", "bmm") and not dynamic and rng.random() < 0.45
    if dynamic:
        # Never 0 or 1: a dynamic dimension of 1 is specialized by design.
        counts = [rng.randint(2, 300) for _ in range(3)]
        tokens = tuple(dict.fromkeys([max(tokens, 2), *counts]))
    else:
        tokens = (tokens,)
    form = {
        "mlp": ["pre", "post"],
        "gated": ["two", "fused"],
        "attention": ["fused", "separate"],
        "bmm": ["bmm", "baddbmm"],
        "scaled": ["plain"],
    }[kind]
    act = rng.choice(sorted(GATED_ACTIVATIONS64) if kind == "gated" else sorted(ACTIVATIONS64))
    # torch's row-wise scaled GEMM writes bf16 only.
    dtype = BF if kind == "scaled" else rng.choice([BF, BF, FP])
    return ModelProgram(
        index=index,
        kind=kind,
        dtype=dtype,
        batch=rng.choice([1, 2, 3]),
        tokens=tokens,
        hidden=hidden,
        inner=inner,
        heads=hidden // 64,
        act=act,
        form=rng.choice(form),
        bias=rng.random() < 0.5,
        backward=backward,
        dynamic=dynamic,
        cudagraphs=rng.random() < 0.3,
        backends=rng.choice(["CUTEDSL"] * 4 + ["CUTEDSL,ATEN"]),
        # torch._scaled_mm scales both operands alike: both per tensor or both per row
        # (the runtime cases cover the mixed modes of our kernel).
        scale_modes=(mode := rng.choice(["tensor", "row"]), mode),
        fast_accum=rng.random() < 0.4,
        beta=rng.choice([1.0, -0.5, 0.0 if rng.random() < 0.3 else 1.0]),
        # Drawn from a stream of its own: the other draws stay as they were.
        rotary=kind == "attention" and random.Random(f"{SEED}-rotary-{index}").random() < 0.5,
    )


# --- Checking: outcomes, runtime items and compiled programs ---------------------------

#: Failures kept per item (the result file keeps the first few of the whole run).
FAILURES_PER_ITEM = 5


@dataclasses.dataclass
class Outcome:
    """What one item of work did. ``cases``: runtime cases run (1 per program);
    ``checked``: of those, compared with float64; ``stock_failures``: programs that
    fail stock Inductor too (a flaw of the generator, not of the backend)."""

    key: str
    category: str  # "runtime", "program" or "model"
    cases: int = 0
    checked: int = 0
    wrong: int = 0
    crashes: int = 0
    unexplained: int = 0
    stock_failures: int = 0
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    failures: list[dict] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    info: dict = dataclasses.field(default_factory=dict)

    def fail(self, kind: str, what: str, detail: str) -> None:
        """Count a failure (``kind``: "wrong", "crashes", "unexplained" or
        "stock_failures") and keep its description."""
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.failures) < FAILURES_PER_ITEM:
            self.failures.append({"kind": kind, "key": self.key, "what": what, "detail": detail[-3000:]})

    def refuse(self, rule: str | None) -> None:
        name = rule or "unexplained"
        self.refused[name] = self.refused.get(name, 0) + 1

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.crashes or self.unexplained)


def _context_broken() -> bool:
    """Whether the CUDA context is unusable (an illegal access poisons it for good)."""
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


def check_runtime(spec_index: int, numbers: Sequence[int], device="cuda") -> Outcome:
    """Cases ``numbers`` of spec ``spec_index``, checked."""
    out = Outcome(f"runtime:{spec_index}:{numbers[0] if numbers else 0}", "runtime")
    start = time.perf_counter()
    for number in numbers:
        case = make_case(spec_index, number)
        out.cases += 1
        try:
            reason = check_case(case, device)
        except AssertionError as exc:
            out.fail("wrong", case.describe(), str(exc))
            continue
        except Exception:
            out.fail("crashes", case.describe(), traceback.format_exc())
            if device == "cuda" and _context_broken():
                break
            continue
        if reason is None:
            out.checked += 1
            continue
        rule, explained = judge_refusal(case, reason)
        out.refuse(rule)
        if not explained:
            why = f"drawn {'with ' + case.flaw if case.flaw else 'to run'}; refused by rule {rule}: {reason}"
            out.fail("unexplained", case.describe(), why)
    out.seconds = round(time.perf_counter() - start, 2)
    return out


@contextlib.contextmanager
def nan_poisoned_allocations() -> Iterator[None]:
    """Every floating-point buffer a compiled program's wrapper allocates comes filled
    with NaN (its whole storage, padding included), so that an element no kernel writes
    fails the float64 check. The wrappers bind ``empty_strided_cuda`` from Inductor's
    guards module as they load: wrappers loaded inside the block allocate through this."""
    guards = torch._C._dynamo.guards
    original = guards._empty_strided_cuda

    def poisoned(*args, **kwargs):
        t = original(*args, **kwargs)
        if t.dtype.is_floating_point and t.untyped_storage().nbytes():
            torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).fill_(0xFF)
        return t

    guards._empty_strided_cuda = poisoned
    try:
        yield
    finally:
        guards._empty_strided_cuda = original


def compile_options(backends: str, cudagraphs: bool) -> dict:
    """max-autotune with ``backends`` as the GEMM backends, without coordinate-descent
    tuning of the pointwise kernels (compile time; it would also turn a one-row GEMM into
    a product and a sum) and without the FX graph cache (every compile lowers)."""
    return {
        "max_autotune": True,
        "max_autotune_gemm_backends": backends,
        "triton.cudagraphs": cudagraphs,
        "coordinate_descent_tuning": False,
        "fx_graph_cache": False,
    }


def reset_compiler() -> None:
    """A clean Dynamo for the next program (no cache entries to reuse, no recompile
    limit reached). The reset drops our compile hook: the backend is installed again,
    as ``benchmarks.models.release`` does."""
    from inductor_cutedsl import disable, enable

    torch._dynamo.reset()
    disable()
    enable()


def evaluate(p, fn: Callable, t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """``fn`` (the program's arguments in sorted name order) on ``t``: its outputs, then
    the gradients of ``p.grad_names`` for fixed random output gradients (backward
    programs), each copied at once (a CUDA graph's outputs are overwritten by the next
    replay)."""
    names = sorted(t)
    args = [t[n].detach().requires_grad_(True) if n in p.grad_names else t[n] for n in names]
    outs = fn(*args)
    values = [o.detach().clone() for o in outs]
    if p.grad_names:
        gen = torch.Generator().manual_seed(p.seed + 7)
        grads_out = [torch.randn(o.shape, generator=gen).to(o.device, o.dtype) for o in outs]
        wrt = [a for n, a in zip(names, args, strict=True) if n in p.grad_names]
        values += [g.detach().clone() for g in torch.autograd.grad(outs, wrt, grads_out)]
    return values


def _eager(p, names: list[str], exact: bool = False) -> Callable:
    return lambda *args: p.forward(dict(zip(names, args, strict=True)), exact)


def _program_function(p, names: list[str]) -> Callable:
    """The program as a function of its inputs in ``names`` order, for torch.compile
    (a fresh function per compile: nothing is shared with an earlier one)."""

    def program(*args):
        return p.forward(dict(zip(names, args, strict=True)))

    return program


def references(p, device) -> tuple[dict, dict]:
    """Per size: the float64 values (outputs, then gradients) and eager's error in the
    program's own dtype against them (None where eager cannot run here: fp8 on a CPU)."""
    refs, eager_errs = {}, {}
    for size in p.sizes():
        t = p.inputs(device, size)
        names = sorted(t)
        refs[size] = evaluate(p, _eager(p, names, exact=True), {n: v.double() for n, v in t.items()})
        if getattr(p, "kind", "") == "scaled" and t["x"].device.type != "cuda":
            eager_errs[size] = None
        else:
            eager = evaluate(p, _eager(p, names), t)
            eager_errs[size] = [_err(e, r) for e, r in zip(eager, refs[size], strict=True)]
    return refs, eager_errs


def compile_and_run(p, device, stock: bool = False) -> dict:
    """Compile ``p`` (max-autotune with its backends; ``stock``: Inductor without us,
    ATen GEMMs) and run it on each of its sizes, twice (thrice with CUDA graphs: warm
    up, record, replay): {"values": {size: [values per call]}, "refusals", "codes",
    "graphs": graphs Dynamo compiled}."""
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    from inductor_cutedsl import disable, enable

    from .models import captured_code

    reset_compiler()
    backends = "ATEN" if stock else p.backends
    if stock:
        disable()
    try:
        names = sorted(p.inputs("meta", p.sizes()[0]))
        compiled = torch.compile(_program_function(p, names), options=compile_options(backends, p.cudagraphs))
        values: dict = {}
        before = counters["stats"]["unique_graphs"]
        with (
            inductor_config.patch(max_autotune_gemm_backends=backends),
            captured_refusals() as refusals,
            captured_code([]) as codes,
        ):
            for size in p.sizes():
                t = p.inputs(device, size)
                for name, dim in p.dynamic_dims().items():
                    torch._dynamo.mark_dynamic(t[name], dim)
                values[size] = [evaluate(p, compiled, t) for _ in range(3 if p.cudagraphs else 2)]
        return {
            "values": values,
            "refusals": list(refusals),
            "codes": codes,
            "graphs": counters["stats"]["unique_graphs"] - before,
        }
    finally:
        if stock:
            enable()


def _errors(p, values: dict, refs: dict, eager_errs: dict) -> dict[tuple, tuple[float, str]]:
    """Every value off float64 by more than its tolerance, by (size, call, index): its
    error and a description. The tolerance: ``PROGRAM_TOL``, or twice eager's own error
    in the program's dtype where that is more, never more than 25%."""
    bad = {}
    base = PROGRAM_TOL[p.dtype]
    for size, calls in values.items():
        for call, got in enumerate(calls):
            if len(got) != len(refs[size]):
                bad[size, call, -1] = (
                    math.inf,
                    f"size {size} call {call}: {len(got)} values, float64 has {len(refs[size])}",
                )
                continue
            for index, (g, r) in enumerate(zip(got, refs[size], strict=True)):
                eager = (eager_errs[size] or [0.0] * len(got))[index]
                tol = min(0.25, max(base, 2 * eager if math.isfinite(eager) else base))
                err = _err(g, r) if tuple(g.shape) == tuple(r.shape) else math.inf
                if not err < tol:
                    bad[size, call, index] = (
                        err,
                        f"size {size} call {call} value {index} {tuple(g.shape)}: "
                        f"rel err {err:.3e} (tol {tol:.3e}, eager {eager:.3e})",
                    )
    return bad


def check_program(p, category: str, device="cuda") -> Outcome:
    """Compile and run one program; check its values against float64, its refusals
    against the rules it may meet, where CuteDSL is the only GEMM backend every ATen
    GEMM against a refusal, and for a dynamic program its graph count against stock's.
    A value stock Inductor gets as wrong (at least half as far off), or a compile that
    fails stock Inductor too, counts as a ``stock_failures``: a flaw of the program."""
    from .launch import kernel_counts

    key = f"{category}:{p.index}"
    out = Outcome(key, category, cases=1)
    start = time.perf_counter()
    try:
        refs, eager_errs = references(p, device)
    except Exception:
        detail = "eager float64 or low precision failed (a generator bug):\n" + traceback.format_exc()
        out.fail("crashes", p.label, detail)
        return out
    try:
        ran = compile_and_run(p, device)
    except Exception:
        detail = traceback.format_exc()
        try:
            compile_and_run(p, device, stock=True)
        except Exception:
            out.fail("stock_failures", p.label, "stock Inductor fails too:\n" + detail)
        else:
            out.fail("crashes", p.label, detail)
        out.seconds = round(time.perf_counter() - start, 2)
        return out
    out.checked = 1
    allowed = p.allowed_rules()
    for r in ran["refusals"]:
        out.refuse(r.rule)
        if r.rule not in allowed:
            out.fail(
                "unexplained",
                p.label,
                f"{r.where} {r.subject}: {r.reason} (rule {r.rule}; this program may meet {sorted(allowed)})",
            )
    counts = kernel_counts("\n".join(ran["codes"]))
    out.info = {"cutedsl_launches": counts["cutedsl"], "aten_gemms": counts["aten"], "graphs": ran["graphs"]}
    gemm_refusals = sum(r.where == "gemm" for r in ran["refusals"])
    if p.backends == "CUTEDSL" and counts["aten"] > gemm_refusals:
        out.fail(
            "unexplained",
            p.label,
            f"{counts['aten']} ATen GEMM call site(s) but {gemm_refusals} GEMM "
            "refusal(s), CuteDSL being the only GEMM backend",
        )
    bad = _errors(p, ran["values"], refs, eager_errs)
    stock = None
    if p.dynamic_dims():
        stock = compile_and_run(p, device, stock=True)
        out.info["stock_graphs"] = stock["graphs"]
        if ran["graphs"] > stock["graphs"]:
            out.fail(
                "wrong",
                p.label,
                f"{ran['graphs']} graphs compiled for token counts {p.sizes()}, stock Inductor {stock['graphs']}",
            )
    if bad:
        try:
            stock = stock or compile_and_run(p, device, stock=True)
            theirs = _errors(p, stock["values"], refs, eager_errs)
        except Exception:
            theirs = {key: (math.inf, "stock Inductor fails") for key in bad}
        ours = {key: why for key, (err, why) in bad.items() if theirs.get(key, (0.0, ""))[0] < 0.5 * err}
        shared = [why for key, (_, why) in bad.items() if key not in ours]
        if ours:
            out.fail("wrong", p.label, "; ".join(list(ours.values())[:6]))
        if shared:
            out.fail("stock_failures", p.label, "stock Inductor as far off: " + "; ".join(shared[:6]))
    out.seconds = round(time.perf_counter() - start, 2)
    return out


# --- The short slice the GPU tests run (tests/test_fuzz_gpu.py) -------------------------

#: Runtime cases per spec in the slice: every corner spec, and one drawn spec per kind.
SLICE_CASES_PER_SPEC = 8


def slice_runtime_specs() -> list[int]:
    corners = list(range(len(CORNER_SPECS)))
    drawn = {}
    for index in range(len(CORNER_SPECS), len(SPECS)):
        drawn.setdefault(SPECS[index].api, index)
    return corners + sorted(drawn.values())


def slice_programs(count: int = 12) -> list[int]:
    """The first ``count`` random programs (every GEMM kind), with at least two
    CUDA-graph ones: a program of those is swapped in for the last non-graph ones."""
    chosen = list(range(count))
    graphed = [i for i in range(count, 20 * count) if make_program(i).cudagraphs][:2]
    have = sum(make_program(i).cudagraphs for i in chosen)
    for extra in graphed[: max(0, 2 - have)]:
        chosen[-1 - graphed.index(extra)] = extra
    return chosen


def slice_model_programs(count: int = 10) -> list[int]:
    """Model programs covering every kind and form, backward, dynamic and CUDA graphs:
    taken in order, each while it adds a feature not yet covered, then the next ones."""
    chosen: list[int] = []
    seen: set = set()
    for i in range(400):
        p = make_model_program(i)
        features = {
            (p.kind, p.form),
            ("backward", p.kind) if p.backward else None,
            "dynamic" if p.dynamic else None,
            "cudagraphs" if p.cudagraphs else None,
        } - {None}
        if features - seen and len(chosen) < count:
            chosen.append(i)
            seen |= features
    return chosen


# --- The run: items, jobs, budget, result file ---------------------------------------------

#: Runtime cases per item: a spec's cases run in items of this many.
RUNTIME_CHUNK = 25
#: First guesses of an item's seconds, per category, until the job has timed one.
FIRST_GUESS_S = {"runtime": 15.0, "program": 45.0, "model": 75.0}
#: Seconds the run keeps for merging and writing its result at the end of ``--budget``.
RESERVE_S = 15.0


def runtime_items(total: int, specs: int | None = None) -> list[tuple[str, int, list[int]]]:
    """(key, spec index, case numbers) of the first ``total`` runtime cases: case c is
    case c // len(SPECS) of spec c % len(SPECS), so any total spreads over every spec."""
    specs = specs or len(SPECS)
    numbers: dict[int, list[int]] = {}
    for c in range(total):
        numbers.setdefault(c % specs, []).append(c // specs)
    return [
        (f"runtime:{spec}:{chunk[0]}", spec, chunk)
        for spec, all_numbers in sorted(numbers.items())
        for chunk in (all_numbers[i : i + RUNTIME_CHUNK] for i in range(0, len(all_numbers), RUNTIME_CHUNK))
    ]


def plan(
    runtime_cases: int, programs: int, model_programs: int, jobs: int, done: set[str] = frozenset()
) -> list[list[str]]:
    """Each job's item keys, in the order it runs them: a fixed slice (a spec's cases
    in one job, so that one process loads its kernel; programs and model programs dealt
    round-robin), runtime items first, then programs and model programs alternating.
    ``done`` items are left out."""
    slices: list[list[str]] = [[] for _ in range(jobs)]
    for key, spec, _ in runtime_items(runtime_cases):
        slices[spec % jobs].append(key)
    compiled: list[list[str]] = [[] for _ in range(jobs)]
    for i in range(max(programs, model_programs)):
        if i < programs:
            compiled[i % jobs].append(f"program:{i}")
        if i < model_programs:
            compiled[(i + jobs // 2) % jobs].append(f"model:{i}")
    return [[k for k in slices[j] + compiled[j] if k not in done] for j in range(jobs)]


def run_item(key: str, settings: dict, device="cuda") -> Outcome:
    category, index, *rest = key.split(":")
    if category == "runtime":
        items = {k: numbers for k, _, numbers in runtime_items(settings["runtime_cases"])}
        return check_runtime(int(index), items[key], device)
    if category == "program":
        return check_program(make_program(int(index)), "program", device)
    return check_program(make_model_program(int(index)), "model", device)


def _append(path: str, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def job_main(plan_path: str) -> int:
    """One job: its items in order, each recorded in the job's log as it starts and as
    it ends; an item whose guessed time would overrun the deadline is skipped."""
    from inductor_cutedsl import config

    with open(plan_path) as f:
        job = json.load(f)
    settings, log, deadline = job["settings"], job["log"], job["deadline"]
    guesses = dict(FIRST_GUESS_S)
    # One candidate per GEMM: the fuzz checks numbers, not the autotuner's pick. Patched,
    # not assigned, so that a job run inside a test leaves the settings as it found them.
    with config.patch(max_configs=1), nan_poisoned_allocations():
        for key in job["items"]:
            category = key.split(":")[0]
            if deadline is not None and time.time() + guesses[category] > deadline:
                continue
            _append(log, {"start": key})
            outcome = run_item(key, settings)
            guesses[category] = max(guesses[category] * 0.5, outcome.seconds * 1.2)
            _append(log, {"done": key, "outcome": dataclasses.asdict(outcome)})
            if outcome.crashes and _context_broken():
                return 3  # the CUDA context is gone: the run starts another process for the rest
    return 0


@dataclasses.dataclass
class _Job:
    index: int
    items: list[str]
    proc: subprocess.Popen | None = None
    log: str = ""
    output: str = ""
    launches: int = 0
    stopped: bool = False  # stopped by the run at its deadline


def _job_env(cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        INDUCTOR_CUTEDSL_STRICT="1",
        INDUCTOR_CUTEDSL_COMPILE_WORKERS="2",
        INDUCTOR_CUTEDSL_CACHE_DIR=cache_dir,
        # Triton kernels compile in the job's own process: 8 jobs each with a pool the
        # size of the machine would oversubscribe it.
        TORCHINDUCTOR_COMPILE_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")])),
    )
    return env


def _launch(job: _Job, settings: dict, deadline: float | None, workdir: str, env: dict) -> None:
    job.launches += 1
    stem = os.path.join(workdir, f"job{job.index}-{job.launches}")
    job.log, job.output = stem + ".jsonl", stem + ".out"
    with open(stem + ".plan.json", "w") as f:
        json.dump({"items": job.items, "settings": settings, "deadline": deadline, "log": job.log}, f)
    with open(job.output, "w") as out:
        job.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.fuzz", "--job", stem + ".plan.json"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=str(Path(__file__).resolve().parents[1]),
        )


def _read_log(path: str) -> tuple[list[Outcome], str | None]:
    """(the outcomes a job's log records, the item it started last without ending)."""
    outcomes, open_item = [], None
    if not os.path.exists(path):
        return outcomes, None
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if "start" in record:
                open_item = record["start"]
            elif "done" in record:
                outcomes.append(Outcome(**record["outcome"]))
                open_item = None
    return outcomes, open_item


def _tail(path: str, chars: int = 3000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


def _stop(jobs: Sequence[_Job]) -> None:
    """End the job processes this run started (each with the compile workers it
    started: a job leads its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [job for job in jobs if job.proc.poll() is None]
        for job in live:
            job.stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.proc.pid, sig)
        for job in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.proc.wait(timeout=10)


def run_jobs(
    slices: list[list[str]], settings: dict, deadline: float | None, cache_dir: str, max_launches: int = 20
) -> tuple[list[Outcome], list[str]]:
    """Run each slice in a job process until it is done or the deadline passes; a job
    that dies mid-item has that item counted as a crash and is started again on the
    rest. Returns the outcomes, the keys left undone and the folder of the jobs' logs
    (each job's output, kept for a failure's whole story)."""
    env = _job_env(cache_dir)
    workdir = tempfile.mkdtemp(prefix="fuzz-jobs-")
    jobs = [_Job(i, items) for i, items in enumerate(slices) if items]
    for job in jobs:
        _launch(job, settings, deadline, workdir, env)
    outcomes: list[Outcome] = []
    running = list(jobs)
    while running:
        time.sleep(1.0)
        if deadline is not None and time.time() > deadline + RESERVE_S / 3:
            _stop(running)
        for job in list(running):
            code = job.proc.poll()
            if code is None:
                continue
            running.remove(job)
            done, open_item = _read_log(job.log)
            outcomes += done
            finished = {o.key for o in done}
            if open_item is not None and code != 0 and not job.stopped:
                crash = Outcome(open_item, open_item.split(":")[0], cases=0 if open_item.startswith("runtime") else 1)
                crash.fail("crashes", open_item, f"the job process died (exit {code}):\n{_tail(job.output)}")
                outcomes.append(crash)
                finished.add(open_item)
            job.items = [k for k in job.items if k not in finished]
            # Exit 0: the job skipped only what would overrun the deadline, which stays undone.
            out_of_time = deadline is not None and time.time() > deadline - 30
            if code != 0 and not job.stopped and job.items and not out_of_time and job.launches < max_launches:
                _launch(job, settings, deadline, workdir, env)
                running.append(job)
    done_keys = {o.key for o in outcomes}
    left = [k for items in slices for k in items if k not in done_keys]
    return outcomes, left, workdir


def summarize(
    outcomes: Sequence[Outcome], settings: dict, left: Sequence[str], seconds: float, previous: dict | None = None
) -> dict:
    """The result file: totals over ``outcomes`` and ``previous`` (a result this run
    resumed), per category, refusals by rule and the first failures."""
    result = {
        "seed": SEED,
        "settings": settings,
        "runtime_cases": 0,
        "runtime_checked": 0,
        "compiled_programs": 0,
        "model_programs": 0,
        "wrong": 0,
        "crashes": 0,
        "unexplained": 0,
        "stock_failures": 0,
        "refused_by_rule": {},
        "categories": {},
        "seconds": round(seconds, 1),
        "failures": [],
        "done_items": [],
        "left_items": len(left),
        "kernel_specs": len(SPECS),
    }
    if previous:
        drawn = (previous.get("seed"), previous.get("settings", {}).get("runtime_cases"))
        if drawn != (SEED, settings["runtime_cases"]):
            raise SystemExit("--resume: the previous result was drawn with another seed or runtime case count")
        for name in (
            "runtime_cases",
            "runtime_checked",
            "compiled_programs",
            "model_programs",
            "wrong",
            "crashes",
            "unexplained",
            "stock_failures",
        ):
            result[name] = previous.get(name, 0)
        result["refused_by_rule"] = dict(previous.get("refused_by_rule", {}))
        result["categories"] = json.loads(json.dumps(previous.get("categories", {})))
        result["failures"] = list(previous.get("failures", []))
        result["done_items"] = list(previous.get("done_items", []))
        result["seconds"] = round(seconds + previous.get("seconds", 0.0), 1)
        result["runs"] = previous.get("runs", 1) + 1
    for o in outcomes:
        if o.category == "runtime":
            result["runtime_cases"] += o.cases
            result["runtime_checked"] += o.checked
        else:
            result["compiled_programs" if o.category == "program" else "model_programs"] += o.cases
        for name in ("wrong", "crashes", "unexplained", "stock_failures"):
            result[name] += getattr(o, name)
        for rule, count in o.refused.items():
            result["refused_by_rule"][rule] = result["refused_by_rule"].get(rule, 0) + count
        cat = result["categories"].setdefault(
            o.category,
            {
                "items": 0,
                "cases": 0,
                "checked": 0,
                "wrong": 0,
                "crashes": 0,
                "unexplained": 0,
                "stock_failures": 0,
                "seconds": 0.0,
            },
        )
        for name in ("cases", "checked", "wrong", "crashes", "unexplained", "stock_failures"):
            cat[name] += getattr(o, name)
        cat["items"] += 1
        cat["seconds"] = round(cat["seconds"] + o.seconds, 1)
        if o.category != "runtime":
            launches = cat.setdefault("with_cutedsl_kernel", 0)
            cat["with_cutedsl_kernel"] = launches + (o.info.get("cutedsl_launches", 0) > 0)
        result["failures"] += o.failures
        result["done_items"].append(o.key)
    result["failures"] = result["failures"][:40]
    result["refused_by_rule"] = dict(sorted(result["refused_by_rule"].items()))
    return result


def precompile(specs: Sequence[FuzzSpec], workers: int) -> None:
    """Build the kernels of ``specs`` into the kernel cache, a line per kernel."""
    from inductor_cutedsl.cli.precompile import build_with_progress
    from inductor_cutedsl.runtime.launch import default_cache

    cache = default_cache()
    kernels = list(dict.fromkeys(s.kernel_spec() for s in specs))
    print(f"{len(kernels)} runtime kernel specs into {cache.root}, {workers} workers", flush=True)
    start = time.perf_counter()
    built = build_with_progress(kernels, cache, workers, out=lambda line: print(line, flush=True))
    fresh = sum(now for _, now, _ in built.values())
    print(f"{fresh} compiled now, {len(kernels) - fresh} cached, {time.perf_counter() - start:.1f}s", flush=True)
    if not cache.persistent:
        why = cache.why_not_persistent()
        raise SystemExit(f"the kernel cache {cache.root} is not persistent ({why}): nothing was kept")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.fuzz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runtime-cases", type=int, default=10000, help="runtime cases (default %(default)s)")
    ap.add_argument("--programs", type=int, default=200, help="random programs (default %(default)s)")
    ap.add_argument("--model-programs", type=int, default=100, help="model-shaped programs (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=8, help="worker processes (default %(default)s)")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no work that would end after this many seconds; write what was done",
    )
    ap.add_argument("--json", default=DEFAULT_JSON, metavar="PATH", help="result file (default %(default)s)")
    ap.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="a previous result file: add to it, skipping the items it has done",
    )
    ap.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="kernel cache (default: INDUCTOR_CUTEDSL_CACHE_DIR or the per-user cache)",
    )
    ap.add_argument(
        "--precompile", action="store_true", help="only build the runtime cases' kernels into the cache (no GPU needed)"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="kernel build processes for the precompile (default %(default)s)",
    )
    ap.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if min(args.runtime_cases, args.programs, args.model_programs) < 0 or args.jobs < 1 or args.workers < 1:
        ap.error("counts must be at least 0, --jobs and --workers at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.job:
        return job_main(args.job)
    from inductor_cutedsl import config

    if args.cache_dir:
        config.cache_dir = args.cache_dir
    from inductor_cutedsl.runtime.launch import default_cache

    cache_dir = str(default_cache().root)
    used = sorted({spec for _, spec, _ in runtime_items(args.runtime_cases)})
    start = time.time()
    if args.precompile:
        precompile([SPECS[i] for i in used], args.workers)
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("the fuzz runs on a GPU (only --precompile runs without one)")
    previous = None
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            previous = json.load(f)
    done = set(previous["done_items"]) if previous else set()
    settings = {
        "runtime_cases": args.runtime_cases,
        "programs": args.programs,
        "model_programs": args.model_programs,
        "jobs": args.jobs,
        "budget": args.budget,
    }
    slices = plan(args.runtime_cases, args.programs, args.model_programs, args.jobs, done)
    pending = {int(k.split(":")[1]) for s in slices for k in s if k.startswith("runtime:")}
    precompile([SPECS[i] for i in sorted(pending)], args.workers)
    deadline = start + args.budget - RESERVE_S if args.budget else None
    items = sum(map(len, slices))
    until = f", starting none that would end after {deadline - start:.0f}s" if deadline else ""
    print(f"{items} items ({len(done)} done before) in {args.jobs} jobs{until}", flush=True)
    outcomes, left, logs = run_jobs(slices, settings, deadline, cache_dir)
    result = {**run_info(), **summarize(outcomes, settings, left, time.time() - start, previous), "job_logs": logs}
    write_json(result, args.json)
    failed = result["wrong"] + result["crashes"] + result["unexplained"]
    print(
        f"runtime cases {result['runtime_cases']} ({result['runtime_checked']} checked), compiled programs "
        f"{result['compiled_programs']}, model programs {result['model_programs']}; wrong {result['wrong']}, "
        f"crashes {result['crashes']}, unexplained {result['unexplained']}, stock failures "
        f"{result['stock_failures']}; refused {result['refused_by_rule']}; {len(left)} items left; "
        f"{result['seconds']}s -> {args.json}"
    )
    for failure in result["failures"][:10]:
        print(f"  {failure['kind']}: {failure['what']}\n    {failure['detail'][:800]}")
    print(f"  the jobs' output: {logs}")
    if left:
        print(f"  {len(left)} items left: run again with --resume {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
