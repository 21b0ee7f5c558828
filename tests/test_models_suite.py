"""The model suite (benchmarks/models.py) without a GPU: the blocks, the reading of
Inductor's wrapper code for the fusion bound, the summary and merging of result files,
the command line, and one whole run with the GPU measurements faked."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F

from benchmarks import harness, models
from inductor_cutedsl import is_enabled

TINY = 16  # the widths' divisor on the CPU (every family keeps whole heads)
SUMMARY_KEYS = {
    "gpu_speedup_geomean",
    "gpu_speedup_min",
    "gpu_bound_geomean",
    "wall_speedup_geomean_cudagraphs",
    "wall_speedup_min_cudagraphs",
    "wall_speedup_geomean_no_cudagraphs",
    "wall_speedup_min_no_cudagraphs",
    "host_ratio_max",
    "host_ratio_geomean",
    "host_ratio_interval_low_max",
    "wall_speedup_interval_high_min_cudagraphs",
    "wall_speedup_interval_high_min_no_cudagraphs",
    "rows",
    "device",
    "torch",
}


# --- the blocks -------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(models.FAMILIES))
def test_block_runs_forward_and_backward(family):
    f = models.FAMILIES[family]
    assert f.small[0] * f.small[1] <= 256 and 3000 <= f.prefill[0] * f.prefill[1] <= 4200
    block, x = models.make_block(family, "small", device="cpu", dtype=torch.float32, scale=TINY)
    pixels = getattr(f, "pixels", False)  # a transformers image model takes images
    assert x.shape == ((f.small[0], 3, 224, 224) if pixels else (*f.small, f.hidden // TINY))
    params = list(block.parameters())
    with torch.no_grad():
        (out,) = models.make_step(block, x, "inference", params)()
    assert out.shape == (*f.small, f.hidden // TINY) and torch.isfinite(out).all()
    x.requires_grad_(True)
    loss, dx, *grads = models.make_step(models.target_of(block, "train", x), x, "train", params)()
    assert loss.dim() == 0 and dx.shape == x.shape
    assert len(grads) == len(params) and all(g is not None and torch.isfinite(g).all() for g in [dx, *grads])


@pytest.mark.parametrize("family", ["hf-llama", "llama", "gpt2"])
def test_the_training_loss_depends_on_every_weight(family):
    """A training row's gradients are real quantities, not rounding noise: in float64, the
    loss moves with every Linear's weight and with the input, not only with the last norm's
    weight. A loss that only the final normalisation fixes (``mean(out**2)`` over a body
    ending in its final RMSNorm) makes every other gradient zero in exact arithmetic
    (relative size ~1e-9)."""
    if family.startswith("hf-"):
        pytest.importorskip("transformers")
    block, x = models.make_block(family, "small", device="cpu", dtype=torch.float64, scale=TINY)
    x.requires_grad_(True)
    params = dict(block.named_parameters())
    loss, dx, *grads = models.make_step(models.target_of(block, "train", x), x, "train", list(params.values()))()
    # How far the loss moves when a tensor moves by its own size: |grad| * |tensor|.
    moves = {name: (g.norm() * p.norm()).item() for (name, p), g in zip(params.items(), grads, strict=True)}
    linears = [n for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears and min(moves[f"{n}.weight"] for n in linears) > 1e-4 * max(moves.values())
    assert (dx.norm() * x.norm()).item() > 1e-4 * max(moves.values())
    # The same block and input give the same loss: the direction is fixed, not drawn anew.
    again = models.make_step(models.target_of(block, "train", x), x, "train", list(params.values()))()[0]
    assert again.item() == loss.item()


def test_the_loss_direction_is_fixed_of_unit_norm_and_the_same_in_every_dtype():
    """The direction a training loss projects on (also the distributed benchmark's, whose
    float64 reference must project on the same values as the compiled run)."""
    d32 = models.loss_direction((3, 5, 7), "cpu")
    d64 = models.loss_direction((3, 5, 7), "cpu", torch.float64)
    assert d32.dtype == torch.float32 and d64.dtype == torch.float64 and d32.shape == (3, 5, 7)
    assert torch.equal(d32, d64.float()) and abs(d64.norm().item() - 1.0) < 1e-12
    assert torch.equal(models.loss_direction((3, 5, 7), "cpu"), d32)
    assert not torch.equal(models.loss_direction((3, 5, 7), "cpu", seed=1), d32)
    assert 0.3 < (d64 > 0).double().mean().item() < 0.7


def test_families_are_written_as_their_models_are():
    def linears(family):
        block, _ = models.make_block(family, "small", device="cpu", dtype=torch.float32, scale=TINY)
        return {n: m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)}

    gpt2, llama, qwen2, phi3 = (linears(f) for f in ("gpt2", "llama", "qwen2", "phi3"))
    assert all(m.bias is not None for m in gpt2.values()) and "attn.qkv" in gpt2
    assert not any(m.bias is not None for m in llama.values()) and {"mlp.gate_proj", "mlp.up_proj"} <= set(llama)
    assert llama["attn.k_proj"].out_features == 2048 // TINY // 4  # 8 of 32 heads
    assert {n for n, m in qwen2.items() if m.bias is not None} == {"attn.q_proj", "attn.k_proj", "attn.v_proj"}
    assert phi3["mlp.gate_up_proj"].out_features == 2 * 8192 // TINY and "attn.qkv" in phi3
    assert models.FAMILIES["bert"].post_norm and not models.FAMILIES["bert"].causal
    assert models.FAMILIES["vit"].small == (1, 197)
    assert sum(models.FAMILIES[f].train for f in models.FAMILIES) >= 3


@pytest.mark.parametrize("family", list(models.FAMILIES))
def test_block_traces_as_one_graph(family):
    """No graph break: each block reaches Inductor whole, as one GEMM-bearing graph."""
    torch._dynamo.reset()
    block, x = models.make_block(family, "small", device="cpu", dtype=torch.float32, scale=TINY)
    compiled = torch.compile(block, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x))
    torch._dynamo.reset()


def test_block_ids_parse_and_refuse():
    assert models.BlockId.parse("gpt2:small:train").name == "gpt2:small:train"
    with pytest.raises(ValueError, match="unknown block"):
        models.BlockId.parse("gpt2:medium:train")


def test_train_phases_drop_old_gradients_and_run_forward_then_backward():
    w = torch.nn.Parameter(torch.ones(3))
    x = torch.ones(3, requires_grad=True)
    x.grad, w.grad = torch.zeros(3), torch.zeros(3)
    forward, backward = models.train_phases(lambda t: (t * w).sum(), x, [w])
    loss = forward()
    assert x.grad is None and w.grad is None
    backward(loss)
    assert torch.equal(w.grad, torch.ones(3)) and torch.equal(x.grad, torch.ones(3))


def test_train_phases_begin_a_cuda_graph_step_only_under_cuda_graphs(monkeypatch):
    """Under CUDA graphs each step's forward starts a new graph-tree step (else the tree
    keeps the previous step's outputs alive and re-records); without, it starts none."""
    begun = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: begun.append(1))
    x = torch.ones(2, requires_grad=True)
    for cudagraphs, expected in ((False, 0), (True, 2)):
        begun.clear()
        step = models.make_step(lambda t: t.sum(), x, "train", [], cudagraphs)
        step()
        forward, _ = models.train_phases(lambda t: t.sum(), x, [], cudagraphs)
        forward()
        assert len(begun) == expected


