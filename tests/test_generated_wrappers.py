"""Whole generated wrappers, run on CPU: each graph compiled for a faked H200 (our kernels
winning every choice and fusion, see fake_hopper), then its wrapper run with CPU tensors,
each of our launches computed by the launcher's torch fallback from the arguments the
wrapper passes and the launcher arguments its module gives (``fake_hopper.run_on_cpu``),
against the graph in float64. What a CPU can check of the code the GPU runs: which
buffers, views, strides and epilogue operands each call passes, buffer reuse, fused
outputs, the layouts operands are read through. Every buffer starts as NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fake_hopper import generated_code, run_on_cpu

PROGRAMS = {
    # a 3-D activation through a Linear with bias, GELU and a residual, all one kernel
    "bias_gelu_residual": (lambda x, w, b: F.gelu(F.linear(x, w, b)) + x, [(2, 40, 64), (64, 64), (64,)]),
    # the GEMM's own output kept beside its fused consumer's
    "kept_intermediate": (lambda x, w: (F.linear(x, w), torch.relu(F.linear(x, w)) * 2.0), [(80, 64), (96, 64)]),
    "bmm_scaled": (lambda q, k: torch.bmm(q, k.transpose(1, 2)) * 0.125, [(3, 48, 64), (3, 40, 64)]),
    "baddbmm": (
        lambda c, q, k: torch.baddbmm(c, q, k.transpose(1, 2), beta=0.5, alpha=2.0),
        [(3, 48, 40), (3, 48, 64), (3, 40, 64)],
    ),
    "addmm_alpha_beta": (
        lambda c, a, w: torch.addmm(c, a, w.t(), beta=0.5, alpha=2.0),
        [(48, 80), (48, 64), (80, 64)],
    ),
    "mm_row_major_b": (lambda a, b: a @ b, [(48, 64), (64, 80)]),
    "mm_column_major_a": (lambda a, b: a.t() @ b, [(64, 48), (64, 80)]),
    # the dual kernel (gate and up in one), then the down projection with its residual
    "llama_mlp": (
        lambda x, wg, wu, wd: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd) + x,
        [(2, 40, 64), (96, 64), (96, 64), (64, 96)],
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_generated_wrapper_computes_its_graph(name):
    fn, shapes = PROGRAMS[name]
    code = generated_code(fn, *shapes)
    assert "cutedsl_" in code and "@triton.jit" not in code, "our kernels compute the whole graph"
    torch.manual_seed(0)
    # Unit-scale activations, weights scaled by 1/sqrt(K): every output is O(1).
    args = [torch.randn(s, dtype=torch.bfloat16) / (s[-1] ** 0.5 if len(s) == 2 else 1.0) for s in shapes]
    outs = run_on_cpu(code, args)
    want = fn(*[a.double() for a in args])
    want = want if isinstance(want, tuple) else (want,)
    assert len(outs) == len(want)
    for out, ref in zip(outs, want):
        assert out.shape == ref.shape
        assert not out.isnan().any(), "an element the wrapper never wrote"
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
