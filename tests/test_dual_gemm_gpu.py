"""The dual (gated) GEMM on the GPU against a float64 reference:
``act(A @ Bg + bg) * (A @ Bu + bu)``, with the two weights given apart or as two column
ranges of one fused weight, the pre-activations optionally kept as extra outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import poisoned, rel_err

from inductor_cutedsl.kernels import GemmConfig

pytestmark = pytest.mark.gpu

# bf16/fp16 outputs round (~2e-3 / ~3e-4); the activations use approximate exp, tanh and
# reciprocal (MUFU, ~5e-4 relative at worst).
TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 2e-3}
# Every tile shape and schedule of the dual shortlist; B's two halves multicast (c2x1)
# or not (c1x2), 128 or 64 columns each.
CONFIGS = [
    GemmConfig(128, 256, 2, 1, False, True, 8, 64),
    GemmConfig(128, 256, 1, 2, False, False, 1, 64),
    GemmConfig(64, 256, 2, 1, True, True, 8),
    GemmConfig(128, 128, 1, 2, True, False, 1),
    GemmConfig(128, 128, 2, 1, False, True, 1),
]
ACTS = {
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_erf": F.gelu,
    "relu": torch.relu,
}
SHAPES = [(1000, 1032, 1024), (4095, 1000, 1536), (1000, 8960, 1536), (4095, 1032, 1024)]  # (M, N', K)


def lhs(m: int, k: int, row: bool, dtype=torch.bfloat16, batch=None) -> torch.Tensor:
    """Fresh randn A (M x K): row-major, or column-major with its rows padded to a
    multiple of 8 (so an odd M still has a 16-byte aligned leading stride)."""
    lead = () if batch is None else (batch,)
    if row:
        return torch.randn(*lead, m, k, device="cuda").to(dtype)
    return torch.randn(*lead, k, -(-m // 8) * 8, device="cuda").to(dtype)[..., :m].transpose(-1, -2)


def weights(k: int, n: int, row: bool, fused: bool, dtype=torch.bfloat16, batch=None):
    """Gate and up weights (K x N' each): two tensors, or the two column halves of one
    K x 2N' weight; row-major (N'-major) or column-major (K-major, a Linear's W.t())."""
    lead = () if batch is None else (batch,)

    def one(cols):
        if row:
            return torch.randn(*lead, k, cols, device="cuda").to(dtype)
        return torch.randn(*lead, cols, k, device="cuda").to(dtype).transpose(-1, -2)

    return one(2 * n).chunk(2, -1) if fused else (one(n), one(n))


def biases(n: int, which: str, fused: bool, dtype=torch.bfloat16):
    """(bias_gate, bias_up): none, the gate's only, or both (halves of one vector when fused)."""
    if which == "none":
        return None, None
    both = (
        torch.randn(2 * n, device="cuda").to(dtype).chunk(2)
        if fused
        else (torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype))
    )
    return both if which == "both" else (both[0], None)


def reference(a, bg, bu, act, bias_g=None, bias_u=None):
    """(act(g) * u, g, u) in float64."""
    g, u = a.double() @ bg.double(), a.double() @ bu.double()
    g = g + bias_g.double() if bias_g is not None else g
    u = u + bias_u.double() if bias_u is not None else u
    return ACTS[act](g) * u, g, u


def check(
    m,
    n,
    k,
    act,
    *,
    a_row=True,
    b_row=True,
    fused=False,
    bias="none",
    keep=False,
    config=None,
    dtype=torch.bfloat16,
    out_dtype=None,
    batch=None,
):
    from inductor_cutedsl.runtime import gated_gemm

    out_dtype = out_dtype or dtype
    lead = () if batch is None else (batch,)
    a = lhs(m, k, a_row, dtype, batch)
    bg, bu = weights(k, n, b_row, fused, dtype, batch)
    bias_g, bias_u = biases(n, bias, fused, dtype)
    out = poisoned((*lead, m, n), out_dtype)
    kept = (poisoned((*lead, m, n), out_dtype), poisoned((*lead, m, n), out_dtype)) if keep else None
    result = gated_gemm(a, bg, bu, act, bias_gate=bias_g, bias_up=bias_u, out=out, keep_out=kept, config=config)
    torch.cuda.synchronize()
    assert (result[0] if keep else result) is out
    ref, g, u = reference(a, bg, bu, act, bias_g, bias_u)
    assert rel_err(out, ref) < TOL[out_dtype], f"out rel err {rel_err(out, ref):.2e}"
    if keep:
        assert rel_err(kept[0], g) < TOL[out_dtype], f"gate rel err {rel_err(kept[0], g):.2e}"
        assert rel_err(kept[1], u) < TOL[out_dtype], f"up rel err {rel_err(kept[1], u):.2e}"


def _cases():
    """Each config with each activation; across them every shape, both majors of A and
    of B, both weight forms, each bias form and keep, each config seeing both forms
    with both B majors."""
    out = []
    for c, cfg in enumerate(CONFIGS):
        for a, act in enumerate(ACTS):
            i = 4 * c + a
            case = dict(
                a_row=i % 2 == 0,
                b_row=i // 2 % 2 == 0,
                fused=(a in (1, 2)) != (c % 2 == 1),
                bias=("both", "gate", "none")[i % 3],
                keep=(c + a) % 2 == 0,
            )
            m, n, k = SHAPES[(c + a) % len(SHAPES)]
            label = "-".join(
                [cfg.name(), act, f"{m}x{n}x{k}"]
                + [key for key, v in case.items() if v is True]
                + [f"bias_{case['bias']}"]
            )
            out.append(pytest.param(cfg, act, (m, n, k), case, id=label))
    return out