# --- reading the wrapper code ----------------------------------------------------------
# Excerpts of wrapper modules as this torch's Inductor writes them (kernel bodies cut).

ADDMM_GELU = """
triton_poi_fused_add_gelu_view_0 = async_compile.triton('triton_poi_fused_add_gelu_view_0', '''
@triton.jit
def triton_poi_fused_add_gelu_view_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):
    x0 = xindex
''', device_str='cuda')

    def call(self, args):
        arg0_1, arg1_1, arg2_1, arg3_1 = args
        with torch.cuda._DeviceGuard(0):
            buf0 = empty_strided_cuda((128, 48), (48, 1), torch.bfloat16)
            extern_kernels.bias_addmm(reinterpret_tensor(arg2_1, (128, 48), (0, 1), 0), reinterpret_tensor(arg0_1, (128, 32), (32, 1), 0), reinterpret_tensor(arg1_1, (32, 48), (1, 32), 0), alpha=1, beta=1, out=buf0)
            del arg0_1
            buf1 = reinterpret_tensor(buf0, (2, 64, 48), (3072, 48, 1), 0); del buf0  # reuse
            stream0 = get_raw_stream(0)
            triton_poi_fused_add_gelu_view_0.run(buf1, arg3_1, 6144, stream=stream0)
        return (buf1, )
"""  # noqa: E501

MM_REDUCTION = """
triton_per_fused_add_native_layer_norm_0 = async_compile.triton('triton_per_fused_add_native_layer_norm_0', '''
def triton_per_fused_add_native_layer_norm_0(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
''', device_str='cuda')
triton_red_fused_sum_1 = async_compile.triton('triton_red_fused_sum_1', '''
def triton_red_fused_sum_1(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
''', device_str='cuda')
triton_poi_fused_mul_2 = async_compile.triton('triton_poi_fused_mul_2', '''
def triton_poi_fused_mul_2(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
''', device_str='cuda')

    def call(self, args):
        buf0 = empty_strided_cuda((4096, 1024), (1024, 1), torch.bfloat16)
        extern_kernels.mm(reinterpret_tensor(arg0_1, (4096, 1024), (1024, 1), 0), reinterpret_tensor(arg1_1, (1024, 1024), (1, 1024), 0), out=buf0)
        buf1 = empty_strided_cuda((4096, ), (1, ), torch.float32)
        triton_red_fused_sum_1.run(buf0, buf1, 4096, 1024, stream=stream0)
        buf2 = reinterpret_tensor(buf0, (2, 2048, 1024), (2097152, 1024, 1), 0); del buf0  # reuse
        triton_per_fused_add_native_layer_norm_0.run(buf2, arg2_1, 4096, 1024, stream=stream0)
        buf3 = empty_strided_cuda((2, 2048, 1024), (2097152, 1024, 1), torch.bfloat16)
        triton_poi_fused_mul_2.run(buf2, buf3, 4194304, stream=stream0)
"""  # noqa: E501

TEMPLATE_CHUNK = """
triton_tem_fused_mm_t_view_0 = async_compile.triton('triton_tem_fused_mm_t_view_0', '''
def triton_tem_fused_mm_t_view_0(arg_A, arg_B, out_ptr0):
''', device_str='cuda')
triton_poi_fused__unsafe_view_mul_silu_split_1 = async_compile.triton('triton_poi_fused__unsafe_view_mul_silu_split_1', '''
def triton_poi_fused__unsafe_view_mul_silu_split_1(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
''', device_str='cuda')
triton_tem_fused_mm_2 = async_compile.triton('triton_tem_fused_mm_2', '''
def triton_tem_fused_mm_2(arg_A, arg_B, out_ptr0):
''', device_str='cuda')
triton_poi_fused_add_3 = async_compile.triton('triton_poi_fused_add_3', '''
def triton_poi_fused_add_3(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
''', device_str='cuda')

    def call(self, args):
        buf0 = empty_strided_cuda((128, 96), (96, 1), torch.bfloat16)
        triton_tem_fused_mm_t_view_0.run(arg0_1, arg1_1, buf0, 12, 1, 1, stream=stream0)
        buf1 = empty_strided_cuda((2, 64, 48), (3072, 48, 1), torch.bfloat16)
        triton_poi_fused__unsafe_view_mul_silu_split_1.run(buf0, buf1, 6144, stream=stream0)
        buf2 = buf0; del buf0  # reuse
        triton_poi_fused_add_3.run(buf1, arg3_1, buf2, 6144, stream=stream0)
        buf3 = empty_strided_cuda((128, 32), (32, 1), torch.bfloat16)
        triton_tem_fused_mm_2.run(buf2, arg2_1, buf3, 4, 1, 1, stream=stream0)
        buf4 = empty_strided_cuda((128, 32), (32, 1), torch.bfloat16)
        triton_poi_fused_add_3.run(buf1, buf2, buf4, 4096, stream=stream0)
"""  # noqa: E501

OURS = """
    def call(self, args):
        buf0 = empty_strided_cuda((4096, 1024), (1024, 1), torch.bfloat16)
        cutedsl_fused_mm_0.run(reinterpret_tensor(arg0_1, (4096, 1024), (1024, 1), 0), arg1_1, buf0, stream=stream0)
        buf1 = empty_strided_cuda((4096, 1024), (1024, 1), torch.bfloat16)
        triton_poi_fused_add_1.run(buf0, arg2_1, buf1, 4194304, stream=stream0)
"""


def test_bias_addmm_then_pointwise_in_place_counts():
    a = models.analyse_wrapper(ADDMM_GELU)
    assert a.gemms == [("extern", "bias_addmm")]
    assert a.pointwise_after_gemm == ["triton_poi_fused_add_gelu_view_0"]


def test_reductions_never_count_and_overwritten_gemm_output_is_not_one():
    a = models.analyse_wrapper(MM_REDUCTION)
    assert a.gemms == [("extern", "mm")]
    # The layer norm rewrote the GEMM's memory in place: the pointwise after it reads
    # the norm's output, not the GEMM's.
    assert a.pointwise_after_gemm == []


def test_template_chunk_and_reused_memory():
    a = models.analyse_wrapper(TEMPLATE_CHUNK)
    assert a.gemms == [("template", "triton_tem_fused_mm_t_view_0"), ("template", "triton_tem_fused_mm_2")]
    # silu * up over both halves of one GEMM output counts; the add writing into the
    # GEMM's reused memory (out_ptr0) reads no GEMM output, nor does its second launch.
    assert a.pointwise_after_gemm == ["triton_poi_fused__unsafe_view_mul_silu_split_1"]


def test_kernel_without_signature_writes_its_fresh_buffers():
    a = models.analyse_wrapper(OURS)
    assert a.gemms == [("cutedsl", "cutedsl_fused_mm_0")]
    assert a.pointwise_after_gemm == ["triton_poi_fused_add_1"]


def test_analysis_merges_the_modules_of_a_compile():
    a = models.analyse_wrappers([ADDMM_GELU, MM_REDUCTION, OURS])
    assert len(a.gemms) == 3
    assert a.pointwise_after_gemm == ["triton_poi_fused_add_gelu_view_0", "triton_poi_fused_add_1"]


