"""Inductor pointwise IR -> epilogue source: translation, refusals, sm_90a compile (no GPU)."""

from __future__ import annotations

import math

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import translated_values
from torch._inductor.virtualized import V, ops

from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build
from inductor_cutedsl.scheduler.epilogue_translation import EpilogueTranslator, finish

m, n, l = sympy.symbols("m n l", integer=True, nonnegative=True)
M, N = 1000, 4096
DTYPES = {
    "acc": torch.bfloat16,
    "bias": torch.bfloat16,
    "colb": torch.float32,
    "res": torch.bfloat16,
    "gate": torch.float16,
    "out": torch.bfloat16,
}
OWN = N * m + n


def translate(body, sizes=(M, N, 1), keep=()):
    tr = EpilogueTranslator("acc", (m, n, l), sizes, DTYPES.__getitem__)
    with V.set_ops_handler(tr):
        body()
    return finish(tr, "test", keep)


def rows(m: int) -> torch.Tensor:
    """The first ``m`` rows of a bf16 GEMM output (the translation's views do not depend on M)."""
    return torch.randn(m, N).to(torch.bfloat16)


def f32(x):
    return ops.to_dtype(x, torch.float32)


def test_bias_gelu_tanh_chain():
    def body():
        x = ops.add(f32(ops.load("acc", OWN)), f32(ops.load("bias", n)))
        inner = ops.mul(
            ops.constant(math.sqrt(2 / math.pi), torch.float32),
            ops.add(x, ops.mul(ops.constant(0.044715, torch.float32), ops.pow(x, ops.constant(3, torch.float32)))),
        )
        y = ops.mul(
            ops.mul(ops.constant(0.5, torch.float32), x), ops.add(ops.constant(1.0, torch.float32), ops.tanh(inner))
        )
        ops.store("out", OWN, ops.to_dtype(y, torch.bfloat16))

    t = translate(body)
    assert [(o.buffer, o.strides, o.offset) for o in t.operands] == [("bias", (0, 1, 0), 0)]
    assert t.outputs == ("out",)
    assert "tanh(" in t.epilogue.source and "round_to(" in t.epilogue.source
    x, bias = rows(8), torch.randn(N).to(torch.bfloat16)
    got = translated_values(t, x, {"bias": bias})["out"]
    want = F.gelu(x.double() + bias.double(), approximate="tanh").to(torch.bfloat16).double()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_operand_index_analysis():
    def body():
        a = ops.add(f32(ops.load("acc", OWN)), f32(ops.load("colb", m)))
        b = ops.mul(a, f32(ops.load("res", OWN + 7)))
        c = ops.sub(b, f32(ops.load("gate", 2 * N * m + 2 * n)))
        ops.store("out", OWN, c)

    t = translate(body)
    assert [(o.buffer, o.strides, o.offset) for o in t.operands] == [
        ("colb", (1, 0, 0), 0),
        ("res", (N, 1, 0), 7),
        ("gate", (2 * N, 2, 0), 0),
    ]
    assert [op.dtype for op in t.epilogue.operands] == ["float32", "bfloat16", "float16"]
    # Paired loads need unit N stride, even offset and strides, 16-bit data: none here.
    assert [op.pairs for op in t.epilogue.operands] == [False, False, False]


@pytest.mark.parametrize("big_n,pairs", [(N, True), (N - 1, False)])
def test_contiguous_16_bit_inputs_are_read_in_pairs_for_an_even_n(big_n, pairs):
    def body():
        x = ops.mul(f32(ops.load("acc", big_n * m + n)), f32(ops.load("res", big_n * m + n)))
        ops.store("out", big_n * m + n, ops.to_dtype(x, torch.bfloat16))

    tr = EpilogueTranslator("acc", (m, n, l), (M, big_n, 1), DTYPES.__getitem__)
    with V.set_ops_handler(tr):
        body()
    assert [op.pairs for op in finish(tr, "t").epilogue.operands] == [pairs]


def test_kept_buffers_become_out_operands(tmp_path):
    """The GEMM output and an intermediate read elsewhere are written as extra outputs."""

    def body():
        ops.store("buf1", OWN, ops.to_dtype(ops.relu(f32(ops.load("acc", OWN))), torch.bfloat16))
        ops.store("out", OWN, ops.mul(f32(ops.load("buf1", OWN)), f32(ops.load("res", OWN))))

    dtypes = {**DTYPES, "buf1": torch.bfloat16}
    tr = EpilogueTranslator("acc", (m, n, l), (M, N, 1), dtypes.__getitem__)
    with V.set_ops_handler(tr):
        body()
    t = finish(tr, "keep", ("acc", "buf1"))
    assert t.kept == ("acc", "buf1")
    assert [(o.buffer, o.strides) for o in t.operands] == [("res", (N, 1, 0)), ("acc", (N, 1, 0)), ("buf1", (N, 1, 0))]
    assert [op.kind for op in t.epilogue.operands] == ["full", "out", "out"]
    last = t.epilogue.source.strip().splitlines()[-1].strip()
    assert last.startswith("return ") and last.count(",") == 2 and ", acc, " in last
    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", t.epilogue)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000
    x, res = rows(8), rows(8)
    got = translated_values(t, x, {"res": res})
    relu = torch.relu(x.double()).to(torch.bfloat16).double()  # buf1 is bf16
    torch.testing.assert_close(got["out"], relu * res.double(), rtol=1e-12, atol=0)
    torch.testing.assert_close(got["acc"], x.double(), rtol=0, atol=0)
    torch.testing.assert_close(got["buf1"], relu, rtol=0, atol=0)


