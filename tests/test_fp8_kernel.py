"""The kernel with 8-bit (e4m3) operands, compiled for sm_90a without a GPU: what it
accepts, and what its SASS does (fp8 wgmma; promotion of partial sums into fp32)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from test_epilogue_sass import sass_script_stats

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelSpec, gemm_reason

FP8 = "float8_e4m3fn"


def test_a_stage_holds_128_bytes_of_each_row_whatever_the_operand_width():
    cfg = GemmConfig(128, 256)
    assert (cfg.tile_k(2), cfg.tile_k(1)) == (64, 128)
    assert cfg.ab_stages(1, 2) == cfg.ab_stages(2, 2)


def test_promotion_needs_registers_for_a_second_accumulator():
    assert GemmConfig(128, 128).promotion_reason() is None
    assert GemmConfig(64, 128, pingpong=True).promotion_reason() is None
    assert "spill" in GemmConfig(128, 256).promotion_reason()
    # PROMOTE_ALTERNATE holds two partial-sum sets beside the accumulator.
    assert GemmConfig(128, 128).promotion_reason(3) is None
    assert GemmConfig(64, 128, pingpong=True).promotion_reason(3) is None
    assert "3 accumulators" in GemmConfig(128, 192).promotion_reason(3)
    # Stream-K promotes in every mode, as far as the registers go.
    assert all(GemmConfig(128, 128, stream_k=True).promotion_reason(p) is None for p in (1, 2, 3))
    assert "3 accumulators" in GemmConfig(128, 192, stream_k=True).promotion_reason(3)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"a_major": "m"}, "K-major"),
        ({"b_major": "n"}, "K-major"),
        ({"dual": True, "epilogue": E.gated("silu"), "b_major": "n"}, "K-major"),
        (
            {
                "dual": True,
                "epilogue": E.gated("silu", scales=("row", "row")),
                "promote": 1,
                "cfg": GemmConfig(128, 256),
            },
            "spill",
        ),
        ({"promote": 1, "ab_dtype": "bfloat16"}, "promote"),
        ({"promote": -1}, "promote"),
        ({"promote": 4}, "every k-tile"),
        ({"promote": 1, "cfg": GemmConfig(128, 256)}, "spill"),
    ],
)
def test_kernel_refuses_what_fp8_cannot_do(kwargs, needle):
    pytest.importorskip("cutlass")
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    args = {
        "cfg": GemmConfig(128, 128),
        "ab_dtype": FP8,
        "out_dtype": "bfloat16",
        "a_major": "k",
        "b_major": "k",
        "epilogue": E.IDENTITY,
    } | kwargs
    with pytest.raises(ValueError, match=needle):
        Sm90Gemm(**args)


def test_spec_keys_and_round_trips_the_promotion():
    fast = KernelSpec(GemmConfig(128, 128), FP8, "bfloat16", "k", "k", E.IDENTITY)
    promoted = KernelSpec(GemmConfig(128, 128), FP8, "bfloat16", "k", "k", E.IDENTITY, promote=1)
    assert fast.key() != promoted.key()
    assert KernelSpec.from_json(promoted.to_json()) == promoted
    assert KernelSpec.from_json(fast.to_json()) == fast and "promote" not in fast.to_json()


def test_runtime_refuses_fp8_without_k_major_operands_or_an_output_dtype(monkeypatch):
    from inductor_cutedsl.runtime import support

    monkeypatch.setattr(support, "_named_device_reason", lambda name, device: None)
    a = torch.randn(64, 128).to(torch.float8_e4m3fn)
    b_k = torch.randn(64, 128).to(torch.float8_e4m3fn).t()  # (K, N), K contiguous
    assert "out_dtype" in gemm_reason(a, b_k)
    assert gemm_reason(a, b_k, out_dtype=torch.bfloat16) is None
    b_n = torch.randn(128, 64).to(torch.float8_e4m3fn)
    assert "K-major" in gemm_reason(a, b_n, out_dtype=torch.bfloat16)
    # A dual kernel of fp8 operands takes the two products' scales, and only it does.
    row, one = torch.rand(64, 1), torch.tensor(0.5)
    scales = (row, torch.rand(1, 64), torch.rand(1, 64))
    assert "scales" in support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16)
    assert support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16, scales=scales) is None
    assert support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16, scales=(one, one, one)) is None
    assert "differ in mode" in support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16, scales=(row, one, scales[1]))
    assert "three tensors" in support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16, scales=scales[:2])
    assert "(64, 1)" in support.gated_reason(a, b_k, b_k, out_dtype=torch.bfloat16, scales=(row.t(), *scales[1:]))
    bf = torch.randn(64, 128, dtype=torch.bfloat16)
    bf_k = bf.t()
    assert "scales" in support.gated_reason(bf, bf_k, bf_k, scales=scales)
    assert support.gated_reason(bf, bf_k, bf_k) is None


SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime.compiler import export_object

    nvdisasm, root = sys.argv[1], Path(sys.argv[2])
    dump = Path(os.environ["CUTE_DSL_DUMP_DIR"])
    stats = {}
    # "0" / "1": a 128x128 tile without / with promotion; "wide": the widest tile the
    # promoting shortlist offers (two accumulators of 96 registers per thread).
    for name, cfg, promote in (("0", GemmConfig(128, 128, 2, 1), 0), ("1", GemmConfig(128, 128, 2, 1), 1),
                               ("wide", GemmConfig(128, 192, 2, 1), 1), ("halves", GemmConfig(128, 192, 2, 1), 2),
                               ("halves128", GemmConfig(128, 128, 2, 1), 2),
                               ("pingpong", GemmConfig(64, 192, 1, 2, pingpong=True), 1),
                               ("alternate", GemmConfig(128, 128, 2, 1), 3),
                               ("stream_k", GemmConfig(128, 128, stream_k=True), 1),
                               ("stream_k_alternate", GemmConfig(128, 128, stream_k=True), 3),
                               ("stream_k_halves", GemmConfig(128, 128, stream_k=True), 2),
                               ("dual_alternate", GemmConfig(128, 128, 1, 2), 3),
                               ("dual_fast", GemmConfig(128, 256, 2, 1, epi_n=64), 0),
                               ("scaled_tensor", GemmConfig(128, 128, 2, 1), 3),
                               ("scaled_row", GemmConfig(128, 128, 2, 1), 3)):
        for old in dump.glob("*"):
            old.unlink()
        # A dual kernel's epilogue: scales, relu (no FADD of its own) and the product.
        dual = name.startswith("dual")
        epi = E.gated("relu", rounding="bfloat16", scales=("row", "row")) if dual else E.IDENTITY
        if name.startswith("scaled_"):
            epi = E.scaled(name[7:], name[7:])
        spec = KernelSpec(cfg, "float8_e4m3fn", "bfloat16", "k", "k", epi, dual=dual, promote=promote)
        export_object(spec, root, f"fp8_{name}")
        (cubin,) = dump.glob("*.cubin")
        lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
        mma = [l for l in lines if "GMMA" in l]
        stats[name] = {
            "fp8_mma": sum(".E4M3.E4M3" in l for l in mma),
            "mma": len(mma),
            "scoreboarded_mma": sum("gsb0" in l for l in mma),
            "mma_from_zero": sum(", RZ," in l for l in mma),
            "fadd": sum(" FADD " in l for l in lines),
            "spill_stores": sum("STL" in l for l in lines),
            # Waits for wgmma batches: each drains the tensor pipe up to its count.
            "batch_waits": sum("WARPGROUP.DEPBAR" in l for l in lines),
            # ... of which those that leave one batch in flight.
            "waits_one_in_flight": sum("WARPGROUP.DEPBAR.LE gsb0, 0x1" in l for l in lines),
            # Plain global loads (the epilogue's operands; TMA loads are UTMALDG).
            "global_loads": sum("LDG.E" in l and "UTMALDG" not in l for l in lines),
        }
    print(json.dumps(stats))
""")