def test_split_args_and_buffer_names():
    args = models.split_args("reinterpret_tensor(buf0, (2, 3), (3, 1), 0), arg1_1, 6144, stream=stream0")
    assert args == ["reinterpret_tensor(buf0, (2, 3), (3, 1), 0)", "arg1_1", "6144", "stream=stream0"]
    assert [models.buffer_name(a) for a in args[:3]] == ["buf0", "arg1_1", None]


def _stock_code(fn, *shapes) -> str:
    """Inductor's wrapper code for ``fn`` with stock max-autotune (ATen GEMMs) on a faked H200."""
    from fake_hopper import generated_code

    import inductor_cutedsl

    inductor_cutedsl.disable()
    try:
        return generated_code(fn, *shapes, backends="ATEN")
    finally:
        inductor_cutedsl.enable()


def test_real_wrapper_code_of_a_3d_linear_gelu_residual():
    """This torch's own wrapper code: the bias + GELU + residual kernel after a (B, T, N)
    Linear reads the GEMM's output."""
    code = _stock_code(
        lambda x, w, b, r: F.gelu(F.linear(x, w, b), approximate="tanh") + r, (2, 64, 32), (48, 32), (48,), (2, 64, 48)
    )
    a = models.analyse_wrapper(code)
    assert [kind for kind, _ in a.gemms] == ["extern"]
    assert len(a.pointwise_after_gemm) == 1 and "gelu" in a.pointwise_after_gemm[0]


def test_real_wrapper_code_of_a_chunked_gate_up_and_a_norm():
    def fn(x, w, w2):
        gate, up = (x @ w.t()).chunk(2, -1)
        y = (F.silu(gate) * up) @ w2.t()
        return F.layer_norm(y + x, (32,))

    a = models.analyse_wrapper(_stock_code(fn, (2, 64, 32), (96, 32), (32, 48)))
    assert [kind for kind, _ in a.gemms] == ["extern", "extern"]
    # silu * up counts; the residual add fused into the layer norm is a reduction.
    assert len(a.pointwise_after_gemm) == 1 and "silu" in a.pointwise_after_gemm[0]


# --- profiles, bound, summary, merging -------------------------------------------------


def _profile(*pairs):
    return [{"kernel": k, "launches": 1.0, "ms": ms} for k, ms in pairs]


def test_profiles_merge_to_medians_and_the_bound_counts_what_reads_gemms():
    rounds = [
        _profile(("nvjet_gemm", 0.100), ("triton_poi_fused_gelu_1", 0.020), ("triton_per_fused_norm_0", 0.010)),
        _profile(("nvjet_gemm", 0.104), ("triton_poi_fused_gelu_1", 0.022), ("triton_per_fused_norm_0", 0.012)),
        _profile(("nvjet_gemm", 0.102), ("triton_poi_fused_gelu_1", 0.021)),
    ]
    merged = models.merge_profiles(rounds)
    assert merged["us"] == pytest.approx(130.0)  # the median of the totals (130, 138, 123)
    assert [k["kernel"] for k in merged["kernels"]] == [
        "nvjet_gemm",
        "triton_poi_fused_gelu_1",
        "triton_per_fused_norm_0",
    ]
    assert merged["kernels"][0]["us"] == pytest.approx(102.0) and merged["kernels"][2]["us"] == pytest.approx(10.0)
    bound, rows = models.fusion_bound(merged, ["triton_poi_fused_gelu_1", "triton_poi_absent_9"])
    assert bound == pytest.approx(130.0 / (130.0 - 21.0), abs=1e-4) and [r["kernel"] for r in rows] == [
        "triton_poi_fused_gelu_1"
    ]
    assert models.fusion_bound(merged, [])[0] == 1.0
    gemms = models.gemm_kernels(
        merged["kernels"] + [{"kernel": "kernel_cutlass_kernel_inductor_cutedsl_x", "launches": 2.0, "us": 50.0}]
    )
    assert [(g["kernel"][:9], g["ours"]) for g in gemms] == [("nvjet_gem", False), ("kernel_cu", True)]


def _row(block, gpu, bound, cg, nocg, **extra):
    return {
        "block": block,
        "gpu_us": {"stock": 100.0 * gpu, "ours": 100.0},
        "gpu_speedup": gpu,
        "bound": bound,
        "wall_speedup": {models.CUDAGRAPHS: cg, models.NO_CUDAGRAPHS: nocg},
        **extra,
    }


def test_summary_from_rows():
    rows = [
        _row(
            "gpt2:small:inference", 1.1, 1.2, 1.05, 0.9, host_ratio={models.CUDAGRAPHS: 0.9, models.NO_CUDAGRAPHS: 1.2}
        ),
        _row("llama:small:inference", 0.9, 1.1, 1.0, 0.8, host_ratio={models.NO_CUDAGRAPHS: 1.0}),
        {"block": "phi3:small:inference", "error": "AccuracyError: ...", "host_ratio": {models.CUDAGRAPHS: 9.0}},
    ]
    result = models.summarize(rows, {"device": "H200", "torch": "2.11"})
    # Every measured row in every mode; a failed row counts in none.
    assert result["host_ratio_max"] == 1.2
    assert result["host_ratio_geomean"] == pytest.approx((0.9 * 1.2 * 1.0) ** (1 / 3), abs=1e-4)
    assert set(result) == SUMMARY_KEYS
    assert result["gpu_speedup_geomean"] == pytest.approx((1.1 * 0.9) ** 0.5, abs=1e-4)
    assert result["gpu_speedup_min"] == 0.9 and result["wall_speedup_min_no_cudagraphs"] == 0.8
    assert result["gpu_bound_geomean"] == pytest.approx((1.2 * 1.1) ** 0.5, abs=1e-4)
    assert result["wall_speedup_geomean_cudagraphs"] == pytest.approx(1.05**0.5, abs=1e-4)
    json.dumps(result)
    assert models.summarize([], {})["gpu_speedup_geomean"] is None


def test_a_timeline_orders_the_gpu_work_and_measures_the_gaps_between():
    """Kernels, copies and fills of a chrome trace in the order they started, from the
    first: each with the idle time before it, negative where it overlapped the one
    before, and a kernel with its launch shape; the host's events are not the GPU's."""
    shape = {"grid": [64, 1, 1], "block": [256, 1, 1], "registers per thread": 40, "shared memory": 0}
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "triton_poi_rotary", "ts": 1040.0, "dur": 28.5, "args": shape},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 900.0, "dur": 500.0},
            {"ph": "X", "cat": "kernel", "name": "kernel_inductor_cutedsl_gemm", "ts": 1000.0, "dur": 35.0},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 1060.0, "dur": 2.0, "args": {}},
            {"ph": "i", "cat": "kernel", "name": "an instant", "ts": 1001.0},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 1100.25, "dur": 1.5},
        ]
    }
    assert models.timeline_of(trace) == [
        {"kernel": "kernel_inductor_cutedsl_gemm", "start_us": 0.0, "us": 35.0, "gap_us": 0.0},
        {
            "kernel": "triton_poi_rotary",
            "start_us": 40.0,
            "us": 28.5,
            "gap_us": 5.0,
            "launch": "grid 64,1,1 block 256,1,1 regs 40 smem 0",
        },
        {"kernel": "Memset (Device)", "start_us": 60.0, "us": 2.0, "gap_us": -8.5},
        {"kernel": "Memcpy DtoD", "start_us": 100.25, "us": 1.5, "gap_us": 38.25},
    ]
    assert models.timeline_of({}) == []
    # Without the occupancy figures a shape still names its grid and block.
    assert models.launch_of({"args": {"grid": [8, 2, 1], "block": [128, 1, 1]}}) == (
        "grid 8,2,1 block 128,1,1 regs ? smem ?"
    )


