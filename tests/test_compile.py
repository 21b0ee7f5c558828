"""Code generation and compilation for sm_90a, without a GPU."""

from __future__ import annotations

import dataclasses
import functools
import os
import types

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig, config_space, shortlist
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build, build_many

# A representative set: both schedules, every tile height, all clusters, all majors,
# every output dtype and the example epilogues.
REPRESENTATIVE = [
    (GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY),
    (GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4), "bfloat16", "bfloat16", "k", "k", E.IDENTITY),
    (
        GemmConfig(128, 256, 2, 1, epi_n=64, stream_k=True),
        "float16",
        "float32",
        "m",
        "n",
        E.bias_activation("gelu_tanh", "row", "float16"),
    ),
    (GemmConfig(128, 128, 1, 2, True, False, 8), "float16", "float32", "m", "n", E.bias("col")),
    (GemmConfig(256, 128, 2, 2, epi_n=64), "bfloat16", "float16", "m", "k", E.bias_activation("gelu_tanh")),
    (GemmConfig(64, 256, 2, 1, True), "float16", "float16", "k", "n", E.addmm(True, "full")),
    (GemmConfig(128, 64, 1, 1, stream_k=True), "bfloat16", "bfloat16", "k", "k", E.bias_activation("gelu_tanh")),
    (
        GemmConfig(128, 256, 1, 2),
        "bfloat16",
        "bfloat16",
        "k",
        "k",
        E.Epilogue(
            "keep_pre",
            "def epilogue(acc, m, n, l, ops):\n    return relu(acc), acc\n",
            (E.EpilogueOperand("pre", "out", "float32"),),
        ),
    ),
]


@pytest.mark.parametrize("case", REPRESENTATIVE, ids=lambda c: f"{c[0].name()}-{c[5].name}")
def test_representative_configs_compile_and_export(case, tmp_path):
    spec = KernelSpec(*case)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000
    assert path.read_bytes()[:4] == b"\x7fELF"


def _eager(name: str, acc, ops):
    """What each representative epilogue computes, written with torch."""
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")
    return {
        "identity": lambda: acc,
        "bias_row_gelu_tanh": lambda: gelu(acc + ops[0]),
        "bias_col": lambda: acc + ops[0],
        "addmm_full": lambda: torch.addmm(
            ops[0], acc, torch.eye(acc.shape[1], dtype=acc.dtype), alpha=ops[1], beta=ops[2]
        ),  # operands c, alpha, beta
        "keep_pre": lambda: (torch.relu(acc), acc),
    }[name]()


@pytest.mark.parametrize("case", REPRESENTATIVE, ids=lambda c: f"{c[0].name()}-{c[5].name}")
def test_representative_epilogues_compute_what_torch_does(case):
    """The epilogues compiled above, computed with ``runtime.reference`` in float64."""
    from inductor_cutedsl.runtime import reference

    spec, (m, n, k) = KernelSpec(*case), (16, 64, 32)
    dtype = getattr(torch, spec.ab_dtype)
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    shapes = {"row": (n,), "col": (m, 1), "full": (m, n), "out": (m, n)}
    tensors = [
        torch.randn(*shapes[op.kind]).to(getattr(torch, op.dtype))
        for op in spec.epilogue.operands
        if op.is_tensor and not op.is_output
    ]
    kept = [torch.empty(m, n, dtype=torch.float64) for op in spec.epilogue.operands if op.is_output]
    scalars = (0.5, -2.0)[: sum(not op.is_tensor for op in spec.epilogue.operands)]
    out = torch.empty(m, n, dtype=torch.float64)
    reference.run(spec, a, b, out, tensors + kept, scalars, dtype=torch.float64)
    acc = a.double() @ b.double()
    want = _eager(spec.epilogue.name, acc, [t.double() for t in tensors] + list(scalars))
    got = (out, *kept) if kept else out
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_config_space_is_valid_and_shortlist_in_it():
    space = config_space()
    assert len(space) > 100
    assert all(c.invalid_reason() is None for c in space)
    for shape in [(8192, 4096, 4096), (1024, 4096, 4096), (64, 128, 4096), (1, 1, 1)]:
        picks = shortlist(*shape)
        assert picks and all(p in space for p in picks)


