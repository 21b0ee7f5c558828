"""Code generation and compilation for sm_90a, without a GPU."""
from __future__ import annotations

import os

import pytest

from inductor_cutedsl.kernels import GemmConfig, config_space, shortlist
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build, build_many

# A representative set: both schedules, every tile height, all clusters, all majors,
# every output dtype and the example epilogues.
REPRESENTATIVE = [
    (GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY),
    (GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4), "bfloat16", "bfloat16", "k", "k", E.IDENTITY),
    (GemmConfig(128, 128, 1, 2, True, False, 8), "float16", "float32", "m", "n", E.bias("col")),
    (GemmConfig(256, 128, 2, 2, epi_n=64), "bfloat16", "float16", "m", "k",
     E.bias_activation("gelu_tanh")),
    (GemmConfig(64, 256, 2, 1, True), "float16", "float16", "k", "n", E.addmm(True, "full")),
    (GemmConfig(128, 256, 1, 2), "bfloat16", "bfloat16", "k", "k", E.Epilogue(
        "keep_pre", "def epilogue(acc, m, n, l, ops):\n    return relu(acc), acc\n",
        (E.EpilogueOperand("pre", "out", "float32"),))),
]  # fmt: skip


@pytest.mark.parametrize("case", REPRESENTATIVE, ids=lambda c: f"{c[0].name()}-{c[5].name}")
def test_representative_configs_compile_and_export(case, tmp_path):
    spec = KernelSpec(*case)
    path, built = build(spec, KernelCache(tmp_path))
    assert built and path.stat().st_size > 10_000
    assert path.read_bytes()[:4] == b"\x7fELF"


def test_config_space_is_valid_and_shortlist_in_it():
    space = config_space()
    assert len(space) > 100
    assert all(c.invalid_reason() is None for c in space)
    for shape in [(8192, 4096, 4096), (1024, 4096, 4096), (64, 128, 4096), (1, 1, 1)]:
        picks = shortlist(*shape)
        assert picks and all(p in space for p in picks)


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
    ],
)
def test_invalid_configs_are_refused(cfg, needle):
    assert needle in (cfg.invalid_reason() or "")


def test_kernel_refuses_invalid_config():
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    with pytest.raises(ValueError, match="invalid config"):
        Sm90Gemm(GemmConfig(96, 128), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)


@pytest.mark.gpu
def test_whole_config_space_compiles(tmp_path):
    """Every config of the space, both schedules, compiles (on the device's 16 cores)."""
    specs = [KernelSpec(c, "bfloat16", "bfloat16", "k", "k", E.IDENTITY) for c in config_space()]
    out = build_many(specs, KernelCache(tmp_path), workers=os.cpu_count() or 1)
    assert len(out) == len(specs)
    assert all(path.stat().st_size > 10_000 for path, _, _ in out.values())


def test_loaded_entry_marshals_the_launchers_arguments(tmp_path):
    """Without a GPU: an exported kernel loads, and the DSL accepts, for every operand
    kind, the argument list ``CompiledGemm`` builds (what its first launch passes)."""
    from inductor_cutedsl.runtime.launch import CompiledGemm

    epi = E.Epilogue(
        "all_kinds",
        "def epilogue(acc, m, n, l, ops):\n    return ops[2] * acc + ops[0] + ops[1], acc\n",
        (E.EpilogueOperand("bias", "row", "bfloat16"), E.EpilogueOperand("r", "full", "float16", pairs=True),
         E.EpilogueOperand("scale", "scalar"), E.EpilogueOperand("pre", "out", "float32")),
    )  # fmt: skip
    spec = KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "n", epi)
    path, _ = build(spec, KernelCache(tmp_path))
    call = CompiledGemm(spec, str(path))._call
    values = [0x1000, 0x2000, 0x3000, 64, 64, 64, 1, 64, 64, 64, 0, 0, 0, 1]
    values += [0x4000, 0, 1, 0] + [0x5000, 64, 1, 0] + [0.5] + [0x6000, 64, 1, 0] + [0]
    exe_args, _ = call._fn.generate_execution_args(*call._to_dsl_args(values))
    assert len(exe_args) == len(values)
