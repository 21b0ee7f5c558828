"""The gated MLP compiled with our backend on the GPU: one dual-GEMM kernel for both
graph forms, forward and backward, against float64 references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import cutedsl_launches, rel_err

pytestmark = pytest.mark.gpu
B, T, D, H = 2, 300, 1024, 1536  # 600 tokens: no tile multiple

ACTS = {
    "silu": F.silu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "gelu_erf": F.gelu,
    "relu": torch.relu,
}


@pytest.fixture
def dual_always(monkeypatch):
    """The dual kernel taken whatever it measures (its speed is the benchmarks' business;
    these tests check what it computes)."""
    from inductor_cutedsl.lowering import gated

    monkeypatch.setattr(gated, "measure", lambda runs, device: {n: 0.0 if n.startswith("dual") else 1.0 for n in runs})


def bf16(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def compiled(fn, *args):
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    torch.compiler.reset()
    with ic.patch(max_autotune_gemm_backends="CUTEDSL,ATEN", force_disable_caches=True):
        out, codes = run_and_get_code(torch.compile(fn, mode="max-autotune-no-cudagraphs"), *args)
    return out, "\n".join(codes)


def check(out, ref, tol=2e-2):
    err = rel_err(out, ref.double())
    assert err < tol, f"rel err {err:.3e}"


def gated_two(act):
    return lambda x, wg, wu, bg, bu: act(F.linear(x, wg, bg)) * F.linear(x, wu, bu)


def gated_fused(act):
    return lambda x, w, b: (lambda h: act(h[0]) * h[1])(F.linear(x, w, b).chunk(2, -1))


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_two_linears_run_as_one_dual_kernel(act, bias, dual_always):
    fn = gated_two(ACTS[act])
    args = (
        bf16(B, T, D),
        bf16(H, D, scale=D**-0.5),
        bf16(H, D, scale=D**-0.5),
        bf16(H) if bias else None,
        bf16(H) if bias else None,
    )
    out = torch.full((B, T, H), float("nan"), device="cuda", dtype=torch.bfloat16)
    got, code = compiled(fn, *args)
    out.copy_(got)
    assert "dual=True" in code and cutedsl_launches(code) == 1
    check(out, fn(*[a.double() if a is not None else None for a in args]))


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_fused_gate_up_weight_runs_as_one_dual_kernel(act, dual_always):
    fn = gated_fused(ACTS[act])
    args = (bf16(B, T, D), bf16(2 * H, D, scale=D**-0.5), bf16(2 * H))
    got, code = compiled(fn, *args)
    assert "dual=True" in code and cutedsl_launches(code) == 1
    check(got, fn(*[a.double() for a in args]))


@pytest.mark.parametrize("form", ["two_linears", "fused_gate_up"])
def test_training_step_keeps_gate_and_up_and_matches_eager_gradients(form, dual_always):
    """fwd + bwd of a gated MLP block (down projection and residual): the dual kernel
    writes gate and up for the backward pass; every gradient matches eager's."""
    torch.manual_seed(0)
    fused = form == "fused_gate_up"
    w_in = [bf16(2 * H, D, scale=D**-0.5)] if fused else [bf16(H, D, scale=D**-0.5), bf16(H, D, scale=D**-0.5)]
    w_down = bf16(D, H, scale=H**-0.5)
    params = [w.requires_grad_() for w in (*w_in, w_down)]

    def step(x):
        if fused:
            g, u = F.linear(x, params[0]).chunk(2, -1)
        else:
            g, u = F.linear(x, params[0]), F.linear(x, params[1])
        y = x + F.linear(F.silu(g) * u, params[-1])
        y.float().square().mean().backward()
        return y

    x = bf16(B, T, D).requires_grad_()
    y_ref = step(x)
    grads_ref = [t.grad.clone() for t in (x, *params)]
    for t in (x, *params):
        t.grad = None
    y, code = compiled(step, x)
    assert "dual=True" in code
    assert "keep" in code, "gate and up are extra outputs of the dual kernel"
    check(y, y_ref)
    for t, g_ref in zip((x, *params), grads_ref):
        check(t.grad, g_ref, tol=3e-2)


def test_measured_choice_computes_the_same(caplog):
    """Without forcing: whichever way measures faster, the block is right and the
    decision is logged."""
    import logging

    fn = gated_two(F.silu)
    args = (bf16(B, T, D), bf16(H, D, scale=D**-0.5), bf16(H, D, scale=D**-0.5), None, None)
    with caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"):
        got, code = compiled(fn, *args)
    assert any("two GEMMs + pointwise" in r.getMessage() for r in caplog.records)
    check(got, fn(*[a.double() if a is not None else None for a in args]))