def test_the_median_interval_takes_the_binomial_order_statistics():
    """The distribution-free 95% interval of a median: from 40 rounds the 14th and 27th
    smallest, from 12 the 3rd and 10th (the tables' values), in any input order; too few
    rounds give none rather than a narrower interval."""
    forty = [float(v) for v in range(40, 0, -1)]
    assert harness.median_interval(forty) == (14.0, 27.0)
    assert harness.median_interval([float(v) for v in (7, 3, 12, 1, 9, 5, 11, 2, 8, 4, 10, 6)]) == (3.0, 10.0)
    assert harness.median_interval(range(1, 7)) == (1, 6) and harness.median_interval(range(1, 6)) is None
    assert harness.median_interval([]) is None


def _host(*rounds):
    return {"stock": 100.0, "ours": 100.0 * sorted(rounds)[len(rounds) // 2], "round_ratios": list(rounds)}


def test_host_ratios_are_their_rounds_medians_with_an_interval_that_says_what_is_above_stock():
    """A row and mode whose rounds all read ours slower has an interval above 1; one whose
    rounds scatter about 1 (even with a median above 1) does not, and the summary's
    ``host_ratio_interval_low_max`` is the highest low end. A failed row counts in none,
    and a file's flat ``host_us`` (before host time was per mode) has no interval."""
    slower = _host(1.06, 1.09, 1.05, 1.08, 1.07, 1.11, 1.04, 1.10, 1.06, 1.12, 1.07, 1.05)
    scattered = _host(0.78, 1.24, 0.95, 1.10, 1.02, 0.91, 1.30, 0.86, 1.05, 1.01, 0.97, 1.15)
    rows = [
        _row("gpt2:small:inference", 1.1, 1.2, 1.0, 1.0, host_us={models.CUDAGRAPHS: scattered}),
        _row("llama:small:train", 1.0, 1.1, 1.0, 1.0, host_us={models.NO_CUDAGRAPHS: slower}),
        {"block": "phi3:small:inference", "error": "x", "host_us": {models.CUDAGRAPHS: _host(*[2.0] * 12)}},
        _row("bert:small:inference", 1.0, 1.0, 1.0, 1.0, host_us={"stock": 200.0, "ours": 250.0}),
    ]
    result = models.summarize(rows, {})
    gpt2, llama, _, bert = result["rows"]
    assert gpt2["host_ratio_interval"] == {models.CUDAGRAPHS: [0.91, 1.15]}
    assert llama["host_ratio_interval"] == {models.NO_CUDAGRAPHS: [1.05, 1.1]}
    assert "host_ratio_interval" not in bert
    assert result["host_ratio_interval_low_max"] == 1.05
    assert models.summarize(rows[:1], {})["host_ratio_interval_low_max"] == 0.91
    assert models.summarize(rows[2:], {})["host_ratio_interval_low_max"] is None
    assert "median within 1.05-1.1 at 95%" in models._block_line(llama)
    # The ratio is the rounds' median, not the ratio of the sides' medians: rounds whose
    # host state both sides share can put those far apart (0.859 against rounds about
    # 0.99 in one H100 run). A mode without its rounds keeps the ratio it was written with.
    apart = {**_host(0.96, 0.99, 1.0, 0.98, 1.01, 0.97, 0.99), "stock": 1384.0, "ours": 1189.2}
    row = _row(
        "qwen2:small:inference", 1.0, 1.0, 1.0, 1.0, host_us={models.CUDAGRAPHS: apart, models.NO_CUDAGRAPHS: {}}
    )
    row["host_ratio"] = {models.CUDAGRAPHS: 0.8592, models.NO_CUDAGRAPHS: 1.02}
    (worked,) = models.summarize([row], {})["rows"]
    assert worked["host_ratio"] == {models.CUDAGRAPHS: 0.99, models.NO_CUDAGRAPHS: 1.02}
    assert worked["host_ratio_interval"] == {models.CUDAGRAPHS: [0.96, 1.01]}
    assert models.summarize([row], {})["host_ratio_max"] == 1.02


def test_wall_speedups_are_their_rounds_medians_with_an_interval_that_says_what_is_below_stock():
    """The wall figure is the host figure's statistic read the other way (stock / ours):
    the median of the rounds' ratios, not the ratio of the sides' medians (one H100 row's
    medians gave 0.851 where its rounds' median was 0.906), with the 95% interval of that
    median; the summary's ``wall_speedup_interval_high_min_*`` is the lowest high end
    (below 1: slower beyond the rounds' spread). A mode without rounds keeps the ratio it
    was written with, or else takes stock / ours of its times."""
    rounds = [0.9992, 0.401, 0.7923, 1.1618, 1.1586, 0.8561, 0.8999, 0.6289, 0.9112, 0.9828]
    noisy = {"stock": 0.1468, "ours": 0.1726, "round_ratios": rounds}
    slower = {"stock": 1.0, "ours": 1.1, "round_ratios": [0.90, 0.92, 0.91, 0.93, 0.89, 0.90, 0.92, 0.91]}
    row = _row(
        "gpt2:small:inference", 1.18, 1.07, 0.8505, 1.2, wall_ms={models.CUDAGRAPHS: noisy, models.NO_CUDAGRAPHS: {}}
    )
    faster = {"stock": 1.25, "ours": 1.0, "round_ratios": [1.2, 1.25, 1.3, 1.22, 1.28, 1.21, 1.27, 1.24]}
    slow = _row(
        "bert:small:inference", 1.0, 1.0, 1.0, 1.0, wall_ms={models.NO_CUDAGRAPHS: slower, models.CUDAGRAPHS: faster}
    )
    bare = {"block": "vit:small:inference", "wall_ms": {models.CUDAGRAPHS: {"stock": 2.0, "ours": 1.6}}}
    result = models.summarize([row, slow, bare], {})
    gpt2, bert, vit = result["rows"]
    assert gpt2["wall_speedup"] == {models.CUDAGRAPHS: 0.9056, models.NO_CUDAGRAPHS: 1.2}
    assert gpt2["wall_speedup_interval"] == {models.CUDAGRAPHS: [0.6289, 1.1586]}
    assert bert["wall_speedup"][models.NO_CUDAGRAPHS] == 0.91
    assert bert["wall_speedup_interval"] == {models.NO_CUDAGRAPHS: [0.89, 0.93], models.CUDAGRAPHS: [1.2, 1.3]}
    assert vit["wall_speedup"] == {models.CUDAGRAPHS: 1.25} and "wall_speedup_interval" not in vit
    assert result["wall_speedup_min_cudagraphs"] == 0.9056
    assert result["wall_speedup_interval_high_min_cudagraphs"] == 1.1586
    assert result["wall_speedup_interval_high_min_no_cudagraphs"] == 0.93
    assert "median within 0.6289-1.1586 at 95%" in models._block_line(gpt2)
    # The host figures are untouched by the wall's: no rounds of host time, no interval.
    assert "host_ratio_interval" not in gpt2 and result["host_ratio_interval_low_max"] is None


def test_combine_merges_partial_runs(tmp_path, capsys):
    first = models.summarize(
        [
            _row("gpt2:small:inference", 1.2, 1.3, 1.1, 0.9),
            {"block": "llama:small:inference", "error": "RuntimeError: out of time"},
        ],
        {"device": "H200", "torch": "2.11"},
    )
    second = models.summarize(
        [
            _row("llama:small:inference", 1.05, 1.1, 1.02, 0.95),
            {"block": "gpt2:small:inference", "host_us": {"stock": 300.0, "ours": 280.0}},
            {"block": "gpt2:small:inference", "error": "a later failure"},
        ],
        {"device": None, "torch": None},
    )
    paths = []
    for i, result in enumerate((first, second)):
        paths.append(str(tmp_path / f"part{i}.json"))
        models.write_json(result, paths[-1])
    out = tmp_path / "all.json"
    models.main(["--combine", *paths, "--json", str(out)])
    combined = json.loads(out.read_text())
    assert set(combined) == SUMMARY_KEYS and combined["device"] == "H200"
    assert [r["block"] for r in combined["rows"]] == ["gpt2:small:inference", "llama:small:inference"]
    gpt2, llama = combined["rows"]
    assert "error" not in gpt2 and gpt2["gpu_speedup"] == 1.2 and gpt2["host_us"] == {"stock": 300.0, "ours": 280.0}
    assert gpt2["device"] == "H200"  # a later file that names no card leaves the row's
    assert "error" not in llama and llama["gpu_speedup"] == 1.05
    assert combined["gpu_speedup_min"] == 1.05
    assert combined["gpu_speedup_geomean"] == pytest.approx((1.2 * 1.05) ** 0.5, abs=1e-4)
    assert "gpt2:small:inference" in capsys.readouterr().out


# --- the command line ------------------------------------------------------------------


def test_blocks_option_selects_and_refuses_unknown_families(capsys):
    args = models.parser().parse_args(["--blocks", "gpt2:prefill,qwen2:small,bert", "--runs", "inference,train"])
    assert args.blocks == [("gpt2", "prefill"), ("qwen2", "small"), ("bert", "prefill"), ("bert", "small")]
    picked = [b.name for b in models.select(args.blocks, args.runs)]
    assert picked == [
        "gpt2:prefill:inference",
        "gpt2:prefill:train",
        "qwen2:small:inference",
        "bert:prefill:inference",
        "bert:small:inference",
    ]
    default = models.parser().parse_args([])
    trained = [f for f in models.DEFAULT_FAMILIES if models.FAMILIES[f].train]
    assert len(models.select(default.blocks, default.runs)) == 2 * len(models.DEFAULT_FAMILIES) + 2 * len(trained)
    assert default.modes == [models.CUDAGRAPHS, models.NO_CUDAGRAPHS]
    for bad, message in (("gpt5:small", "unknown family 'gpt5'"), ("llama:huge", "unknown size 'huge'")):
        with pytest.raises(SystemExit):
            models.parser().parse_args(["--blocks", bad])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        models.parser().parse_args(["--runs", "inference,finetune"])
    assert "unknown run" in capsys.readouterr().err


def test_every_option_has_help():
    for action in models.parser()._actions:
        assert action.help, action.dest


# --- a whole run, GPU measurements faked ------------------------------------------------


class FakeProbe(models.GpuProbe):
    def synchronize(self):
        pass

    def wall_ms(self, steps):
        return {**{name: 2.0 if name == "stock" else 1.6 for name in steps}, "round_ratios": [1.2, 1.3]}

    def loop_ms(self, steps):
        return {name: 2.2 if name == "stock" else 2.0 for name in steps}

    def profile(self, steps):
        for step in steps.values():
            step()
        return {
            "stock": models.merge_profiles([_profile(("nvjet_tst_gemm", 0.3), ("triton_poi_fused_gelu_0", 0.05))]),
            "ours": models.merge_profiles([_profile(("kernel_cutlass_kernel_inductor_cutedsl_0", 0.28))]),
        }

    def launches(self, steps):
        for step in steps.values():
            step()
        return {name: {"graph_launches": 0.0, "kernel_launches": 3.0 if name == "stock" else 2.0} for name in steps}

    def host_us(self, steps, launches):
        assert launches == {"stock": 2.0, "ours": 1.0}
        assert set(steps) == {"stock", "ours"} and all(callable(step) for step in steps.values())
        return {"stock": 300.0, "ours": 280.0, "calls": {"stock": 20, "ours": 20}, "gpu_busy": True}

    def timeline(self, step):
        step()
        return [{"kernel": "nvjet_tst_gemm", "start_us": 0.0, "us": 30.0, "gap_us": 0.0}]


def run_on_cpu(blocks, path, compile_fn=lambda target, mode: target, **kw):
    """``run_blocks`` on the CPU: tiny float32 blocks, the fake probe's figures."""
    return models.run_blocks(
        blocks,
        list(models.MODES),
        path,
        probe=kw.pop("probe", None) or FakeProbe(),
        info=kw.pop("info", {"device": "cpu"}),
        device="cpu",
        dtype=torch.float32,
        scale=TINY,
        compile_fn=compile_fn,
        **kw,
    )


def test_a_training_row_holds_each_gradient_to_stocks_own_distance_from_eager(tmp_path):
    """Per output: where stock's compile is itself far from eager on a gradient (one that
    is a small difference of large terms), ours may differ from both by as much; where
    stock computes a gradient well, ours must too. Gradients are perturbed through hooks
    that see which side's compiled function ran the step."""
    from inductor_cutedsl.runtime import compiler

    compiler.wait_idle(timeout=600)
    side = {"now": "eager"}
    noise: dict = {}  # (side, parameter index) -> relative size of the noise added to its gradient

    def compile_fn(target, mode):
        name = "ours" if is_enabled() else "stock"
        params = list(target.parameters())
        for i, p in enumerate(params):
            if not hasattr(p, "_noised"):
                p._noised = True

                def hook(grad, i=i):
                    size = noise.get((side["now"], i), 0.0)
                    return grad + size * grad.norm() * torch.randn_like(grad) / grad.numel() ** 0.5 if size else grad

                p.register_hook(hook)

        def run(x):
            side["now"] = name
            return target(x)

        return run

    def row(stock_noise: dict, ours_noise: dict, path: str) -> dict:
        noise.clear()
        noise.update({("stock", i): n for i, n in stock_noise.items()})
        noise.update({("ours", i): n for i, n in ours_noise.items()})
        side["now"] = "eager"
        torch._dynamo.reset()
        return run_on_cpu([models.BlockId("llama", "small", "train")], path, compile_fn)["rows"][0]

    # Parameter 1's gradient: stock 100% off eager, ours as far off in another direction.
    noisy = row({1: 1.0}, {1: 1.0}, str(tmp_path / "noisy.json"))
    assert "error" not in noisy, noisy.get("error")
    assert noisy["rel_err_outputs"][3]["stock_vs_eager"] > 0.5  # outputs: loss, x's gradient, then parameters
    assert noisy["rel_err"]["ours_vs_stock"] > 0.5
    # Parameter 2's gradient: stock right, ours 10% off.
    wrong = row({1: 1.0}, {2: 0.1}, str(tmp_path / "wrong.json"))
    assert "AccuracyError" in wrong["error"] and "output 4" in wrong["error"]


def test_a_dumped_block_keeps_both_backends_wrappers_and_timelines(tmp_path):
    """With ``dump``, each block's wrapper code (what compiled through Inductor wrote)
    and the profiled mode's timeline of each backend go to one file per block, named in
    the row; without it, nothing is written."""
    import gzip

    dump = tmp_path / "dump"
    blocks = [models.BlockId("gpt2", "small", "inference")]
    (row,) = run_on_cpu(blocks, str(tmp_path / "a.json"), dump=str(dump))["rows"]
    assert row["dump"] == "gpt2-small-inference.json.gz"
    with gzip.open(dump / row["dump"], "rt") as f:
        dumped = json.load(f)
    assert dumped["block"] == "gpt2:small:inference" and set(dumped["wrappers"]) == set(models.BACKENDS)
    assert dumped["timelines"] == {b: FakeProbe().timeline(lambda: None) for b in models.BACKENDS}
    (plain_row,) = run_on_cpu(blocks, str(tmp_path / "b.json"))["rows"]
    assert "dump" not in plain_row and sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "dump"]


def test_the_tuning_log_holds_the_tuners_records_after_each_compiles_mark(tmp_path, capsys):
    """``--log-tuning``: Inductor's tuner records (DEBUG) go to the file, not the screen,
    each after the mark of the compile whose first call tuned: block, backend, mode, the
    first backend first."""
    import logging

    path = tmp_path / "tuning.log"
    handler = models.log_tuning(str(path))
    tuner = logging.getLogger(models.TUNING_LOGGERS[1])
    try:

        def compile_fn(target, mode):
            tuner.debug("tuned for %s %s", "ours" if is_enabled() else "stock", mode)
            return target

        blocks = [models.BlockId("gpt2", "small", "inference")]
        run_on_cpu(blocks, str(tmp_path / "a.json"), compile_fn, first="ours")
    finally:
        for name in (*models.TUNING_LOGGERS, models.tuning_log.name):
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = True
        handler.close()
    lines = [line.split(" ", 1)[1] for line in path.read_text().splitlines()]
    expected = []
    for side in ("ours", "stock"):
        for mode in sorted(models.MODES, key=models.uses_cudagraphs):
            expected += [f"benchmarks.models.tuning: gpt2:small:inference {side} {mode}"]
            expected += [f"{models.TUNING_LOGGERS[1]}: tuned for {side} {mode}"]
    assert lines == expected
    assert "tuned for" not in capsys.readouterr().err


def test_run_measures_every_block_and_goes_on_after_a_failure(tmp_path, capsys):
    blocks = [
        models.BlockId("gpt2", "small", "inference"),
        models.BlockId("llama", "small", "train"),
        models.BlockId("bert", "small", "inference"),
    ]
    compiled = []

    def compile_fn(target, mode):
        """No compile: the eager module, except for bert, whose "ours" is wrong."""
        compiled.append((type(target).__name__, mode, not is_enabled()))
        if isinstance(target, models.Block) and target.post_norm and is_enabled():
            return lambda x: target(x) * 1.5
        return target

    from inductor_cutedsl.runtime import compiler

    # Builds another test of this process left in flight would be waited for (and
    # counted) before the first block's timings: none may be.
    compiler.wait_idle(timeout=600)
    path = tmp_path / "models.json"
    result = run_on_cpu(blocks, str(path), compile_fn)
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    gpt2, llama, bert = result["rows"]
    assert gpt2["gpu_speedup"] == pytest.approx(350 / 280, abs=1e-4)
    # GPU figures from the mode whose choices both sides rank by GPU time; both modes kept.
    assert gpt2["profiled_mode"] == models.CUDAGRAPHS and set(gpt2["gpu_speedup_by_mode"]) == set(models.MODES)
    # Ours' decisions of each mode's compile, the profiled mode's among them.
    assert set(gpt2["decisions_by_mode"]) == set(models.MODES)
    assert all(set(d) == {"epilogue", "gated", "gemm"} for d in gpt2["decisions_by_mode"].values())
    assert gpt2["wall_speedup"] == {models.CUDAGRAPHS: 1.25, models.NO_CUDAGRAPHS: 1.25}
    assert set(gpt2["host_us"]) == set(models.MODES) and gpt2["host_us"][models.CUDAGRAPHS]["stock"] == 300.0
    assert gpt2["host_ratio"] == {mode: round(280 / 300, 4) for mode in models.MODES}
    assert result["host_ratio_max"] == round(280 / 300, 4) and gpt2["rel_err"]["ours_vs_stock"] == 0.0
    assert gpt2["wall_loop_speedup"] == {models.CUDAGRAPHS: 1.1, models.NO_CUDAGRAPHS: 1.1}
    assert gpt2["launches_per_call"][models.CUDAGRAPHS]["ours"] == {"graph_launches": 0.0, "kernel_launches": 2.0}
    assert set(gpt2["launches_per_call"]) == set(models.MODES)
    assert gpt2["host_state"]["builds_waited"] == 0 and gpt2["host_state"]["loadavg_1m"] >= 0
    assert gpt2["bound"] == 1.0 and gpt2["bound_note"]  # nothing compiled, so no wrapper code to read
    assert gpt2["gemm_kernels"]["ours"][0]["ours"] and not gpt2["gemm_kernels"]["stock"][0]["ours"]
    assert llama["run"] == "train" and llama["rel_err"]["ours_vs_eager"] == 0.0 and "error" not in llama
    assert "AccuracyError" in bert["error"] and bert["rel_err"]["ours_vs_stock"] > 0.1 and "gpu_us" not in bert
    assert result["gpu_speedup_min"] == pytest.approx(350 / 280, abs=1e-4)
    # Each backend compiled once per mode, the mode without CUDA graphs first, stock first.
    assert compiled[:4] == [
        ("Block", models.NO_CUDAGRAPHS, True),
        ("Block", models.CUDAGRAPHS, True),
        ("Block", models.NO_CUDAGRAPHS, False),
        ("Block", models.CUDAGRAPHS, False),
    ]
    assert compiled[4][0] == "ScalarLoss" and len(compiled) == 12
    out = capsys.readouterr().out
    assert "FAILED" in out and "gpt2:small:inference" in out and "gpu_speedup_geomean" in out
    assert f"wall {models.NO_CUDAGRAPHS} 1.25x (rounds 1.2-1.3)" in out
    assert is_enabled()


def test_transformers_rows_are_the_classes_users_compile(tmp_path):
    """The default rows are transformers' own classes, measured through the same steps
    (here eagerly, on the CPU): inference for every class, training for the decoders."""
    pytest.importorskip("transformers")
    from benchmarks import hf_blocks

    assert tuple(hf_blocks.FAMILIES) == models.DEFAULT_FAMILIES
    classes = {
        f: type(models.make_block(f, "small", "cpu", torch.float32, TINY)[0].model).__name__ for f in hf_blocks.FAMILIES
    }
    assert classes == {
        "hf-llama": "LlamaModel",
        "hf-mistral": "MistralModel",
        "hf-qwen2": "Qwen2Model",
        "hf-phi3": "Phi3Model",
        "hf-gpt2": "GPT2Model",
        "hf-bert": "BertModel",
        "hf-vit": "ViTModel",
    }
    phi3, _ = models.make_block("hf-phi3", "small", "cpu", torch.float32, TINY)
    assert phi3.model.layers[0].mlp.gate_up_proj.out_features == 2 * 8192 // TINY and len(phi3.model.layers) == 2
    qwen2, _ = models.make_block("hf-qwen2", "small", "cpu", torch.float32, TINY)
    assert qwen2.model.layers[0].self_attn.q_proj.bias is not None
    assert {f for f in hf_blocks.FAMILIES if models.FAMILIES[f].train} == {
        "hf-llama",
        "hf-mistral",
        "hf-qwen2",
        "hf-phi3",
        "hf-gpt2",
    }
    blocks = [models.BlockId("hf-llama", "small", "train"), models.BlockId("hf-vit", "small", "inference")]
    result = run_on_cpu(blocks, str(tmp_path / "hf.json"))
    for row in result["rows"]:
        assert "error" not in row, row["error"]
        assert row["rel_err"]["ours_vs_stock"] == 0.0 and row["gpu_speedup"] == pytest.approx(350 / 280, abs=1e-4)
    assert result["rows"][1]["tokens"] == 197


def test_compile_first_ours_compiles_ours_before_stock(tmp_path):
    compiled = []

    def compile_fn(target, mode):
        compiled.append((mode, not is_enabled()))
        return target

    result = run_on_cpu([models.BlockId("gpt2", "small", "inference")], None, compile_fn, first="ours")
    assert compiled == [
        (models.NO_CUDAGRAPHS, False),
        (models.CUDAGRAPHS, False),
        (models.NO_CUDAGRAPHS, True),
        (models.CUDAGRAPHS, True),
    ]
    assert result["rows"][0]["compiled_first"] == "ours" and is_enabled()
    assert models.parser().parse_args(["--compile-first", "ours"]).compile_first == "ours"


def test_a_resumed_run_keeps_earlier_rows_and_measures_the_rest(tmp_path):
    prior = [
        _row("gpt2:small:inference", 1.3, 1.4, 1.2, 1.0),
        {"block": "vit:small:inference", "error": "RuntimeError: cut short"},
    ]
    blocks = [models.BlockId("gpt2", "small", "inference"), models.BlockId("vit", "small", "inference")]

    def resumed(retry_failed):
        return run_on_cpu(blocks, str(tmp_path / "r.json"), info={}, prior=prior, retry_failed=retry_failed)

    assert resumed(retry_failed=False)["rows"] == prior  # a failed block counts as done
    result = resumed(retry_failed=True)
    gpt2, vit = result["rows"]
    assert gpt2 == prior[0] and "error" not in vit and vit["gpu_speedup"] == pytest.approx(1.25)
    assert result["gpu_speedup_min"] == pytest.approx(1.25) and result["gpu_speedup_geomean"] == pytest.approx(
        (1.3 * 1.25) ** 0.5, abs=1e-4
    )


def test_a_suite_resumed_on_another_card_names_the_card_of_each_row(tmp_path):
    """A suite spans device calls, and each call gets whichever card is lent: rows keep
    the card they ran on, rows of a file from before rows named one take the file's, and
    the summary names every card with its count of rows (one card: its name alone)."""
    earlier = models.summarize([_row("gpt2:small:inference", 1.3, 1.4, 1.2, 1.0)], {"device": "H200"})
    earlier["rows"][0].pop("device", None)  # written before rows named their card
    path = tmp_path / "earlier.json"
    models.write_json(earlier, str(path))
    blocks = [models.BlockId("gpt2", "small", "inference"), models.BlockId("vit", "small", "inference")]
    out = tmp_path / "next.json"
    result = run_on_cpu(blocks, str(out), info={"device": "H100"}, prior=models.stamped(json.loads(path.read_text())))
    assert [(r["block"], r["device"]) for r in result["rows"]] == [
        ("gpt2:small:inference", "H200"),
        ("vit:small:inference", "H100"),
    ]
    assert result["device"] == "H100 (1 row) and H200 (1 row)"
    assert json.loads(out.read_text())["device"] == result["device"]
    # Combined with a file of the same card's rows: the counts add up.
    models.write_json(
        models.summarize([_row("llama:small:inference", 1.0, 1.1, 1.0, 1.0)], {"device": "H100"}), str(path)
    )
    models.main(["--combine", str(out), str(path), "--json", str(out)])
    assert json.loads(out.read_text())["device"] == "H100 (2 rows) and H200 (1 row)"
    # One card, or rows that name none: the card alone.
    assert models.summarize([_row("gpt2:small:inference", 1, 1, 1, 1)], {"device": "H200"})["device"] == "H200"
    assert models.summarize([], {"device": "H200"})["device"] == "H200"


def test_a_budget_starts_only_the_blocks_expected_to_end_within_it(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(models, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: clock[0])}))

    def measure_block(bid, row, modes, probe, **kw):
        clock[0] += 250.0 if bid.run == "train" else 100.0
        row.update(gpu_us={"stock": 1.0, "ours": 1.0}, gpu_speedup=1.0)

    monkeypatch.setattr(models, "measure_block", measure_block)
    names = ["gpt2:small:inference", "llama:small:inference", "gpt2:small:train", "bert:small:inference"]
    result = models.run_blocks(
        [models.BlockId.parse(n) for n in names], list(models.MODES), None, info={}, budget=350.0
    )
    # The training block, expected to take twice the longest inference block, would end past the budget.
    assert [r["block"] for r in result["rows"]] == [names[0], names[1], names[3]]
    assert "not started (run again with --resume): gpt2:small:train" in capsys.readouterr().out


