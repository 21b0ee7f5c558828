"""The lowering's generated code for a faked H200 (see fake_hopper; no GPU needed)."""
from __future__ import annotations

import torch

from fake_hopper import generated_code

M, N, K = 1000, 2048, 1024


def test_cutedsl_only_runs_our_kernel_through_the_runtime():
    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K))
    assert "from inductor_cutedsl.runtime.generated import launcher" in code
    assert "extern_kernels.mm" not in code


def test_refused_dtype_falls_back_to_aten():
    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K), dtype=torch.float32)
    assert "inductor_cutedsl" not in code
    assert "extern_kernels.mm" in code


def test_faster_aten_wins_the_autotuning():
    def timing(choice):
        return 0.05 if "Extern" in type(choice).__name__ else 0.1

    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K), candidate_ms=timing, backends="ATEN,CUTEDSL")
    assert "extern_kernels.mm" in code
    assert "inductor_cutedsl" not in code
