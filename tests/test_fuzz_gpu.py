"""Seeded fuzzing of the GEMM kernels and the torch.compile backend against float64.

Two parts:

* ``test_fuzz_gemm``: random GEMM + epilogue cases through ``runtime.gemm``. Every
  kernel spec compiles once (5-15 s each), so the cases are drawn from the fixed
  list ``SPECS`` (config, dtypes, majors, epilogue) and each test runs
  ``CASES_PER_SPEC`` cases of one spec: odd sizes, batches, padded leading dims,
  storage offsets, broadcast and strided operands, outputs (and ``out`` operands)
  pre-filled with NaN inside larger NaN buffers whose padding must stay NaN.
  A case the runtime refuses (ValueError) is counted, not failed; a few cases are
  drawn misaligned on purpose (``Case.expect_ok`` False) so refusals are exercised.
  Output widths are whole 16-byte rows (odd M and K, N odd only where refused).
* ``test_fuzz_compile``: random small programs (linear / matmul / bmm / addmm with
  random pointwise consumers, kept intermediates, a second GEMM) compiled with
  CuteDSL as the only GEMM backend and epilogue fusion on, against eager float64.

The generators need no GPU: ``tests/test_fuzz_cases.py`` checks them on CPU (the
counts, the coverage, and that the runtime accepts exactly the cases meant to
run). Compile the GEMM specs ahead of time, on any machine, into the cache the
tests use (``tests/conftest.py``'s ``INDUCTOR_CUTEDSL_CACHE_DIR``) with::

    python tests/test_fuzz_gpu.py --precompile [--workers N]
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
from typing import Callable

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E

SEED = 20261201
CASES_PER_SPEC = 60
MIN_CHECKED_FRACTION = 0.85  # of a spec's cases; the rest were refused (meant or not)
PROGRAMS = 24

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
                "float8_e4m3fn": torch.float8_e4m3fn}  # fmt: skip
# Relative Frobenius error against float64, by output dtype: rounding the output
# dominates (bf16 2^-9, fp16 2^-11, e4m3 2^-4), plus the epilogue's approximate
# tanh/exp/rcp.
TOL = {"bfloat16": 1.5e-2, "float16": 5e-3, "float32": 5e-3, "float8_e4m3fn": 7e-2}


# --- The kernel specs --------------------------------------------------------------

CFG_COOP = GemmConfig(128, 256, 2, 1, False, True, 1)
CFG_PINGPONG = GemmConfig(128, 128, 1, 2, True, False, 1)
CFG_TALL = GemmConfig(256, 128, 2, 2, False, False, 8, 64)
CFG_PP64 = GemmConfig(64, 256, 2, 1, True, True, 8)
CFG_BUFFERS = GemmConfig(128, 256, 1, 2, False, False, 8, 64, 4)
CFG_STREAM_K = GemmConfig(128, 256, 2, 1, False, False, 8, 64, stream_k=True)
CFG_PROMOTE = GemmConfig(128, 128, 1, 2, False, True, 1)  # registers for two accumulators


def _source(*lines: str) -> str:
    return "def epilogue(acc, m, n, l, ops):\n" + "".join(f"    {line}\n" for line in lines)


def _sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def _gelu_tanh(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


@dataclasses.dataclass(frozen=True)
class FuzzEpilogue:
    """An epilogue and its float64 reference: ``reference(acc, ops)`` returns the
    output's value, then one value per ``out`` operand (``ops``: the operands in
    declaration order, tensors as float64, ``out`` operands as None)."""

    epilogue: E.Epilogue
    reference: Callable

    @property
    def name(self) -> str:
        return self.epilogue.name


def identity() -> FuzzEpilogue:
    return FuzzEpilogue(E.IDENTITY, lambda acc, ops: (acc,))


def row_relu(dtype: str) -> FuzzEpilogue:
    return FuzzEpilogue(E.bias_activation("relu", "row", dtype), lambda acc, ops: (torch.relu(acc + ops[0]),))


def col_silu(dtype: str) -> FuzzEpilogue:
    epi = E.bias_activation("silu", "col", dtype)
    return FuzzEpilogue(epi, lambda acc, ops: ((acc + ops[0]) * _sigmoid(acc + ops[0]),))


def full_scalars(dtype: str) -> FuzzEpilogue:
    """``torch.addmm``'s beta * C + alpha * acc, C full."""
    return FuzzEpilogue(E.addmm(True, "full", dtype), lambda acc, ops: (ops[1] * acc + ops[2] * ops[0],))


