"""Inductor's generated code with our backend, for a faked H200 (no GPU needed).

See ``fake_hopper``: the lowering, candidate builds, fusion decisions and code
generation are ours and real; only device queries and timings are made up.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import inductor_cutedsl
from fake_hopper import generated_code
from inductor_cutedsl import config

M, N, K = 1000, 2048, 1024
MARK = "inductor_cutedsl.runtime.generated"


@pytest.fixture(params=[True, False], ids=["fusion", "no_fusion"])
def fusion(request):
    inductor_cutedsl.disable()
    # Two candidates: autotuning leaves the GEMM undecided until fusion (the selection path).
    with config.patch(epilogue_fusion=request.param, max_configs=2):
        inductor_cutedsl.enable()
        yield request.param
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()


def kernels(code: str) -> tuple[int, int]:
    """(CuteDSL kernels, Triton kernels) defined in the wrapper code."""
    return code.count(f"from {MARK} import launcher"), code.count("@triton.jit")


def test_mm_relu(fusion):
    code = generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K))
    if fusion:
        assert kernels(code) == (1, 0)
        assert "relu(acc)" in code
        assert code.count("empty_strided_cuda((1000, 2048)") == 1, "the GEMM's own output is never allocated"
    else:
        assert kernels(code) == (1, 1)


def test_addmm_bias_gelu_composes_the_bias_epilogue(fusion):
    code = generated_code(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), (M, K), (N, K), (N,))
    if fusion:
        assert kernels(code) == (1, 0)
        assert "_gemm_epilogue" in code and "tanh(" in code
    else:
        assert kernels(code) == (1, 1)


def test_kept_gemm_output_is_an_extra_output():
    inductor_cutedsl.disable()
    with config.patch(epilogue_fusion=True, max_configs=2):
        inductor_cutedsl.enable()
        code = generated_code(lambda x, w: (lambda y: (y, torch.sigmoid(y)))(x @ w.t()), (M, K), (N, K))
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    assert kernels(code) == (1, 0)
    assert '"kind": "out"' in code
    assert code.count("empty_strided_cuda((1000, 2048)") == 2, "both outputs are allocated"


def test_single_candidate_fuses_without_autotuning():
    inductor_cutedsl.disable()
    with config.patch(epilogue_fusion=True, max_configs=1):
        inductor_cutedsl.enable()
        code = generated_code(lambda x, w: torch.relu(x @ w.t()) * 2, (M, K), (N, K), fused_ms=9.9)
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    assert kernels(code) == (1, 0), "our GEMM is the only implementation: fusing saves a kernel"


def test_fused_candidate_that_measures_slower_is_not_taken(caplog):
    inductor_cutedsl.disable()
    with config.patch(epilogue_fusion=True, max_configs=2):
        inductor_cutedsl.enable()
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K), fused_ms=0.2)
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    assert kernels(code) == (1, 1), "our GEMM unfused, the epilogue in Triton"
    assert any("left to Inductor" in r.getMessage() for r in caplog.records)


def test_refused_consumer_is_logged_with_its_reason(caplog):
    inductor_cutedsl.disable()
    with config.patch(epilogue_fusion=True, max_configs=2):
        inductor_cutedsl.enable()
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(lambda x, w: torch.softmax(x @ w.t(), dim=-1), (M, K), (N, K))
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    assert kernels(code)[0] == 1 and kernels(code)[1] >= 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("not fusing" in m and "reduction" in m for m in messages), messages