def test_wall_rounds_are_many_short_interleaved_windows_each_with_its_ratio(monkeypatch):
    """The wall figure's rounds: ``wall_rounds`` windows per side of ``wall_rep_ms`` of
    calls each, interleaved, and each round's stock / ours, in round order."""
    from inductor_cutedsl import timing

    reps, clock = [], iter(range(1, 1000))

    def bench(fn, rep=100, warmup=25):
        reps.append(rep)
        return fn() * next(clock)

    monkeypatch.setattr(timing, "bench", bench)
    probe = models.GpuProbe()
    wall = probe.wall_ms({"stock": lambda: 2.0, "ours": lambda: 1.0})
    assert reps == [probe.wall_rep_ms] * 2 * probe.wall_rounds and probe.wall_rounds >= 30
    ratios = wall["round_ratios"]
    assert len(ratios) == probe.wall_rounds
    # The clock ticks once a window: round 0 runs stock (2 x 1) then ours (1 x 2), round 1
    # ours (1 x 3) then stock (2 x 4).
    assert ratios[0] == round(2 * 1 / 2, 4) and ratios[1] == round(2 * 4 / 3, 4)


# --- on the GPU: the measurements themselves (no compile) ---------------------------------


@pytest.mark.gpu
def test_gpu_probe_measures_two_steps():
    a = torch.randn(1024, 1024, device="cuda").to(torch.bfloat16)
    steps = {"stock": lambda: [a @ a], "ours": lambda: [torch.relu(a @ a)]}
    probe = models.GpuProbe()
    wall = probe.wall_ms(steps)
    assert wall["stock"] > 0 and wall["ours"] > 0
    assert len(wall["round_ratios"]) == probe.wall_rounds and all(r > 0 for r in wall["round_ratios"])
    prof = probe.profile(steps)
    assert prof["stock"]["us"] > 0 and len(prof["ours"]["kernels"]) == len(prof["stock"]["kernels"]) + 1  # relu
    gemms = models.gemm_kernels(prof["stock"]["kernels"])
    assert gemms and not any(k["ours"] for k in gemms)  # cuBLAS, by its kernel's name
    host = probe.host_us(steps, {"stock": 1, "ours": 2})
    assert host["gpu_busy"] and host["stock"] > 0 and host["calls"] == {"stock": 20, "ours": 20}
    assert len(host["round_ratios"]) == probe.host_rounds and all(r > 0 for r in host["round_ratios"])