def row_keep(dtype: str, keep_dtype: str, pairs: bool = False) -> FuzzEpilogue:
    """A kept pre-activation (an ``out`` operand), with ``pairs`` written two columns per store."""
    epi = E.Epilogue(
        f"row_gelu_keep_{keep_dtype}{'_pairs' if pairs else ''}",
        _source("pre = acc + ops[0]", "return gelu_tanh(pre), pre"),
        (E.EpilogueOperand("bias", "row", dtype), E.EpilogueOperand("pre", "out", keep_dtype, pairs)),
    )  # fmt: skip
    return FuzzEpilogue(epi, lambda acc, ops: (_gelu_tanh(acc + ops[0]), acc + ops[0]))


def all_kinds(keep_dtype: str) -> FuzzEpilogue:
    """Every operand kind in one epilogue: row, col, full, scalar and out."""
    epi = E.Epilogue(
        f"all_kinds_{keep_dtype}",
        _source("pre = ops[3] * acc + ops[0] + ops[1]", "return tanh(pre) * ops[2] + pre, pre"),
        (E.EpilogueOperand("row", "row", "float16"), E.EpilogueOperand("col", "col", "bfloat16"),
         E.EpilogueOperand("full", "full", "bfloat16"), E.EpilogueOperand("alpha", "scalar"),
         E.EpilogueOperand("pre", "out", keep_dtype)),
    )  # fmt: skip

    def reference(acc, ops):
        pre = ops[3] * acc + ops[0] + ops[1]
        return torch.tanh(pre) * ops[2] + pre, pre

    return FuzzEpilogue(epi, reference)


def paired_gate(dtype: str) -> FuzzEpilogue:
    """A full operand read two columns per load."""
    epi = E.Epilogue(f"paired_gate_{dtype}", _source("return silu(acc) * ops[0]"),
                     (E.EpilogueOperand("gate", "full", dtype, pairs=True),))  # fmt: skip
    return FuzzEpilogue(epi, lambda acc, ops: (acc * _sigmoid(acc) * ops[0],))


def scaled_rows(bias: str) -> FuzzEpilogue:
    """``torch._scaled_mm``'s row-wise scales and bias."""
    return FuzzEpilogue(E.scaled("row", "row", bias), lambda acc, ops: (acc * ops[0] * ops[1] + ops[2],))


def staged_residual(dtype: str) -> FuzzEpilogue:
    """A full operand TMA-loaded into shared memory."""
    epi = E.Epilogue(f"staged_residual_{dtype}", _source("return relu(acc) + ops[0]"),
                     (E.EpilogueOperand("r", "full", dtype, staged=True),))  # fmt: skip
    return FuzzEpilogue(epi, lambda acc, ops: (torch.relu(acc) + ops[0],))


@dataclasses.dataclass(frozen=True)
class FuzzSpec:
    """One kernel spec of the fuzz: what ``runtime.spec_for`` makes of its cases."""

    config: GemmConfig
    ab_dtype: str
    out_dtype: str
    a_major: str  # "k": A row-major, "m": column-major
    b_major: str  # "n": B row-major, "k": column-major
    fuzz_epilogue: FuzzEpilogue
    promote: int = 0  # fp8: partial sums promoted every k-tile

    @property
    def epilogue(self) -> E.Epilogue:
        return self.fuzz_epilogue.epilogue

    def kernel_spec(self):
        from inductor_cutedsl.runtime import KernelSpec

        return KernelSpec(self.config, self.ab_dtype, self.out_dtype, self.a_major, self.b_major, self.epilogue,
                          promote=self.promote)  # fmt: skip

    def id(self) -> str:
        return (f"{self.config.name()}-{self.ab_dtype[:4]}to{self.out_dtype[:4]}-"
                f"A{self.a_major}B{self.b_major}-{self.epilogue.name}")  # fmt: skip


