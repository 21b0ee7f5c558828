"""torch.compile with the CuteDSL backend: results match eager, our kernels run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import cutedsl_launches, rel_err

pytestmark = pytest.mark.gpu

MARK = "inductor_cutedsl.runtime.generated"


@pytest.fixture(autouse=True)
def backend_without_fusion():
    """The lowering alone, whatever ``epilogue_fusion`` defaults to (test_fusion_gpu
    covers fusion): a GEMM's pointwise consumers stay Triton kernels here."""
    from inductor_cutedsl.install import reenabled

    with reenabled(epilogue_fusion=False):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()


def compile_cutedsl_only(fn, mode="max-autotune-no-cudagraphs", **kw):
    from torch._inductor import config as ic

    def run(*args):
        with ic.patch(max_autotune_gemm_backends="CUTEDSL"):
            compiled = torch.compile(fn, mode=mode, **kw)
            from torch._inductor.utils import run_and_get_code

            return run_and_get_code(compiled, *args)

    return run


def bf16(*shape):
    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


def test_linear_stack_with_bias_runs_cutedsl_and_triton():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024)).to(
        "cuda", torch.bfloat16
    )
    x = bf16(1000, 1024)
    out, codes = compile_cutedsl_only(model)(x)
    code = "\n".join(codes)
    assert cutedsl_launches(code) == 2, "the two Linear GEMMs should be CuteDSL kernels"
    assert "@triton.jit" in code, "the GELU stays a Triton kernel"
    assert rel_err(out, model(x).double()) < 2e-2


def test_operands_passed_as_their_buffers_compute_the_graph():
    """A 3-D activation read as 2-D and transposed weights are passed as their buffers
    (no ``reinterpret_tensor`` in our calls), an A starting past its buffer's start keeps
    its view, and both compute what eager computes in float64, on the first call and on
    a later one (the launcher's reused entry)."""

    def fn(x, w1, w2, w3):
        h = torch.nn.functional.linear(x, w1)  # (B, T, D) activation, transposed weight
        return h, torch.nn.functional.linear(h.reshape(500, 1024).narrow(-1, 512, 512), w2) @ w3.t()

    x, w1, w2, w3 = bf16(2, 250, 1024), bf16(1024, 1024) * 0.03, bf16(768, 512) * 0.04, bf16(640, 768) * 0.04
    ref_h = torch.nn.functional.linear(x.double(), w1.double())
    ref_y = torch.nn.functional.linear(ref_h.reshape(500, 1024).narrow(-1, 512, 512), w2.double()) @ w3.double().t()
    (h, y), codes = compile_cutedsl_only(fn)(x, w1, w2, w3)
    calls = [line for line in "\n".join(codes).splitlines() if ".run(" in line and "cutedsl" in line]
    assert len(calls) == 3
    assert sum("reinterpret_tensor(" in call for call in calls) == 1, calls  # the offset A only
    assert rel_err(h, ref_h) < 2e-2 and rel_err(y, ref_y) < 2e-2
    (h, y), _ = compile_cutedsl_only(fn)(x, w1, w2, w3)  # the compiled code again
    assert rel_err(h, ref_h) < 2e-2 and rel_err(y, ref_y) < 2e-2


def test_bmm_and_baddbmm_attention_scores():
    q, k = bf16(16, 1000, 64), bf16(16, 1000, 64)
    bias = bf16(16, 1000, 1000)

    def scores(q, k, bias):
        return torch.bmm(q, k.transpose(1, 2)) * 0.125, torch.baddbmm(bias, q, k.transpose(1, 2))

    (s, sb), codes = compile_cutedsl_only(scores)(q, k, bias)
    assert cutedsl_launches("\n".join(codes)) == 2
    ref = torch.bmm(q.double(), k.double().transpose(1, 2))
    assert rel_err(s, ref * 0.125) < 2e-2
    assert rel_err(sb, ref + bias.double()) < 2e-2


def test_training_step_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(
        "cuda", torch.bfloat16
    )
    ref_model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(
        "cuda", torch.bfloat16
    )
    ref_model.load_state_dict(model.state_dict())
    x = bf16(2048, 512)

    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    loss, codes = compile_cutedsl_only(step)(x)
    ref_loss = ref_model(x).float().pow(2).mean()
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) / ref_loss.item() < 2e-2
    for p, rp in zip(model.parameters(), ref_model.parameters()):
        assert rel_err(p.grad, rp.grad.double()) < 3e-2
    # Forward and backward GEMMs both went through our lowering.
    assert cutedsl_launches("\n".join(codes)) >= 4


@pytest.mark.long
def test_backward_after_a_stock_compile_gets_our_candidates(monkeypatch):
    """A training step's backward compiles in autograd's device thread, whose choices
    handler a stock compile made first (as the model suite compiles): our candidates
    must still be offered there, not only to the forward's GEMMs."""
    import threading

    from torch._inductor import config as ic

    import inductor_cutedsl
    import inductor_cutedsl.lowering.choices as choices_mod

    asked = []  # per ask: from the main thread (forward) or another (backward)
    real = choices_mod.gemm_choices
    monkeypatch.setattr(
        choices_mod,
        "gemm_choices",
        lambda ki, op: asked.append(threading.current_thread() is threading.main_thread()) or real(ki, op),
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 1024).to("cuda", torch.bfloat16)
    x = bf16(2048, 512).requires_grad_(True)

    def train():
        compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
        compiled(x).float().square().mean().backward()
        torch.cuda.synchronize()

    with ic.patch(force_disable_caches=True):
        inductor_cutedsl.disable()
        try:
            train()
        finally:
            inductor_cutedsl.enable()
        assert asked == []
        torch._dynamo.reset()
        train()
    assert True in asked and False in asked, asked


