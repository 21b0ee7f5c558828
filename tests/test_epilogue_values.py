"""What every epilogue we generate computes, on the CPU in float64, against torch eager.

The epilogue sources run through ``runtime.reference``, whose names are the DSL helpers of
``kernels.epilogue_math`` themselves bound to torch: a wrong formula or constant in the
translation, in a helper or in a builder shows here as it would in the kernel. The
expectations are torch eager on float64 inputs, never the package's own code. Inputs are
seeded random values plus edge values (0, -0, +-1, large, tiny, ties between operands).
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import graph_inputs, translate_inductor, translated_values
from torch._inductor.virtualized import V, ops

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.lowering.candidate import GemmCandidate
from inductor_cutedsl.runtime import KernelSpec, reference
from inductor_cutedsl.scheduler import epilogue_translation as et
from inductor_cutedsl.scheduler.fusion import compose, fuse

F64 = torch.float64
M, N = 8, 48
#: Where an op is defined the kernel must give eager's value; where not, eager's NaN/inf.
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e4, -1e4, 1e30, -1e30, 1e-30, -1e-30, 88.0, -90.0, 448.0, 500.0]
TIES = 12  # entries of y equal to x's (comparisons at equality, x - y == 0)


def close(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    """Equal to float64 rounding: the same formula evaluated twice in float64. NaN and
    infinities must sit where eager's are."""
    torch.testing.assert_close(
        got.to(F64), want.to(F64), rtol=1e-9, atol=1e-12, equal_nan=True, msg=lambda default: f"{what}: {default}"
    )


