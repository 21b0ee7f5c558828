"""The fp8 gated MLP (two ``torch._scaled_mm`` of one quantized input, an activation and a
product) as one ``gated_scaled_mm`` op: the graph rewrite, the op's eager values, and
Inductor's code for a faked H200 (no GPU needed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fake_hopper import generated_code, launched
from test_fusion_codegen import backend
from test_gated import compiled_with_graph_form_failing, rewritten
from torch._inductor import config as inductor_config

from inductor_cutedsl import config

FP8 = torch.float8_e4m3fn
B, T, D, F4 = 2, 64, 256, 512


def quantize(t: torch.Tensor, rowwise: bool, top: float = 448.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` in e4m3 and its fp32 scale: per row (amax / 448 of each row), or one for all."""
    amax = t.abs().amax(dim=-1, keepdim=True) if rowwise else t.abs().amax()
    scale = amax.float().clamp_min(1e-12) / top
    return (t.float() / scale).to(FP8), scale


def fp8_mlp(rowwise: bool, act=F.silu, x_top: float = 448.0, biases: bool = False):
    """An fp8 gated MLP as float8 inference recipes write it (``benchmarks.fp8.Fp8Linear``):
    each Linear quantizes the input again; ``x_top``: the up projection's input
    quantization range (448: the same quantization as the gate's)."""

    def linear(x, w, top, bias=None):
        xq, xs = quantize(x.reshape(-1, D), rowwise, top)
        wq, ws = quantize(w, rowwise)
        y = torch._scaled_mm(xq, wq.t(), xs, ws.t() if rowwise else ws, bias=bias, out_dtype=torch.bfloat16)
        return y.reshape(B, T, -1)

    if biases:
        return lambda x, wg, wu, bg, bu: act(linear(x, wg, 448.0, bg)) * linear(x, wu, x_top, bu)
    return lambda x, wg, wu: act(linear(x, wg, 448.0)) * linear(x, wu, x_top)


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


def scaled_targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_two_scaled_mm_of_one_quantized_input_become_one_op_with_eager_values():
    fn = fp8_mlp(rowwise=False)  # torch's CPU _scaled_mm takes tensor-wise scales only
    args = [bf16(B, T, D), bf16(F4, D), bf16(F4, D)]
    with config.patch(fp8_dual=True):
        gm, count = rewritten(fn, *args)
    assert count == 1
    targets = scaled_targets(gm)
    assert torch.ops.inductor_cutedsl.gated_scaled_mm.default in targets and torch._scaled_mm not in targets
    torch.testing.assert_close(gm(*args), fn(*args), rtol=0, atol=0)


@pytest.mark.parametrize(
    "fn,why",
    [
        (fp8_mlp(rowwise=False, x_top=240.0), "the two inputs are quantized differently"),
        (fp8_mlp(rowwise=False, act=torch.tanh), "tanh is no gated activation"),
    ],
)
def test_products_of_other_inputs_or_activations_are_left_alone(fn, why):
    args = [bf16(B, T, D), bf16(F4, D), bf16(F4, D)]
    with config.patch(fp8_dual=True):
        gm, count = rewritten(fn, *args)
    assert count == 0, why
    assert torch.ops.inductor_cutedsl.gated_scaled_mm.default not in scaled_targets(gm)


def test_copies_of_one_quantization_around_an_in_place_write_stay_two():
    """Between the two quantizations of the input, the input is written in place: the
    copies read different values, and the product stays as the graph wrote it."""

    def written_between(x, wg, wu):
        xq, xs = quantize(x.reshape(-1, D), False)
        wgq, wgs = quantize(wg, False)
        gate = torch._scaled_mm(xq, wgq.t(), xs, wgs, out_dtype=torch.bfloat16)
        x.mul_(2)
        xq2, xs2 = quantize(x.reshape(-1, D), False)
        wuq, wus = quantize(wu, False)
        return F.silu(gate) * torch._scaled_mm(xq2, wuq.t(), xs2, wus, out_dtype=torch.bfloat16)

    args = [bf16(B, T, D), bf16(F4, D), bf16(F4, D)]
    with config.patch(fp8_dual=True):
        gm, count = rewritten(written_between, *[a.clone() for a in args])
    assert count == 0
    torch.testing.assert_close(gm(*[a.clone() for a in args]), written_between(*[a.clone() for a in args]))


