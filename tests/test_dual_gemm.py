"""The dual (gated) GEMM without a GPU: every dual config and activation compiles and
exports for sm_90a, its SASS neither spills nor loses the mainloop's overlap, its key
is its own, and the kernel and runtime refuse what it cannot do. (Its entry's
arguments: ``test_compile.test_loaded_entry_marshals_the_launchers_arguments``.)"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig, dual_shortlist
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build

# The tile shapes and schedules ``dual_shortlist`` chooses from, each with a cluster
# that multicasts B's two halves (c2x1) or A (c1x2).
DUAL_CONFIGS = [
    GemmConfig(128, 256, 2, 1, False, True, 8, 64),
    GemmConfig(64, 256, 2, 1, True, True, 8),
    GemmConfig(128, 128, 1, 2, True, False, 8),
    GemmConfig(128, 128, 2, 1, False, True, 1),
]
SHAPES = [(4096, 8960, 1536), (1000, 1032, 1024), (256, 8960, 1536), (256, 1024, 1024), (8192, 14336, 4096)]


def dual_spec(cfg, epi, a_major="k", b_major="k", ab="bfloat16", out="bfloat16") -> KernelSpec:
    return KernelSpec(cfg, ab, out, a_major, b_major, epi, dual=True)


@pytest.mark.parametrize("act", E.GATED_ACTIVATIONS)
@pytest.mark.parametrize("cfg", DUAL_CONFIGS, ids=lambda c: c.name())
def test_dual_configs_compile_and_export(cfg, act, tmp_path):
    # The majors rotate: each config meets both majors of A and of B.
    i = DUAL_CONFIGS.index(cfg) + E.GATED_ACTIVATIONS.index(act)
    spec = dual_spec(cfg, E.gated(act), "km"[i % 2], "kn"[i // 2 % 2])
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize(
    "epi,ab,out",
    [
        (E.gated("silu", "bfloat16", "bfloat16", "bfloat16"), "bfloat16", "bfloat16"),
        (E.gated("gelu_tanh", "float32", None, "float16", "float16"), "float16", "float16"),
        (E.gated("relu", None, "bfloat16"), "bfloat16", "float32"),
    ],
    ids=["biases_keep", "fp16_round_keep", "fp32_out"],
)
def test_dual_operands_and_dtypes_compile(epi, ab, out, tmp_path):
    path, built = build(dual_spec(DUAL_CONFIGS[0], epi, "m", "n", ab, out), KernelCache(tmp_path))
    assert built and path.read_bytes()[:4] == b"\x7fELF"


def gated_then_residual() -> E.Epilogue:
    """What fusion makes of a gated MLP's product with a consumer after it: gate and up
    rounded to bf16 (as two GEMM outputs would be), the bf16 product, plus a residual
    (a paired M x N input). Operands: the gate's bias, the residual."""
    base = E.gated("silu", "bfloat16", None, None, "bfloat16")
    return E.Epilogue(
        "gated+residual",
        base.source.replace("def epilogue(", "def _gated(") + "def epilogue(acc, m, n, l, ops):\n"
        "    return round_to(_gated(acc, m, n, l, ops[:1]), 'bfloat16') + ops[1]\n",
        (*base.operands, E.EpilogueOperand("r", "full", "bfloat16", pairs=True)),
    )


def test_a_pointwise_chain_composes_after_the_gated_product(tmp_path):
    """The gated product stands where a plain kernel's accumulator value does: a chain
    after it compiles into the same kernel."""
    spec = dual_spec(DUAL_CONFIGS[2], gated_then_residual())
    path, built = build(spec, KernelCache(tmp_path))
    assert built
    # What it computes (runtime.reference, float64): silu of the rounded gate times the
    # rounded up, rounded as the product's bf16 buffer, plus the residual.
    from inductor_cutedsl.runtime import reference

    m, n, k = 16, 64, 32
    a, b_gate, b_up = (torch.randn(*shape).to(torch.bfloat16) for shape in ((m, k), (k, n), (k, n)))
    bias, r = torch.randn(n).to(torch.bfloat16), torch.randn(m, n).to(torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.float64)
    reference.run(spec, a, b_gate, out, [bias, r], b_up=b_up, dtype=torch.float64)
    gate = (a.double() @ b_gate.double() + bias.double()).to(torch.bfloat16).double()
    up = (a.double() @ b_up.double()).to(torch.bfloat16).double()
    want = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16).double() + r.double()
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_dual_shortlist_stays_in_the_compiled_shapes():
    classes = {(c.tile_m, c.tile_n, c.pingpong) for c in DUAL_CONFIGS}
    for shape in SHAPES:
        picks = dual_shortlist(*shape)
        assert picks, shape
        for cfg in picks:
            assert cfg.invalid_reason() is None and cfg.dual_reason() is None, cfg
            assert (cfg.tile_m, cfg.tile_n, cfg.pingpong) in classes, cfg
    # A 128 x 256 MMA tile (128 x 128 out) first where it gives every SM work; 128 x 128
    # MMA tiles (64 columns out) first where it would not.
    assert dual_shortlist(4096, 8960, 1536)[0].tile_n == 256
    assert dual_shortlist(256, 1024, 1024)[0].tile_n == 128