BF, FP, F32, F8 = "bfloat16", "float16", "float32", "float8_e4m3fn"
SPECS: list[FuzzSpec] = [
    FuzzSpec(CFG_COOP, BF, BF, "k", "n", identity()),
    FuzzSpec(CFG_PINGPONG, FP, FP, "m", "k", identity()),
    FuzzSpec(CFG_TALL, BF, F32, "k", "k", identity()),
    FuzzSpec(CFG_PP64, FP, F32, "m", "n", identity()),
    FuzzSpec(CFG_STREAM_K, BF, BF, "m", "n", identity()),
    FuzzSpec(CFG_BUFFERS, BF, BF, "k", "k", row_relu(BF)),
    FuzzSpec(CFG_STREAM_K, BF, BF, "k", "k", row_relu(F32)),
    FuzzSpec(CFG_COOP, FP, FP, "m", "n", col_silu(F32)),
    FuzzSpec(CFG_TALL, BF, BF, "k", "n", col_silu(BF)),
    FuzzSpec(CFG_PINGPONG, BF, BF, "k", "n", full_scalars(BF)),
    FuzzSpec(CFG_PP64, BF, F32, "m", "k", full_scalars(FP)),
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
    # fp8 operands (both K-major): fast accumulation, promotion, an fp8 output.
    FuzzSpec(CFG_COOP, F8, BF, "k", "k", identity()),
    FuzzSpec(CFG_PROMOTE, F8, F32, "k", "k", scaled_rows(BF), promote=1),
    FuzzSpec(CFG_PINGPONG, F8, F8, "k", "k", row_relu(BF)),
]


# --- Cases: sizes, layouts and values drawn per spec -----------------------------


