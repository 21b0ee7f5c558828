"""GEMM operands passed as their buffers: the generated call builds no view per launch,
and the launcher reads each through the layout its module was given (no GPU: the
wrapper runs on CPU with the launcher's torch fallback, see fake_hopper.run_on_cpu)."""

from __future__ import annotations

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from fake_hopper import generated_code, launched, run_on_cpu

from inductor_cutedsl.runtime import generated


def _our_calls(code: str) -> list[str]:
    """The lines of the wrapper's ``call`` that launch one of our kernels."""
    body = code[code.index("def call(") :]
    return [line.strip() for line in body.splitlines() if re.match(r"\s*cutedsl_\w+\.run\(", line)]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def _inputs(shapes: list[tuple[int, ...]], seed: int = 0) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    # Weights and biases small, activations of unit scale: the chain stays O(1).
    return [torch.randn(s, dtype=torch.bfloat16) * (1.0 if len(s) == 3 else 0.2) for s in shapes]


def _mlp(x, w1, b1, w2, wg, wu):
    """A 3-D activation through a Linear with bias and GELU, one with a residual, and a
    gated MLP (our dual kernel): every GEMM operand a view of a graph input or buffer."""
    h = F.gelu(F.linear(x, w1, b1))
    y = F.linear(h, w2) + x
    return F.linear(F.silu(F.linear(y, wg)) * F.linear(y, wu), w2)


MLP_SHAPES = [(2, 48, 64), (96, 64), (96,), (64, 96), (96, 64), (96, 64)]


def test_our_gemm_calls_pass_static_operands_as_buffers_and_compute_the_graph():
    code = generated_code(_mlp, *MLP_SHAPES)
    calls = _our_calls(code)
    assert len(calls) == 4  # fc1 + GELU, fc2 + residual, the dual gate/up, the down projection
    # A (the 3-D activation read as 2-D) and B (the transposed weight) are passed as
    # their buffers; only the broadcast bias, an epilogue operand, stays a view.
    assert [call.count("reinterpret_tensor(") for call in calls] == [1, 0, 0, 0]
    assert "reinterpret_tensor(arg2_1, (96, 96), (0, 1), 0)" in calls[0]
    layouts = [launched(code, i).get("layouts") for i in range(4)]
    assert layouts[0] == {"a": ((96, 64), (64, 1)), "b": ((64, 96), (1, 64))}
    assert layouts[2] == {"a": ((96, 64), (64, 1)), "b": ((64, 96), (1, 64)), "b_up": ((64, 96), (1, 64))}
    args = _inputs(MLP_SHAPES)
    (out,) = run_on_cpu(code, args)
    assert _rel_err(out, _mlp(*[a.double() for a in args])) < 2e-2


def test_launches_that_ignore_the_layouts_are_caught(monkeypatch):
    """The check above can fail: with the launcher reading the buffers as passed, the
    wrapper's calls no longer compute the graph."""
    code = generated_code(_mlp, *MLP_SHAPES)
    monkeypatch.setattr(generated, "read_through", lambda layouts, a, b, b_up: (a, b, b_up))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        run_on_cpu(code, _inputs(MLP_SHAPES))


def _second_half(x, w):
    """A GEMM whose A starts past its buffer's start (a column slice at offset 64)."""
    return F.linear(x.narrow(1, 64, 64), w)


def test_an_operand_that_starts_past_its_buffer_keeps_its_view_at_the_call():
    """Only views that start where their buffer does are passed as the buffer: a launcher
    given the buffer of an offset view would read from its start (the rule that keeps
    the module right when a benchmark passes the view itself)."""
    code = generated_code(_second_half, (96, 128), (80, 64))
    (call,) = _our_calls(code)
    assert "reinterpret_tensor(arg0_1, (96, 64), (128, 1), 64)" in call
    assert launched(code).get("layouts") == {"b": ((64, 80), (1, 64))}
    x, w = _inputs([(96, 128), (80, 64)])
    (out,) = run_on_cpu(code, [x, w])
    assert _rel_err(out, _second_half(x.double(), w.double())) < 1e-2


def _phi3_mlp(x, w, wd):
    """Phi-3's MLP: one gate_up weight whose halves are the dual kernel's two B operands."""
    g, u = F.linear(x, w).chunk(2, -1)
    return F.linear(F.silu(g) * u, wd)


