"""Translation of real Inductor scheduler nodes (compiled for the CPU, no GPU needed).

The input ``x`` plays the GEMM output: a pointwise chain over it is translated
exactly as a fused epilogue would be, from Inductor's own loop bodies.
"""

from __future__ import annotations

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import graph_inputs, translate_inductor, translated_values

from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.scheduler.node_translation import L_SYM, M_SYM, N_SYM, loop_coordinates

M, N = 64, 128


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize(
    "fn,args,operands",
    [
        (lambda x, b: F.gelu(x + b, approximate="tanh"), (bf16(M, N), bf16(N)), [((0, 1, 0), 0)]),
        (lambda x, r: torch.relu(x) + r, (bf16(M, N), bf16(M, N)), [((N, 1, 0), 0)]),
        (lambda x, g: F.silu(x) * g, (bf16(M, N), bf16(M, N)), [((N, 1, 0), 0)]),
        (lambda x: (x * 0.125).to(torch.float16), (bf16(M, N),), []),
        (lambda x, c: x + c, (bf16(M, N), bf16(M, 1)), [((1, 0, 0), 0)]),
    ],
    ids=["bias_gelu_tanh", "relu_residual", "silu_gate", "scale_cast", "col_bias"],
)
def test_real_inductor_chains_translate(fn, args, operands):
    res = translate_inductor(fn, *args)
    assert "t" in res, res.get("refused")
    t = res["t"]
    assert [(o.strides, o.offset) for o in t.operands] == operands
    assert_computes(t, fn, args, [(0, 0), (3, 77), (M - 1, N - 1), (17, 5)])


def assert_computes(t, fn, args, points):
    """The translated arithmetic (``runtime.reference``: the DSL helpers' own formulas, in
    float64) gives eager's values at every element, ``points`` included; x (``args[0]``)
    is the GEMM output, as an (M, N) matrix, and ``fn``'s result is read as one too. The
    reference is ``fn`` in float64 on the same inputs: the translation rounds once, to
    the output's bf16, where eager bf16 rounds every step (two ulps apart near 1 at
    times)."""
    expected = fn(*(a.double() for a in args)).reshape(M, N).double()
    got = translated_values(t, args[0], graph_inputs(*args))[t.outputs[-1]]
    for mi, ni in points:
        assert abs(got[mi, ni] - expected[mi, ni]) <= 1e-2 * max(1.0, abs(expected[mi, ni])), (mi, ni)
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "fn,args,needle",
    [
        (lambda x: x.sum(dim=1), (bf16(M, N),), "reduction|cover less|do not tile"),
        # Inductor lays this output out column-major (like y): not the GEMM's layout.
        (lambda x, y: x + y.t(), (bf16(M, N), bf16(N, M)), "element-for-element"),
        (lambda x: x[:, ::2] * 2, (bf16(M, N),), "element-for-element|cover less|do not tile"),
        (lambda x, y: torch.relu(x) + y.t(), (bf16(M, N), bf16(N, M)), "read transposed"),
        (lambda x, t, i: x + t[i], (bf16(M, N), bf16(16, N), torch.randint(0, 16, (M,))), "indirect"),
        (lambda x: torch.atan(x), (bf16(M, N),), "no CuteDSL epilogue translation"),
    ],
    ids=["reduction", "transposed_output", "strided_read", "transposed_operand", "indirect_read", "unsupported_op"],
)
def test_real_inductor_refusals(fn, args, needle):
    res = translate_inductor(fn, *args)
    assert "refused" in res, "must not translate"
    assert re.search(needle, res["refused"]), res["refused"]