def test_a_decode_sized_gated_product_under_cuda_graphs_leads_with_a_stream_k_dual_tile():
    """At M <= 64 under CUDA graphs, the dual shortlist leads with a stream-K 128x128 MMA
    tile (64 output columns, as the plain shortlist's 128x64 one) where its tiles leave
    SMs without work (8192 and 8960 wide: 128 tiles, and a wave and 8); not without
    graphs, not at 65 rows, not where a second wave fills most SMs (14336: 224 tiles)."""
    stream_k = GemmConfig(128, 128, 1, 1, False, False, 1, stream_k=True)
    assert stream_k.invalid_reason() is None and stream_k.dual_reason() is None
    for m, n in ((1, 8192), (16, 8960), (64, 2048)):
        assert dual_shortlist(m, n, 2048, graphs=True)[0] == stream_k, (m, n)
        assert not any(c.stream_k for c in dual_shortlist(m, n, 2048, limit=64)), (m, n)
    for m, n in ((65, 2048), (16, 14336)):
        assert not any(c.stream_k for c in dual_shortlist(m, n, 2048, limit=64, graphs=True)), (m, n)


def test_dual_is_in_the_key_and_the_json():
    plain = KernelSpec(DUAL_CONFIGS[0], "bfloat16", "bfloat16", "k", "k", E.gated("silu"))
    dual = dataclasses.replace(plain, dual=True)
    assert plain.key() != dual.key() and plain.symbol() != dual.symbol()
    assert "dual" in dual.describe() and "dual" not in plain.describe()
    assert KernelSpec.from_json(dual.to_json()) == dual
    # A single-GEMM spec's JSON (what generated code embeds) is unchanged: no new field.
    assert "dual" not in json.loads(plain.to_json())
    assert KernelSpec.from_json(plain.to_json()) == plain


@pytest.mark.parametrize(
    "cfg,epi,needle",
    [
        (GemmConfig(128, 192), E.gated("silu"), "tile_n"),
        (GemmConfig(128, 64), E.gated("silu"), "tile_n"),
        (GemmConfig(128, 256, 2, 1), E.IDENTITY, "epilogue of"),
        (
            GemmConfig(128, 256, 2, 1, epi_n=64),
            E.Epilogue(
                "staged",
                "def epilogue(acc, m, n, l, ops):\n    return acc[0] * ops[0]\n",
                (E.EpilogueOperand("r", "full", "bfloat16", staged=True),),
            ),
            "staged",
        ),
    ],
    ids=["tile_n_192", "tile_n_64", "identity", "staged"],
)
def test_kernel_refuses_what_a_dual_kernel_cannot_do(cfg, epi, needle):
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    with pytest.raises(ValueError, match=needle):
        Sm90Gemm(cfg, "bfloat16", "bfloat16", "k", "k", epi, dual=True)


def test_gated_epilogue_source():
    epi = E.gated("gelu_erf", "bfloat16", "float32", "bfloat16", "bfloat16")
    assert [(op.name, op.kind, op.dtype) for op in epi.operands] == [
        ("bias_gate", "row", "bfloat16"),
        ("bias_up", "row", "float32"),
        ("gate", "out", "bfloat16"),
        ("up", "out", "bfloat16"),
    ]
    assert "return gelu_erf(gate) * up, gate, up" in epi.source
    assert E.gated("relu").source.endswith("return relu(gate) * up\n")
    with pytest.raises(ValueError, match="activation"):
        E.gated("tanh")


