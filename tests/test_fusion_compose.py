"""Composing the GEMM's own epilogue with a translated chain (no GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec, reference
from inductor_cutedsl.runtime.compiler import build
from inductor_cutedsl.scheduler.fusion import compose


def evaluate(epi: E.Epilogue, acc: float, ops: tuple) -> float:
    """``epi`` at one element, in float64, with the DSL helpers' own formulas."""
    f64 = [torch.tensor(v, dtype=torch.float64) for v in (acc, *ops)]
    return float(reference.evaluate(epi, f64[0], 0, 0, 0, f64[1:], torch.float64))


GELU_RES = E.Epilogue(
    "gelu_residual",
    "def epilogue(acc, m, n, l, ops):\n    return gelu_tanh(acc) + ops[0]\n",
    (E.EpilogueOperand("res", "full", "bfloat16"),),
)


def test_compose_addmm_then_chain_matches_unfused_order():
    base = E.addmm(True, "full")  # alpha * acc + beta * c
    fused = compose(base, "bfloat16", GELU_RES, "addmm_gelu_res")
    assert [o.name for o in fused.operands] == ["c", "alpha", "beta", "res"]
    acc, c, alpha, beta, res = 3.3, 0.7, 0.5, 2.0, -1.25
    # Unfused: the GEMM stores alpha * acc + beta * c in its bf16 buffer, which the chain reads.
    stored = float(torch.tensor(alpha * acc + beta * c, dtype=torch.float64).to(torch.bfloat16))
    want = 0.5 * stored * (1 + math.tanh(math.sqrt(2 / math.pi) * (stored + 0.044715 * stored**3))) + res
    assert evaluate(fused, acc, (c, alpha, beta, res)) == pytest.approx(want, rel=1e-6)


def test_compose_identity_fp32_keeps_accumulator():
    fused = compose(E.IDENTITY, "float32", GELU_RES, "g")
    assert "round_to" not in fused.source and "_gemm_epilogue" not in fused.source
    assert evaluate(fused, 1.0, (2.0,)) == pytest.approx(0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * 1.044715)) + 2.0)


def test_composed_epilogue_compiles_for_sm90a(tmp_path):
    fused = compose(E.bias("row"), "bfloat16", GELU_RES, "bias_gelu_res")
    spec = KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "k", fused)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000
    # What it computes: the bias, the GEMM's bf16 output, then the chain.
    for acc, bias, res in [(1.7, -0.3, 0.25), (-4.0, 2.5, -1.0), (0.0, 0.0, 3.0)]:
        stored = float(torch.tensor(acc + bias, dtype=torch.float64).to(torch.bfloat16))
        gelu = 0.5 * stored * (1 + math.tanh(math.sqrt(2 / math.pi) * (stored + 0.044715 * stored**3)))
        assert evaluate(fused, acc, (bias, res)) == pytest.approx(gelu + res, rel=1e-9, abs=1e-12)


def test_compose_rejects_foreign_source():
    with pytest.raises(ValueError):
        compose(E.IDENTITY, "bfloat16", E.Epilogue("x", "def other(acc, m, n, l, ops):\n    return acc\n"), "x")