def operands(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (the GEMM output) and y (another (M, N) input), float32: random, x's first
    entries the edge values, y's first entries equal to x's and its last ones the edges."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(2, M, N, generator=gen).unbind(0)
    x.view(-1)[: len(EDGES)] = torch.tensor(EDGES)
    y.view(-1)[:TIES] = x.view(-1)[:TIES]
    y.view(-1)[-len(EDGES) :] = torch.tensor(EDGES)
    return x, y


# -- every op of the translation, from real Inductor pointwise nodes ------------------

#: (name, fn of x and y): each a graph output. The name is the translator op it reaches.
GRAPH_OPS = [
    ("exp", lambda x, y: torch.exp(x)),
    ("exp2", lambda x, y: torch.exp2(x)),
    ("expm1", lambda x, y: torch.expm1(x)),
    ("log", lambda x, y: torch.log(x)),
    ("log1p", lambda x, y: torch.log1p(x)),
    ("log2", lambda x, y: torch.log2(x)),
    ("tanh", lambda x, y: torch.tanh(x)),
    ("sigmoid", lambda x, y: torch.sigmoid(x)),
    ("erf", lambda x, y: torch.erf(x)),
    ("rsqrt", lambda x, y: torch.rsqrt(x)),
    ("sqrt", lambda x, y: torch.sqrt(x)),
    ("abs", lambda x, y: torch.abs(x)),
    ("neg", lambda x, y: torch.neg(x)),
    ("reciprocal", lambda x, y: torch.reciprocal(x)),
    ("relu", lambda x, y: torch.relu(x)),
    ("sin", lambda x, y: torch.sin(x)),
    ("cos", lambda x, y: torch.cos(x)),
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("truediv", lambda x, y: x / y),
    ("maximum", lambda x, y: torch.maximum(x, y)),
    ("minimum", lambda x, y: torch.minimum(x, y)),
    # Each comparison picks x, else a multiple of y that differs from x at the ties.
    ("lt", lambda x, y: torch.where(x < y, x, 2 * y)),
    ("le", lambda x, y: torch.where(x <= y, x, 3 * y)),
    ("gt", lambda x, y: torch.where(x > y, x, 4 * y)),
    ("ge", lambda x, y: torch.where(x >= y, x, 5 * y)),
    ("eq", lambda x, y: torch.where(x == y, x, 6 * y)),
    ("ne", lambda x, y: torch.where(x != y, x, 7 * y)),
    ("pow", lambda x, y: torch.pow(x.abs() + 1, y)),
    ("constant", lambda x, y: x * 0.125 - 3.0),
    ("to_dtype", lambda x, y: (x * 3).to(torch.bfloat16)),
    ("to_dtype_fp16", lambda x, y: (x - 1).to(torch.float16)),
    ("to_dtype_fp8", lambda x, y: x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() + y),
    # What models write, through Inductor's own decompositions.
    ("gelu_tanh", lambda x, y: F.gelu(x, approximate="tanh")),
    ("gelu_erf", lambda x, y: F.gelu(x)),
    ("silu", lambda x, y: F.silu(x)),
    ("softplus", lambda x, y: F.softplus(x)),
    ("elu", lambda x, y: F.elu(x)),
    ("leaky_relu", lambda x, y: F.leaky_relu(x, 0.1)),
    ("hardtanh", lambda x, y: F.hardtanh(x, -2.0, 2.0)),
    ("mish", lambda x, y: F.mish(x)),
]


@pytest.fixture(scope="module")
def graph():
    """The translation of one CPU graph with every ``GRAPH_OPS`` entry as an output, each
    output's values, and the translator ops the replay called."""
    called: set[str] = set()
    names = [*et._UNARY, *et._BINARY, *et._COMPARE, "constant", "to_dtype", "where", "pow", "fma"]

    def recording(name):
        method = getattr(et.EpilogueTranslator, name)

        def record(self, *args, **kwargs):
            called.add(name)
            return method(self, *args, **kwargs)

        return record

    x, y = operands()
    with mock.patch.multiple(et.EpilogueTranslator, **{name: recording(name) for name in names}):
        res = translate_inductor(lambda x, y: tuple(fn(x, y) for _, fn in GRAPH_OPS), x, y, keep_all=True)
    assert "t" in res, res.get("refused")
    values = translated_values(res["t"], x, graph_inputs(x, y))
    return {"values": [values[buf] for buf in res["outputs"]], "called": called, "x": x, "y": y}


@pytest.mark.parametrize("index", range(len(GRAPH_OPS)), ids=[name for name, _ in GRAPH_OPS])
def test_translated_op_computes_what_eager_does(graph, index):
    name, fn = GRAPH_OPS[index]
    want = fn(graph["x"].to(F64), graph["y"].to(F64))
    close(graph["values"][index], want, name)


#: Translator ops that Inductor's CPU lowering never calls for the graphs above (it
#: writes x * x for square, mul and add for addcmul, a product for small integer
#: powers); each is checked by a test of its own below.
DIRECT = {"square", "fma", "pow", "constant", "where"}


def test_every_op_of_the_translation_is_evaluated(graph):
    """A new entry of the translator's tables needs a value test here."""
    handled = {*et._UNARY, *et._BINARY, *et._COMPARE, "constant", "to_dtype", "where", "pow", "fma"}
    assert handled - graph["called"] <= DIRECT, handled - graph["called"] - DIRECT


ms, ns, ls = sympy.symbols("m n l", integer=True, nonnegative=True)
OWN = N * ms + ns


def direct(body) -> et.Translation:
    """The translation of ``body``, a replay of ops calls on inputs arg0_1 (the GEMM
    output) and arg1_1 (y), stored to an fp32 output."""
    dtypes = {"arg0_1": torch.float32, "arg1_1": torch.float32, "out": torch.float32}
    tr = et.EpilogueTranslator("arg0_1", (ms, ns, ls), (M, N, 1), dtypes.__getitem__)
    with V.set_ops_handler(tr):
        ops.store("out", OWN, body(ops.load("arg0_1", OWN), ops.load("arg1_1", OWN)))
    return et.finish(tr, "direct")


def direct_values(body) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(what the translation of ``body`` computes, x and y), in float64."""
    x, y = operands(1)
    return translated_values(direct(body), x, graph_inputs(x, y))["out"], x.to(F64), y.to(F64)


def test_square_and_fma():
    got, x, y = direct_values(lambda x, y: ops.add(ops.square(x), ops.fma(x, y, ops.constant(0.75, torch.float32))))
    close(got, x * x + (x * y + 0.75))
    got, x, y = direct_values(lambda x, y: ops.fma(y, x, x))
    close(got, y * x + x)


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 9.0, 2.5, -1.0, -2.0])
def test_pow_by_a_constant(exponent):
    """Small whole exponents become products, the others ``pow``: both eager's values."""
    got, x, _ = direct_values(lambda x, y: ops.pow(ops.abs(x), ops.constant(exponent, torch.float32)))
    close(got, torch.pow(x.abs(), exponent), f"x ** {exponent}")


def test_pow_by_a_tensor():
    got, x, y = direct_values(lambda x, y: ops.pow(ops.abs(x), y))
    close(got, torch.pow(x.abs(), y))


@pytest.mark.parametrize("cond", [True, False])
def test_where_on_a_constant_condition(cond):
    got, x, y = direct_values(lambda x, y: ops.where(ops.constant(cond, torch.bool), x, y))
    close(got, x if cond else y)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -3.25, 1e30, 1e-30, 0.1])