@pytest.fixture
def any_device(monkeypatch):
    """CPU tensors pass the device rule, so the other refusals can be checked here."""
    from inductor_cutedsl.runtime import support

    monkeypatch.setattr(support, "device_reason", lambda device: None)


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda a, w: (a, *w.chunk(2, 1)), None),
        (lambda a, w: (a, *w.t().contiguous().t().chunk(2, 1)), None),
        (lambda a, w: (a.new_zeros(1000, 1020), *(x[:1020] for x in w.chunk(2, 1))), "leading stride"),
        (lambda a, w: (a, w[:, :1000], w[:, 1004:2004]), "base pointer"),
        (lambda a, w: (a, *w.float().chunk(2, 1)), "dtypes"),
        (lambda a, w: (a, w[:, :1024], w[:, :1024].t().contiguous().t()), "major"),
        (lambda a, w: (a, w[:, :1024], w[:, 1024:2040]), "shape"),
    ],
    ids=["fused_n_major", "fused_k_major", "misaligned_a", "misaligned_up", "dtype", "majors", "shapes"],
)
def test_gated_reason(any_device, make, needle):
    from inductor_cutedsl.runtime import gated_reason

    a = torch.randn(1000, 1024, dtype=torch.bfloat16)
    w = torch.randn(1024, 2048, dtype=torch.bfloat16)
    reason = gated_reason(*make(a, w))
    assert (reason is None) if needle is None else needle in (reason or ""), reason


def test_gated_gemm_refuses_with_value_errors(any_device):
    from inductor_cutedsl.runtime import gated_gemm

    a = torch.randn(1000, 1024, dtype=torch.bfloat16)
    bg, bu = torch.randn(1024, 2048, dtype=torch.bfloat16).chunk(2, 1)
    bias = torch.randn(1024, dtype=torch.bfloat16)
    cases = {
        "activation": dict(act="tanh"),
        "broadcast": dict(bias_gate=torch.randn(1000, dtype=torch.bfloat16)),
        "tensors of": dict(bias_up=torch.randn(1024, dtype=torch.float64)),
        "must be a bfloat16": dict(
            keep_out=(torch.empty(1000, 1024, dtype=torch.bfloat16), torch.empty(1000, 1024, dtype=torch.float16))
        ),
        "two tensors": dict(keep_out=(torch.empty(1000, 1024, dtype=torch.bfloat16),)),
        "is broadcast": dict(keep_out=(torch.empty(1024, dtype=torch.bfloat16),) * 2),
        "tile_n": dict(config=GemmConfig(128, 192)),
        "output shape": dict(out=torch.empty(1000, 1032, dtype=torch.bfloat16)),
        "is not 16-byte": dict(out=torch.empty(1000, 1040, dtype=torch.bfloat16)[:, 1:1025]),
    }
    for needle, kwargs in cases.items():
        with pytest.raises(ValueError, match="cannot run this gated GEMM") as info:
            gated_gemm(a, bg, bu, **{"bias_gate": bias, **kwargs})
        assert needle in str(info.value), (needle, str(info.value))


def test_gated_gemm_pairs_kept_outputs_where_their_layouts_allow(any_device, monkeypatch):
    """Kept gate/up are declared for 4-byte stores when both tensors allow it, and still
    run (one element per store) when one does not."""
    from inductor_cutedsl.runtime import gated_gemm, launch

    specs = []
    monkeypatch.setattr(launch, "get_gemm", lambda spec: lambda *args, **kwargs: specs.append(spec))
    a = torch.randn(1000, 1024, dtype=torch.bfloat16)
    bg, bu = torch.randn(1024, 2048, dtype=torch.bfloat16).chunk(2, 1)
    shifted = torch.empty(1000 * 1024 + 1, dtype=torch.bfloat16)[1:].view(1000, 1024)  # 2-byte aligned
    for keep_out, pairs in [
        (None, True),
        ((torch.empty(1000, 1024, dtype=torch.bfloat16),) * 2, True),
        ((torch.empty(1000, 1024, dtype=torch.bfloat16), shifted), False),
        ((torch.empty(1000, 1024),) * 2, False),  # float32: one element per store
    ]:
        gated_gemm(a, bg, bu, keep=True, keep_out=keep_out)
        kept = [op for op in specs[-1].epilogue.operands if op.is_output]
        assert len(kept) == 2 and all(op.pairs == pairs for op in kept), (keep_out, kept)