@pytest.fixture(scope="module")
def fp8_sass(tmp_path_factory) -> dict:
    pytest.importorskip("cutlass")
    return sass_script_stats(SCRIPT, tmp_path_factory.mktemp("fp8"))


def test_fp8_kernels_run_the_fp8_wgmma_and_promotion_adds_in_fp32(fp8_sass):
    fast, promoted = fp8_sass["0"], fp8_sass["1"]
    # A 128-element K tile is four 64x128x32 fp8 wgmmas per warpgroup, issued as one
    # batch: only its last waits on the scoreboard (a serialized loop marks all four).
    for s in (fast, promoted):
        assert s["mma"] == s["fp8_mma"] == 4 and s["scoreboarded_mma"] == 1 and s["spill_stores"] == 0, s
    assert fast["fadd"] == 0 and fast["mma_from_zero"] == 0, fast
    # 64 accumulator registers per thread (128x128 tile, two warpgroups), added once per
    # k-tile (the last k-tile's promotion leaves nothing to add after the loop); the
    # partial sums restart from zero in the k-tile's first wgmma.
    assert promoted["fadd"] == 64 and promoted["mma_from_zero"] == 1, promoted


def test_the_widest_promoting_tile_keeps_both_accumulators_in_registers(fp8_sass):
    """``GemmConfig.promotion_reason`` admits 128x192 (2 x 96 accumulator registers per
    thread) and the promoting shortlist puts it first: it must not spill."""
    wide = fp8_sass["wide"]
    assert wide["spill_stores"] == 0 and wide["fadd"] == 96 and wide["mma_from_zero"] == 1, wide