def test_constant_values(value):
    got, x, _ = direct_values(lambda x, y: ops.add(x, ops.constant(value, torch.float32)))
    close(got, x + value)


def test_infinite_constant():
    """A masked fill (``torch.where(mask, x, -inf)``) writes an infinite constant, in a
    source the kernel's DSL namespace takes (``inf`` is no name the source sees)."""
    from inductor_cutedsl.kernels.epilogue_math import materialize

    body = lambda x, y: ops.where(ops.gt(x, y), x, ops.constant(-math.inf, torch.float32))
    got, x, y = direct_values(body)
    close(got, torch.where(x > y, x, -math.inf))
    assert materialize(direct(body).epilogue) is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_casts_round_as_eager(dtype):
    """A cast rounds through its type (fp8 saturating at +-448, as Triton's does); one to
    fp32 is no step (the epilogue computes in fp32)."""
    got, x, y = direct_values(lambda x, y: ops.mul(ops.to_dtype(ops.mul(x, y), dtype), y))
    prod = x * y
    if dtype == torch.float8_e4m3fn:
        prod = prod.clamp(-448.0, 448.0)
    close(got, (prod if dtype == torch.float32 else prod.to(dtype).to(F64)) * y, str(dtype))


# -- the GEMM epilogues of the builders, through the whole reference kernel -----------