@dataclasses.dataclass(frozen=True)
class View:
    """A strided view into a flat storage of ``numel`` elements."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        return self.offset + sum((s - 1) * st for s, st in zip(self.size, self.stride)) + 1

    def make(self, dtype: torch.dtype, device, fill: str = "randn") -> tuple[torch.Tensor, torch.Tensor]:
        """(storage, view): randn values, NaN (``fill="nan"``) or uninitialised ("empty")."""
        if fill == "randn":
            storage = torch.randn(self.numel, device=device).to(dtype)
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
    operands: tuple[Operand, ...]
    expect_ok: bool  # False: drawn misaligned on purpose, the runtime must refuse it
    why_bad: str = ""

    @property
    def spec(self) -> FuzzSpec:
        return SPECS[self.spec_index]


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


def _matrix(rng: random.Random, rows: int, cols: int, major_last: bool, batch: int | None, itemsize: int,
            misalign: str = "") -> View:  # fmt: skip
    """A (batch?, rows, cols) matrix, row-major if ``major_last``, with its leading
    dimension padded (16-byte multiples), its batches spaced and a storage offset
    (16-byte multiples), unless ``misalign`` names the one to break ("ld" or "base")."""
    step = 16 // itemsize
    inner, outer = (cols, rows) if major_last else (rows, cols)
    ld = _round_up(inner, step) + step * rng.choice([0, 0, 0, 1, 3])
    if misalign == "ld":
        ld += 1
    offset = step * rng.choice([0, 0, 1, 5]) + (1 if misalign == "base" else 0)
    stride = (ld, 1) if major_last else (1, ld)
    if batch is None:
        return View((rows, cols), stride, offset)
    batch_stride = outer * ld + step * rng.choice([0, 0, 2])
    return View((batch, rows, cols), (batch_stride, *stride), offset)


def _operand(rng: random.Random, decl: E.EpilogueOperand, m: int, n: int, batch: int | None,
             misalign: bool) -> Operand:  # fmt: skip
    """An operand as its declaration allows: broadcast, strided, padded or offset."""
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
    if decl.pairs or decl.staged:
        # Unit N stride; paired: even strides and 4-byte aligned base; staged: strides
        # and base 16-byte aligned, and no broadcast batch.
        align = 16 // itemsize if decl.staged else 2
        ld = _round_up(n, align) + align * rng.choice([0, 0, 1, 4])
        offset = align * rng.choice([0, 0, 1, 3]) + (1 if misalign else 0)
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
        stride2 = (1, ld)
        outer = n
    else:
        stride2 = (ld, 1)
        outer = m
    if batch is None or (decl.kind == "full" and rng.random() < 0.3):  # broadcast over L
        return Operand(decl.kind, decl.dtype, View((m, n), stride2, offset))
    bstride = outer * ld + rng.randint(0, 7)
    return Operand(decl.kind, decl.dtype, View((*lead, m, n), (bstride, *stride2), offset))


def make_case(spec_index: int, number: int) -> Case:
    """Case ``number`` of spec ``spec_index``: drawn from its own seed, so any case can
    be rebuilt alone."""
    spec = SPECS[spec_index]
    rng = random.Random(f"{SEED}-{spec_index}-{number}")
    paired = any(op.pairs for op in spec.epilogue.operands)
    m, n, k = _size(rng, 700), _size(rng, 700), _size(rng, 600)
    if paired and n % 2:
        n += 1  # paired loads read column pairs
    batch = rng.choice([None, None, None, 1, 2, 3, 4])
    ab_size = TORCH_DTYPES[spec.ab_dtype].itemsize
    out_size = TORCH_DTYPES[spec.out_dtype].itemsize
    bad = ""
    if rng.random() < 0.06:  # one misalignment the runtime must refuse
        flaws = ["a ld", "b base", "out base", "out width"]
        if any(op.pairs or op.staged for op in spec.epilogue.operands):
            flaws.append("operand")
        bad = rng.choice(flaws)
    # The output's rows are whole 16-byte units (runtime.support.row_width_reason);
    # "out width" draws one that is not.
    step = 16 // out_size
    n = _round_up(n, step)
    if bad == "out width":
        n += step // 2 if step > 2 else 1
    a = _matrix(rng, m, k, spec.a_major == "k", batch, ab_size, misalign="ld" if bad == "a ld" else "")
    b = _matrix(rng, k, n, spec.b_major == "n", batch, ab_size, misalign="base" if bad == "b base" else "")
    out = _matrix(rng, m, n, True, batch, out_size, misalign="base" if bad == "out base" else "")
    operands = tuple(
        _operand(rng, decl, m, n, batch, misalign=bad == "operand" and (decl.pairs or decl.staged))
        for decl in spec.epilogue.operands
    )
    return Case(spec_index, number, m, n, k, batch, a, b, out, operands, not bad, bad)


def cases_for(spec_index: int) -> list[Case]:
    return [make_case(spec_index, i) for i in range(CASES_PER_SPEC)]


def case_tensors(case: Case, device, fill: str = "randn"):
    """(a, b, out, operand values, [(storage, view) of each output]) on ``device``:
    outputs NaN-filled (NaN storage around them too); inputs ``fill``ed."""
    spec = case.spec
    ab = TORCH_DTYPES[spec.ab_dtype]
    _, a = case.a.make(ab, device, fill)
    _, b = case.b.make(ab, device, fill)
    outputs = [case.out.make(TORCH_DTYPES[spec.out_dtype], device, "nan" if fill != "empty" else "empty")]
    values = []
    for op in case.operands:
        if op.view is None:
            values.append(op.value)
        elif op.kind == "out":
            outputs.append(op.view.make(TORCH_DTYPES[op.dtype], device, "nan" if fill != "empty" else "empty"))
            values.append(outputs[-1][1])
        else:
            values.append(op.view.make(TORCH_DTYPES[op.dtype], device, fill)[1])
    return a, b, outputs[0][1], values, outputs


def _untouched(storage: torch.Tensor, view: View) -> bool:
    """Whether every storage element outside ``view`` is still NaN."""
    outside = torch.ones(storage.numel(), dtype=torch.bool, device=storage.device)
    outside.as_strided(view.size, view.stride, view.offset).fill_(False)
    return bool(storage[outside].isnan().all())


def check_case(case: Case, device="cuda") -> str | None:
    """Run one case on the GPU: None when checked right, "refused: ..." when the
    runtime refused it; an assertion fails on a wrong result."""
    from inductor_cutedsl.runtime import gemm, spec_for

    spec = case.spec
    a, b, out, values, outputs = case_tensors(case, device)
    assert spec_for(a, b, out.dtype, spec.config, spec.epilogue, promote=spec.promote) == spec.kernel_spec(), case
    try:
        gemm(a, b, *values, out=out, config=spec.config, epilogue=spec.epilogue, promote=spec.promote)
    except ValueError as exc:
        return f"refused: {exc}"
    if device == "cuda":
        torch.cuda.synchronize()
    acc = torch.matmul(a.double(), b.double())
    ops = [None if op.kind == "out" else v.double() if torch.is_tensor(v) else v
           for op, v in zip(case.operands, values)]  # fmt: skip
    expected = spec.fuzz_epilogue.reference(acc, ops)
    kinds = [spec.out_dtype] + [op.dtype for op in case.operands if op.kind == "out"]
    for index, ((storage, got), want, dtype) in enumerate(zip(outputs, expected, kinds)):
        err = _rel_err(got, want)
        assert err < TOL[dtype], f"{case}\noutput {index}: rel err {err:.3e} (tol {TOL[dtype]})"
        view = case.out if index == 0 else [op for op in case.operands if op.kind == "out"][index - 1].view
        assert _untouched(storage, view), f"{case}\noutput {index}: wrote outside its view"
    return None


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    from helpers import rel_err

    return rel_err(out, ref.expand(out.shape))


@pytest.mark.gpu
@pytest.mark.parametrize("spec_index", range(len(SPECS)), ids=[s.id() for s in SPECS])
def test_fuzz_gemm(spec_index):
    torch.manual_seed(SEED + spec_index)
    cases = cases_for(spec_index)
    refused = []
    for case in cases:
        why = check_case(case)
        if why is not None:
            refused.append((case.number, case.why_bad or "meant to run", why))
    checked = len(cases) - len(refused)
    print(f"{SPECS[spec_index].id()}: {checked} checked, {len(refused)} refused")
    for number, meant, why in refused:
        print(f"  case {number} ({meant}): {why}")
    assert checked >= MIN_CHECKED_FRACTION * len(cases), refused


# --- Random torch.compile programs ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Program:
    """A small graph: one GEMM (``gemm``), pointwise consumers (``ops``; "keep"
    returns the value so far as an extra output), optionally a second GEMM."""

    seed: int
    dtype: str
    gemm: str  # linear, linear_3d, matmul, matmul_t, bmm, addmm
    m: int
    n: int
    k: int
    batch: int
    ops: tuple[str, ...]
    second: int  # N of a second GEMM on the result, 0 for none
    scale: float
    alpha: float
    beta: float

    def inputs(self, device) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        dtype = TORCH_DTYPES[self.dtype]

        def randn(*shape, scale=1.0):
            return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

        m, n, k, wscale = self.m, self.n, self.k, 1 / math.sqrt(self.k)
        x_shape = {"bmm": (self.batch, m, k), "linear_3d": (self.batch, m, k)}.get(self.gemm, (m, k))
        t = {"x": randn(*x_shape)}
        if self.gemm.startswith("linear"):
            t["w"], t["bias"] = randn(n, k, scale=wscale), randn(n)
        elif self.gemm == "matmul_t":
            t["w"] = randn(n, k, scale=wscale)
        elif self.gemm == "bmm":
            t["w"] = randn(self.batch, k, n, scale=wscale)
        else:
            t["w"] = randn(k, n, scale=wscale)
        if self.gemm == "addmm":
            t["c"] = randn(n)
        out_shape = (*x_shape[:-1], n)
        if "add_row" in self.ops:
            t["row"] = randn(n)
        if "mul_col" in self.ops:
            t["col"] = randn(*out_shape[:-1], 1)
        if "add_full" in self.ops:
            t["full"] = randn(*out_shape)
        if self.second:
            t["w2"] = randn(n, self.second, scale=1 / math.sqrt(n))
        return t

    def run(self, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        F = torch.nn.functional
        x, w = t["x"], t["w"]
        if self.gemm.startswith("linear"):
            y = F.linear(x, w, t["bias"])
        elif self.gemm == "matmul_t":
            y = x @ w.t()
        elif self.gemm == "bmm":
            y = torch.bmm(x, w)
        elif self.gemm == "addmm":
            y = torch.addmm(t["c"], x, w, beta=self.beta, alpha=self.alpha)
        else:
            y = x @ w
        outs = []
        for op in self.ops:
            if op == "keep":
                outs.append(y)
            elif op == "add_row":
                y = y + t["row"]
            elif op == "mul_col":
                y = y * t["col"]
            elif op == "add_full":
                y = y + t["full"]
            elif op == "scale":
                y = y * self.scale
            elif op == "gelu_tanh":
                y = F.gelu(y, approximate="tanh")
            else:
                y = getattr(torch, op)(y) if op in ("relu", "sigmoid", "tanh") else getattr(F, op)(y)
        if self.second:
            y = y @ t["w2"]
        return (*outs, y)


POINTWISE = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "scale", "add_row", "mul_col", "add_full", "keep"]
GEMMS = ["linear", "linear_3d", "matmul", "matmul_t", "bmm", "addmm"]


def make_program(index: int) -> Program:
    """Program ``index``: its GEMM cycles through ``GEMMS``; sizes keep N and K
    multiples of 8 (rows 16-byte aligned, so the backend takes every GEMM)."""
    rng = random.Random(f"{SEED}-program-{index}")
    ops = tuple(rng.sample(POINTWISE, rng.randint(0, 3)))
    if ops and ops[-1] == "keep":
        ops = ops[:-1] + ("relu",)
    return Program(
        seed=SEED + index, dtype=rng.choice([BF, BF, FP]), gemm=GEMMS[index % len(GEMMS)],
        m=rng.choice([1, 7, 64, 100, 257, 512, 1000]), n=rng.choice([64, 256, 264, 1000, 2048]),
        k=rng.choice([64, 256, 520, 1024]), batch=rng.choice([2, 3]), ops=ops,
        second=rng.choice([0, 0, 0, 128, 512]), scale=round(rng.uniform(-2, 2), 3),
        alpha=rng.choice([1.0, 0.5]), beta=rng.choice([1.0, -1.5]),
    )  # fmt: skip


PROGRAM_LIST = [make_program(i) for i in range(PROGRAMS)]


@pytest.fixture
def fusion_on_one_config():
    """The backend with epilogue fusion on and one config per GEMM (every config is
    a kernel to compile; the GEMM fuzz covers the configs)."""
    from inductor_cutedsl.install import reenabled

    with reenabled(epilogue_fusion=True, max_configs=1):
        torch.compiler.reset()
        yield
    torch.compiler.reset()


@pytest.mark.gpu
@pytest.mark.usefixtures("fusion_on_one_config")
@pytest.mark.parametrize("program", PROGRAM_LIST, ids=lambda p: f"{p.seed}-{p.gemm}-{'-'.join(p.ops) or 'plain'}")
def test_fuzz_compile(program):
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    from helpers import cutedsl_launches, rel_err

    t = program.inputs("cuda")
    names = sorted(t)

    def fn(*args):
        return program.run(dict(zip(names, args)))

    with ic.patch(max_autotune_gemm_backends="CUTEDSL", force_disable_caches=True):
        outs, codes = run_and_get_code(torch.compile(fn, mode="max-autotune-no-cudagraphs"), *[t[n] for n in names])
    refs = program.run({name: v.double() for name, v in t.items()})
    code = "\n".join(codes)
    if program.m == 1 and program.gemm not in ("bmm", "linear_3d"):
        # Inductor rewrites a 2-D GEMM with one row as a product and a sum when
        # coordinate-descent tuning is on (max-autotune turns it on): no GEMM is left
        # to take. Any GEMM that is left must still be ours.
        assert cutedsl_launches(code) >= 1 or not re.search(r"extern_kernels\.|triton_tem_", code), code
    else:
        assert cutedsl_launches(code) >= 1, "no CuteDSL kernel ran"
    tol = 3e-2 if program.dtype == BF else 1e-2
    for index, (got, want) in enumerate(zip(outs, refs)):
        assert got.shape == want.shape
        err = rel_err(got, want)
        assert err < tol, f"{program}\noutput {index}: rel err {err:.3e}"


# --- Ahead-of-time compilation of the GEMM specs -------------------------------------


def precompile(workers: int) -> None:
    """Compile every spec of ``SPECS`` into the cache the tests use."""
    import os
    import sys
    import time

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import conftest  # noqa: F401  (sets the tests' INDUCTOR_CUTEDSL_CACHE_DIR)
    from inductor_cutedsl.runtime import compiler
    from inductor_cutedsl.runtime.launch import default_cache

    cache = default_cache()
    specs = [s.kernel_spec() for s in SPECS]
    t0 = time.perf_counter()
    built = compiler.build_many(specs, cache, workers)
    compiled = sum(b for _, b, _ in built.values())
    print(f"{len(specs)} fuzz specs in {cache.root}: {compiled} compiled now, "
          f"{len(specs) - compiled} cached, {time.perf_counter() - t0:.1f}s")  # fmt: skip
    if not cache.persistent:
        raise SystemExit(f"the kernel cache {cache.root} is not persistent: nothing was kept")


if __name__ == "__main__":
    import argparse
    import os

    parser = argparse.ArgumentParser(description="Compile the GEMM fuzz's kernel specs ahead of time.")
    parser.add_argument("--precompile", action="store_true", required=True, help="compile the specs")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="compile worker processes (default: %(default)s)")  # fmt: skip
    precompile(parser.parse_args().workers)