def test_the_promoting_pingpong_tile_keeps_both_accumulators_in_registers(fp8_sass):
    """64x192 pingpong (each warpgroup a whole tile: 2 x 96 accumulator registers per
    thread), which the promoting shortlist offers so that one warpgroup's epilogue runs
    while the other's wgmmas do: one scoreboarded batch of four 64x192x32 wgmmas per
    k-tile, 96 additions, no spills."""
    pp = fp8_sass["pingpong"]
    assert pp["mma"] == pp["fp8_mma"] == 4 and pp["scoreboarded_mma"] == 1, pp
    assert pp["spill_stores"] == 0 and pp["fadd"] == 96 and pp["mma_from_zero"] == 1, pp


def test_alternating_promotion_keeps_a_batch_in_flight_through_the_additions(fp8_sass):
    """PROMOTE_ALTERNATE at 128x128: the first k-tile's batch, two per loop turn and an
    odd last one (4 batches in the code), each of four 64x128x32 wgmmas scoreboarded
    once and restarting its set from zero; every addition in the loop and the odd
    tail's first one waits with the next batch still in flight (3 waits at 1), the
    last k-tile's sums once the pipe is empty (2 waits at 0, one per tail); 64
    additions per thread per add (5 in the code); three accumulators without spills.
    Without the asm pinning each read of a set after its wait, the compiler hoists
    copies of the in-flight set above the wait and ptxas serializes every wgmma."""
    alt = fp8_sass["alternate"]
    assert alt["mma"] == alt["fp8_mma"] == 16 and alt["scoreboarded_mma"] == 4, alt
    assert alt["mma_from_zero"] == 4 and alt["fadd"] == 5 * 64 and alt["spill_stores"] == 0, alt
    assert alt["batch_waits"] == 5 and alt["waits_one_in_flight"] == 3, alt


def test_promotion_by_halves_keeps_both_batches_pipelined_in_the_same_registers(fp8_sass):
    """PROMOTE_HALVES: per k-tile two batches of four 64x96x32 wgmmas (one per column
    half), each restarting from zero and scoreboarded once (ptxas serializes every
    wgmma when a batch is in flight across the loop's back edge or an instruction
    writes partial sums between batches); the additions per half in the loop and the
    last k-tile's second half after it; no more registers than PROMOTE_TILE's."""
    for name, per_half in (("halves", 48), ("halves128", 32)):
        halves = fp8_sass[name]
        assert halves["mma"] == halves["fp8_mma"] == 8 and halves["scoreboarded_mma"] == 2, halves
        assert halves["mma_from_zero"] == 2 and halves["fadd"] == 3 * per_half and halves["spill_stores"] == 0, halves
        # Two waits: for the first batch with the second in flight, then for the
        # second at the k-tile's end; none between the batches (ptxas injects one
        # where the code reads the first batch's sums before the second may issue).
        assert halves["batch_waits"] == 2, halves


@pytest.mark.parametrize("mode,plain", [("stream_k", "1"), ("stream_k_halves", "halves128"),
                                        ("stream_k_alternate", "alternate")])  # fmt: skip