K = 64
ACTS = {
    "relu": torch.relu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "gelu_erf": F.gelu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def spec(epilogue: E.Epilogue, dual: bool = False, ab: str = "bfloat16", out: str = "bfloat16") -> KernelSpec:
    return KernelSpec(GemmConfig(), ab, out, "k", "k", epilogue, dual)


@pytest.fixture(params=["random", "edges"])
def ab(request):
    """A (M x K) and B (K x N) in bf16: random, or A an identity so the accumulator is
    B's first rows, which hold the edge values."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b = torch.randn(K, N, generator=gen)
    if request.param == "edges":
        a = torch.eye(M, K, dtype=torch.bfloat16)
        b.view(-1)[: len(EDGES)] = torch.tensor(EDGES)
    return a, b.to(torch.bfloat16)


def product(a, b) -> torch.Tensor:
    return a.to(F64) @ b.to(F64)


def vector(kind: str, gen_seed: int = 3) -> torch.Tensor:
    """A bias of ``kind``: ``row`` one value per column (N,), ``col`` one per row (M, 1)."""
    gen = torch.Generator().manual_seed(gen_seed)
    return torch.randn(N if kind == "row" else (M, 1), generator=gen).to(torch.bfloat16)


def run(s: KernelSpec, a, b, operands=(), scalars=(), b_up=None) -> torch.Tensor:
    out = torch.full((M, N), math.nan, dtype=F64)
    reference.run(s, a, b, out, list(operands), scalars, b_up=b_up, dtype=F64)
    return out


@pytest.mark.parametrize("kind", ["row", "col"])
@pytest.mark.parametrize("activation", [None, *E.ACTIVATIONS])
def test_bias_and_activation(ab, kind, activation):
    a, b = ab
    bias = vector(kind)
    epi = E.bias(kind) if activation is None else E.bias_activation(activation, kind)
    want = product(a, b) + bias.to(F64)
    close(run(spec(epi), a, b, [bias]), want if activation is None else ACTS[activation](want))


@pytest.mark.parametrize("kind", ["row", "col", "full"])
@pytest.mark.parametrize("alpha,beta", [(0.5, 2.0), (-1.5, 0.25), (1.0, -1.0), (3.0, 1.0)])
def test_addmm_scales_the_product_by_alpha_and_the_bias_by_beta(ab, kind, alpha, beta):
    a, b = ab
    c = vector(kind) if kind != "full" else torch.randn(M, N).to(torch.bfloat16)
    got = run(spec(E.addmm(True, kind)), a, b, [c], (alpha, beta))
    close(got, torch.addmm(c.to(F64).expand(M, N), a.to(F64), b.to(F64), beta=beta, alpha=alpha))


def test_addmm_without_scales_is_the_bias():
    a, b = torch.randn(M, K).to(torch.bfloat16), torch.randn(K, N).to(torch.bfloat16)
    c = vector("row")
    close(run(spec(E.addmm(False, "row")), a, b, [c]), torch.addmm(c.to(F64), a.to(F64), b.to(F64)))


def test_beta_zero_is_why_the_lowering_refuses_it():
    """torch.addmm ignores C when beta == 0, NaN included; the epilogue multiplies it in.
    (``test_refusals`` checks that the lowering never builds it.)"""
    a, b = torch.randn(M, K).to(torch.bfloat16), torch.randn(K, N).to(torch.bfloat16)
    c = torch.full((N,), math.nan, dtype=torch.bfloat16)
    want = torch.addmm(c.to(F64), a.to(F64), b.to(F64), beta=0.0, alpha=2.0)
    assert torch.isfinite(want).all()
    assert torch.isnan(run(spec(E.addmm(True, "row")), a, b, [c], (2.0, 0.0))).all()


@pytest.mark.parametrize(
    "scale_a,scale_b", [("tensor", "tensor"), ("row", "row"), ("tensor", "row"), ("row", "tensor")]
)
@pytest.mark.parametrize("bias", [None, "bfloat16", "float32"])
def test_scaled_is_scaled_mm(scale_a, scale_b, bias):
    """``torch._scaled_mm``: (A @ B) * scale_a * scale_b + bias, in fp32 from e4m3 operands."""
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(M, K, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(N, K, generator=gen).to(torch.float8_e4m3fn).t()
    sa = torch.rand(M, 1, generator=gen) + 0.5 if scale_a == "row" else torch.tensor(0.375)
    sb = torch.rand(1, N, generator=gen) + 0.5 if scale_b == "row" else torch.tensor(1.75)
    ops_ = [sa, sb]
    want = product(a, b) * sa.to(F64) * sb.to(F64)
    if bias is not None:
        ops_.append(torch.randn(N, generator=gen).to(getattr(torch, bias)))
        want = want + ops_[-1].to(F64)
    got = run(spec(E.scaled(scale_a, scale_b, bias), ab="float8_e4m3fn"), a, b, ops_)
    close(got, want)


def test_scaled_result_divides_and_an_fp8_output_saturates():
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(M, K, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(N, K, generator=gen).to(torch.float8_e4m3fn).t()
    sa, sb, sr = torch.tensor(8.0), torch.rand(1, N, generator=gen) + 2.0, torch.tensor(0.125)
    want = product(a, b) * 8.0 * sb.to(F64) / 0.125
    s = spec(E.scaled("tensor", "row", None, scale_result=True), ab="float8_e4m3fn", out="float8_e4m3fn")
    close(run(s, a, b, [sa, sb, sr]), want)
    out = torch.empty(M, N, dtype=torch.float8_e4m3fn)
    reference.run(s, a, b, out, [sa, sb, sr], dtype=F64)
    assert want.abs().max() > 448, "some values saturate"
    close(out.to(F64), want.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(F64))


GATED = {"silu": F.silu, "gelu_tanh": ACTS["gelu_tanh"], "gelu_erf": F.gelu, "relu": torch.relu}


@pytest.mark.parametrize("activation", E.GATED_ACTIVATIONS)
@pytest.mark.parametrize("biases", [(None, None), ("bfloat16", None), ("bfloat16", "float32")])
@pytest.mark.parametrize("rounding", [None, "bfloat16"])
def test_gated_is_activation_of_gate_times_up(activation, biases, rounding):
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b_gate, b_up = (torch.randn(K, N, generator=gen).to(torch.bfloat16) for _ in range(2))
    gate, up = product(a, b_gate), product(a, b_up)
    bias_ops = []
    for i, dtype in enumerate(biases):
        if dtype is not None:
            bias_ops.append(torch.randn(N, generator=gen).to(getattr(torch, dtype)))
            if i == 0:
                gate = gate + bias_ops[-1].to(F64)
            else:
                up = up + bias_ops[-1].to(F64)
    if rounding is not None:  # what two bf16 GEMMs and a pointwise kernel read
        gate, up = (t.to(torch.bfloat16).to(F64) for t in (gate, up))
    kept = [torch.full((M, N), math.nan, dtype=F64) for _ in range(2)]
    epi = E.gated(activation, *biases, keep="float32", rounding=rounding)
    got = run(spec(epi, dual=True), a, b_gate, [*bias_ops, *kept], b_up=b_up)
    close(got, GATED[activation](gate) * up)
    close(kept[0], gate, "kept gate")
    close(kept[1], up, "kept up")


@pytest.mark.parametrize(
    "scale_a,scale_b", [("tensor", "tensor"), ("row", "row"), ("tensor", "row"), ("row", "tensor")]
)
@pytest.mark.parametrize("biases", [(None, None), ("bfloat16", "float32")])
def test_fp8_gated_is_the_activation_of_one_scaled_mm_times_another(scale_a, scale_b, biases):
    """An fp8 dual kernel: act(_scaled_mm(a, b_gate, sa, s_gate, bias_gate)) *
    _scaled_mm(a, b_up, sa, s_up, bias_up), each product scaled before its bias and both
    rounded to bf16 (what two ``_scaled_mm`` writing bf16 and a pointwise kernel read);
    the gate's and the up weight's scales differ, so a swap of the two shows."""
    gen = torch.Generator().manual_seed(8)
    a = torch.randn(M, K, generator=gen).to(torch.float8_e4m3fn)
    b_gate, b_up = (torch.randn(N, K, generator=gen).to(torch.float8_e4m3fn).t() for _ in range(2))
    sa = torch.rand(M, 1, generator=gen) + 0.5 if scale_a == "row" else torch.tensor(0.375)
    s_gate, s_up = (
        torch.rand(1, N, generator=gen) + 0.5 if scale_b == "row" else torch.tensor(value) for value in (1.75, 0.625)
    )
    bias_ops = [torch.randn(N, generator=gen).to(getattr(torch, d)) for d in biases if d is not None]
    parts = []
    for b, s, i in ((b_gate, s_gate, 0), (b_up, s_up, 1)):
        part = product(a, b) * sa.to(F64) * s.to(F64)
        if bias_ops:
            part = part + bias_ops[i].to(F64)
        parts.append(part.to(torch.bfloat16).to(F64))
    epi = E.gated("silu", *biases, rounding="bfloat16", scales=(scale_a, scale_b))
    assert [op.name for op in epi.operands[:3]] == ["scale_a", "scale_gate", "scale_up"]
    got = run(spec(epi, dual=True, ab="float8_e4m3fn"), a, b_gate, [sa, s_gate, s_up, *bias_ops], b_up=b_up)
    close(got, F.silu(parts[0]) * parts[1])


# -- a GEMM's own epilogue composed with a fused chain ---------------------------------


@pytest.fixture(scope="module")
def residual_chain():
    """The translation of gelu_tanh(y) * 2 + r, y a bf16 GEMM output, the result fp32 (so
    no final rounding hides one inside)."""
    y, r = torch.randn(M, N).to(torch.bfloat16), torch.randn(M, N).to(torch.bfloat16)
    res = translate_inductor(lambda y, r: F.gelu(y.float(), approximate="tanh") * 2 + r.float(), y, r)
    assert "t" in res, res.get("refused")
    return res["t"]


def test_broadcast_inputs_of_a_fused_chain_are_declared_by_their_zero_strides():
    """A fused chain's inputs read through zero strides are declared so that the kernel
    compiles the zeros in (each thread then loads a broadcast value once): a tensor-wise
    scale ``one``, a per-row scale ``col``, an fp32 bias ``row``; a bf16 bias stays
    ``full`` read in pairs (each value once already), a residual ``full``. The chain,
    evaluated in float64 through the declarations, is eager's."""
    gen = torch.Generator().manual_seed(10)
    y = torch.randn(M, N, generator=gen).to(torch.bfloat16)
    one, per_row = torch.rand((), generator=gen) + 0.5, torch.rand(M, 1, generator=gen) + 0.5
    bias32, bias16 = torch.randn(N, generator=gen), torch.randn(N, generator=gen).to(torch.bfloat16)
    resid = torch.randn(M, N, generator=gen).to(torch.bfloat16)

    def chain(y, one, per_row, bias32, bias16, resid):
        return (y.float() * one * per_row + bias32 + bias16.float() + resid.float()).to(torch.bfloat16)

    res = translate_inductor(chain, y, one, per_row, bias32, bias16, resid)
    assert "t" in res, res.get("refused")
    tr = res["t"]
    kinds = {op.buffer: (decl.kind, decl.pairs) for op, decl in zip(tr.operands, tr.epilogue.operands)}
    assert sorted(kinds.values()) == sorted(
        [("one", False), ("col", False), ("row", False), ("full", True), ("full", True)]
    ), kinds
    inputs = graph_inputs(y, one, per_row, bias32, bias16, resid)
    (got,) = translated_values(tr, y, inputs).values()
    close(got, chain(y.to(F64), one.to(F64), per_row.to(F64), bias32.to(F64), bias16.to(F64), resid.to(F64)))


@pytest.mark.parametrize("base", ["identity", "bias", "addmm"])
def test_fused_chain_computes_the_gemm_then_the_chain_as_eager(residual_chain, base):
    """The fused kernel gives what the unfused pair did: the GEMM's epilogue (alpha and
    beta in their places), its bf16 output, then the chain (``fusion.compose``, ``fuse``)."""
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b = torch.randn(K, N, generator=gen).to(torch.bfloat16)
    c = torch.randn(N, generator=gen).to(torch.bfloat16)
    r = torch.randn(M, N, generator=gen).to(torch.bfloat16)
    alpha, beta = 0.75, -1.25
    if base == "identity":
        cand, inputs, gemm = GemmCandidate(spec(E.IDENTITY)), [], product(a, b)
    elif base == "bias":
        cand = GemmCandidate(spec(E.bias("row")), ("c", "a", "b"), ("c",))
        inputs, gemm = [c], product(a, b) + c.to(F64)
    else:
        cand = GemmCandidate(spec(E.addmm(True, "row")), ("c", "a", "b"), ("c",), scalars=(alpha, beta))
        inputs, gemm = [c], torch.addmm(c.to(F64), a.to(F64), b.to(F64), alpha=alpha, beta=beta)
    fused = fuse(cand, residual_chain, "float32")
    y = gemm.to(torch.bfloat16).to(F64)  # the GEMM's bf16 output buffer
    want = F.gelu(y, approximate="tanh") * 2 + r.to(F64)
    out = torch.full((M, N), math.nan, dtype=F64)
    reference.run(fused.spec, a, b, out, [*inputs, r], fused.scalars, fused.views, fused.out_view, dtype=F64)
    close(out, want)


def test_compose_of_an_fp32_gemm_output_does_not_round():
    gelu_res = E.Epilogue(
        "gelu_residual",
        "def epilogue(acc, m, n, l, ops):\n    return gelu_tanh(acc) + ops[0]\n",
        (E.EpilogueOperand("res", "full", "bfloat16"),),
    )
    acc, res = torch.randn(1, M, N, dtype=F64), torch.randn(1, M, N, dtype=F64)
    coords = (torch.arange(M).view(1, M, 1), torch.arange(N).view(1, 1, N), torch.zeros(1, 1, 1, dtype=torch.long))
    got = reference.evaluate(compose(E.IDENTITY, "float32", gelu_res, "g"), acc, *coords, [res], F64)
    close(got, F.gelu(acc, approximate="tanh") + res)
