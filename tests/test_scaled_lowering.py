"""``aten._scaled_mm`` (fp8) lowered to our kernel for a faked H200 (no GPU needed):
candidates with the scales and bias in the epilogue, pointwise consumers fused after
them, and refusals that leave the op to ATen with the reason logged."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from fake_hopper import generated_code, launched
from test_fusion_codegen import backend, kernels
from test_lowering import graph  # noqa: F401  (the fixture)

from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.kernels.config import promotion_mode

M, N, K = 1000, 2048, 1024
E4M3 = torch.float8_e4m3fn


@pytest.fixture(autouse=True)
def fp8_on():
    from inductor_cutedsl import config

    with config.patch(fp8=True):
        yield


def test_fp8_candidates_can_be_turned_off(caplog):
    from inductor_cutedsl import config

    with config.patch(fp8=False), caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"), backend():
        code = generated_code(
            lambda a, w, sa, sb: scaled_mm(a, w, sa, sb, out_dtype=torch.bfloat16),
            (M, K),
            (N, K),
            (),
            (),
            backends="CUTEDSL,ATEN",
        )
    assert kernels(code)[0] == 0 and "extern_kernels._scaled_mm" in code
    assert any("INDUCTOR_CUTEDSL_FP8" in r.getMessage() for r in caplog.records)
    with config.patch(fp8=False), backend():
        code = generated_code(lambda x, w: (x @ w.t()).clamp(-448.0, 448.0).to(E4M3), (M, K), (N, K))
    assert launched(code, 0)["spec"].out_dtype == "bfloat16" and kernels(code) == (1, 1)


def scaled_mm(a, w, sa, sb, **kwargs):
    """The graph a quantized Linear makes: fp8 casts, then _scaled_mm with B = W^T."""
    return torch._scaled_mm(a.to(E4M3), w.to(E4M3).t(), sa.float(), sb.float(), **kwargs)


def test_row_wise_scales_are_the_epilogue_of_a_promoting_fp8_kernel():
    with backend():
        code = generated_code(
            lambda a, w, sa, sb: scaled_mm(a, w, sa, sb, out_dtype=torch.bfloat16),
            (M, K),
            (N, K),
            (M, 1),
            (1, N),
            backends="CUTEDSL,ATEN",
        )
    assert kernels(code)[0] == 1
    spec = launched(code, 0)["spec"]
    assert (spec.ab_dtype, spec.a_major, spec.b_major) == ("float8_e4m3fn", "k", "k")
    assert spec.promote == promotion_mode(spec.config) != 0
    assert spec.epilogue.name == "scaled_row_row"
    assert [op.kind for op in spec.epilogue.operands] == ["col", "row"]
    assert "_launch(a, b, out_ptr0, scale_a, scale_b, stream=stream)" in code


def test_each_promoting_candidate_takes_the_mode_its_registers_allow():
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.kernels.config import PROMOTE_ALTERNATE, PROMOTE_TILE, GemmConfig
    from inductor_cutedsl.lowering.gemm_choices import candidate_specs

    # Three accumulators fit a 128x128 cooperative tile (64 registers each), not a 128x192 one.
    assert promotion_mode(GemmConfig(128, 128)) == PROMOTE_ALTERNATE
    assert promotion_mode(GemmConfig(128, 192)) == PROMOTE_TILE
    for m, n, k in ((1024, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096)):
        promoting = candidate_specs((m, n, k, 1), "float8_e4m3fn", "bfloat16", "k", "k", E.scaled("row", "row"), True)
        modes = {(s.config.tile_m, s.config.tile_n): s.promote for s in promoting}
        assert modes[(128, 192)] == PROMOTE_TILE and modes[(128, 128)] == PROMOTE_ALTERNATE, modes
        assert all(s.config.promotion_reason(s.promote) is None for s in promoting)
        fast = candidate_specs((m, n, k, 1), "float8_e4m3fn", "bfloat16", "k", "k", E.scaled("row", "row"), False)
        assert fast and all(s.promote == 0 for s in fast)


def test_tensor_wise_scales_bias_and_consumers_fuse_with_fast_accumulation():
    def fn(a, w, sa, sb, c, r):
        y = scaled_mm(a, w, sa, sb, bias=c, out_dtype=torch.bfloat16, use_fast_accum=True)
        return F.gelu(y, approximate="tanh") + r

    with backend():
        code = generated_code(fn, (M, K), (N, K), (), (), (N,), (M, N), backends="CUTEDSL,ATEN")
    assert kernels(code)[0] == 1 and "extern_kernels._scaled_mm" not in code
    spec = launched(code, 0)["spec"]
    assert spec.promote == 0 and spec.epilogue.name.startswith("scaled_tensor_tensor_bias_bfloat16")
    assert "tanh" in spec.epilogue.source, "the GELU runs in the scaled kernel's epilogue"
    assert [op.name for op in spec.epilogue.operands][:3] == ["scale_a", "scale_b", "bias"]


def test_an_fp8_output_is_stored_by_the_kernel():
    with backend():
        code = generated_code(
            lambda a, w, sa, sb: scaled_mm(a, w, sa, sb, out_dtype=E4M3),
            (M, K),
            (N, K),
            (),
            (),
            backends="CUTEDSL,ATEN",
        )
    spec = launched(code, 0)["spec"]
    assert (spec.ab_dtype, spec.out_dtype) == ("float8_e4m3fn", "float8_e4m3fn")


def test_a_cast_to_fp8_for_the_next_layer_fuses_into_a_bf16_gemm():
    def quantized(x, w):
        y = torch.relu(x @ w.t())
        return (y * 0.25).clamp(-448.0, 448.0).to(E4M3)

    with backend():
        code = generated_code(quantized, (M, K), (N, K))
    assert kernels(code) == (1, 0)
    spec = launched(code, 0)["spec"]
    assert (spec.ab_dtype, spec.out_dtype) == ("bfloat16", "float8_e4m3fn")
    assert "round_to(" in spec.epilogue.source and "'float8_e4m3fn'" in spec.epilogue.source


@pytest.mark.parametrize(
    "kwargs,shapes,needle",
    [
        ({"out_dtype": torch.bfloat16, "scale_result": torch.ones(())}, [(), ()], "scale_result"),
        ({"out_dtype": torch.bfloat16}, [(M, K // 128), (K // 128, N)], "not block-wise"),
    ],
    ids=["scale_result", "block_wise"],
)
def test_refusals_leave_the_op_to_aten_and_say_why(kwargs, shapes, needle, caplog):
    with caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"), backend():
        code = generated_code(
            lambda a, w, sa, sb: scaled_mm(a, w, sa, sb, **kwargs), (M, K), (N, K), *shapes, backends="CUTEDSL,ATEN"
        )
    assert kernels(code)[0] == 0 and "extern_kernels._scaled_mm" in code
    assert any(needle in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_scale_modes_and_the_scales_refused(graph):  # noqa: F811  (the fixture imported above)
    from test_lowering import FakeNode

    from inductor_cutedsl.lowering import gemm_choices as gc

    fp32 = torch.float32
    assert gc.operand_scale_mode("scale_a", FakeNode((M, 1), (1, 1), fp32), (M, 1)) == "row"
    assert gc.operand_scale_mode("scale_b", FakeNode((1, N), (N, 1), fp32), (1, N)) == "row"
    for shape in [(), (1,), (1, 1)]:
        assert gc.operand_scale_mode("scale_a", FakeNode(shape, [1] * len(shape), fp32), (M, 1)) == "tensor"
    with pytest.raises(Unsupported, match="not block-wise"):
        gc.operand_scale_mode("scale_a", FakeNode((M, K // 128), (K // 128, 1), fp32), (M, 1))
    with pytest.raises(Unsupported, match="fp32 scales"):
        gc.operand_scale_mode("scale_a", FakeNode((M, 1), (1, 1), torch.float8_e8m0fnu), (M, 1))


def test_an_fp8_cast_of_rows_not_whole_16_byte_units_stays_outside():
    """N = 1048: bf16 rows of 2096 bytes are whole 16-byte units, fp8 rows of 1048 are
    not. Padded to a 1152-byte stride, the fp8 output passes the stride rule, but the
    TMA store would write its columns 1048-1055: the cast is not fused."""
    from torch._inductor import config as inductor_config

    def quantized(x, w):
        return (x @ w.t()).clamp(-448.0, 448.0).to(E4M3)

    with backend(), inductor_config.patch(comprehensive_padding=True, pad_outputs=True):
        code = generated_code(quantized, (M, K), (1048, K))
    assert "empty_strided_cuda((1000, 1048), (1152, 1), torch.float8_e4m3fn)" in code
    spec = launched(code, 0)["spec"]
    assert spec.out_dtype == "bfloat16" and kernels(code) == (1, 1)


def test_torch_215_scaled_mm_v2_is_refused_by_name_and_runs_as_stock(caplog):
    """torch 2.15's ``F.scaled_mm`` lowers ``aten._scaled_mm_v2``, which asks for choices
    under ``_scaled_mm``'s name with scale lists and recipes in its arguments: it is
    refused as what it is, and compiles as stock compiles it."""
    from torch._inductor.kernel import mm

    if not hasattr(mm, "tuned_scaled_mm_v2"):
        pytest.skip("this Inductor asks no GEMM backend for _scaled_mm_v2 choices (before 2.15)")
    from torch.nn.functional import ScalingType

    def v2(a, w, sa, sb):
        return F.scaled_mm(
            a.to(E4M3), w.to(E4M3).t(), sa.float(), ScalingType.TensorWise, sb.float(), ScalingType.TensorWise
        )

    with caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"), backend():
        code = generated_code(v2, (M, K), (N, K), (), (), backends="CUTEDSL,ATEN")
    assert kernels(code)[0] == 0 and "_scaled_mm_v2" in code
    refusals = [r.getMessage() for r in caplog.records if "scaled_mm" in r.getMessage()]
    assert any("torch._scaled_mm_v2 (F.scaled_mm) gets no CuteDSL candidates" in m for m in refusals), refusals