def test_decode_sized_gemms_under_cuda_graphs_get_a_stream_k_candidate():
    """At M <= 64 with fewer output tiles than SMs, or a wave of them and a second of at
    most half the SMs, a stream-K tile that spreads the K loop over the SMs is offered
    where a CUDA graph hides its launch's host work: not without graphs, not for a
    promoting fp8 GEMM, not where the tiles fill the SMs."""
    stream_k = GemmConfig(128, 64, 1, 1, False, False, 1, stream_k=True)
    for m, n in ((1, 2048), (16, 8192), (64, 2048), (16, 8960)):  # 8960: 140 tiles, 8 past a wave
        assert stream_k in shortlist(m, n, 2048, limit=3, graphs=True), (m, n)
        assert not any(c.stream_k for c in shortlist(m, n, 2048, limit=64)), (m, n)
        assert not any(c.stream_k for c in shortlist(m, n, 2048, limit=64, promote=1, graphs=True)), (m, n)
    for m, n in ((65, 2048), (16, 14336), (16, 16896)):  # more rows; a second wave of 92, or two whole
        assert not any(c.stream_k for c in shortlist(m, n, 2048, limit=64, graphs=True)), (m, n)
    assert stream_k.invalid_reason() is None and stream_k in config_space()


def test_swizzle_is_fitted_to_the_swizzled_dimension():
    """The scheduler pads the swizzled cluster count to a multiple of the swizzle, and
    schedules the padding: the shortlist never pads by more than 1/16."""
    from inductor_cutedsl.kernels.config import fitted_swizzle

    along_n = GemmConfig(256, 128, 1, 2, False, False, 8)  # swizzles M: 4 tile rows at M=1024
    assert fitted_swizzle(along_n, 1024, 4096) == 4
    assert fitted_swizzle(along_n, 768, 4096) == 1  # 3 tile rows
    assert fitted_swizzle(along_n, 8192, 4096) == 8
    along_m = GemmConfig(128, 256, 1, 2, False, True, 8)  # swizzles N: 28 clusters at 14336
    assert fitted_swizzle(along_m, 8192, 14336) == 4
    for shape in [(600, 11008, 4096), (1000, 11008, 4096), (7680, 4096, 4096), (8192, 14336, 4096)]:
        for cfg in shortlist(*shape):
            assert fitted_swizzle(cfg, shape[0], shape[1]) == cfg.swizzle


@pytest.mark.parametrize(
    "cfg,needle",
    [
        (GemmConfig(96, 128), "tile_m"),
        (GemmConfig(128, 96), "tile_n"),
        (GemmConfig(128, 256, 4, 1), "cluster"),
        (GemmConfig(128, 256, swizzle=3), "swizzle"),
        (GemmConfig(128, 256, pingpong=True), "accumulator registers"),
        (GemmConfig(128, 192, epi_n=128), "epi_n"),
        (GemmConfig(128, 256, epi_buffers=1), "epi_buffers"),
        (GemmConfig(256, 256, False, epi_buffers=8), "accumulator registers"),
        (GemmConfig(128, 128, pingpong=True, stream_k=True), "stream_k"),
    ],
)
def test_invalid_configs_are_refused(cfg, needle):
    assert needle in (cfg.invalid_reason() or "")


def test_kernel_refuses_invalid_config():
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    with pytest.raises(ValueError, match="invalid config"):
        Sm90Gemm(GemmConfig(96, 128), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)


@pytest.mark.parametrize(
    "cfg,operands,dtype",
    [
        (GemmConfig(128, 128, 2, 1, True), ("r",), "bfloat16"),
        (GemmConfig(128, 256, 2, 1, stream_k=True), ("r",), "bfloat16"),
        (GemmConfig(128, 256, 2, 1), ("r", "s"), "bfloat16"),
        # Buffers of its own (fp16 into a bf16 output) would leave 2 mainloop stages.
        (GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4), ("r",), "float16"),
    ],
    ids=["pingpong", "stream_k", "two_staged", "whole_tile_buffers_own"],
)
def test_kernel_refuses_what_staging_does_not_support(cfg, operands, dtype):
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    ops = tuple(E.EpilogueOperand(name, "full", dtype, staged=True) for name in operands)
    epi = E.Epilogue("staged", "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n", ops)
    with pytest.raises(ValueError, match="one staged operand"):
        Sm90Gemm(cfg, "bfloat16", "bfloat16", "k", "k", epi)


