"""The kernel with fp8 (e4m3) operands on the GPU, against a float64 reference of the
same fp8 values: odd sizes, each output dtype, fast accumulation and promotion."""

from __future__ import annotations

import pytest
import torch
from helpers import poisoned, rel_err

from inductor_cutedsl.kernels import GemmConfig

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
# fp8 inputs are exact in float64; the error is the output's rounding (bf16 ~2e-3)
# plus the accumulation's. The fp8 wgmma accumulates with fewer bits than fp32 (about
# 14 kept, per DeepSeek-V3's report on H800): without promotion its error grows with
# K, bounded here by FAST_TOL; promoted every k-tile or few, fp32 accumulation holds.
TOL = {torch.bfloat16: 1e-2, torch.float16: 3e-3, torch.float32: 1e-3}
FAST_TOL = 2e-2


def tol(out_dtype, promote: int) -> float:
    return TOL[out_dtype] if promote else max(TOL[out_dtype], FAST_TOL)


def operands(m: int, n: int, k: int):
    """A (M, K) row-major and B (K, N) K-major (the .t() of an N x K tensor), fresh
    random values spread over e4m3's range."""
    a = (torch.randn(m, k, device="cuda") * 4).to(E4M3)
    w = (torch.randn(n, k, device="cuda") * 4).to(E4M3)
    return a, w.t()


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
# K = 4176: 33 k-tiles, the last partial. PROMOTE_ALTERNATE issues the first k-tile,
# then two per loop turn: an odd count (33 here, 17 in the config test below) ends
# with the loop, an even one (the other shapes) with one k-tile after it.
@pytest.mark.parametrize(
    "shape", [(1000, 1008, 4096), (17, 4096, 1024), (4096, 16, 4000), (8192, 4096, 4096), (520, 2048, 4176)]
)
@pytest.mark.parametrize("promote", [0, 1, 2, 3])
def test_fp8_gemm_matches_float64(shape, out_dtype, promote):
    from inductor_cutedsl.runtime import gemm

    m, n, k = shape
    a, b = operands(m, n, k)
    out = poisoned((m, n), out_dtype)
    gemm(a, b, out=out, promote=promote)
    ref = a.double() @ b.double()
    err = rel_err(out, ref)
    assert err < tol(out_dtype, promote), f"rel err {err:.3e}"


@pytest.mark.parametrize(
    "cfg, promote",
    [
        (GemmConfig(128, 128, 2, 1), 1),
        (GemmConfig(128, 128, 2, 1), 2),
        (GemmConfig(64, 128, 1, 2, True), 1),
        (GemmConfig(64, 128, 1, 2, True), 2),
        (GemmConfig(128, 192, 2, 1), 2),
        (GemmConfig(64, 192, 2, 1, True), 1),
        (GemmConfig(64, 192, 2, 1, True), 2),  # fp8.py's trial tile
        (GemmConfig(128, 128, 2, 1), 3),
        (GemmConfig(64, 128, 1, 2, True), 3),
        (GemmConfig(128, 128, 1, 1), 3),
        (GemmConfig(128, 256), 0),  # no registers for a second accumulator
        (GemmConfig(128, 128, stream_k=True), 1),  # every tile shared (40 tiles, 132 SMs)
        (GemmConfig(128, 128, stream_k=True), 2),
        (GemmConfig(128, 128, stream_k=True), 3),
    ],
)
def test_fp8_configs(cfg, promote):
    from inductor_cutedsl.runtime import gemm

    a, b = operands(600, 1024, 2176)  # 17 k-tiles: no k-tile after the loop
    out = poisoned((600, 1024), torch.float32)
    gemm(a, b, out=out, config=cfg, promote=promote)
    assert rel_err(out, a.double() @ b.double()) < tol(torch.float32, promote)


@pytest.mark.parametrize("promote", [1, 3])
def test_fp8_stream_k_promotes_whole_tiles_and_the_shared_last_wave(promote):
    """1089 tiles of 128x128 on 132 SMs: eight whole waves, then 33 tiles whose 17
    k-tiles each are shared over the SMs, every part promoted."""
    from inductor_cutedsl.runtime import gemm

    a, b = operands(4224, 4160, 2176)
    out = poisoned((4224, 4160), torch.float32)
    gemm(a, b, out=out, config=GemmConfig(128, 128, stream_k=True), promote=promote)
    assert rel_err(out, a.double() @ b.double()) < tol(torch.float32, promote)