def test_cuda_graphs_mode():
    lin = torch.nn.Linear(1024, 1024, bias=False).to("cuda", torch.bfloat16)
    x = bf16(512, 1024)
    out, codes = compile_cutedsl_only(lin, mode="max-autotune")(x)
    assert MARK in "\n".join(codes)
    assert rel_err(out, lin(x).double()) < 2e-2


def test_dynamic_m_one_kernel_serves_all():
    w = bf16(1024, 512)

    def f(x):
        return x @ w

    from torch._inductor import config as ic

    counters = torch._dynamo.utils.counters
    counters.clear()  # the xdist worker may have compiled other tests before
    with ic.patch(max_autotune_gemm_backends="CUTEDSL"):
        compiled = torch.compile(f, mode="max-autotune-no-cudagraphs", dynamic=True)
        for m in (256, 1000, 3000, 4096):
            x = bf16(m, 1024)
            assert rel_err(compiled(x), (x.double() @ w.double())) < 2e-2
    assert counters["stats"]["unique_graphs"] == 1


def test_refused_gemm_falls_back_to_aten():
    a, b = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    out, codes = compile_cutedsl_only(torch.mm)(a, b)
    assert MARK not in "\n".join(codes)
    assert rel_err(out, a.double() @ b.double()) < 1e-2  # tf32 at worst


SECOND_PROCESS = textwrap.dedent(
    """
    import torch, inductor_cutedsl
    from torch._inductor import config as ic
    from inductor_cutedsl.runtime.launch import default_cache
    w = torch.randn(1024, 768, device="cuda").to(torch.bfloat16)
    x = torch.randn(640, 1024, device="cuda").to(torch.bfloat16)
    with ic.patch(max_autotune_gemm_backends="CUTEDSL", force_disable_caches=True):
        torch.compile(lambda x: x @ w, mode="max-autotune-no-cudagraphs")(x)
    print("CUTEDSL_COMPILES", default_cache().builds)
    """
)


@pytest.mark.long
def test_second_process_runs_zero_cutedsl_compiles(tmp_path):
    env = {**os.environ, "INDUCTOR_CUTEDSL_CACHE_DIR": str(tmp_path)}

    def run() -> int:
        done = subprocess.run(
            [sys.executable, "-c", SECOND_PROCESS],
            env=env,
            capture_output=True,
            text=True,
            timeout=500,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        line = [ln for ln in done.stdout.splitlines() if ln.startswith("CUTEDSL_COMPILES")]
        return int(line[-1].split()[1])

    assert run() > 0  # cold: compiles into the fresh cache
    assert run() == 0  # warm: a second process compiles nothing


@pytest.mark.parametrize("other", ["ATEN", "TRITON"])
def test_side_by_side_retiming_runs_the_other_choice_as_a_cuda_graph(other, caplog):
    """Our candidates are re-timed beside the fastest other choice (cuBLAS, or a Triton
    template whose run function reads its stream when made) as CUDA graph replays: the
    capture must work for real, not fall back to Inductor's first figures."""
    import logging

    from torch._inductor import config as ic

    a, w = bf16(1000, 1024), bf16(2048, 1024)
    with ic.patch(max_autotune_gemm_backends=f"{other},CUTEDSL", force_disable_caches=True):
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"):
            out = torch.compile(lambda x, y: x @ y.t(), mode="max-autotune-no-cudagraphs")(a, w)
    messages = [r.getMessage() for r in caplog.records]
    assert any("side by side" in m for m in messages), messages
    assert not any("side-by-side timing" in m and "failed" in m for m in messages), messages
    assert rel_err(out, a.double() @ w.double().t()) < 2e-2


def test_a_sum_of_two_matmuls_is_split_into_our_gemms_forward_and_in_a_backward():
    """Inductor's max-autotune pattern gives ``x @ w.t() + y @ v.t()``, and a training
    step's input gradient through two projections of one input, to ``mm_plus_mm``; ours
    lowers them as an mm and an addmm over its output (``lowering/mm_plus_mm.py``), each one ours here."""
    from inductor_cutedsl.lowering import mm_plus_mm

    torch.manual_seed(0)
    x, y = bf16(1000, 1024), bf16(1000, 1024)
    w, v = bf16(2048, 1024) * 0.03, bf16(2048, 1024) * 0.03
    before = len(mm_plus_mm.splits)
    out, codes = compile_cutedsl_only(lambda x, w, y, v: x @ w.t() + y @ v.t())(x, w, y, v)
    assert len(mm_plus_mm.splits) == before + 1
    assert cutedsl_launches("\n".join(codes)) == 2
    assert rel_err(out, x.double() @ w.double().t() + y.double() @ v.double().t()) < 2e-2

    def two_projections(x, w1, w2):
        return torch.relu(x @ w1.t()) + torch.tanh(x @ w2.t())

    x = bf16(512, 1024).requires_grad_()
    w1, w2 = ((bf16(1536, 1024) * 0.03).requires_grad_() for _ in range(2))
    grad = bf16(512, 1536)
    before = len(mm_plus_mm.splits)
    with torch._inductor.config.patch(max_autotune_gemm_backends="CUTEDSL"):
        compiled = torch.compile(two_projections, mode="max-autotune-no-cudagraphs")
        compiled(x, w1, w2).backward(grad)
    assert len(mm_plus_mm.splits) == before + 1, "the input's gradient is one split sum"
    x64, w164, w264 = (t.detach().double().requires_grad_() for t in (x, w1, w2))
    two_projections(x64, w164, w264).backward(grad.double())
    assert rel_err(x.grad, x64.grad) < 2e-2
    assert rel_err(w1.grad, w164.grad) < 2e-2 and rel_err(w2.grad, w264.grad) < 2e-2