def test_loop_coordinates():
    assert loop_coordinates([M, N], (M, N, 1)) == [M_SYM, N_SYM]
    assert loop_coordinates([M * N], (M, N, 1)) == [N * M_SYM + N_SYM]
    assert loop_coordinates([3 * M, N], (M, N, 3)) == [M * L_SYM + M_SYM, N_SYM]
    # (B, T, N) over a (B*T, N) output: M is split into two atoms.
    b, t = loop_coordinates([2, M // 2, N], (M, N, 1))[:2]
    assert {str(s) for s in b.free_symbols | t.free_symbols} == {"cutedsl_m0", "cutedsl_m1"}
    # Loops of other extents still cover the output in row-major order, as atoms.
    assert len(loop_coordinates([N, M], (M, N, 1))) == 2
    with pytest.raises(Unsupported, match="cover less"):
        loop_coordinates([M], (M, N, 1))
    with pytest.raises(Unsupported, match="do not tile"):
        loop_coordinates([4, 6], (6, 4, 1))
    assert isinstance(loop_coordinates([M, N], (M, N, 1))[0], sympy.Symbol)


def gelu_bias_residual(x, b, r):
    return F.gelu(x.view(2, M // 2, N) + b, approximate="tanh") + r


def gelu_bias_residual_as_lowered(x, b, r):
    """``gelu_bias_residual`` rounded where Inductor's loop body rounds it: the GELU goes
    to bf16 (its decomposition's own downcast) before the residual is added, and the
    translation follows. Near |GELU| = 5 that rounding is worth 0.016, more than the
    comparison's tolerance wherever the residual cancels the GELU, so the float64
    reference must round there too."""
    g = F.gelu(x.view(2, M // 2, N) + b, approximate="tanh")
    return g.to(torch.bfloat16).to(g.dtype) + r


H = 4  # heads of the (B, T, H, D) views below
VIEW_CASES = [
    # A model's (B, T, N) activations over a (B*T, N) GEMM: GELU(x + bias), then + residual.
    (
        gelu_bias_residual,
        (bf16(M, N), bf16(N), bf16(2, M // 2, N)),
        [((0, 1, 0), 0), ((N, 1, 0), 0)],
        gelu_bias_residual_as_lowered,
    ),
    # A gate read in the (B, T, H, D) view of the output: a pure reshape.
    (
        lambda x, g: F.silu(x.view(2, M // 2, H, N // H)) * g,
        (bf16(M, N), bf16(2, M // 2, H, N // H)),
        [((N, 1, 0), 0)],
        None,
    ),
    # A residual that is itself a strided view (every other row of a wider tensor).
    (
        lambda x, r: torch.relu(x.view(2, M // 2, N)) + r[:, ::2, :N],
        (bf16(M, N), bf16(2, M, N + 8)),
        [((2 * (N + 8), 1, 0), 0)],
        None,
    ),
]


@pytest.mark.parametrize(
    "fn,args,operands,reference",
    VIEW_CASES,
    ids=["btn_bias_gelu_residual", "bthd_silu_gate", "strided_residual"],
)
def test_consumers_through_views_translate(fn, args, operands, reference):
    res = translate_inductor(fn, *args)
    assert "t" in res, res.get("refused")
    t = res["t"]
    assert [(o.strides, o.offset) for o in t.operands] == operands
    assert t.out_view == ((N, 1, 0), 0)
    points = [(0, 0), (M // 2, 3), (M // 2 - 1, N - 1), (M - 1, 77)]
    assert_computes(t, reference or fn, args, points)


@pytest.mark.parametrize(
    "fn,args,needle",
    [
        # Heads moved before tokens: the output is not the GEMM's rows any more.
        (
            lambda x, y: x.view(2, M // 2, H, N // H).transpose(1, 2) + y,
            (bf16(M, N), bf16(2, H, M // 2, N // H)),
            "element-for-element|not linear|pure reshape",
        ),
        # Tokens regrouped across the batch boundary by a permute of the (B, T) split.
        (
            lambda x, y: x.view(2, M // 2, N).transpose(0, 1) * y,
            (bf16(M, N), bf16(M // 2, 2, N)),
            "element-for-element|not linear|pure reshape",
        ),
    ],
    ids=["bhtd_transpose", "tb_permute"],
)
def test_views_that_are_not_reshapes_are_refused(fn, args, needle):
    res = translate_inductor(fn, *args)
    assert "refused" in res, "must not translate"
    assert re.search(needle, res["refused"]), res["refused"]