def test_launch_counts_tell_a_graph_replay_from_kernels_launched_one_by_one():
    """Runtime and driver launches both count as kernels; a replay counts apart; other
    API calls not at all; figures are per call."""
    events = [
        ("cudaGraphLaunch", 10),
        ("cuLaunchKernel", 30),
        ("cudaLaunchKernel", 10),
        ("cuLaunchKernelEx", 5),
        ("cudaLaunchKernelExC", 5),
        ("cudaMemcpyAsync", 40),
        ("cudaStreamSynchronize", 10),
    ]
    assert harness.launch_counts(events, 10) == {"graph_launches": 1.0, "kernel_launches": 5.0}
    assert harness.launch_counts([], 4) == {"graph_launches": 0.0, "kernel_launches": 0.0}


@pytest.mark.gpu
def test_launch_api_calls_count_a_replay_and_an_eager_step_as_the_profiler_names_them():
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)

    def eager():
        return torch.relu(a @ a) + 1

    eager_counts = harness.launch_api_calls(eager, calls=5)
    # relu and add through the runtime at least (cuBLAS may launch through either API).
    assert eager_counts["graph_launches"] == 0 and eager_counts["kernel_launches"] >= 2
    replay = harness.graphed(eager)
    assert harness.launch_api_calls(replay, calls=5) == {"graph_launches": 1.0, "kernel_launches": 0.0}