def test_staged_operand_shares_the_store_buffers_or_takes_a_mainloop_stage():
    """An input of the output's dtype is loaded into the store buffers (no stage lost);
    another 16-bit dtype gets its own two sub-tile buffers (one stage fewer)."""
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    cfg = GemmConfig(128, 256, 2, 1, epi_n=64)

    def kernel(op_dtype, out_dtype="bfloat16"):
        op = E.EpilogueOperand("r", "full", op_dtype, staged=True)
        epi = E.Epilogue("staged", "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n", (op,))
        return Sm90Gemm(cfg, "bfloat16", out_dtype, "k", "k", epi)

    plain = Sm90Gemm(cfg, "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    shared, own = kernel("bfloat16"), kernel("float16")
    assert plain.ab_stage == 4
    assert (shared.shares_c, shared.c_buffers, shared.ab_stage) == (True, plain.epi_stage, 4)
    assert (own.shares_c, own.ab_stage) == (False, 3)  # 2 x 16 KiB of sub-tile buffers
    # fp32 out (2 x 32 KiB of store buffers) would leave two: refused.
    assert cfg.stages_operands(2) and not cfg.stages_operands(4)
    with pytest.raises(ValueError, match="mainloop stages"):
        kernel("bfloat16", "float32")
    # Whole-tile store buffers (64 KiB) keep their 3 stages when shared: every sub-tile
    # of the input loads during the mainloop.
    cfg = dataclasses.replace(cfg, epi_buffers=4)
    assert cfg.stages_operands(2, shared=True) and not cfg.stages_operands(2)
    whole = kernel("bfloat16")
    assert (whole.shares_c, whole.c_buffers, whole.ab_stage) == (True, 4, 3)


@pytest.mark.gpu
@pytest.mark.long
def test_whole_config_space_compiles():
    """Every config of the space, both schedules, compiles (on the device's 16 cores).

    Into the suite's shared cache: a run given an earlier run's kernels
    (``tools/gpu_run.sh`` carries them) loads those already built, whose keys hold the
    same kernel sources, DSL version and architecture, and builds only what changed."""
    from inductor_cutedsl.runtime.cache import default_cache

    specs = [KernelSpec(c, "bfloat16", "bfloat16", "k", "k", E.IDENTITY) for c in config_space()]
    out = build_many(specs, default_cache(), workers=os.cpu_count() or 1)
    assert len(out) == len(specs)
    assert all(path.stat().st_size > 10_000 for path, _, _ in out.values())


@pytest.mark.parametrize("variant", ["data_parallel", "stream_k", "dual"])
def test_loaded_entry_marshals_the_launchers_arguments(tmp_path, variant):
    """Without a GPU: an exported kernel loads, and the DSL accepts, for every operand
    kind (and stream-K's buffers, a dual kernel's up weight), the argument list
    ``CompiledGemm`` builds (what its first launch passes), and the fast path packs
    it exactly as the DSL does."""
    stream_k, dual = variant == "stream_k", variant == "dual"
    acc = "acc[0] * acc[1]" if dual else "acc"  # a dual kernel's acc is (gate, up)
    epi = E.Epilogue(
        "all_kinds",
        f"def epilogue(acc, m, n, l, ops):\n    return ops[2] * {acc} + ops[0] + ops[1], {acc}\n",
        (
            E.EpilogueOperand("bias", "row", "bfloat16"),
            E.EpilogueOperand("r", "full", "float16", pairs=True),
            E.EpilogueOperand("scale", "scalar"),
            E.EpilogueOperand("pre", "out", "float32"),
        ),
    )
    spec = KernelSpec(GemmConfig(128, 128, 1, 1, stream_k=stream_k), "bfloat16", "bfloat16", "k", "n", epi, dual)
    values = [0x1000, 0x2000, 0x3000, 64, 64, 64, 1, 64, 64, 64, 0, 0, 0, 1, 1]  # ..., clusters, programmatic
    values += [0x9000, 128, 0] if dual else []
    values += [0x7000, 0x8000, 0x123456789ABCDEF] if stream_k else []
    values += [0x4000, 0, 1, 0] + [0x5000, 64, 1, 0] + [0.5] + [0x6000, 64, 1, 0] + [0]
    assert_entry_takes(spec, values, tmp_path)


def test_stream_k_tokens_are_never_a_cleared_flag_and_do_not_follow_the_programs_seed():
    """A stream-K launch's flags are not zeroed: its token must never be 0 (a flag its
    reader cleared), must fit the entry's signed 64-bit slot, and must not repeat when
    a program seeds ``random`` the same way before every step."""
    import random

    from inductor_cutedsl.runtime.launch import stream_k_token

    draws = []
    for _ in range(2):
        random.seed(0)
        draws += [stream_k_token() for _ in range(500)]
    assert all(0 < t < 2**62 for t in draws)
    assert len(set(draws)) == len(draws)


def test_the_suites_recorded_specs_build_again_into_the_archive_a_gpu_run_carries(tmp_path):
    """The GPU suite records each spec it keys once (``record_specs``); after a kernel
    change ``tools.rebuild_kernels`` builds them from the current sources into the
    archive ``tools/gpu_run.sh`` unpacks into the suite's cache, whose names are the
    keys; a spec that no longer builds is reported and left out."""
    import json
    import tarfile

    from helpers import record_specs

    from tools import rebuild_kernels

    specs = [
        KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY),
        KernelSpec(GemmConfig(128, 64, 1, 1, stream_k=True), "bfloat16", "bfloat16", "k", "n", E.IDENTITY),
    ]
    stop = record_specs(str(tmp_path))
    try:
        keys = [s.key() for s in specs] + [specs[0].key()]
    finally:
        stop()
    specs[1].key()  # after stop: not recorded again
    (log,) = tmp_path.glob("specs-*.jsonl")
    assert [KernelSpec.from_json(line) for line in log.read_text().splitlines()] == specs
    broken = json.loads(specs[0].to_json())
    broken["config"]["tile_n"] = 96  # no such tile: the build refuses it
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(broken) + "\n" + specs[0].to_json() + "\n")
    archive = tmp_path / "kernels.tar.xz"
    packed, failed = rebuild_kernels.rebuild(rebuild_kernels.read_specs([str(log), str(other)]), archive, 2)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert names == {f"./{k}.{ext}" for k in keys[:2] for ext in ("o", "json")}
    assert packed == 2 and len(failed) == 1 and "128x96" in failed[0], failed