def test_an_fp8_product_whose_graph_form_fails_to_lower_runs_the_op_with_eagers_value(monkeypatch, lenient):
    """Compiled on the CPU (no dual kernel: the op lowers as the graph was), a failure of
    ours while lowering the graph's two ``_scaled_mm`` falls back to the op itself."""
    fn, args = fp8_mlp(rowwise=False), [bf16(B, T, D), bf16(F4, D), bf16(F4, D)]
    with config.patch(fp8_dual=True):
        got = compiled_with_graph_form_failing(monkeypatch, "_scaled_as_graph", fn, args)
    torch.testing.assert_close(got, fn(*args), rtol=0, atol=0)


def test_nothing_is_rewritten_until_the_fp8_dual_kernel_is_switched_on():
    args = [bf16(B, T, D), bf16(F4, D), bf16(F4, D)]
    assert not config.fp8_dual, "off by default until a model measures a gain"
    assert rewritten(fp8_mlp(rowwise=False), *args)[1] == 0
    with config.patch(fp8_dual=True, fp8=False):
        assert rewritten(fp8_mlp(rowwise=False), *args)[1] == 0


@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
def test_an_fp8_gated_mlp_is_one_fp8_dual_kernel(rowwise):
    mode = "row" if rowwise else "tensor"
    with backend(), config.patch(fp8_dual=True):
        code = generated_code(fp8_mlp(rowwise, biases=True), (B, T, D), (F4, D), (F4, D), (F4,), (F4,))
    assert code.count("dual=True") == 1
    spec = launched(code, 0)["spec"]
    assert spec.dual and spec.ab_dtype == "float8_e4m3fn" and spec.out_dtype == "bfloat16"
    assert spec.epilogue.name.startswith(f"gated_silu_scaled_{mode}_{mode}_bias_gate_bias_up_round_bfloat16")
    assert [op.name for op in spec.epilogue.operands] == ["scale_a", "scale_gate", "scale_up", "bias_gate", "bias_up"]
    assert spec.promote == 3, "128x128 MMA tiles promote alternately, as the plain kernel does"
    assert "extern_kernels._scaled_mm" not in code and "b_up=b_up" in code
    assert code.count("_launch = launcher(") == 1, "no GEMM of the product is left beside the dual kernel"


def test_two_scaled_mm_measured_faster_stay_two_gemms():
    with backend(), config.patch(fp8_dual=True):
        code = generated_code(fp8_mlp(True), (B, T, D), (F4, D), (F4, D), gated_ms=(0.2, 0.1))
    assert "dual=True" not in code
    specs = [launched(code, i)["spec"] for i in range(code.count("_launch = launcher("))]
    assert sum(s.ab_dtype == "float8_e4m3fn" for s in specs) == 2


def static_fp8_mlp(x, wg, wu, wd, s_in, s_h):
    """An fp8 MLP with static (calibrated) tensor-wise input scales, gate and up sharing
    theirs (one input): the quantization of the down projection's input can run in the
    epilogue of the kernel that writes it."""
    s_in, s_h = s_in.float(), s_h.float()
    (wgq, sg), (wuq, su), (wdq, sd) = (quantize(w, False) for w in (wg, wu, wd))
    xq = (x.reshape(-1, D).float() / s_in).clamp(-448.0, 448.0).to(FP8)
    g = torch._scaled_mm(xq, wgq.t(), s_in, sg, out_dtype=torch.bfloat16)
    h = F.silu(g) * torch._scaled_mm(xq, wuq.t(), s_in, su, out_dtype=torch.bfloat16)
    hq = (h.float() / s_h).clamp(-448.0, 448.0).to(FP8)
    return torch._scaled_mm(hq, wdq.t(), s_h, sd, out_dtype=torch.bfloat16).reshape(B, T, D)