def _wrapper_reading_a_gemm_into(kernel: str) -> str:
    return f"""
    def call(self, args):
        arg0_1, arg1_1 = args
        buf0 = empty_strided_cuda((4, 4), (4, 1), torch.bfloat16)
        extern_kernels.mm(arg0_1, arg1_1, out=buf0)
        {kernel}.run(buf0, 16, stream=stream0)
        return (buf0, )
"""


def test_the_bound_reads_the_profiled_modes_wrapper_code(tmp_path):
    """Each mode's compile numbers its kernels apart: the bound's kernels (and the GEMMs
    a row lists) come from the wrapper of the mode whose profile the row reports, never
    from the other mode's, whose names would miss the profile or name other kernels."""
    from torch._inductor.graph import GraphLowering

    names = {models.CUDAGRAPHS: "triton_poi_fused_gelu_view_10", models.NO_CUDAGRAPHS: "triton_poi_fused_gelu_view_12"}
    ran = {}  # the mode of the compiled step called last

    def compile_fn(target, mode):
        def compiled(x):
            # The first call compiles: Inductor hands its wrapper to the hook, if one is set.
            if not compiled.done and GraphLowering.save_output_code is not None:
                GraphLowering.save_output_code(_wrapper_reading_a_gemm_into(names[mode]))
            compiled.done = True
            ran["mode"] = mode
            return target(x)

        compiled.done = False
        return compiled

    class ModeProfiles(FakeProbe):
        # The other mode's name is in each profile too, as another kernel: reading the
        # wrong wrapper changes the bound rather than only emptying it.
        def profile(self, steps):
            steps["stock"]()
            mode = ran["mode"]
            other = next(m for m in models.MODES if m != mode)
            return {
                "stock": models.merge_profiles([_profile((names[mode], 0.002), (names[other], 0.005))]),
                "ours": models.merge_profiles([_profile(("kernel_cutlass_kernel_inductor_cutedsl_0", 0.007))]),
            }

    block = models.BlockId("gpt2", "small", "inference")
    row = run_on_cpu([block], None, compile_fn=compile_fn, probe=ModeProfiles())["rows"][0]
    assert "error" not in row, row["error"]
    assert row["profiled_mode"] == models.CUDAGRAPHS
    assert [k["kernel"] for k in row["bound_kernels"]] == [names[models.CUDAGRAPHS]]
    assert row["bound"] == pytest.approx(7.0 / 5.0, abs=1e-4)
    assert row["gemm_sites"]["stock"] == [["extern", "mm"]]