# Runs in a fresh process: the DSL reads CUTE_DSL_KEEP / CUTE_DSL_DUMP_DIR at import.
SASS_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from inductor_cutedsl.kernels import GemmConfig, IDENTITY, gated
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime.compiler import export_object

    nvdisasm, root = sys.argv[1], Path(sys.argv[2])
    dump = Path(os.environ["CUTE_DSL_DUMP_DIR"])
    cfg = GemmConfig(128, 256, 2, 1, False, True, 8, 64)
    cases = {"plain": (IDENTITY, False), "silu": (gated("silu"), True), "gelu_erf": (gated("gelu_erf"), True),
             "keep": (gated("silu", keep="bfloat16"), True),
             "keep_pairs": (gated("silu", keep="bfloat16", keep_pairs=True), True)}
    stats = {}
    for name, (epi, dual) in cases.items():
        for old in dump.glob("*"):
            old.unlink()
        export_object(KernelSpec(cfg, "bfloat16", "bfloat16", "k", "k", epi, dual), root, name)
        (cubin,) = dump.glob("*.cubin")
        lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
        count = lambda needle: sum(needle in line for line in lines)
        stats[name] = {
            "spill_stores": count("STL"), "spill_loads": count("LDL"), "mufu": count("MUFU"),
            "tma_loads": count("UTMALDG"), "tma_stores": count("UTMASTG"), "stmatrix": count("STSM"),
            "pipelined_wgmma_waits": count("WARPGROUP.DEPBAR.LE gsb0, 0x1"),
            "two_byte_stores": count("STG.E.U16"),
            "four_byte_stores": sum(line.split()[1:2] == ["STG.E"] or "STG.E " in line for line in lines),
        }
    print(json.dumps(stats))
""")


@pytest.fixture(scope="module")
def sass_stats(tmp_path_factory) -> dict:
    from test_epilogue_sass import sass_script_stats

    return sass_script_stats(SASS_SCRIPT, tmp_path_factory.mktemp("dual_sass"))


@pytest.mark.parametrize("act", ["silu", "gelu_erf"])
def test_dual_epilogue_neither_spills_nor_serializes_the_mainloop(sass_stats, act):
    """128 x 256 MMA tile: 128 accumulators per thread, the hook on the 64 gate/up pairs."""
    s = sass_stats[act]
    assert s["spill_stores"] == 0 and s["spill_loads"] == 0, s
    assert s["pipelined_wgmma_waits"] >= 1, s
    if act == "silu":  # exp and reciprocal per output element, over the plain kernel's
        assert s["mufu"] - sass_stats["plain"]["mufu"] == 2 * 64, s


def test_dual_kernel_loads_three_tiles_per_stage_and_stores_half(sass_stats):
    """A, then B's two halves (gate and up weights) per k-tile, where the plain kernel
    loads A and B; half the output sub-tiles to stage and store."""
    plain, dual = sass_stats["plain"], sass_stats["silu"]
    assert 2 * dual["tma_loads"] == 3 * plain["tma_loads"], (plain, dual)
    assert 2 * dual["tma_stores"] == plain["tma_stores"] and 2 * dual["stmatrix"] == plain["stmatrix"], (plain, dual)


def test_kept_outputs_are_stored_two_columns_at_a_time_when_declared(sass_stats):
    """The training path writes gate and up too: at a 128 x 256 MMA tile each thread
    holds 64 output elements (32 column pairs) of each, one 2-byte store per element,
    or with ``keep_pairs`` one 4-byte store per pair (and none of 2 bytes)."""
    plain, keep, pairs = sass_stats["plain"], sass_stats["keep"], sass_stats["keep_pairs"]
    assert keep["two_byte_stores"] - plain["two_byte_stores"] == 2 * 64, keep
    assert pairs["two_byte_stores"] == plain["two_byte_stores"], pairs
    assert pairs["four_byte_stores"] - plain["four_byte_stores"] == 2 * 32, pairs
    for s in (keep, pairs):
        assert s["spill_stores"] == 0 and s["pipelined_wgmma_waits"] >= 1, s