def test_a_static_scale_quantizes_the_down_projections_input_in_the_dual_kernels_epilogue():
    """With a tensor-wise input scale known ahead (a static recipe), the dual kernel
    writes the down projection's e4m3 input itself; its epilogue, evaluated in float64
    as generated, is eager's silu(gate) * up rounded to bf16, divided by the scale and
    saturated to e4m3."""
    from inductor_cutedsl.runtime import reference

    with backend(), config.patch(fp8_dual=True):
        code = generated_code(static_fp8_mlp, (B, T, D), (F4, D), (F4, D), (D, F4), (), ())
    first = launched(code, 0)
    spec = first["spec"]
    assert spec.dual and spec.ab_dtype == spec.out_dtype == "float8_e4m3fn", spec.describe()
    assert code.count("_launch = launcher(") == 2, "the dual kernel and the down projection"
    # The tensor-wise scales, the fused one included, are each loaded once per thread.
    assert [op.kind for op in spec.epilogue.operands] == ["one"] * 4
    gen = torch.Generator().manual_seed(9)
    m, n, k = 24, 32, 64
    a = (torch.randn(m, k, generator=gen) * 4).to(FP8)
    b_gate, b_up = ((torch.randn(n, k, generator=gen) * 4).to(FP8).t() for _ in range(2))
    sa, sg, su = torch.tensor(0.5), torch.tensor(0.3), torch.tensor(0.25)
    s_h = torch.tensor(0.5).to(torch.bfloat16)
    out = torch.empty(m, n, dtype=FP8)
    ops = [sa, sg, su, s_h]
    reference.run(spec, a, b_gate, out, ops, first["scalars"], first["views"], b_up=b_up, dtype=torch.float64)

    def part(w, s):
        return (a.double() @ w.double() * 0.5 * s).to(torch.bfloat16).double()

    h = (F.silu(part(b_gate, 0.3)) * part(b_up, 0.25)).to(torch.bfloat16).double()
    want = (h / s_h.double()).clamp(-448.0, 448.0).to(FP8)
    assert (want.double().abs() == 448).any() and (want.double() != 0).sum() > m * n // 2, "saturates, mostly nonzero"
    torch.testing.assert_close(out.double(), want.double(), rtol=0, atol=0)


def test_a_dynamo_graph_of_the_static_fp8_recipe_is_rewritten_and_computes_as_stock(monkeypatch):
    """The benchmarks' fp8 Linears (``benchmarks.fp8``, static recipe: CPU's
    ``_scaled_mm`` takes tensor-wise scales) in a gated MLP, compiled with max-autotune
    on the CPU: Dynamo's graph (buffers, the weights' ``t()``, the output views) is
    rewritten to the fp8 gated op, which lowers there as the graph was, bit for bit
    what stock computes."""
    from torch import nn

    import inductor_cutedsl
    from benchmarks import fp8
    from inductor_cutedsl.install import reenabled
    from inductor_cutedsl.lowering import gated_rewrite

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(64, 128, bias=False), nn.Linear(64, 128, bias=False)
            self.down_proj = nn.Linear(128, 64, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    replaced = []
    real = gated_rewrite.rewrite
    monkeypatch.setattr(gated_rewrite, "rewrite", lambda graph: replaced.append(real(graph)) or replaced[-1])
    torch.manual_seed(11)
    mlp, x = MLP().to(torch.bfloat16), torch.randn(2, 8, 64).to(torch.bfloat16)
    block = fp8.quantized(mlp, fp8.calibrate(mlp, x))
    outs = {}
    # No compile cache: a cached graph would skip the pre-grad pass.
    with torch.no_grad(), inductor_config.patch(force_disable_caches=True):
        for side in ("ours", "stock"):
            torch.compiler.reset()
            with reenabled(fp8_dual=True):  # installed whatever an earlier test left
                if side == "stock":
                    inductor_cutedsl.disable()
                outs[side] = torch.compile(block, mode="max-autotune-no-cudagraphs")(x)
    assert replaced == [1], "ours' graph had its product rewritten, stock's went untouched"
    assert torch.equal(outs["ours"], outs["stock"])