@pytest.mark.gpu
def test_blocks_run_through_the_real_measurements_uncompiled(tmp_path):
    blocks = [models.BlockId("gpt2", "small", "inference"), models.BlockId("llama", "small", "train")]
    result = models.run_blocks(
        blocks, list(models.MODES), str(tmp_path / "gpu.json"), scale=4, compile_fn=lambda target, mode: target
    )
    for row in result["rows"]:
        assert "error" not in row, row["error"]
        assert row["gpu_us"]["stock"] > 0 and row["bound"] == 1.0
        assert set(row["host_us"]) == set(models.MODES) and all(h["gpu_busy"] for h in row["host_us"].values())
        assert set(row["wall_ms"]) == set(models.MODES) and row["rel_err"]["ours_vs_stock"] == 0.0
        # Uncompiled: every mode's step launches its kernels one by one.
        assert all(c["ours"]["kernel_launches"] > 0 for c in row["launches_per_call"].values())
    assert result["device"] == torch.cuda.get_device_name()


def test_quiet_waits_for_builds_still_in_flight(monkeypatch):
    """A build handed to a worker and not finished is waited for before timing."""
    import concurrent.futures
    import threading

    from inductor_cutedsl.runtime import compiler

    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(release.wait)
    monkeypatch.setitem(compiler._inflight, ("root", "key"), fut)
    threading.Timer(0.2, release.set).start()
    state = models.GpuProbe().quiet()
    assert fut.done() and state["builds_waited"] == 1 and state["waited_s"] >= 0.1
    pool.shutdown()


def test_loop_ms_times_back_to_back_calls_interleaved():
    calls = {"stock": 0, "ours": 0}

    def step(name):
        def run():
            calls[name] += 1
            time.sleep(0.002 if name == "stock" else 0.001)

        return run

    probe = FakeProbe()
    out = models.GpuProbe.loop_ms(probe, {n: step(n) for n in calls}, calls=5, rounds=2)
    assert calls == {"stock": 12, "ours": 12}  # a warm-up call and five timed, per round
    assert out["stock"] > out["ours"] > 0.9


def test_a_rows_fused_epilogues_and_decisions_are_the_profiled_modes():
    """Each mode's compile decides and fuses apart: the row's ``fused`` and ``decisions``
    (what its GPU figures rest on) are those of the mode it profiles, not of the mode
    compiled first."""
    from inductor_cutedsl.lowering import fair_timing
    from inductor_cutedsl.scheduler import scheduling

    def compile_fn(target, mode):
        def compiled(x):
            # ours' first call compiles: each mode records a decision and a fusion of its own
            if is_enabled() and not compiled.done:
                fair_timing.decisions.append({"mode": mode})
                scheduling.fused_epilogues.append({"ops": [mode]})
            compiled.done = True
            return target(x)

        compiled.done = False
        return compiled

    row = run_on_cpu([models.BlockId("gpt2", "small", "inference")], None, compile_fn=compile_fn)["rows"][0]
    assert "error" not in row, row["error"]
    profiled = row["profiled_mode"]
    assert profiled == models.CUDAGRAPHS and models.NO_CUDAGRAPHS in row["decisions_by_mode"]
    assert row["decisions"]["gemm"] == [{"mode": profiled}] == row["decisions_by_mode"][profiled]["gemm"]
    assert row["fused"] == [{"ops": [profiled]}]