def assert_entry_takes(spec: KernelSpec, values: list, tmp_path) -> None:
    """``spec`` built, exported and loaded: the DSL accepts ``values`` (the entry's
    flat arguments, as ``CompiledGemm`` builds them) and the fast path packs them as it
    does; a changed size needs the slow path again."""
    from inductor_cutedsl.runtime.launch import CompiledGemm

    path, _ = build(spec, KernelCache(tmp_path))
    call = CompiledGemm(spec, str(path), native_load=False).call  # the DSL path: its marshalling
    dsl_args = call._to_dsl_args(values)  # exe_args point into these: keep them alive
    exe_args, _ = call._fn.generate_execution_args(*dsl_args)
    assert len(exe_args) == len(values)
    # The fast path's packed slots hold, byte for byte, what the DSL marshalled. (Its
    # executor needs a CUDA context: a stand-in gives only the packed-argument count.)
    call._fn._default_executor = types.SimpleNamespace(
        _num_extra_args=0,
        _get_invoke_packed_args=lambda args: [None] * len(args),
        capi_func=None,
        cuda_result=None,
    )
    assert call._build_fast_state(exe_args, values) is not None
    assert call._build_fast_state(exe_args, [*values[:3], 65, *values[4:]]) is None


@pytest.mark.parametrize(
    "tiles,slots,k_tiles",
    [
        (512, 66, 64),
        (67, 66, 64),
        (512, 66, 1),
        (133, 66, 7),
        (66, 66, 64),
        (200, 132, 3),
        (1000, 66, 224),
        (68, 66, 3),
        (70, 66, 1000),
        (83, 66, 64),  # 17 tail tiles over 66 slots: shares not aligned with the tiles
    ],
)
def test_stream_k_schedule(tiles, slots, k_tiles):
    """The kernel's stream-K arithmetic, replayed on ints: the tail's k-iterations are
    covered exactly once; each tile has one owner (its k = 0 part), which enumerates
    exactly the slots holding the rest; a slot's contribution comes before its own
    tile, so no owner waits on a slot that waits on it."""
    from inductor_cutedsl.kernels.sm90_gemm import _STREAM_K_MAX_PARTS, Sm90Gemm

    first = tiles // slots * slots
    iters = (tiles - first) * k_tiles
    sharers = max(min(slots, (tiles - first) * _STREAM_K_MAX_PARTS), 1)
    share_start = functools.partial(Sm90Gemm._share_start, sharers=sharers, iters=iters)
    parts: dict[int, list] = {}
    for slot in range(slots):
        it, end = share_start(slot), share_start(slot + 1)
        segments = []
        while it < end:  # as in _consume / _produce
            r = it // k_tiles
            k0 = it - r * k_tiles
            k1 = min(k_tiles, k0 + end - it)
            segments.append((r, k0, k1))
            it += k1 - k0
        assert sum(k0 > 0 for _, k0, _ in segments) <= 1 and sum(k0 == 0 for _, k0, _ in segments) <= 1
        assert all(k0 > 0 for _, k0, _ in segments[:-1]), "a contribution comes first"
        for r, k0, k1 in segments:
            parts.setdefault(r, []).append((slot, k0, k1))
    assert sorted(parts) == list(range(tiles - first))
    for r, segs in parts.items():
        assert sorted(k for _, k0, k1 in segs for k in range(k0, k1)) == list(range(k_tiles))
        # At most _STREAM_K_MAX_PARTS shares per tile, each at least a quarter of its
        # k-iterations: a tile across share boundaries meets one more.
        assert len(segs) <= _STREAM_K_MAX_PARTS + 1
        (owner,) = [s for s, k0, _ in segs if k0 == 0]
        last = Sm90Gemm._slot_of((r + 1) * k_tiles - 1, sharers, iters)
        read = [o for o in range(owner + 1, last + 1) if share_start(o) < share_start(o + 1)]
        assert read == sorted(s for s, k0, _ in segs if k0 > 0)
        assert owner == Sm90Gemm._slot_of(r * k_tiles, sharers, iters)
        # The owner's peers lie in its static window (``_add_peers``).
        assert last - owner <= _STREAM_K_MAX_PARTS


def test_a_stream_k_owners_peers_fit_its_static_window():
    """``_add_peers`` reads the slots after an owner up to its tile's last as a window
    of ``_STREAM_K_MAX_PARTS`` (a slot past it would be left out of the sum, a wrong
    result): every tail of 1 to 131 tiles over the persistent grids of 33 to 132 slots,
    with 1 to 80 k-tiles and a few long ones."""
    from inductor_cutedsl.kernels.sm90_gemm import _STREAM_K_MAX_PARTS, Sm90Gemm

    widest = 0
    for slots in (33, 50, 66, 100, 132):
        for tail in range(1, slots):
            sharers = min(slots, tail * _STREAM_K_MAX_PARTS)
            for k_tiles in (*range(1, 81), 127, 224, 1000):
                iters = tail * k_tiles
                for r in range(tail):
                    owner = Sm90Gemm._slot_of(r * k_tiles, sharers, iters)
                    last = Sm90Gemm._slot_of((r + 1) * k_tiles - 1, sharers, iters)
                    widest = max(widest, last - owner)
    assert widest == _STREAM_K_MAX_PARTS, widest
