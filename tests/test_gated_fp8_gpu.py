"""The fp8 gated dual kernel on the GPU: ``gated_gemm`` with e4m3 operands and scales, and
an fp8 gated MLP compiled with ``fp8_dual`` on, against float64 references of the
dequantised operands (and against two ``torch._scaled_mm`` and the product)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import cutedsl_launches, rel_err

from inductor_cutedsl import config
from inductor_cutedsl.kernels import GemmConfig

pytestmark = pytest.mark.gpu
FP8 = torch.float8_e4m3fn

#: The dual configs a promoting kernel has registers for, the widest fast one, and the
#: stream-K one decode-sized products get under CUDA graphs.
CONFIGS = [
    (GemmConfig(128, 128, 1, 2, False, False, 1), False),
    (GemmConfig(64, 128, 1, 1, True, False, 1), False),
    (GemmConfig(128, 256, 2, 1, False, True, 1, 64), True),
    (GemmConfig(128, 128, 1, 1, False, True, 1, stream_k=True), True),
    (GemmConfig(128, 128, 1, 1, False, True, 1, stream_k=True), False),  # decode's, promoting
]


def operands(m, n, k, rowwise):
    """Random e4m3 a (M, K), gate and up weights (K, N) K-major, and fp32 scales."""
    a = (torch.randn(m, k, device="cuda") * 4).to(FP8)
    b_gate, b_up = ((torch.randn(n, k, device="cuda") * 4).to(FP8).t() for _ in range(2))
    if rowwise:
        scales = (torch.rand(m, 1, device="cuda") / 64, *(torch.rand(1, n, device="cuda") / 64 for _ in range(2)))
    else:
        scales = tuple(torch.tensor(v, device="cuda") for v in (1 / 48, 1 / 40, 1 / 56))
    return a, b_gate, b_up, scales


def reference(a, b_gate, b_up, scales, act, bias_gate, bias_up, round_to=None):
    """act(a @ b_gate * sa * sg + bias_gate) * (a @ b_up * sa * su + bias_up) in float64."""
    sa, sg, su = (s.double() for s in scales)
    gate = a.double() @ b_gate.double() * sa * sg + bias_gate.double()
    up = a.double() @ b_up.double() * sa * su + bias_up.double()
    if round_to is not None:
        gate, up = gate.to(round_to).double(), up.to(round_to).double()
    return act(gate) * up


@pytest.mark.parametrize("cfg,fast", CONFIGS, ids=lambda c: c.name() if isinstance(c, GemmConfig) else str(c))
@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("m,n,k", [(333, 512, 1024), (64, 1536, 4096)])
def test_fp8_gated_gemm_is_two_scaled_products_and_the_gate(cfg, fast, rowwise, m, n, k):
    from inductor_cutedsl.runtime import gated_gemm

    a, b_gate, b_up, scales = operands(m, n, k, rowwise)
    bias_gate, bias_up = (torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(2))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gated_gemm(a, b_gate, b_up, "silu", bias_gate=bias_gate, bias_up=bias_up, out=out, config=cfg,
               scales=scales, use_fast_accum=fast)  # fmt: skip
    torch.cuda.synchronize()
    err = rel_err(out, reference(a, b_gate, b_up, scales, F.silu, bias_gate, bias_up))
    assert err < 1e-2, f"rel err {err:.3e}"


def test_promoted_sums_are_as_accurate_as_scaled_mm_at_long_k():
    """At K = 16384 the promoting kernel's error stays at ``torch._scaled_mm``'s (the
    wgmma's own fp8 accumulation alone would drift)."""
    from inductor_cutedsl.runtime import gated_gemm

    m, n, k = 128, 256, 16384
    a, b_gate, b_up, scales = operands(m, n, k, True)
    zero = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
    ref = reference(a, b_gate, b_up, scales, F.silu, zero, zero)
    ours = gated_gemm(a, b_gate, b_up, "silu", out_dtype=torch.bfloat16, scales=scales)
    sa, sg, su = scales
    gate = torch._scaled_mm(a, b_gate, sa, sg, out_dtype=torch.bfloat16)
    up = torch._scaled_mm(a, b_up, sa, su, out_dtype=torch.bfloat16)
    theirs = F.silu(gate) * up
    assert rel_err(ours, ref) <= 1.5 * rel_err(theirs, ref) + 1e-4


def fp8_mlp(x, wg, wu, bg, bu):
    """An fp8 gated MLP as ``benchmarks.fp8.Fp8Linear`` computes it, the weights
    quantised per row in the graph (as a compiled model quantises its buffers once)."""

    def quantize(t):
        scale = t.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12) / 448.0
        return (t.float() / scale).to(FP8), scale

    def linear(w, b):
        xq, xs = quantize(x.reshape(-1, x.shape[-1]))
        wq, ws = quantize(w)
        y = torch._scaled_mm(xq, wq.t(), xs, ws.t(), bias=b, out_dtype=torch.bfloat16)
        return y.reshape(*x.shape[:-1], -1)

    return F.silu(linear(wg, bg)) * linear(wu, bu)


@pytest.mark.parametrize("measured", [False, True], ids=["dual_always", "measured"])
def test_a_compiled_fp8_gated_mlp_runs_one_fp8_dual_kernel_with_stocks_values(monkeypatch, measured):
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    from inductor_cutedsl.lowering import gated

    def dual_first(runs, device):  # the dual kernel taken whatever it measures
        return {r: 0.0 if r.startswith("dual") else 1.0 for r in runs}

    if not measured:
        monkeypatch.setattr(gated, "measure", dual_first)
    x = torch.randn(2, 300, 1024, device="cuda").to(torch.bfloat16)
    wg, wu = (torch.randn(1536, 1024, device="cuda").to(torch.bfloat16) * 1024**-0.5 for _ in range(2))
    bg, bu = (torch.randn(1536, device="cuda").to(torch.bfloat16) for _ in range(2))
    stock = fp8_mlp(x, wg, wu, bg, bu)  # eager: two cuBLASLt _scaled_mm and the product
    torch.compiler.reset()
    with config.patch(fp8_dual=True), ic.patch(max_autotune_gemm_backends="CUTEDSL,ATEN", force_disable_caches=True):
        out, codes = run_and_get_code(torch.compile(fp8_mlp, mode="max-autotune-no-cudagraphs"), x, wg, wu, bg, bu)
    code = "\n".join(codes)
    if not measured:
        assert "dual=True" in code and cutedsl_launches(code) == 1
    # Both sides quantise alike; their results differ by the bf16 rounding of the sums.
    err = rel_err(out, stock.double())
    assert err < 2e-2, f"rel err against eager {err:.3e}"