def test_fast_accumulation_error_at_large_k_and_promotion_removes_it():
    """The fp8 wgmma's own accumulation keeps fewer bits than fp32; at K = 32768 its
    error is printed here, and promotion brings it down to fp32 accumulation's."""
    from inductor_cutedsl.runtime import gemm

    m, n, k = 256, 512, 32768
    a, b = operands(m, n, k)
    ref = a.double() @ b.double()
    errs = {}
    for promote in (0, 1, 2, 3):
        out = poisoned((m, n), torch.float32)
        gemm(a, b, out=out, promote=promote)
        errs[promote] = rel_err(out, ref)
    print(
        f"fp8 K={k}: rel err fast {errs[0]:.2e}, promoted every k-tile {errs[1]:.2e}, by halves {errs[2]:.2e}, "
        f"alternating {errs[3]:.2e}"
    )
    assert errs[0] < FAST_TOL, errs  # the fast mode's bound; its figure is printed above
    for promoted in (1, 2, 3):
        assert errs[promoted] < TOL[torch.float32] and errs[promoted] <= errs[0], errs


def test_fp8_refusals_on_the_gpu():
    from inductor_cutedsl.runtime import gemm

    a, b = operands(128, 256, 512)
    with pytest.raises(ValueError, match="K-major"):
        gemm(a, b.contiguous(), out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out_dtype"):
        gemm(a, b)
    with pytest.raises(ValueError, match="spill"):
        gemm(a, b, out_dtype=torch.bfloat16, promote=1, config=GemmConfig(128, 256))
    with pytest.raises(ValueError, match="promote"):
        gemm(a.to(torch.bfloat16), b.to(torch.bfloat16), promote=1)
    with pytest.raises(ValueError, match="promote"):
        gemm(a, b, out_dtype=torch.bfloat16, promote=4)
    with pytest.raises(ValueError, match="3 accumulators"):
        gemm(a, b, out_dtype=torch.bfloat16, promote=3, config=GemmConfig(128, 192, 2, 1))
    from inductor_cutedsl.runtime import scaled_gemm

    one = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="only an fp8 output"):  # torch would ignore it
        scaled_gemm(a, b, one, one, None, one, out_dtype=torch.bfloat16)


def scales(mode: str, m: int, n: int):
    if mode == "tensor":
        return torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
    return torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5


@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("fast", [False, True], ids=["promoted", "fast"])
def test_scaled_gemm_matches_float64_and_torch_scaled_mm(mode, bias, fast):
    from inductor_cutedsl.runtime import scaled_gemm

    m, n, k = 1000, 2048, 4096
    a, b = operands(m, n, k)
    sa, sb = scales(mode, m, n)
    c = torch.randn(n, device="cuda").to(torch.bfloat16) if bias else None
    out = poisoned((m, n), torch.bfloat16)
    scaled_gemm(a, b, sa, sb, c, out=out, use_fast_accum=fast)
    ref = (a.double() @ b.double()) * sa.double() * sb.double() + (c.double() if bias else 0)
    assert rel_err(out, ref) < tol(torch.bfloat16, 0 if fast else 1)
    theirs = torch._scaled_mm(a, b, sa, sb, bias=c, out_dtype=torch.bfloat16, use_fast_accum=fast)
    assert rel_err(out, theirs.double()) < 1e-2  # two bf16 roundings of nearly equal sums