def test_a_stream_k_kernel_promotes_its_whole_tiles_and_its_shares_as_a_plain_one(fp8_sass, mode, plain):
    """Stream-K (the last wave's k-iterations shared over every SM) in each promotion
    mode: the promoting mainloop twice (whole tiles, then shares), each as the plain
    128x128 kernel's (its wgmma batches, scoreboards, restarts from zero and waits with a
    batch in flight), its additions twice and the peers' partial sums besides; no
    spills. The alternating mode's MMA is made anew per call: one made once and set in
    the tile loop does not build in the share loop after it."""
    sk, one = fp8_sass[mode], fp8_sass[plain]
    for key in ("mma", "fp8_mma", "scoreboarded_mma", "mma_from_zero", "waits_one_in_flight"):
        assert sk[key] == 2 * one[key], (key, sk, one)
    assert sk["fadd"] > 2 * one["fadd"] and sk["spill_stores"] == 0, sk


def test_an_fp8_dual_kernel_multiplies_both_weights_in_fp8_and_promotes_both_halves(fp8_sass):
    """The gated dual kernel of e4m3 operands: a 128x128 MMA tile (64 gate and 64 up
    columns) promoting as ``PROMOTE_ALTERNATE`` does at 128x128 plain (the same wgmma
    batches and 64 additions per add: both halves' partial sums), and the widest dual
    tile (128x256, fast accumulation) one batch of four fp8 wgmmas per k-tile, no
    additions; neither spills."""
    alt, fast = fp8_sass["dual_alternate"], fp8_sass["dual_fast"]
    assert alt["mma"] == alt["fp8_mma"] == 16 and alt["scoreboarded_mma"] == 4, alt
    assert alt["mma_from_zero"] == 4 and alt["fadd"] == 5 * 64 and alt["spill_stores"] == 0, alt
    assert fast["mma"] == fast["fp8_mma"] == 4 and fast["scoreboarded_mma"] == 1, fast
    assert fast["fadd"] == 0 and fast["spill_stores"] == 0, fast


def test_scaled_epilogue_reads_scales_as_the_mode_says():
    epi = E.scaled("row", "tensor", "bfloat16")
    assert [(op.name, op.kind, op.dtype) for op in epi.operands] == [
        ("scale_a", "col", "float32"),
        ("scale_b", "one", "float32"),
        ("bias", "row", "bfloat16"),
    ]
    assert "acc * ops[0] * ops[1] + ops[2]" in epi.source
    assert E.scaled("tensor", "row").operands[0].kind == "one"  # one value: zero strides every way
    assert E.scaled("tensor", "tensor", None, scale_result=True).operands[2].kind == "one"


def test_a_tensor_wise_scale_is_loaded_once_per_thread(fp8_sass):
    """A tensor-wise scale's strides are zero at compile time (``one``): each thread
    loads each scale once, where zero strides known only at launch had it load one per
    accumulator column (64 loads for two scales). Row-wise, a thread loads A's scale
    for its 2 rows and B's for its 32 columns of a 128x128 tile."""
    assert fp8_sass["scaled_tensor"]["global_loads"] == 2, fp8_sass["scaled_tensor"]
    assert fp8_sass["scaled_row"]["global_loads"] == 2 + 32, fp8_sass["scaled_row"]
    with pytest.raises(ValueError, match="scale_b mode"):
        E.scaled("row", "block")


def test_scaled_refusals_name_what_is_wrong(monkeypatch):
    from inductor_cutedsl.runtime import scales_reason, support

    monkeypatch.setattr(support, "_named_device_reason", lambda name, device: None)
    m, n, k = 64, 128, 256
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    one, rows, cols = torch.ones(()), torch.ones(m, 1), torch.ones(1, n)
    assert scales_reason(a, b, one, one) is None
    assert scales_reason(a, b, rows, cols, torch.ones(n, dtype=torch.bfloat16)) is None
    assert scales_reason(a, b, rows, one) is None  # each scale has its own mode
    assert "scales" in scales_reason(a, b, torch.ones(m, 2), cols)  # block-wise: refused
    assert "scales" in scales_reason(a, b, rows.double(), cols)
    assert "bias" in scales_reason(a, b, one, one, torch.ones(n + 1, dtype=torch.bfloat16))
    assert "fp8" in scales_reason(a.to(torch.bfloat16), b.to(torch.bfloat16), one, one)
    assert "K-major" in scales_reason(a, b.contiguous(), one, one)
    e4m3 = torch.float8_e4m3fn
    assert scales_reason(a, b, one, one, None, e4m3, torch.tensor(4.0)) is None
    assert "only an fp8 output" in scales_reason(a, b, one, one, None, torch.bfloat16, torch.tensor(4.0))
    assert "one fp32 value" in scales_reason(a, b, one, one, None, e4m3, torch.ones(2))