def test_a_dual_kernel_reads_a_bound_gate_half_and_an_offset_up_half_of_one_weight():
    shapes = [(2, 48, 64), (192, 64), (64, 96)]
    code = generated_code(_phi3_mlp, *shapes)
    dual = next(call for call in _our_calls(code) if "gated_mm" in call)
    assert dual.split(".run(")[1].startswith("arg0_1, arg1_1, reinterpret_tensor(arg1_1, (64, 96), (1, 64), 6144)")
    assert launched(code, 0)["layouts"] == {"a": ((96, 64), (64, 1)), "b": ((64, 96), (1, 64))}
    args = _inputs(shapes)
    (out,) = run_on_cpu(code, args)
    assert _rel_err(out, _phi3_mlp(*[a.double() for a in args])) < 2e-2


def _tensors():
    """A row-major (2, 48, 64) activation and a (96, 64) weight, their storage buffers."""
    torch.manual_seed(1)
    return torch.randn(2, 48, 64, dtype=torch.bfloat16), torch.randn(96, 64, dtype=torch.bfloat16)


LAYOUTS = {"a": ((96, 64), (64, 1)), "b": ((64, 96), (1, 64))}


def test_a_bound_launch_passes_what_the_built_views_would(monkeypatch):
    """The fast launcher given ``layouts`` passes the kernel the values the plain
    launcher passes for the views, whether it is given the buffers, other tensors over
    the same memory or the views themselves, on a stream-K kernel too."""
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime import launch as runtime_launch

    ran = []

    def stand_in(spec):
        kernel = runtime_launch.CompiledGemm.__new__(runtime_launch.CompiledGemm)
        kernel.spec = spec
        kernel.call = lambda *values: ran.append(list(values))
        kernel.launch = lambda a, b, out, values, stream, out_view, b_up=None, programmatic=False: ran.append(
            [a.data_ptr(), tuple(a.shape), a.stride(), b.data_ptr(), tuple(b.shape), b.stride(), *values]
        )
        return kernel

    monkeypatch.setattr(generated, "get_gemm", stand_in)
    monkeypatch.setattr(runtime_launch, "max_active_clusters", lambda cluster_size, device: 66)
    x, w = _tensors()
    out = torch.empty(96, 96, dtype=torch.bfloat16)
    for config in (GemmConfig(128, 256, 2, 1), GemmConfig(128, 64, 1, 1, stream_k=True)):
        spec = KernelSpec(config, "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
        ran.clear()
        bound = generated.launcher(spec, layouts=LAYOUTS)
        bound(x, w, out, stream=3)
        bound(x.view(96, 64), w, out, stream=3)  # another tensor over the same memory
        bound(x.view(96, 64), w.t(), out, stream=3)  # the views themselves, as a benchmark passes them
        generated.launcher(spec)(x.view(96, 64), w.t(), out, stream=3)
        assert ran[0] == ran[1] == ran[2] == ran[3]
    with pytest.raises(ValueError, match="not GEMM operands"):
        generated.launcher(spec, layouts={"c": ((96, 96), (0, 1))})


def test_the_fallback_reads_bound_operands_through_their_layouts():
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import KernelSpec

    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    x, w = _tensors()
    out = torch.full((96, 96), float("nan"), dtype=torch.bfloat16)
    generated._reference_launcher(spec, (), (), None, LAYOUTS)(x, w, out)
    assert _rel_err(out, x.double().view(96, 64) @ w.double().t()) < 1e-2


def test_only_static_layouts_from_the_buffers_start_are_bound():
    from torch._inductor import ir

    device, dtype = torch.device("cuda", 0), torch.bfloat16
    from inductor_cutedsl.compat.ir_access import bound_layout

    def buffer(size, stride, offset=0):
        return ir.InputBuffer(name="x", layout=ir.FixedLayout(device, dtype, size, stride, offset))

    base = buffer([2, 48, 64], [3072, 64, 1])
    assert bound_layout(base) == ((2, 48, 64), (3072, 64, 1))

    def view(size, stride, offset):
        return ir.ReinterpretView(data=base, layout=ir.FixedLayout(device, dtype, size, stride, offset))

    assert bound_layout(view([96, 64], [64, 1], 0)) == ((96, 64), (64, 1))
    assert bound_layout(view([96, 32], [64, 1], 32)) is None  # starts past the buffer's start
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    assert bound_layout(buffer([s0, 64], [64, 1])) is None  # a dynamic size
    flexible = ir.InputBuffer(name="y", layout=ir.FlexibleLayout(device, dtype, [96, 64]))
    assert bound_layout(flexible) is None  # its strides may still change
