"""Epilogue fusion on the GPU (issue 4): GEMM + pointwise chain is one CuteDSL kernel.

Written ahead of its first GPU run; the fused path is behind
``inductor_cutedsl.config.epilogue_fusion`` until these pass.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import rel_err

pytestmark = pytest.mark.gpu
MARK = "inductor_cutedsl.runtime.generated"


@pytest.fixture(autouse=True)
def fusion_enabled():
    import inductor_cutedsl
    from inductor_cutedsl import config

    inductor_cutedsl.disable()
    with config.patch(epilogue_fusion=True):
        inductor_cutedsl.enable()
    torch.compiler.reset()
    yield
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    torch.compiler.reset()


def compiled_code(fn, *args):
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    with ic.patch(max_autotune_gemm_backends="CUTEDSL", force_disable_caches=True):
        return run_and_get_code(torch.compile(fn, mode="max-autotune-no-cudagraphs"), *args)


def bf16(*shape):
    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


CASES = {
    "bias_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
                  lambda: (bf16(1000, 1024), bf16(2048, 1024), bf16(2048))),
    "relu_residual": (lambda x, w, r: torch.relu(x @ w.t()) + r,
                      lambda: (bf16(1000, 1024), bf16(2048, 1024), bf16(1000, 2048))),
    "silu_gate": (lambda x, w, g: F.silu(x @ w.t()) * g,
                  lambda: (bf16(1000, 1024), bf16(2048, 1024), bf16(1000, 2048))),
    "scale_cast": (lambda x, w: (x @ w.t() * 0.125).to(torch.float16),
                   lambda: (bf16(1000, 1024), bf16(2048, 1024))),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_gemm_and_epilogue_are_one_kernel(name):
    fn, make = CASES[name]
    args = make()
    out, codes = compiled_code(fn, *args)
    code = "\n".join(codes)
    assert code.count(MARK) == 1, "one CuteDSL kernel"
    assert "@triton.jit" not in code, "the epilogue was fused, no Triton kernel left"
    ref = fn(*[a.double() for a in args])
    assert rel_err(out, ref) < 2e-2