@pytest.mark.parametrize("promote", [0, 1, 3])
def test_scaled_fp8_kernels_compile_and_export(promote, tmp_path):
    pytest.importorskip("cutlass")
    from inductor_cutedsl.runtime import KernelCache
    from inductor_cutedsl.runtime.compiler import build

    spec = KernelSpec(
        GemmConfig(128, 128, 2, 1), FP8, "bfloat16", "k", "k", E.scaled("row", "row", "bfloat16"), promote=promote
    )
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.read_bytes()[:4] == b"\x7fELF"


def test_loaded_fp8_entry_marshals_the_launchers_arguments(tmp_path):
    """Without a GPU: an exported fp8 kernel (scales, bias, fp8 output) loads and the DSL
    accepts the argument list ``CompiledGemm`` builds for it (as for 16-bit kernels in
    test_compile)."""
    pytest.importorskip("cutlass")
    from test_compile import assert_entry_takes

    spec = KernelSpec(GemmConfig(128, 128), FP8, FP8, "k", "k", E.scaled("row", "tensor", "bfloat16"), promote=1)
    values = [0x1000, 0x2000, 0x3000, 64, 64, 128, 1, 128, 128, 64, 0, 0, 0, 1, 0]  # ..., clusters, programmatic
    values += [0x4000, 1, 0, 0] + [0x5000, 0, 0, 0] + [0x6000, 0, 1, 0] + [0]  # scales, bias, stream
    assert_entry_takes(spec, values, tmp_path)


def test_scaled_epilogue_with_a_result_scale_divides_last():
    """torch._scaled_mm divides an fp8 output by scale_result (its CPU kernel: the
    output over the product reads 4.0 for scale_result 0.25, 0.25 for 4.0)."""
    epi = E.scaled("tensor", "tensor", "bfloat16", scale_result=True)
    assert [op.name for op in epi.operands] == ["scale_a", "scale_b", "bias", "scale_result"]
    assert "fdiv(acc * ops[0] * ops[1] + ops[2], ops[3])" in epi.source and epi.name.endswith("_sr")
    assert "fdiv(acc * ops[0] * ops[1], ops[2])" in E.scaled("row", "row", scale_result=True).source


def output_factor(device: str, scale_result: float | None, out_dtype: torch.dtype) -> float:
    """The factor ``torch._scaled_mm`` applies to the product, by least squares against
    it in float64 (unit scales; ``scale_result`` as given)."""
    torch.manual_seed(0)
    a = torch.randn(64, 128, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(64, 128, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    kw = {} if scale_result is None else {"scale_result": torch.tensor(scale_result, device=device)}
    y = torch._scaled_mm(a, b, one, one, out_dtype=out_dtype, **kw).double()
    ref = a.double() @ b.double()
    return ((y * ref).sum() / (ref * ref).sum()).item()


def test_torch_divides_an_fp8_output_by_scale_result_and_ignores_it_otherwise():
    """The semantics ``scaled`` follows, read from torch's own CPU kernel: if a torch
    release changes them, this fails before a GPU run disagrees."""

    def factor(out_dtype, sr):
        try:
            return output_factor("cpu", sr, out_dtype)
        except (RuntimeError, NotImplementedError) as exc:  # a build without the CPU kernel
            pytest.skip(f"torch._scaled_mm on CPU: {exc}")

    assert factor(torch.float8_e4m3fn, 0.25) == pytest.approx(4.0, rel=0.02)
    assert factor(torch.float8_e4m3fn, 4.0) == pytest.approx(0.25, rel=0.02)
    assert factor(torch.bfloat16, 4.0) == pytest.approx(1.0, rel=0.01)
