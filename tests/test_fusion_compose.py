"""Composing the GEMM's own epilogue with a translated chain (no GPU)."""
from __future__ import annotations

import math

import pytest

from epilogue_interpreter import evaluate
from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build
from inductor_cutedsl.scheduler.fusion import compose

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
    stored = evaluate(E.addmm(True, "full").source, acc, (c, alpha, beta))
    import torch

    stored = float(torch.tensor(stored).to(torch.bfloat16).float())  # the GEMM's bf16 buffer
    want = 0.5 * stored * (1 + math.tanh(math.sqrt(2 / math.pi) * (stored + 0.044715 * stored**3))) + res
    assert evaluate(fused.source, acc, (c, alpha, beta, res)) == pytest.approx(want, rel=1e-6)


def test_compose_identity_fp32_keeps_accumulator():
    fused = compose(E.IDENTITY, "float32", GELU_RES, "g")
    assert "round_to" not in fused.source and "_gemm_epilogue" not in fused.source
    assert evaluate(fused.source, 1.0, (2.0,)) == pytest.approx(0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * 1.044715)) + 2.0)


def test_composed_epilogue_compiles_for_sm90a(tmp_path):
    fused = compose(E.bias("row"), "bfloat16", GELU_RES, "bias_gelu_res")
    spec = KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "k", fused)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000


def test_compose_rejects_foreign_source():
    with pytest.raises(ValueError):
        compose(E.IDENTITY, "bfloat16", E.Epilogue("x", "def other(acc, m, n, l, ops):\n    return acc\n"), "x")