def test_batched_acc_index_and_reused_intermediate():
    own3 = M * N * l + OWN

    def body():
        ops.store("buf1", own3, ops.relu(ops.load("acc", own3)))
        ops.store("out", own3, ops.mul(ops.load("buf1", own3), ops.load("bias", n + N * l)))

    t = translate(body, sizes=(M, N, 3))
    assert t.outputs == ("buf1", "out")
    assert t.operands[0].strides == (0, 1, N)


@pytest.mark.parametrize(
    "body,needle",
    [
        (lambda: ops.store("out", OWN, ops.load("bias", sympy.floor(n / 2))), "not polynomial|not linear"),
        (lambda: ops.store("out", OWN, ops.load("bias", sympy.Symbol("tmp0"))), "depends on"),
        (lambda: ops.store("out", OWN, ops.load("acc", M * n + m)), "element-for-element"),
        (lambda: ops.store("out", OWN, ops.load("bias", m * n)), "not linear"),
        (lambda: ops.store("out", OWN, ops.bitwise_and(ops.load("acc", OWN), ops.load("acc", OWN))), "bitwise_and"),
        (lambda: ops.store("out", OWN, ops.load("acc", OWN), "atomic_add"), "store mode"),
        (lambda: ops.store("out", M * n + m, ops.load("acc", OWN)), "element-for-element"),
        (lambda: ops.store("out", OWN, ops.to_dtype(ops.load("acc", OWN), torch.int32)), "cast"),
        (lambda: None, "stores nothing"),
    ],
)
def test_untranslatable_nodes_are_refused(body, needle):
    with pytest.raises(Unsupported, match=needle):
        translate(body)


UNARY = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "tanh",
    "sigmoid",
    "erf",
    "rsqrt",
    "sqrt",
    "abs",
    "neg",
    "reciprocal",
    "relu",
    "square",
    "sin",
    "cos",
)


def test_every_op_translates_and_compiles_for_sm90a(tmp_path):
    """One epilogue using every supported op, compiled into a real sm_90a kernel."""

    def body():
        x = f32(ops.load("acc", OWN))
        b = f32(ops.load("bias", n))
        vals = [x, b]
        for op in UNARY:
            vals.append(getattr(ops, op)(ops.abs(x)))
        for op in ("add", "sub", "mul", "truediv", "maximum", "minimum"):
            vals.append(getattr(ops, op)(x, b))
        cond = ops.gt(x, b)
        for op in ("lt", "le", "ge", "eq", "ne"):
            vals.append(ops.where(getattr(ops, op)(x, b), x, b))
        vals.append(ops.where(cond, x, ops.constant(0.0, torch.float32)))
        vals.append(ops.pow(x, ops.constant(2.0, torch.float32)))
        vals.append(ops.pow(ops.abs(x), ops.constant(0.5, torch.float32)))
        vals.append(ops.fma(x, b, x))
        vals.append(f32(ops.to_dtype(x, torch.float16)))
        total = vals[0]
        for v in vals[1:]:
            total = ops.add(total, v)
        ops.store("out", OWN, ops.to_dtype(total, torch.bfloat16))

    t = translate(body)
    spec = KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "k", t.epilogue)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000
    # What it computes, written with torch.
    x16, b16 = rows(8), torch.randn(N).to(torch.bfloat16)
    x, b = x16.double(), b16.double()
    vals = [x, b] + [getattr(torch, op)(x.abs()) for op in UNARY]
    vals += [x + b, x - b, x * b, x / b, torch.maximum(x, b), torch.minimum(x, b)]
    vals += [torch.where(cmp, x, b) for cmp in (x < b, x <= b, x >= b, x == b, x != b)]
    vals += [torch.where(x > b, x, 0.0), x**2, x.abs() ** 0.5, x * b + x, x.to(torch.float16).double()]
    want = sum(vals[1:], vals[0]).to(torch.bfloat16).double()
    torch.testing.assert_close(translated_values(t, x16, {"bias": b16})["out"], want, rtol=8e-3, atol=1e-2)