@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("offered", ["shortlist", "alternate"])
def test_compiled_scaled_mm_runs_our_kernel_and_computes_the_block(mode, offered, monkeypatch):
    """torch.compile of a quantized Linear + GELU + residual with CuteDSL as the only
    GEMM backend: our fp8 kernel takes the _scaled_mm (the consumers fused into it or
    not, as the selection measures), promoting in its config's mode, and the result
    matches float64. ``alternate``: the lowering offers only a 128x128 tile, so the
    kernel that runs promotes by ``PROMOTE_ALTERNATE``."""
    import torch.nn.functional as F
    from fake_hopper import launched
    from helpers import cutedsl_launches
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    from inductor_cutedsl.kernels.config import PROMOTE_ALTERNATE, promotion_mode
    from inductor_cutedsl.lowering import gemm_choices

    if offered == "alternate":
        monkeypatch.setattr(gemm_choices, "shortlist", lambda *a, **k: [GemmConfig(128, 128, 1, 2)])

    m, n, k = 1000, 2048, 1024
    a, b = operands(m, n, k)
    sa, sb = scales(mode, m, n)
    c = torch.randn(n, device="cuda").to(torch.bfloat16)
    r = torch.randn(m, n, device="cuda").to(torch.bfloat16)

    def fn(a, b, sa, sb, c, r):
        y = torch._scaled_mm(a, b, sa, sb, bias=c, out_dtype=torch.bfloat16)
        return F.gelu(y, approximate="tanh") + r

    from inductor_cutedsl import config

    torch.compiler.reset()
    with config.patch(fp8=True), ic.patch(max_autotune_gemm_backends="CUTEDSL", force_disable_caches=True):
        got, codes = run_and_get_code(torch.compile(fn, mode="max-autotune-no-cudagraphs"), a, b, sa, sb, c, r)
    code = "\n".join(codes)
    assert cutedsl_launches(code) == 1 and "extern_kernels._scaled_mm" not in code
    spec = launched(code)["spec"]
    assert spec.promote == promotion_mode(spec.config)
    assert offered == "shortlist" or spec.promote == PROMOTE_ALTERNATE
    y = (a.double() @ b.double()) * sa.double() * sb.double() + c.double()
    ref = F.gelu(y, approximate="tanh") + r.double()
    assert rel_err(got, ref) < 1e-2


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_fp8_output_with_a_result_scale(mode):
    """An fp8 output (saturating at +-448, as cuBLAS's) divided by scale_result, against
    float64; with tensor-wise scales also the same fp8 values as torch._scaled_mm's, up
    to a rounding step where the fp32 sums differ. Torch is given the division folded
    into scale_a: its CUDA kernel ignores scale_result (2.11, benchmarks/scale_result_probe.py)
    where its CPU kernel divides, and cuBLASLt refuses row-wise scales with an fp8 output
    (CUBLAS_STATUS_INVALID_VALUE)."""
    from inductor_cutedsl.runtime import scaled_gemm

    m, n, k = 1000, 2048, 4096
    a, b = operands(m, n, k)
    sa, sb = scales(mode, m, n)
    sr = torch.tensor(64.0, device="cuda")  # the product's ~1000 down to e4m3's range
    out = torch.full((m, n), float("nan"), device="cuda").to(E4M3)
    scaled_gemm(a, b, sa, sb, None, sr, out=out)
    ours64 = out.double()
    assert torch.isfinite(ours64).all() and ours64.abs().max() <= 448
    ref = ((a.double() @ b.double()) * sa.double() * sb.double() / sr.double()).clamp(-448, 448)
    assert rel_err(out, ref) < 0.07  # e4m3 has 3 mantissa bits: one step is 6-12%
    if mode == "tensor":
        theirs = torch._scaled_mm(a, b, sa / sr, sb, out_dtype=E4M3).double()
        assert (ours64 == theirs).double().mean() > 0.9


def test_bf16_gemm_stores_fp8_output_saturated():
    from inductor_cutedsl.runtime import gemm

    a = torch.randn(512, 1024, device="cuda").to(torch.bfloat16)
    b = torch.randn(1024, 768, device="cuda").to(torch.bfloat16)
    out = torch.empty(512, 768, device="cuda", dtype=E4M3)
    gemm(a, b, out=out)
    ref = (a.double() @ b.double()).clamp(-448, 448)  # |a @ b| ~ 32: a few saturate
    assert rel_err(out, ref) < 0.07


@pytest.mark.parametrize("promote", [1, 3])
def test_fp8_gemm_with_a_full_operand_epilogue(promote):
    """An M x N input in the epilogue (a residual): the mainloop prefetches it toward L2
    a few k-tiles before the end, inside PROMOTE_ALTERNATE's two-k-tile loop too."""
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import gemm

    m, n, k = 1000, 1024, 4096 + 128  # 33 k-tiles
    a, b = operands(m, n, k)
    residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    out = poisoned((m, n), torch.float32)
    gemm(a, b, residual, out=out, epilogue=E.bias("full"), promote=promote, config=GemmConfig(128, 128, 2, 1))
    assert rel_err(out, a.double() @ b.double() + residual.double()) < tol(torch.float32, promote)


def test_fp8_accuracy_rows_promoted_hold_at_long_k():
    """The fp8 benchmark's accuracy rows (``--accuracy``) on the device, at K up to
    32768: promoted, ours is as accurate as ``_scaled_mm``'s promoting default (fp32
    accumulation, bf16 output); with fast accumulation, within what ``_scaled_mm``'s own
    fast mode loses. Every way's output was written (no NaN reads as inf)."""
    from benchmarks import fp8

    torch.manual_seed(0)
    rows = fp8.accuracy_rows(ks=(4096, 32768), mn=256)
    for row in rows:
        assert row["scaled_mm"] < TOL[torch.bfloat16], row
        assert row["ours"] <= max(2 * row["scaled_mm"], 5e-3), row
        assert row["ours_fast"] <= max(2 * row["scaled_mm_fast"], FAST_TOL), row