@pytest.mark.parametrize("cfg,act,shape,case", _cases())
def test_gated_gemm(cfg, act, shape, case):
    check(*shape, act, config=cfg, **case)


@pytest.mark.parametrize("fused", [False, True], ids=["two_weights", "fused_weight"])
def test_gated_gemm_shortlist_pick(fused):
    """No config given: the dual shortlist's first pick, at a prefill-sized SwiGLU shape."""
    check(4095, 8960, 1536, "silu", a_row=True, b_row=False, fused=fused, keep=fused)


# Decode: M <= 64 rows in the stream-K dual tile the shortlist leads with under CUDA
# graphs. 8960 wide: 140 tiles of 64 output columns, a wave and 8 split over every slot;
# 2560 wide (40 tiles): shares not aligned with the tiles, some meeting five.
@pytest.mark.parametrize("m", [1, 5, 16, 33, 64])
@pytest.mark.parametrize("n,k", [(8960, 1536), (2560, 2104)], ids=str)
def test_decode_sized_gated_gemm_in_stream_k(m, n, k):
    from inductor_cutedsl.kernels import dual_shortlist

    cfg = dual_shortlist(m, n, k, graphs=True)[0]
    assert cfg.stream_k, cfg
    check(m, n, k, "silu", a_row=True, b_row=False, bias="both", config=cfg)


@pytest.mark.parametrize(
    "dtype,out_dtype", [(torch.float16, torch.float16), (torch.bfloat16, torch.float32)], ids=["fp16", "bf16_to_fp32"]
)
def test_gated_gemm_dtypes(dtype, out_dtype):
    check(1000, 1032, 1024, "gelu_tanh", bias="both", keep=True, config=CONFIGS[0], dtype=dtype, out_dtype=out_dtype)


def test_gated_gemm_batched():
    check(1000, 1032, 1024, "silu", b_row=False, bias="both", keep=True, config=CONFIGS[3], batch=3)


def test_gated_output_view_stays_in_its_columns():
    """An output whose rows are longer than N' (a view of a wider buffer): the kernel
    writes N' columns of gated products, nothing of the MMA tile's second half."""
    from inductor_cutedsl.runtime import gated_gemm

    a = lhs(1000, 1024, True)
    bg, bu = weights(1024, 1000, False, True)
    wide = poisoned((1000, 1256), torch.bfloat16)
    gated_gemm(a, bg, bu, "silu", out=wide[:, :1000], config=CONFIGS[0])
    torch.cuda.synchronize()
    assert rel_err(wide[:, :1000], reference(a, bg, bu, "silu")[0]) < 1e-2
    assert wide[:, 1000:].isnan().all(), "kernel wrote past N'"


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[3]], ids=lambda c: c.name())
def test_rounded_gated_product_with_a_residual_after_it(cfg):
    """The lowering's form (``test_dual_gemm.gated_then_residual``): gate and up rounded to
    bf16, the bf16 product, then a paired M x N' residual added."""
    from test_dual_gemm import gated_then_residual

    from inductor_cutedsl.runtime.launch import get_gemm, spec_for

    m, n, k = 1000, 1032, 1024
    a, (bg, bu) = lhs(m, k, True), weights(k, n, False, True)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    r = torch.randn(m, n + 8, device="cuda").to(torch.bfloat16)[:, :n]
    out = poisoned((m, n), torch.bfloat16)
    get_gemm(spec_for(a, bg, torch.bfloat16, cfg, gated_then_residual(), dual=True))(a, bg, out, bias, r, b_up=bu)
    torch.cuda.synchronize()
    g = (a.double() @ bg.double() + bias.double()).bfloat16().double()
    u = (a.double() @ bu.double()).bfloat16().double()
    assert rel_err(out, (F.silu(g) * u).bfloat16().double() + r.double()) < 1e-2


def _refused(case: str):
    m, n, k = 1000, 1032, 1024
    a, (bg, bu) = lhs(m, k, True), weights(k, n, True, True)
    if case == "a_stride":  # K = 1020: A's rows not 16-byte aligned
        a, bg, bu = lhs(m, 1020, True), bg[:1020], bu[:1020]
    elif case == "a_m_major_odd_m":  # M-major A with an odd, unpadded M
        a = torch.randn(k, 999, device="cuda").to(torch.bfloat16).t()
    elif case == "up_base":  # N' = 1004: the up half of a fused weight starts misaligned
        bg, bu = weights(k, 1004, True, True)
    elif case == "dtype":
        a, bg, bu = a.float(), bg.float(), bu.float()
    elif case == "mixed_dtype":
        bu = bu.half()
    elif case == "majors":
        bu = bu.t().contiguous().t()
    return a, bg, bu


@pytest.mark.parametrize("case", ["a_stride", "a_m_major_odd_m", "up_base", "dtype", "mixed_dtype", "majors"])
def test_gated_gemm_refuses(case):
    from inductor_cutedsl.runtime import gated_gemm, gated_reason

    a, bg, bu = _refused(case)
    assert gated_reason(a, bg, bu) is not None
    with pytest.raises(ValueError, match="cannot run this gated GEMM"):
        gated_gemm(a, bg, bu, "silu")