@pytest.mark.parametrize("act", ACTS)
def test_gated_product_reads_the_column_halves_of_one_output(act):
    from inductor_cutedsl.lowering.gated_product import gated_product

    both = bf16(611, 2 * 264)  # odd rows; halves are column ranges of wider rows
    gate, up = both.chunk(2, -1)
    h = gated_product(gate, up, act)
    ref = ACTS[act](gate.double()) * up.double()
    assert h.is_contiguous() and h.shape == gate.shape
    check(h, ref)


def _gemm_calls(code: str) -> int:
    """GEMM launches in generated code: ATen's and ours."""
    import re

    return len(re.findall(r"extern_kernels\.(?:mm|addmm|bmm)\(", code)) + cutedsl_launches(code)


def test_fused_form_alternative_runs_stocks_gemms_forward_and_backward(monkeypatch):
    """Dual kernel measured slower: the fused gate_up form runs as stock does, one GEMM
    over both halves per pass (forward, d_x, d_w), and its gradients match eager's."""
    import inductor_cutedsl
    from inductor_cutedsl.lowering import gated

    monkeypatch.setattr(gated, "measure", lambda runs, device: {n: 1.0 if n.startswith("dual") else 0.0 for n in runs})
    torch.manual_seed(0)
    w, w_down = bf16(2 * H, D, scale=D**-0.5).requires_grad_(), bf16(D, H, scale=H**-0.5).requires_grad_()

    def step(x):
        g, u = F.linear(x, w).chunk(2, -1)
        y = x + F.linear(F.silu(g) * u, w_down)
        y.float().square().mean().backward()
        return y

    x = bf16(B, T, D).requires_grad_()
    y_ref = step(x)
    grads_ref = [t.grad.clone() for t in (x, w, w_down)]
    for t in (x, w, w_down):
        t.grad = None
    decided = len(gated.decisions)
    y, code = compiled(step, x)
    grads = [t.grad.clone() for t in (x, w, w_down)]
    assert [(d["form"], d["way"]) for d in gated.decisions[decided:]] == [("fused", "alternative")]
    assert "dual=True" not in code
    check(y, y_ref)
    for g, g_ref in zip(grads, grads_ref):
        check(g, g_ref, tol=3e-2)
    inductor_cutedsl.disable()
    try:
        from torch._inductor import config as ic
        from torch._inductor.utils import run_and_get_code

        torch.compiler.reset()
        for t in (x, w, w_down):
            t.grad = None
        with ic.patch(max_autotune_gemm_backends="ATEN", force_disable_caches=True):
            _, codes = run_and_get_code(torch.compile(step, mode="max-autotune-no-cudagraphs"), x)
    finally:
        inductor_cutedsl.enable()
    assert _gemm_calls(code) == _gemm_calls("\n".join(codes)) == 6  # 2 forward, 4 backward


def test_a_decode_step_keeps_its_cache_writes_beside_a_dual_kernel(dual_always):
    """A decode step's shape, with CUDA graphs as decode runs: a gated MLP on the new
    token's rows and in-place writes whose results nothing reads (a static cache's slot,
    its write counter). Both must land, step after step, as in eager."""

    def step(x, wg, wu, cache, n):
        n.add_(1)
        cache.index_copy_(0, n - 1, x[:1])
        h = F.silu(F.linear(x, wg)) * F.linear(x, wu)
        return h.float().sum(-1, keepdim=True) + cache.float().sum()

    x, wg, wu = bf16(16, D), bf16(H, D, scale=D**-0.5), bf16(H, D, scale=D**-0.5)
    cache_ours, cache_ref = bf16(8, D), None
    cache_ref = cache_ours.clone()
    n_ours = torch.zeros(1, dtype=torch.long, device="cuda")
    n_ref = n_ours.clone()
    from torch._inductor import config as ic

    torch.compiler.reset()
    with ic.patch(max_autotune_gemm_backends="CUTEDSL,ATEN", force_disable_caches=True):
        fn = torch.compile(step, mode="max-autotune")
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            out = fn(x, wg, wu, cache_ours, n_ours).clone()
            ref = step(x, wg, wu, cache_ref, n_ref)
            check(out, ref)
    assert int(n_ours) == int(n_ref) == 3
    torch.testing.assert_close(cache_ours, cache_ref)
